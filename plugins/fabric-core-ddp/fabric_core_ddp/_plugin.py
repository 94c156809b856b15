"""Registration of the DDP strategies: strings only, so discovery never imports torch."""

from __future__ import annotations

import multiprocessing
import sys
import warnings
from typing import TYPE_CHECKING, Final

from fabric_core.plugin_api import FabricCoreWarning, InvalidConfigError, component, hookimpl, module_paths, registers

if TYPE_CHECKING:
    from fabric_core.plugin_api import SelectionContext

_DDP: Final = "fabric_core_ddp.ddp:DDPStrategy"
_DP: Final = "fabric_core_ddp.dp:DataParallelStrategy"
_FORKING: Final = frozenset({"ddp_fork", "ddp_notebook"})
#: Every name this plugin registers (for the validation hook).
NAMES: Final = frozenset(
    {"ddp", "ddp_spawn", "ddp_find_unused_parameters_true", "ddp_find_unused_parameters_false", "dp", *_FORKING}
)

#: ``ddp``, ``ddp_spawn``, ``ddp_fork`` (alias ``ddp_notebook``), the find-unused aliases, ``dp``.
fabric_core_register_strategies = registers(
    component(
        "ddp",
        _DDP,
        description="DistributedDataParallel; the script runs again once per device.",
        defaults={"start_method": "popen"},
    ),
    component(
        "ddp_spawn",
        _DDP,
        description="DistributedDataParallel; fabric.launch(fn) spawns fresh processes running fn.",
        defaults={"start_method": "spawn"},
    ),
    component(
        "ddp_fork",
        _DDP,
        description="DistributedDataParallel; fabric.launch(fn) forks processes (works in notebooks).",
        defaults={"start_method": "fork"},
        aliases=("ddp_notebook",),
    ),
    *(
        component(
            f"ddp_find_unused_parameters_{str(value).lower()}",
            _DDP,
            description=f"ddp with find_unused_parameters={value}.",
            defaults={"start_method": "popen", "find_unused_parameters": value},
        )
        for value in (True, False)
    ),
    component(
        "dp",
        _DP,
        description="torch.nn.DataParallel: one process splits each batch over its GPUs (CUDA only).",
    ),
)


@hookimpl
def fabric_core_select_strategy(requested: str, context: SelectionContext) -> str | None:
    """``"auto"`` with more than one process is ``ddp`` (``ddp_fork`` when interactive); ``dp`` on CPU is ``ddp``."""
    if requested == "auto" and context.world_size > 1:
        return "ddp_fork" if context.interactive else "ddp"
    if requested == "dp" and context.device_type == "cpu":
        warnings.warn(
            "`Fabric(strategy='dp')`: torch.nn.DataParallel needs GPUs, so 'dp' is not supported on CPUs, hence "
            "setting `strategy='ddp'`.",
            FabricCoreWarning,
            stacklevel=2,
        )
        return "ddp"
    return None


@hookimpl
def fabric_core_validate_selection(context: SelectionContext) -> None:
    """Reject forking where the platform cannot, and the DDP family on Apple's MPS."""
    # torch.multiprocessing starts the processes (and is what Lightning asks); this module imports no torch, so
    # it asks torch's module when a Fabric has imported it, which is always the case when a selection runs.
    start_methods = sys.modules.get("torch.multiprocessing", multiprocessing).get_all_start_methods()
    if context.strategy in _FORKING and "fork" not in start_methods:
        raise InvalidConfigError(
            f"You selected `Fabric(strategy={context.strategy!r})` but process forking is not supported on this "
            "platform. Use `Fabric(strategy='ddp_spawn')` instead.",
            argument="strategy",
            value=context.strategy,
        )
    if context.strategy in NAMES and context.device_type == "mps":
        raise InvalidConfigError(
            f"You selected `Fabric(strategy={context.strategy!r})` but strategies from the DDP family are not "
            "supported on the MPS accelerator. Set `accelerator='cpu'` or choose another strategy.",
            argument="strategy",
            value=context.strategy,
        )


#: The Lightning paths of the DDP and DataParallel strategies (``fabric_core.strategies.ddp``, ``.dp``).
fabric_core_register_modules = module_paths(
    {"strategies.ddp": "fabric_core_ddp.ddp", "strategies.dp": "fabric_core_ddp.dp"}
)
