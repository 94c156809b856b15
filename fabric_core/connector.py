"""Lightning's ``connector`` path: its private ``_Connector`` and the precision-argument helpers.

fabric-core decides ``Fabric(...)`` arguments in :mod:`fabric_core._selection`, through the plugins' selection
hooks (``fabric-core explain`` shows the result), and builds them in :mod:`fabric_core._assembly`. Lightning's
``_Connector`` is a thin front over those two; ``_convert_precision_to_unified_args`` (which
``lightning.pytorch`` imports) reads the same spelling table as ``Fabric(precision=...)``. The two registries
Lightning's module imports are read views over the plugin catalog, loaded on first access.
"""

from __future__ import annotations

import os
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


class _Connector:
    """The components ``Fabric(...)`` would run with for these arguments, decided and built as ``Fabric`` does.

    After construction ``accelerator``, ``strategy`` (connected to the others), ``precision``,
    ``checkpoint_io`` and ``cluster_environment`` hold the built objects.

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
        from fabric_core._assembly import assemble

        components = assemble(
            None,
            accelerator=accelerator,
            strategy=strategy,
            devices=devices,
            num_nodes=num_nodes,
            precision=precision,
            plugins=plugins,
        )
        self.accelerator: Any = components.accelerator
        self.strategy: Any = components.strategy
        self.precision: Any = components.precision
        self.checkpoint_io: Any = components.checkpoint_io
        self.cluster_environment: Any = components.cluster_environment


def _convert_precision_to_unified_args(precision: _PRECISION_INPUT | None) -> _PRECISION_INPUT_STR | None:
    """Lightning's canonical precision string for ``precision`` (``16`` → ``"16-mixed"``), ``None`` for ``None``.

    The historical ``16`` and ``bf16`` spellings warn, as ``Fabric(precision=...)`` does.

    Raises:
        ValueError: ``precision`` is none of the values Lightning accepts (names them).
    """
    from fabric_core._arguments import normalize_precision
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
    from fabric_core._run_worker import CLI_ENV, LIGHTNING_CLI_ENV

    return os.environ.get(CLI_ENV) == "1" or os.environ.get(LIGHTNING_CLI_ENV) == "1"


__getattr__ = reexports(
    __name__,
    {
        "ACCELERATOR_REGISTRY": "fabric_core.accelerators.registry",
        "STRATEGY_REGISTRY": "fabric_core.strategies.registry",
    },
    fallback=lightning_reexports(__name__),
)
