"""Known differences between Lightning Fabric's public API and ours: the allow-list of the compat suite.

Each entry: Lightning's path -> (kind, one-line reason). ``gap``: to be closed (issue 15); ``deliberate``: ours
differs on purpose and the docs say so. A fix deletes its lines; the suite fails on an entry that no longer
differs, so the list stays exact. Keys are Lightning paths; ``path(param)`` names a parameter.
"""

from __future__ import annotations

GAP = "gap"
DELIBERATE = "deliberate"

# fmt: off
# One entry per line (no wrapping), so that a fix deletes exactly its lines.

# Public module paths that do not import under fabric_core (their names are listed in NAMES too).
MODULES: dict[str, tuple[str, str]] = {
}

# Public module-level names and class members fabric_core lacks.
NAMES: dict[str, tuple[str, str]] = {
}

# Parameters of public functions and methods fabric_core lacks.
PARAMS: dict[str, tuple[str, str]] = {
    "lightning_fabric._graveyard.tpu.SingleTPUStrategy.__init__(*args)": (DELIBERATE, "ours names SingleDeviceXLAStrategy's parameters; Lightning forwards *args/**kwargs to them"),
    "lightning_fabric._graveyard.tpu.SingleTPUStrategy.__init__(**kwargs)": (DELIBERATE, "ours names SingleDeviceXLAStrategy's parameters; Lightning forwards *args/**kwargs to them"),
    "lightning_fabric._graveyard.tpu.TPUAccelerator.__init__(*args)": (DELIBERATE, "the XLA accelerator takes no arguments; Lightning's forwards them to a base that takes none"),
    "lightning_fabric._graveyard.tpu.TPUAccelerator.__init__(**kwargs)": (DELIBERATE, "the XLA accelerator takes no arguments; Lightning's forwards them to a base that takes none"),
    "lightning_fabric.plugins.io.xla.XLACheckpointIO.__init__(*args)": (DELIBERATE, "ours takes its one option by keyword (zip_crc32); Lightning forwards *args/**kwargs to a base that takes none"),
    "lightning_fabric.plugins.io.xla.XLACheckpointIO.__init__(**kwargs)": (DELIBERATE, "ours takes its one option by keyword (zip_crc32); Lightning forwards *args/**kwargs to a base that takes none"),
    "lightning_fabric.accelerators.xla.XLAAccelerator.__init__(**kwargs)": (DELIBERATE, "the XLA accelerator takes no arguments; Lightning's forwards them to a base that takes none"),
    "lightning_fabric.accelerators.xla.XLAAccelerator.__init__(*args)": (DELIBERATE, "the XLA accelerator takes no arguments; Lightning's forwards them to a base that takes none"),
}

# Parameters both have, with different defaults.
DEFAULTS: dict[str, tuple[str, str]] = {
    "lightning_fabric.cli.main(args)": (DELIBERATE, "the same function is the fabric-core console script, whose argument list defaults to sys.argv; Lightning's call passes args"),
    "lightning_fabric.plugins.io.torch_io.TorchCheckpointIO.load_checkpoint(map_location)": (DELIBERATE, "None loads to the CPU as Lightning's identity lambda does"),
    "lightning_fabric.plugins.io.xla.XLACheckpointIO.load_checkpoint(map_location)": (DELIBERATE, "None loads to the CPU as Lightning's identity lambda does"),
    "lightning_fabric.plugins.precision.deepspeed.DeepSpeedPrecision.__init__(precision)": (DELIBERATE, "ours defaults to '32-true'; passing it works in both"),
    "lightning_fabric.plugins.precision.fsdp.FSDPPrecision.__init__(precision)": (DELIBERATE, "ours defaults to '32-true'; passing it works in both"),
    "lightning_fabric.plugins.precision.xla.XLAPrecision.__init__(precision)": (DELIBERATE, "ours defaults to '32-true'; passing it works in both"),
    "lightning_fabric.strategies.fsdp.FSDPStrategy.__init__(sharding_strategy)": (DELIBERATE, "None lets FSDP2's own reshard_after_forward choose (FULL_SHARD unless it is False); the strategy still reports FULL_SHARD as Lightning's does"),
    "lightning_fabric.strategies.model_parallel.ModelParallelStrategy.__init__(parallelize_fn)": (DELIBERATE, "optional in ours (no parallelization); passing it works in both"),
    "lightning_fabric.strategies.single_device.SingleDeviceStrategy.__init__(device)": (DELIBERATE, "None means the accelerator's device (cpu here); passing it works in both"),
    "lightning_fabric.strategies.single_xla.SingleDeviceXLAStrategy.__init__(device)": (DELIBERATE, "None means the XLA device; passing it works in both"),
    "lightning_fabric.utilities.rank_zero.rank_zero_debug(stacklevel)": (DELIBERATE, "ours counts from the caller; both attribute the record to the calling line"),
    "lightning_fabric.utilities.rank_zero_deprecation(stacklevel)": (DELIBERATE, "ours counts from the caller; both attribute the record to the calling line"),
    "lightning_fabric.utilities.rank_zero_info(stacklevel)": (DELIBERATE, "ours counts from the caller; both attribute the record to the calling line"),
    "lightning_fabric.utilities.rank_zero_warn(stacklevel)": (DELIBERATE, "ours counts from the caller; both attribute the record to the calling line"),
}

# Module-level names of every Lightning module, private ones included, that fabric_core lacks at the same path
# (see compat_surface.module_level_names for what counts as a name).
MODULE_LEVEL: dict[str, tuple[str, str]] = {
    "lightning_fabric._graveyard.tpu.SingleDeviceXLAStrategy": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.SingleTPUStrategy": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.TPUAccelerator": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.TPUBf16Precision": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.TPUPrecision": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.XLAAccelerator": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.XLABf16Precision": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.XLAPrecision": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu._StrategyRegistry": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu._patch_classes": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu._patch_sys_modules": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
    "lightning_fabric._graveyard.tpu.rank_zero_deprecation": (DELIBERATE, "Lightning's private module that creates its deprecated TPU paths at import; the xla plugin declares those paths (fabric_core_xla.tpu), where the classes are"),
}

# Behaviour cases of test_behaviour.py (compat_cases.CASES ids; "2-ranks:<part>" for compat_job.PARTS) that differ.
# A positional call that binds to another parameter here (see test_positional_arguments_bind_to_the_same_parameters).
POSITIONS: dict[str, tuple[str, str]] = {
}

BEHAVIOUR: dict[str, tuple[str, str]] = {
    "2-ranks:custom_batch_sampler": (DELIBERATE, "a plain BatchSampler keeps its batch size on each rank; Lightning's launch(fn) path draws batches of one (its script path crashes in collate)"),
    "resolve-fsdp-cpu": (DELIBERATE, "FSDP on CPU (gloo) is a Lightning limitation we lift; Lightning refuses it with a ValueError"),
    "torchrun-auto-resolution": (DELIBERATE, "under torchrun, Fabric() with devices/strategy 'auto' joins the N-process job (Lightning trains N copies); tests/environments/test_cluster_inference.py runs it for real"),
}
# fmt: on
