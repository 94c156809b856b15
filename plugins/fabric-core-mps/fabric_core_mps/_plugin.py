"""Registration of the MPS accelerator: strings only, so discovery never imports torch."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

from fabric_core.plugin_api import InvalidConfigError, component, hookimpl, module_paths, registers

if TYPE_CHECKING:
    from fabric_core.plugin_api import SelectionContext

#: Above the cpu (0), below XLA (30); cuda shares the band: no machine has both.
PRIORITY: Final = 20
#: Strategy names of the multi-process families (ddp, dp, deepspeed, fsdp and their aliases).
PARALLEL_PREFIXES: Final = ("ddp", "dp", "deepspeed", "fsdp")

#: ``"mps"``, found by ``accelerator="auto"`` on Apple silicon.
fabric_core_register_accelerators = registers(
    component(
        "mps",
        "fabric_core_mps.accelerator:MPSAccelerator",
        description="The GPU of Apple silicon Macs (Metal Performance Shaders); one process.",
        priority=PRIORITY,
        probe="fabric_core_mps.accelerator:probe",
    )
)
#: The Lightning path of the MPS accelerator (``fabric_core.accelerators.mps``).
fabric_core_register_modules = module_paths({"accelerators.mps": "fabric_core_mps.accelerator"})


@hookimpl
def fabric_core_select_accelerator(requested: str, context: SelectionContext) -> str | None:
    """``"gpu"`` means mps on a Mac that has it; elsewhere other plugins (cuda) decide."""
    if requested != "gpu":
        return None
    # The entry's probe asks `MPSAccelerator.is_available()` at call time, so that patching it answers here too.
    entry = context.catalog.find("accelerator", "mps")
    return "mps" if entry is not None and entry.is_available() else None


def _is_parallel(context: SelectionContext) -> bool:
    name = (context.strategy or "").lower()
    if name.startswith(PARALLEL_PREFIXES):
        return True
    # A class can derive from ParallelStrategy only once its module is imported: look there, import nothing.
    parallel = sys.modules.get("fabric_core.strategies.parallel")
    if context.strategy_class is None or parallel is None:
        return False
    return issubclass(context.strategy_class, parallel.ParallelStrategy)


@hookimpl
def fabric_core_validate_selection(context: SelectionContext) -> None:
    """Reject multi-process strategies on MPS: torch has no process-group backend for it."""
    if context.device_type == "mps" and _is_parallel(context):
        raise InvalidConfigError(
            f"You set `strategy={context.strategy!r}` but strategies from the DDP family are not supported on "
            "the MPS accelerator. Either explicitly set `accelerator='cpu'` or change the strategy "
            "(e.g. `strategy='auto'` for one MPS device).",
            argument="strategy",
            value=context.strategy,
        )
