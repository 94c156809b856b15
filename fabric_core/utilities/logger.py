"""Lightning's ``utilities.logger`` path: helpers that turn hyperparameters and metrics into what a tracker takes.

In Lightning this module holds private helpers of its loggers; here they are public, so that every logger (the
tracker plugins included) checks its input the same way and with the same messages.
"""

from __future__ import annotations

import argparse
import contextlib
import numbers
from collections.abc import Mapping
from typing import Any

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
