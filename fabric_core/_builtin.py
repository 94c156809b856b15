"""The core's own plugin: registers the built-in components by string, through the same hooks as any plugin.

Like any plugin, it imports only the contract, :mod:`fabric_core.plugin_api`, and the kernel finds it as it
finds any plugin: through its entry point (``builtin``, declared by fabric-core's own distribution).

Its selection hooks are ``trylast``: they give the core's default answer when no plugin decides.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

from fabric_core.plugin_api import InvalidConfigError, bf16_on_cpu, component, hookimpl, module_paths, registers

if TYPE_CHECKING:
    from fabric_core.plugin_api import Entry, SelectionContext

_P = "fabric_core.precision"
_E = "fabric_core.environments"

fabric_core_register_accelerators = registers(
    component(
        "cpu",
        "fabric_core.accelerators.cpu:CPUAccelerator",
        description="The CPU; devices=N runs N processes.",
        priority=0,
    )
)
fabric_core_register_strategies = registers(
    component(
        "single_device",
        "fabric_core.strategies.single_device:SingleDeviceStrategy",
        description="One process on one device; collectives are the identity.",
    )
)
fabric_core_register_precisions = registers(
    component("32-true", f"{_P}.precision:Precision", description="Full fp32 precision (the default)."),
    component(
        "64-true", f"{_P}.double:DoublePrecision", description="Double precision: parameters and compute in fp64."
    ),
    *(
        component(
            name,
            f"{_P}.half:HalfPrecision",
            description=f"Parameters and compute in {dtype}, no autocast.",
            defaults={"precision": name},
        )
        for name, dtype in (("16-true", "fp16"), ("bf16-true", "bf16"))
    ),
    *(
        component(
            name,
            f"{_P}.transformer_engine:TransformerEnginePrecision",
            description=f"FP8 through NVIDIA Transformer Engine, weights in {dtype} (needs transformer_engine, CUDA).",
            defaults={"weights_dtype": dtype},
        )
        for name, dtype in (("transformer-engine", "bfloat16"), ("transformer-engine-float16", "float16"))
    ),
    *(
        component(
            name,
            f"{_P}.mixed:MixedPrecision",
            description=f"Mixed precision: fp32 parameters, {how}.",
            defaults={"precision": name},
        )
        for name, how in (("16-mixed", "fp16 autocast with a gradient scaler"), ("bf16-mixed", "bf16 autocast"))
    ),
)

fabric_core_register_environments = registers(
    *(
        component(
            name,
            f"{_E}.{name}:{cls}",
            description=description,
            priority=priority,
            # Kubeflow's `detect()` raises, as Lightning's does; its probe just says no.
            probe=f"{_E}.{name}:never_detected" if name == "kubeflow" else f"{_E}.{name}:{cls}.detect",
        )
        for name, cls, priority, description in (
            ("torchelastic", "TorchElasticEnvironment", 40, "Processes started by torchrun / torchelastic."),
            ("slurm", "SLURMEnvironment", 30, "A SLURM job (srun); not interactive sessions."),
            ("lsf", "LSFEnvironment", 20, "An IBM LSF job started with jsrun."),
            ("mpi", "MPIEnvironment", 10, "Processes started by an MPI launcher (needs mpi4py)."),
            ("kubeflow", "KubeflowEnvironment", -10, "A Kubeflow PyTorchJob; never auto-detected, pass it explicitly."),
            ("lightning", "LightningEnvironment", -100, "The default: fabric-core starts the processes itself."),
        )
    )
)
fabric_core_register_loggers = registers(
    component(
        "csv",
        "fabric_core.loggers.csv_logs:CSVLogger",
        description="Writes metrics to root_dir/name/version_N/metrics.csv (no dependencies).",
        defaults={"root_dir": "."},
    )
)
fabric_core_register_callbacks = registers(
    component(
        "throughput",
        "fabric_core.callbacks.throughput:ThroughputMonitor",
        description="Logs steps, samples, tokens and FLOPs per second and MFU every N steps.",
    ),
    component("progress", "fabric_core.callbacks.progress:ProgressBar", description="A rich progress bar on rank 0."),
    component("profiler", "fabric_core.callbacks.profiler:Profiler", description="torch.profiler traces per rank."),
)
fabric_core_register_runners = registers(
    component(
        "torchrun",
        "fabric_core._run.command:run_torchrun",
        description="The default: torchrun starts --devices processes on this node (--num-nodes nodes in all).",
    )
)


#: Lightning's module paths of the core's own components: each is the implementing module itself, so a
#: module-level name patched at Lightning's path (``plugins.environments.mpi._MPI4PY_AVAILABLE``,
#: ``strategies.launchers.multiprocessing.mp``) is the one the code reads. The other Lightning paths of the core
#: are modules of their own under ``fabric_core/`` (``plugins/precision/precision.py``, ...).
LIGHTNING_PATHS: Final = {
    "plugins.environments.cluster_environment": "fabric_core.environments.environment",
    "plugins.environments.kubeflow": "fabric_core.environments.kubeflow",
    "plugins.environments.lightning": "fabric_core.environments.lightning",
    "plugins.environments.lsf": "fabric_core.environments.lsf",
    "plugins.environments.mpi": "fabric_core.environments.mpi",
    "plugins.environments.slurm": "fabric_core.environments.slurm",
    "plugins.environments.torchelastic": "fabric_core.environments.torchelastic",
    "plugins.io.checkpoint_io": "fabric_core.io.checkpoint_io",
    "plugins.io.torch_io": "fabric_core.io.torch_io",
    "plugins.precision.amp": "fabric_core.precision.mixed",
    "plugins.precision.double": "fabric_core.precision.double",
    "plugins.precision.half": "fabric_core.precision.half",
    "plugins.precision.transformer_engine": "fabric_core.precision.transformer_engine",
    "strategies.launchers.launcher": "fabric_core.launchers.launcher",
    "strategies.launchers.multiprocessing": "fabric_core.launchers.multiprocessing",
    "strategies.launchers.subprocess_script": "fabric_core.launchers.subprocess_script",
}

fabric_core_register_modules = module_paths(LIGHTNING_PATHS)


@hookimpl(trylast=True)
def fabric_core_select_accelerator(requested: str, context: SelectionContext) -> str | None:
    if requested != "auto":
        return requested
    by_priority: dict[int, list[Entry]] = {}
    for entry in context.catalog.selectable("accelerator"):  # a shadowed name is the built-in's
        by_priority.setdefault(entry.priority, []).append(entry)
    for priority in sorted(by_priority, reverse=True):
        available = sorted(e.qualified_name for e in by_priority[priority] if e.is_available())
        if len(available) > 1:
            names = sorted(name.partition(":")[2] for name in available)
            raise InvalidConfigError(
                f"`Fabric(accelerator='auto')` found more than one available accelerator at priority {priority}: "
                f"{', '.join(names)}. Choose one, e.g. `Fabric(accelerator={names[0]!r})`.",
                argument="accelerator",
                value="auto",
            )
        if available:
            return available[0]
    return None


@hookimpl(trylast=True)
def fabric_core_select_strategy(requested: str, context: SelectionContext) -> str | None:
    if requested == "auto":
        return "single_device" if context.world_size == 1 else None
    return requested


@hookimpl(trylast=True)
def fabric_core_select_precision(requested: str, context: SelectionContext) -> str | None:
    requested = bf16_on_cpu(requested, context)
    if requested in ("16-mixed", "bf16-mixed"):
        from fabric_core.utilities.rank_zero import rank_zero_info

        kind = "16-bit" if requested == "16-mixed" else "bfloat16"
        rank_zero_info(f"Using {kind} Automatic Mixed Precision (AMP)")
    return requested


@hookimpl(trylast=True)
def fabric_core_validate_selection(context: SelectionContext) -> None:
    """Refuse the one-device strategy named with several devices or nodes (it would use only the first).

    ``devices="auto"`` is fine: the strategy takes the first device found. An instance is not refused: it brings
    its own device, and Lightning takes it whatever ``devices`` says (its ``test_connector.py``).
    """
    # A chosen strategy class is imported already: a subclass of SingleDeviceStrategy means its module is loaded.
    single = sys.modules.get("fabric_core.strategies.single_device")
    cls = context.strategy_class
    if single is None or cls is None or not issubclass(cls, single.SingleDeviceStrategy):
        return
    if context.catalog.find("strategy", context.strategy or "") is None:
        return  # an instance: its class name is not a catalog name
    several = context.devices != "auto" and context.num_processes > 1
    if not several and context.num_nodes == 1:
        return
    asked = f"devices={context.devices!r}" if several else f"num_nodes={context.num_nodes}"
    raise InvalidConfigError(
        f"`Fabric(strategy={context.strategy!r}, {asked})`: this strategy runs one process on one device, so it would "
        "silently use only the first. Pass `devices=1` (and `num_nodes=1`), or a multi-device strategy such "
        "as 'ddp'.",
        argument="devices" if several else "num_nodes",
        value=context.devices if several else context.num_nodes,
    )
