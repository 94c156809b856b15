"""Lightning's ``connector`` path: its private ``_Connector`` and the precision-argument helpers.

fabric-core decides ``Fabric(...)`` arguments in :mod:`fabric_core._kernel.selection`, through the plugins' selection
hooks (``fabric-core explain`` shows the result), and builds them in :mod:`fabric_core._fabric.assembly`. Lightning's
``_Connector`` is a thin front over those two, with Lightning's private attributes read from what was decided;
``_convert_precision_to_unified_args`` (which ``lightning.pytorch`` imports) reads the same spelling table as
``Fabric(precision=...)``. The names Lightning's module imports (the two registries, ``_IS_INTERACTIVE``,
``torch``) are loaded on first access; ``_IS_INTERACTIVE`` is read here at call time, so that setting it on this
module decides whether ``_Connector`` treats the session as interactive, as in Lightning.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, Union, get_args

from fabric_core._deferred import lightning_reexports, reexports

if TYPE_CHECKING:
    from fabric_core.accelerators.registry import ACCELERATOR_REGISTRY
    from fabric_core.environments.environment import ClusterEnvironment
    from fabric_core.io.checkpoint_io import CheckpointIO
    from fabric_core.plugins.precision.precision import _PRECISION_INPUT, _PRECISION_INPUT_STR
    from fabric_core.precision.precision import Precision
    from fabric_core.strategies.registry import STRATEGY_REGISTRY

__all__ = ["ACCELERATOR_REGISTRY", "STRATEGY_REGISTRY"]

_PLUGIN_INPUT = Union["Precision", "ClusterEnvironment", "CheckpointIO"]
#: The components a strategy instance may carry itself (Lightning's connector takes them from it).
_OWN = ("_precision", "_cluster_environment", "_checkpoint_io")


class _Connector:
    """The components ``Fabric(...)`` would run with for these arguments, decided and built as ``Fabric`` does.

    After construction ``accelerator``, ``strategy`` (connected to the others), ``precision`` and
    ``cluster_environment`` hold the built objects, and Lightning's private attributes what was decided, with
    Lightning's meaning: ``_accelerator_flag`` (the accelerator's name, ``"cuda"`` for ``"gpu"``, or the
    instance passed), ``_strategy_flag`` (likewise), ``_devices_flag`` (the devices as the accelerator parsed
    them, ``"auto"`` counted), ``_parallel_devices``, ``_num_nodes_flag``, ``_precision_input`` (the canonical
    precision string in use; ``"32-true"`` beside a precision instance), ``_precision_instance`` and
    ``_cluster_environment_flag`` (what the user passed, else ``None``), and ``checkpoint_io`` (the checkpoint
    I/O passed in ``plugins`` or on the strategy, else ``None``, as Lightning's: the one in use is the strategy's).

    Args:
        accelerator: As ``Fabric(accelerator=...)``.
        strategy: As ``Fabric(strategy=...)``.
        devices: As ``Fabric(devices=...)``.
        num_nodes: As ``Fabric(num_nodes=...)``.
        precision: As ``Fabric(precision=...)``.
        plugins: As ``Fabric(plugins=...)``.

    Raises:
        InvalidConfigError: The arguments ``Fabric(...)`` would refuse, with the same message.
    """

    def __init__(
        self,
        accelerator: Any = "auto",
        strategy: Any = "auto",
        devices: Any = "auto",
        num_nodes: int = 1,
        precision: _PRECISION_INPUT | None = None,
        plugins: Any = None,
    ) -> None:
        from fabric_core._fabric.assembly import build
        from fabric_core._kernel.selection import select

        selection = select(
            None,
            accelerator=accelerator,
            strategy=strategy,
            devices=devices,
            num_nodes=num_nodes,
            precision=precision,
            plugins=plugins,
            interactive=_interactive(),
        )
        context = selection.context
        # What a strategy instance brought itself, read before building connects the rest to it.
        own = {attr: getattr(selection.strategy.instance, attr, None) for attr in _OWN}
        components = build(selection)
        self.accelerator: Any = components.accelerator
        self.strategy: Any = components.strategy
        self.precision: Any = components.precision
        self.cluster_environment: Any = components.cluster_environment
        self._accelerator_flag: Any = selection.accelerator.instance or context.accelerator
        self._strategy_flag: Any = selection.strategy.instance or context.strategy
        self._devices_flag: Any = selection.parsed_devices
        self._num_nodes_flag: int = context.num_nodes
        self._parallel_devices: list[Any] = list(
            getattr(self.strategy, "parallel_devices", None) or context.parallel_devices
        )
        self._precision_instance: Any = selection.precision.instance or own["_precision"]
        in_use = getattr(self.precision, "precision", None)
        named = in_use if isinstance(in_use, str) else context.precision or "32-true"
        self._precision_input: str = "32-true" if self._precision_instance is not None else named
        self._cluster_environment_flag: Any = selection.environment_given or own["_cluster_environment"]
        self.checkpoint_io: Any = selection.checkpoint_io or own["_checkpoint_io"]


def _interactive() -> bool:
    """This module's ``_IS_INTERACTIVE``, read now: a value set here (as Lightning's tests set it), else
    Lightning's flag at ``utilities.imports``, re-exported on first access as Lightning's module imports it."""
    return bool(sys.modules[__name__]._IS_INTERACTIVE)


def _convert_precision_to_unified_args(precision: _PRECISION_INPUT | None) -> _PRECISION_INPUT_STR | None:
    """Lightning's canonical precision string for ``precision`` (``16`` → ``"16-mixed"``), ``None`` for ``None``.

    The historical ``16`` and ``bf16`` spellings warn, as ``Fabric(precision=...)`` does.

    Raises:
        ValueError: ``precision`` is none of the values Lightning accepts (names them).
    """
    from fabric_core._kernel.arguments import normalize_precision
    from fabric_core.plugins.precision.precision import (
        _PRECISION_INPUT_INT,
        _PRECISION_INPUT_STR,
        _PRECISION_INPUT_STR_ALIAS,
    )

    if precision is None:
        return None
    supported = get_args(_PRECISION_INPUT_STR) + get_args(_PRECISION_INPUT_INT) + get_args(_PRECISION_INPUT_STR_ALIAS)
    if precision not in supported:
        raise ValueError(f"Precision {precision!r} is invalid. Allowed precision values: {supported}")
    return normalize_precision(precision)  # type: ignore[return-value]


def _is_using_cli() -> bool:
    """Whether ``fabric-core run`` (``FABRIC_CORE_CLI_USED=1``) or Lightning's ``fabric run`` (``LT_CLI_USED=1``)
    started this process."""
    from fabric_core._run.worker import CLI_ENV, LIGHTNING_CLI_ENV

    return os.environ.get(CLI_ENV) == "1" or os.environ.get(LIGHTNING_CLI_ENV) == "1"


_reexported = reexports(
    __name__,
    {
        "ACCELERATOR_REGISTRY": "fabric_core.accelerators.registry",
        "STRATEGY_REGISTRY": "fabric_core.strategies.registry",
    },
    fallback=lightning_reexports(__name__),
)


def __getattr__(name: str) -> Any:
    """Lightning's names of this module on first access: ``torch`` (its module imports it) and its re-exports."""
    if name == "torch":
        return importlib.import_module("torch")
    return _reexported(name)
