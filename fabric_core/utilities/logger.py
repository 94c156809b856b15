"""Lightning's ``utilities.logger`` path: helpers that turn hyperparameters and metrics into what a tracker takes.

In Lightning this module holds private helpers of its loggers; here they are public, so that every logger (the
tracker plugins included) checks its input the same way and with the same messages.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import numbers
from collections.abc import Mapping, MutableMapping
from typing import Any

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import InvalidConfigError

__all__ = ["flatten_params", "metric_as_float", "params_as_dict"]


def params_as_dict(params: Any, owner: str) -> dict[str, Any]:
    """``log_hyperparams``' argument as a dict: ``None`` is empty, an ``argparse.Namespace`` its ``vars``.

    Args:
        params: What the user passed.
        owner: The logger class, for the message (``"MLFlowLogger"``).

    Raises:
        InvalidConfigError: ``params`` is neither a mapping nor a namespace.
    """
    if params is None:
        return {}
    if isinstance(params, argparse.Namespace):
        return vars(params)
    if isinstance(params, Mapping):
        return dict(params)
    raise InvalidConfigError(
        f"{owner}.log_hyperparams: params must be a mapping or an argparse.Namespace, got "
        f"{type(params).__name__} {params!r}.",
        argument="params",
        value=params,
    )


def flatten_params(params: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    """Nested mappings and namespaces as one level, keys joined with ``/`` (``{"opt": {"lr": 1}}`` → ``opt/lr``)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}/{key}" if parent else str(key)
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, name))
        else:
            flat[name] = value
    return flat


def metric_as_float(owner: str, name: str, value: Any) -> float:
    """A metric value as a ``float``: a number, or a one-element tensor or numpy scalar (through ``.item()``).

    Raises:
        InvalidConfigError: Anything else, named with its key.
    """
    if not isinstance(value, numbers.Real) and callable(getattr(value, "item", None)):
        # A one-element tensor or a numpy scalar; more than one element is refused below.
        with contextlib.suppress(RuntimeError, ValueError):
            value = value.item()
    if isinstance(value, numbers.Real):
        return float(value)
    raise InvalidConfigError(
        f"{owner}: metric {name!r} has the value {value!r} of type {type(value).__name__}; expected a number.",
        argument="metrics",
        value=value,
    )


# -- Lightning's private helpers, as its loggers (and ``lightning.pytorch``'s) call them ------------------------


def _convert_params(params: Any) -> Any:
    """``None`` as ``{}``, an ``argparse.Namespace`` as its ``vars``; anything else unchanged (Lightning's rule)."""
    if params is None or isinstance(params, argparse.Namespace):
        return params_as_dict(params, "")
    return params


def _sanitize_callable_params(params: dict[str, Any]) -> dict[str, Any]:
    """Callables replaced for logging: a class by its name, a function by what it returns when called.

    A function whose result is callable again, or that fails when called without arguments, is logged by its
    ``__name__`` (``None`` if it has none).
    """

    def sanitize(value: Any) -> Any:
        if inspect.isclass(value):
            return value.__name__
        if not callable(value):
            return value
        try:
            result = value()
        except Exception:
            return getattr(value, "__name__", None)
        return value.__name__ if callable(result) else result

    return {key: sanitize(value) for key, value in params.items()}


def _flatten_dict(params: MutableMapping[Any, Any], delimiter: str = "/", parent_key: str = "") -> dict[str, Any]:
    """Nested mappings as one level, keys joined with ``delimiter`` (``{"a": {"b": 1}}`` → ``{"a/b": 1}``).

    Dataclass instances and namespaces are opened like mappings; a list whose items are all mappings is opened
    with each item's index as a key part (``{"l": [{"a": 1}]}`` → ``{"l/0/a": 1}``); an empty mapping vanishes.
    """
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent_key}{delimiter}{key}" if parent_key else str(key)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        elif isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, MutableMapping):
            flat.update(_flatten_dict(value, delimiter=delimiter, parent_key=name))
        elif isinstance(value, list) and all(isinstance(item, MutableMapping) for item in value):
            for index, item in enumerate(value):
                flat.update(_flatten_dict(item, delimiter=delimiter, parent_key=f"{name}/{index}"))
        else:
            flat[name] = value
    return flat


def _sanitize_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` itself, with every value that is no ``bool``, ``int``, ``float``, ``str`` or tensor as a string.

    Numpy scalars become the Python number they hold first.
    """
    from torch import Tensor

    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is optional
        np = None  # type: ignore[assignment]
    for key in params:
        if np is not None and isinstance(params[key], (np.bool_, np.integer, np.floating)):
            params[key] = params[key].item()
        if type(params[key]) not in (bool, int, float, str, Tensor):
            params[key] = str(params[key])
    return params


def _convert_json_serializable(params: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` whose values ``json.dumps`` cannot encode are replaced by their ``str``."""
    return {key: value if _is_json_serializable(value) else str(value) for key, value in params.items()}


def _is_json_serializable(value: Any) -> bool:
    """Whether ``json.dumps(value)`` succeeds (a number too large to encode does not)."""
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return True
    try:
        json.dumps(value)
    except (TypeError, OverflowError):
        return False
    return True


def _add_prefix(metrics: Mapping[str, Any], prefix: str, separator: str) -> Mapping[str, Any]:
    """``metrics`` with ``prefix`` and ``separator`` before each key; the same object when ``prefix`` is empty."""
    if not prefix:
        return metrics
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()}


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
