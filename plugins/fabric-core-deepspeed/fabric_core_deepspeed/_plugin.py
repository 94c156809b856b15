"""Registration of the DeepSpeed strategies and precisions: strings only, so discovery imports neither torch
nor deepspeed."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Final

from fabric_core.plugin_api import InvalidConfigError, bf16_on_cpu, component, hookimpl, module_paths, registers

if TYPE_CHECKING:
    from fabric_core.plugin_api import SelectionContext

_STRATEGY: Final = "fabric_core_deepspeed.strategy:DeepSpeedStrategy"
_PRECISION: Final = "fabric_core_deepspeed.precision:DeepSpeedPrecision"
_REQUIRES: Final = ("deepspeed",)
#: The precision strings DeepSpeed runs with (kept here as strings: this module must not import torch).
PRECISIONS: Final = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")
#: Strategy names and the constructor arguments each implies.
STRATEGIES: Final[dict[str, tuple[dict[str, Any], str]]] = {
    "deepspeed": ({}, "DeepSpeed ZeRO (stage 2 unless options say otherwise)."),
    "deepspeed_stage_1": ({"stage": 1}, "DeepSpeed ZeRO stage 1: optimizer states sharded."),
    "deepspeed_stage_1_offload": (
        {"stage": 1, "offload_optimizer": True},
        "DeepSpeed ZeRO stage 1 with the optimizer offloaded to CPU.",
    ),
    "deepspeed_stage_2": ({"stage": 2}, "DeepSpeed ZeRO stage 2: optimizer states and gradients sharded."),
    "deepspeed_stage_2_offload": (
        {"stage": 2, "offload_optimizer": True},
        "DeepSpeed ZeRO stage 2 with the optimizer offloaded to CPU.",
    ),
    "deepspeed_stage_3": ({"stage": 3}, "DeepSpeed ZeRO stage 3: parameters, gradients and optimizer states sharded."),
    "deepspeed_stage_3_offload": (
        {"stage": 3, "offload_optimizer": True, "offload_parameters": True},
        "DeepSpeed ZeRO stage 3 with parameters and optimizer offloaded to CPU.",
    ),
    "deepspeed_stage_3_offload_nvme": (
        {
            "stage": 3,
            "offload_optimizer": True,
            "offload_parameters": True,
            "remote_device": "nvme",
            "offload_params_device": "nvme",
            "offload_optimizer_device": "nvme",
        },
        "DeepSpeed ZeRO stage 3 with parameters and optimizer offloaded to NVMe.",
    ),
}


def precision_name(precision: str) -> str:
    """The catalog name of DeepSpeed's precision entry for a precision string (``"deepspeed-bf16-mixed"``)."""
    return f"deepspeed-{precision}"


#: ``deepspeed`` and its stage/offload variants.
fabric_core_register_strategies = registers(
    *(
        component(name, _STRATEGY, description=description, defaults=defaults, requires=_REQUIRES)
        for name, (defaults, description) in STRATEGIES.items()
    )
)
#: ``deepspeed-<precision>`` for each precision DeepSpeed supports (chosen by the selection hook).
fabric_core_register_precisions = registers(
    *(
        component(
            precision_name(precision),
            _PRECISION,
            description=f"{precision} under the DeepSpeed strategy (selected automatically with it).",
            defaults={"precision": precision},
            requires=_REQUIRES,
        )
        for precision in PRECISIONS
    )
)


def _is_deepspeed(strategy_class: type | None) -> bool:
    # Until the strategy module is imported no class can derive from it: nothing to import to find out.
    module = sys.modules.get("fabric_core_deepspeed.strategy")
    if strategy_class is None or module is None:
        return False
    return issubclass(strategy_class, module.DeepSpeedStrategy)


@hookimpl
def fabric_core_select_precision(requested: str, context: SelectionContext) -> str | None:
    """Under a DeepSpeed strategy, serve the precision with DeepSpeed's own precision plugin.

    ``"16-mixed"`` on CPU becomes ``"bf16-mixed"`` with a warning, as without DeepSpeed.
    """
    if not _is_deepspeed(context.strategy_class):
        return None
    requested = bf16_on_cpu(requested, context)
    return precision_name(requested) if requested in PRECISIONS else None


@hookimpl
def fabric_core_validate_selection(context: SelectionContext) -> None:
    """Reject precisions DeepSpeed cannot run (``"64-true"``, the bitsandbytes ones, ...)."""
    if not _is_deepspeed(context.strategy_class) or context.precision is None:
        return
    if context.precision in PRECISIONS or context.precision in {precision_name(p) for p in PRECISIONS}:
        return
    raise InvalidConfigError(
        f"`Fabric(strategy={context.strategy!r}, precision={context.precision!r})`: DeepSpeed does not support "
        f"this precision. Valid choices: {', '.join(repr(p) for p in PRECISIONS)}.",
        argument="precision",
        value=context.precision,
    )


#: The Lightning paths of the DeepSpeed strategy and precision (``fabric_core.strategies.deepspeed``, ...).
fabric_core_register_modules = module_paths(
    {
        "strategies.deepspeed": "fabric_core_deepspeed.strategy",
        "plugins.precision.deepspeed": "fabric_core_deepspeed.precision",
    }
)
