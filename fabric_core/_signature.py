"""Which keyword arguments a callable takes: the one signature helper of the project (torch-free leaf).

Plugin factories, user hooks (``fabric.call``), checkpoint I/O methods and the targets of strategy options
are all called with "only what they accept"; this module answers that question once per function.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, cast

__all__ = ["accepted_keywords", "accepts", "call_with_accepted", "call_with_keywords", "hooks"]

_SIGNATURES: Final[weakref.WeakKeyDictionary[Callable[..., Any], frozenset[str] | None]] = weakref.WeakKeyDictionary()
_UNKNOWN: Final = object()
_KEYWORD_KINDS: Final = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _compute_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: pass everything, as a direct call would
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind in _KEYWORD_KINDS)


def accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments ``fn`` accepts, or ``None`` when it takes ``**kwargs`` (or has no signature).

    Signatures are inspected once per function (bound methods share their function's entry).
    """
    key = getattr(fn, "__func__", fn)
    try:
        known = _SIGNATURES.get(key, _UNKNOWN)  # one weak reference built, not two as `in` then `[]` would
    except TypeError:  # not weakly referenceable
        known = _UNKNOWN
    if known is not _UNKNOWN:
        return cast("frozenset[str] | None", known)
    keywords = _compute_keywords(fn)
    with contextlib.suppress(TypeError):  # a callable that cannot be weakly referenced: inspected each time
        _SIGNATURES[key] = keywords
    return keywords


def accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes the keyword argument ``name`` by its own name (``**kwargs`` does not count)."""
    keywords = accepted_keywords(fn)
    return keywords is not None and name in keywords


def call_with_accepted(fn: Callable[..., Any], args: Iterable[Any], kwargs: Mapping[str, Any]) -> Any:
    """Call ``fn(*args, **kwargs)`` with only the keyword arguments its signature accepts."""
    return call_with_keywords(fn, accepted_keywords(fn), args, kwargs)


def call_with_keywords(
    fn: Callable[..., Any], keywords: frozenset[str] | None, args: Iterable[Any], kwargs: Mapping[str, Any]
) -> Any:
    """Call ``fn(*args, **kwargs)`` with the keyword arguments in ``keywords`` only (all of them for ``None``)."""
    if keywords is not None and not keywords.issuperset(kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k in keywords}
    return fn(*args, **kwargs)


def hooks(objects: Iterable[Any], name: str) -> list[tuple[Callable[..., Any], frozenset[str] | None]]:
    """The bound methods ``name`` of ``objects`` that have one, each with the keywords it accepts.

    For events fired on every step: looked up once, then called with :func:`call_with_keywords`. Attributes
    of that name that are not callable are left out.
    """
    found = [getattr(obj, name, None) for obj in objects]
    return [(method, accepted_keywords(method)) for method in found if callable(method)]
