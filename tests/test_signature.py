"""The one signature helper: which keywords a callable takes, and calling it with only those."""

from __future__ import annotations

import functools
from typing import Any

from fabric_core._signature import accepted_keywords, accepts, call_with_accepted


def only_a(a: int, *, b: int = 0) -> tuple[int, int]:
    return a, b


def anything(**kwargs: Any) -> dict[str, Any]:
    return kwargs


class Hooks:
    def on_log(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics


def test_keywords_of_a_function_a_catch_all_and_a_wrapped_function() -> None:
    assert accepted_keywords(only_a) == {"a", "b"}
    assert accepted_keywords(anything) is None
    assert accepted_keywords(functools.wraps(only_a)(lambda *a, **k: only_a(*a, **k))) == {"a", "b"}
    assert accepts(only_a, "b") and not accepts(anything, "b")


def test_bound_methods_of_different_objects_share_their_function_entry() -> None:
    first, second = Hooks(), Hooks()
    assert accepted_keywords(first.on_log) == accepted_keywords(second.on_log) == {"metrics"}


def test_call_passes_only_what_the_callable_takes() -> None:
    assert call_with_accepted(only_a, (), {"a": 1, "b": 2, "step": 3}) == (1, 2)
    assert call_with_accepted(anything, (), {"x": 1, "y": 2}) == {"x": 1, "y": 2}
    assert call_with_accepted(Hooks().on_log, (), {"metrics": {"loss": 0.5}}) == {"loss": 0.5}


def test_a_callable_that_cannot_be_weakly_referenced_is_inspected_each_time() -> None:
    # `max` is a builtin without a signature (and not weakly referenceable): everything is passed through.
    assert accepted_keywords(max) is None
    assert call_with_accepted(max, ([3, 5],), {"default": 0}) == 5

    class Slotted:
        __slots__ = ()

        def __call__(self, a: int) -> int:
            return a

    slotted = Slotted()  # no __weakref__ slot
    assert accepted_keywords(slotted) == {"a"}
    assert call_with_accepted(slotted, (), {"a": 4, "extra": 1}) == 4
