"""Registration of the XLA accelerator, strategies and precisions: strings only, no torch, no torch_xla."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

from fabric_core.plugin_api import InvalidConfigError, MissingPackageError, component, hookimpl, module_paths, registers
from fabric_core_xla._names import PRECISIONS, STRATEGIES, TPU_PATHS, precision_entry

if TYPE_CHECKING:
    from fabric_core.plugin_api import SelectionContext

#: Above every other accelerator: a host with TPUs wants them, even if it also has a GPU.
PRIORITY: Final = 30
_PKG: Final = "fabric_core_xla"
#: The XLA strategy classes, as (module, class) names.
_STRATEGY_CLASSES: Final = (
    (f"{_PKG}.strategy", "XLAStrategy"),
    (f"{_PKG}.single_device", "SingleDeviceXLAStrategy"),
)


#: ``"tpu"`` (alias ``"xla"``), found by ``accelerator="auto"`` first.
fabric_core_register_accelerators = registers(
    component(
        "tpu",
        f"{_PKG}.accelerator:XLAAccelerator",
        description="TPUs (and other PJRT devices) through torch_xla; needs `pip install torch_xla`.",
        aliases=("xla",),
        priority=PRIORITY,
        probe=f"{_PKG}.accelerator:probe",
    )
)
#: ``"xla"``, ``"single_xla"`` and ``"xla_fsdp"``.
fabric_core_register_strategies = registers(
    component(
        "xla",
        f"{_PKG}.strategy:XLAStrategy",
        description="One process per XLA device (xmp.spawn); gradients averaged in the optimizer step.",
    ),
    component(
        "single_xla", f"{_PKG}.single_device:SingleDeviceXLAStrategy", description="One process on one XLA device."
    ),
    component(
        "xla_fsdp",
        f"{_PKG}.fsdp:XLAFSDPStrategy",
        description="Fully sharded data parallel on XLA devices (XlaFullyShardedDataParallel).",
    ),
)
#: ``"xla-32-true"``, ``"xla-16-true"``, ``"xla-bf16-true"`` (chosen for the XLA strategies).
fabric_core_register_precisions = registers(
    *(
        component(
            precision_entry(precision),
            f"{_PKG}.precision:XLAPrecision",
            description=f"{precision} on XLA devices, stepped with xm.optimizer_step.",
            defaults={"precision": precision},
        )
        for precision in PRECISIONS
    )
)


@hookimpl
def fabric_core_select_accelerator(requested: str, context: SelectionContext) -> str | None:
    """Explain how to get torch_xla when ``"tpu"``/``"xla"`` is asked for without it."""
    if requested not in ("tpu", "xla"):
        return None
    # The accelerator's module (imported next by selection anyway) holds Lightning's `_XLA_AVAILABLE` flag,
    # read at call time: tests pretend torch_xla is installed by setting it.
    from fabric_core_xla import accelerator, device

    if not accelerator._XLA_AVAILABLE and accelerator.XLAAccelerator.auto_device_count() == 0:
        raise MissingPackageError(
            f"`Fabric(accelerator={requested!r})` needs torch_xla, which is not installed. {device.INSTALL_HINT}",
            package="torch_xla",
            argument="accelerator",
            value=requested,
        )
    return None


def _uses_xla_strategy(context: SelectionContext) -> bool:
    if context.strategy in STRATEGIES:
        return True
    if context.strategy_class is None:
        return False
    # A class can derive from an XLA strategy only once its module is imported: look there, import nothing
    # (this runs on every `Fabric()`, and importing the strategies costs a second).
    bases = tuple(
        getattr(module, name)
        for module_name, name in _STRATEGY_CLASSES
        if (module := sys.modules.get(module_name)) is not None
    )
    return bool(bases) and issubclass(context.strategy_class, bases)


@hookimpl(tryfirst=True)
def fabric_core_select_strategy(requested: str, context: SelectionContext) -> str | None:
    """On XLA devices ``"auto"`` is ``"xla"`` (several devices) or ``"single_xla"``; ``"fsdp"`` is ``"xla_fsdp"``."""
    if context.device_type != "xla":
        return None
    if requested == "auto":
        return "xla" if len(context.parallel_devices) > 1 else "single_xla"
    if requested == "fsdp":
        return "xla_fsdp"
    return None


@hookimpl(tryfirst=True)
def fabric_core_select_precision(requested: str, context: SelectionContext) -> str | None:
    """Under the XLA strategies, each supported precision maps to its XLA entry; others are an error."""
    if not _uses_xla_strategy(context):
        return None
    if requested not in PRECISIONS:
        raise InvalidConfigError(
            f"`Fabric(precision={requested!r})` is not supported with the XLA strategies (strategy="
            f"{context.strategy!r}). Valid choices: {', '.join(repr(p) for p in PRECISIONS)}.",
            argument="precision",
            value=requested,
        )
    return precision_entry(requested)


@hookimpl
def fabric_core_validate_selection(context: SelectionContext) -> None:
    """XLA devices run only with the XLA strategies and vice versa; each strategy with its device count."""
    on_xla, xla_strategy = context.device_type == "xla", _uses_xla_strategy(context)
    if on_xla and not xla_strategy:
        found = context.strategy_class.__name__ if context.strategy_class is not None else context.strategy
        raise InvalidConfigError(
            # Lightning's sentence, then ours.
            "The `XLAAccelerator` can only be used with a `SingleDeviceXLAStrategy`, `XLAStrategy`, or "
            f"`XLAFSDPStrategy`. Found {found}. The tpu accelerator runs only with the XLA strategies, not "
            f"`strategy={context.strategy!r}`. Valid choices: 'auto', {', '.join(repr(s) for s in STRATEGIES)}.",
            argument="strategy",
            value=context.strategy,
        )
    if xla_strategy and not on_xla:
        raise InvalidConfigError(
            f"`strategy={context.strategy!r}` runs on XLA devices, but the accelerator is "
            f"{context.accelerator!r}. Use `Fabric(accelerator='tpu')`, or another strategy.",
            argument="accelerator",
            value=context.accelerator,
        )
    if not on_xla:
        return
    devices = len(context.parallel_devices)
    if context.strategy == "single_xla" and devices > 1:
        raise InvalidConfigError(
            f"`strategy='single_xla'` runs one process on one device, but {devices} devices were selected. Use "
            "`strategy='xla'` (or 'auto') for all of them, or `devices=1`.",
            argument="strategy",
            value=context.strategy,
        )
    if context.strategy in ("xla", "xla_fsdp") and devices < 2:
        raise InvalidConfigError(
            f"`strategy={context.strategy!r}` runs one process per device and needs more than one, but "
            f"{devices} was selected. Use `strategy='single_xla'` (or 'auto') for one device.",
            argument="strategy",
            value=context.strategy,
        )


#: The Lightning paths of the XLA accelerator, strategies, launcher, environment, checkpoint I/O and precision,
#: and Lightning's deprecated TPU paths: one module for all five, as Lightning's are.
fabric_core_register_modules = module_paths(
    {
        "accelerators.xla": f"{_PKG}.accelerator",
        "strategies.xla": f"{_PKG}.strategy",
        "strategies.single_xla": f"{_PKG}.single_device",
        "strategies.xla_fsdp": f"{_PKG}.fsdp",
        "strategies.launchers.xla": f"{_PKG}.launcher",
        "plugins.environments.xla": f"{_PKG}.environment",
        "plugins.io.xla": f"{_PKG}.checkpoint_io",
        "plugins.precision.xla": f"{_PKG}.precision",
        **dict.fromkeys(TPU_PATHS, f"{_PKG}.tpu"),
    }
)
