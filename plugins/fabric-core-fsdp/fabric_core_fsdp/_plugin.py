"""Registration of the FSDP strategies and their precision: strings only, so discovery never imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from fabric_core.plugin_api import InvalidConfigError, bf16_on_cpu, component, hookimpl, module_paths, registers

if TYPE_CHECKING:
    from fabric_core.plugin_api import SelectionContext

_FSDP: Final = "fabric_core_fsdp.fsdp:FSDPStrategy"
_FSDP1: Final = "fabric_core_fsdp.fsdp1:FSDP1Strategy"
_MODEL_PARALLEL: Final = "fabric_core_fsdp.model_parallel:ModelParallelStrategy"
_PRECISION: Final = "fabric_core_fsdp.precision:FSDPPrecision"
# fully_shard and DTensor became public in torch.distributed.fsdp / torch.distributed.tensor in 2.6.
_REQUIRES: Final = ("torch>=2.6",)
#: The precision strings FSDPPrecision serves, each registered as ``fsdp-<precision>``.
FSDP_PRECISIONS: Final = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true")
#: What ModelParallelStrategy runs with (the core's precision classes; the user's parallelize_fn decides
#: any FSDP mixed-precision policy itself).
MODEL_PARALLEL_PRECISIONS: Final = ("32-true", "bf16-mixed", "bf16-true", "16-true")


def _is_subclass_of(cls: type | None, module: str, name: str) -> bool:
    """Whether ``cls`` derives from ``module.name``, decided from its MRO so nothing is imported."""
    if cls is None:
        return False
    return any(base.__module__ == module and base.__name__ == name for base in cls.__mro__)


def is_fsdp(cls: type | None) -> bool:
    """Whether ``cls`` is :class:`~fabric_core_fsdp.fsdp.FSDPStrategy` or a subclass of it."""
    return _is_subclass_of(cls, "fabric_core_fsdp.fsdp", "FSDPStrategy")


def is_model_parallel(cls: type | None) -> bool:
    """Whether ``cls`` is :class:`~fabric_core_fsdp.model_parallel.ModelParallelStrategy` or a subclass."""
    return _is_subclass_of(cls, "fabric_core_fsdp.model_parallel", "ModelParallelStrategy")


#: ``fsdp``, ``fsdp_cpu_offload``, ``fsdp1``, ``fsdp1_cpu_offload`` and ``model_parallel``.
fabric_core_register_strategies = registers(
    *(
        component(name, target, description=description, defaults=defaults, requires=_REQUIRES)
        for name, target, description, defaults in (
            (
                "fsdp",
                _FSDP,
                "Fully sharded data parallel (FSDP2 fully_shard); the script runs again once per device.",
                {"start_method": "popen"},
            ),
            (
                "fsdp_cpu_offload",
                _FSDP,
                "fsdp with parameters, gradients and optimizer state offloaded to CPU memory (needs a GPU).",
                {"start_method": "popen", "cpu_offload": True},
            ),
            (
                "fsdp1",
                _FSDP1,
                "Fully sharded data parallel with FSDP1 (FullyShardedDataParallel), for code calling its API.",
                {"start_method": "popen"},
            ),
            (
                "fsdp1_cpu_offload",
                _FSDP1,
                "fsdp1 with parameters and gradients offloaded to CPU memory (needs a GPU).",
                {"start_method": "popen", "cpu_offload": True},
            ),
            (
                "model_parallel",
                _MODEL_PARALLEL,
                "Tensor parallel + FSDP2 over a 2-D device mesh, applied by your parallelize_fn(model, mesh).",
                {"start_method": "popen"},
            ),
        )
    )
)
#: ``fsdp-32-true``, ``fsdp-bf16-mixed``, ... (chosen for FSDP by the selection hook).
fabric_core_register_precisions = registers(
    *(
        component(
            f"fsdp-{precision}",
            _PRECISION,
            description=f"{precision} under FSDP: an FSDP2 MixedPrecisionPolicy (+ grad scaler for 16-mixed).",
            defaults={"precision": precision},
            requires=_REQUIRES,
        )
        for precision in FSDP_PRECISIONS
    )
)


@hookimpl
def fabric_core_select_precision(requested: str, context: SelectionContext) -> str | None:
    """Under an FSDPStrategy, serve the five FSDP precisions with ``FSDPPrecision``; leave others alone."""
    if not is_fsdp(context.strategy_class) or requested not in FSDP_PRECISIONS:
        return None
    return f"fsdp-{bf16_on_cpu(requested, context)}"


@hookimpl
def fabric_core_validate_selection(context: SelectionContext) -> None:
    """Reject the precisions FSDP and ModelParallelStrategy cannot run."""
    if is_fsdp(context.strategy_class) and context.precision not in FSDP_PRECISIONS:
        # Only FSDPPrecision's policies shard: others (64-true, the quantized bitsandbytes layers) would reach
        # fully_shard with parameters it cannot flatten, or not be applied at all.
        raise InvalidConfigError(
            f"`Fabric(strategy={context.strategy!r}, precision={context.precision!r})`: the FSDP strategy supports "
            f"the precisions {', '.join(repr(p) for p in FSDP_PRECISIONS)}. Choose one of them, or another "
            "strategy (e.g. 'ddp' or 'single_device') for this precision.",
            argument="precision",
            value=context.precision,
        )
    if is_model_parallel(context.strategy_class) and context.precision not in MODEL_PARALLEL_PRECISIONS:
        raise InvalidConfigError(
            f"The `ModelParallelStrategy` does not support `Fabric(..., precision={context.precision!r})`. "
            f"`Fabric(strategy={context.strategy!r}, precision={context.precision!r})`: the model-parallel "
            f"strategy supports the precisions {', '.join(repr(p) for p in MODEL_PARALLEL_PRECISIONS)}. Choose "
            "one of them (for fp16 with loss scaling use `strategy='fsdp'`).",
            argument="precision",
            value=context.precision,
        )


#: The Lightning paths of the FSDP and model-parallel strategies and the FSDP precision.
fabric_core_register_modules = module_paths(
    {
        "strategies.fsdp": "fabric_core_fsdp.fsdp",
        "strategies.model_parallel": "fabric_core_fsdp.model_parallel",
        "plugins.precision.fsdp": "fabric_core_fsdp.precision",
    }
)
