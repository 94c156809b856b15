"""Utilities users import: seeding, data loading, rank-zero helpers, and the Accelerate-style operations.

Every name is loaded on first use, so importing one light helper never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

#: Accelerate's operations: :mod:`fabric_core.utilities.operations` exports these names, listed once here so that
#: this package knows them without importing torch.
_OPERATIONS: Final = (
    "GatheredParameters",
    "TensorInformation",
    "broadcast",
    "broadcast_object_list",
    "concatenate",
    "convert_outputs_to_fp32",
    "convert_to_fp32",
    "find_batch_size",
    "find_device",
    "gather",
    "gather_object",
    "get_data_structure",
    "honor_type",
    "ignorant_find_batch_size",
    "initialize_tensors",
    "is_tensor_information",
    "is_torch_tensor",
    "pad_across_processes",
    "reduce",
    "send_to_device",
    "slice_tensors",
    "synchronize_rng_state",
    "synchronize_rng_states",
    "wait_for_everyone",
)
_MODULES: Final = {
    "fabric_core.utilities.seed": (
        "seed_everything",
        "reset_seed",
        "set_seed",
        "worker_init_function",
        "pl_worker_init_function",
        "seed_workers_enabled",
        "recorded_seed",
    ),
    "fabric_core.utilities.attribute_dict": ("AttributeDict",),
    "fabric_core.utilities.distributed": ("is_shared_filesystem",),
    "fabric_core.utilities.data": (
        "DistributedSamplerWrapper",
        "suggested_max_num_workers",
        "has_len",
        "has_iterable_dataset",
        "replace_sampler",
        "distributed_sampler_for",
        "requires_distributed_sampler",
    ),
    "fabric_core.utilities.rank_zero": (
        "rank_zero_only",
        "rank_zero_info",
        "rank_zero_warn",
        "rank_zero_debug",
        "rank_zero_deprecation",
        "rank_prefixed_message",
    ),
    "fabric_core.utilities.apply_func": (
        "apply_to_collection",
        "move_data_to_device",
        "convert_to_tensors",
        "convert_tensors_to_scalars",
    ),
    "fabric_core.utilities.operations": _OPERATIONS,
    "fabric_core.utilities.enums": ("LightningEnum",),
    "fabric_core.utilities.warnings": ("disable_possible_user_warnings", "PossibleUserWarning"),
    "fabric_core.utilities.throughput": ("Throughput", "ThroughputMonitor", "measure_flops", "get_available_flops"),
}
_WHERE: Final = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        from fabric_core._deferred import submodule

        return submodule(__name__, name)  # `fabric_core.utilities.seed` after a bare `import fabric_core`
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
