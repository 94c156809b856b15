"""The names of Lightning's modules whose classes come from a first-party plugin, for when it is absent.

Generated from lightning-fabric 2.6.6 by
``python tests/compat/lightning_absent.py --write``; do not edit by hand. ``{path: {name: description}}``;
the descriptions are explained in that script, and :mod:`.absent_plugins` builds the modules.
"""

from __future__ import annotations

from typing import Final

# fmt: off
ABSENT_NAMES: Final[dict[str, dict[str, str]]] = {
    'accelerators.cuda': {
        'CUDAAccelerator': 'class accelerators.accelerator:Accelerator',
        'find_usable_cuda_devices': 'function',
        '_get_all_visible_cuda_devices': 'function',
        'num_cuda_devices': 'function',
        'is_cuda_available': 'function',
        '_is_ampere_or_later': 'function',
        '_check_cuda_matmul_precision': 'function',
        '_clear_cuda_memory': 'function',
    },
    'accelerators.mps': {
        'MPSAccelerator': 'class accelerators.accelerator:Accelerator',
        '_get_all_available_mps_gpus': 'function',
    },
    'strategies.ddp': {
        '_DDP_FORK_ALIASES': "value ('ddp_fork', 'ddp_notebook')",
        'DDPStrategy': 'class strategies.parallel:ParallelStrategy',
        '_DDPBackwardSyncControl': 'class strategies.strategy:_BackwardSyncControl',
    },
    'strategies.dp': {
        'DataParallelStrategy': 'class strategies.parallel:ParallelStrategy',
    },
    'strategies.fsdp': {
        '_FSDP_ALIASES': "value ('fsdp', 'fsdp_cpu_offload')",
        'FSDPStrategy': 'class strategies.parallel:ParallelStrategy strategies.strategy:_Sharded',
        '_activation_checkpointing_kwargs': 'function',
        '_auto_wrap_policy_kwargs': 'function',
        '_setup_activation_checkpointing': 'function',
        '_FSDPBackwardSyncControl': 'class strategies.strategy:_BackwardSyncControl',
        '_init_cpu_offload': 'function',
        '_init_sharding_strategy': 'function',
        '_optimizer_has_flat_params': 'function',
        '_get_sharded_state_dict_context': 'function',
        '_get_full_state_dict_context': 'function',
        '_is_sharded_checkpoint': 'function',
        '_is_full_checkpoint': 'function',
        '_has_fsdp_modules': 'function',
        '_move_torchmetrics_to_device': 'function',
        '_distributed_checkpoint_save': 'function',
        '_distributed_checkpoint_load': 'function',
    },
    'strategies.model_parallel': {
        'ModelParallelStrategy': 'class strategies.parallel:ParallelStrategy',
        '_ParallelBackwardSyncControl': 'class strategies.strategy:_BackwardSyncControl',
        '_FSDPNoSync': 'class contextlib:AbstractContextManager',
        '_save_checkpoint': 'function',
        '_load_checkpoint': 'function',
        '_setup_device_mesh': 'function',
        '_has_dtensor_modules': 'function',
        '_load_raw_module_state_from_path': 'function',
        '_load_raw_module_state': 'function',
        '_named_parameters_and_buffers_to_load': 'function',
        '_rekey_optimizer_state_if_needed': 'function',
    },
    'plugins.precision.fsdp': {
        '_PRECISION_INPUT': 'literal 32-true 16-true bf16-true 16-mixed bf16-mixed',
        'FSDPPrecision': 'class plugins.precision.precision:Precision',
    },
    'strategies.deepspeed': {
        '_DEEPSPEED_AVAILABLE': 'absent',
        '_DEEPSPEED_GREATER_EQUAL_0_16': 'absent',
        'DeepSpeedStrategy': 'class strategies.parallel:ParallelStrategy strategies.strategy:_Sharded',
        '_get_deepspeed_engines_from_state': 'function',
        '_validate_state_keys': 'function',
        '_validate_device_index_selection': 'function',
        '_is_deepspeed_checkpoint': 'function',
        '_validate_checkpoint_directory': 'function',
        '_format_precision_config': 'function',
    },
    'plugins.precision.deepspeed': {
        '_PRECISION_INPUT': 'literal 32-true 16-true bf16-true 16-mixed bf16-mixed',
        'DeepSpeedPrecision': 'class plugins.precision.precision:Precision',
    },
    'plugins.precision.bitsandbytes': {
        '_BITSANDBYTES_AVAILABLE': 'absent',
        'BitsandbytesPrecision': 'class plugins.precision.precision:Precision',
        '_quantize_on_load_hook': 'function',
        '_ignore_missing_weights_hook': 'function',
        '_replace_param': 'function',
        '_import_bitsandbytes': 'function',
        '_convert_layers': 'function',
    },
    'loggers.tensorboard': {
        '_TENSORBOARD_AVAILABLE': 'absent',
        '_TENSORBOARDX_AVAILABLE': 'absent',
        'TensorBoardLogger': 'class loggers.logger:Logger',
    },
    'accelerators.xla': {
        'XLAAccelerator': 'class accelerators.accelerator:Accelerator',
        '_XLA_AVAILABLE': 'absent',
        '_XLA_GREATER_EQUAL_2_1': 'absent',
        '_XLA_GREATER_EQUAL_2_5': 'absent',
        '_using_pjrt': 'function',
        '_parse_tpu_devices': 'function',
        '_check_tpu_devices_valid': 'function',
        '_parse_tpu_devices_str': 'function',
    },
    'strategies.xla': {
        'XLAStrategy': 'class strategies.parallel:ParallelStrategy',
    },
    'strategies.single_xla': {
        'SingleDeviceXLAStrategy': 'class strategies.single_device:SingleDeviceStrategy',
    },
    'strategies.xla_fsdp': {
        'XLAFSDPStrategy': 'class strategies.parallel:ParallelStrategy strategies.strategy:_Sharded',
        '_auto_wrap_policy_kwargs': 'function',
        '_activation_checkpointing_auto_wrapper': 'function',
        '_activation_checkpointing_kwargs': 'function',
        '_XLAFSDPBackwardSyncControl': 'class strategies.strategy:_BackwardSyncControl',
    },
    'strategies.launchers.xla': {
        '_XLALauncher': 'class strategies.launchers.launcher:_Launcher',
        '_rank_teardown': 'function',
    },
    'plugins.environments.xla': {
        'XLAEnvironment': 'class plugins.environments.cluster_environment:ClusterEnvironment',
    },
    'plugins.io.xla': {
        'XLACheckpointIO': 'class plugins.io.torch_io:TorchCheckpointIO',
    },
    'plugins.precision.xla': {
        '_PRECISION_INPUT': 'literal 32-true 16-true bf16-true',
        'XLAPrecision': 'class plugins.precision.precision:Precision',
    },
    'accelerators.tpu': {
        '_patch_sys_modules': 'function',
        'SingleTPUStrategy': 'class strategies.single_device:SingleDeviceStrategy',
        'TPUAccelerator': 'class accelerators.accelerator:Accelerator',
        'TPUPrecision': 'class plugins.precision.precision:Precision',
        'XLABf16Precision': 'class plugins.precision.precision:Precision',
        'TPUBf16Precision': 'class plugins.precision.precision:Precision',
        '_patch_classes': 'function',
    },
    'plugins.precision.tpu': {
        '_patch_sys_modules': 'function',
        'SingleTPUStrategy': 'class strategies.single_device:SingleDeviceStrategy',
        'TPUAccelerator': 'class accelerators.accelerator:Accelerator',
        'TPUPrecision': 'class plugins.precision.precision:Precision',
        'XLABf16Precision': 'class plugins.precision.precision:Precision',
        'TPUBf16Precision': 'class plugins.precision.precision:Precision',
        '_patch_classes': 'function',
    },
    'plugins.precision.tpu_bf16': {
        '_patch_sys_modules': 'function',
        'SingleTPUStrategy': 'class strategies.single_device:SingleDeviceStrategy',
        'TPUAccelerator': 'class accelerators.accelerator:Accelerator',
        'TPUPrecision': 'class plugins.precision.precision:Precision',
        'XLABf16Precision': 'class plugins.precision.precision:Precision',
        'TPUBf16Precision': 'class plugins.precision.precision:Precision',
        '_patch_classes': 'function',
    },
    'plugins.precision.xlabf16': {
        '_patch_sys_modules': 'function',
        'SingleTPUStrategy': 'class strategies.single_device:SingleDeviceStrategy',
        'TPUAccelerator': 'class accelerators.accelerator:Accelerator',
        'TPUPrecision': 'class plugins.precision.precision:Precision',
        'XLABf16Precision': 'class plugins.precision.precision:Precision',
        'TPUBf16Precision': 'class plugins.precision.precision:Precision',
        '_patch_classes': 'function',
    },
    'strategies.single_tpu': {
        '_patch_sys_modules': 'function',
        'SingleTPUStrategy': 'class strategies.single_device:SingleDeviceStrategy',
        'TPUAccelerator': 'class accelerators.accelerator:Accelerator',
        'TPUPrecision': 'class plugins.precision.precision:Precision',
        'XLABf16Precision': 'class plugins.precision.precision:Precision',
        'TPUBf16Precision': 'class plugins.precision.precision:Precision',
        '_patch_classes': 'function',
    },
}
# fmt: on
