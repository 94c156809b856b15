"""Lightning Fabric's names that one of its modules re-exports from another, at our matching paths.

Generated from lightning-fabric 2.6.6 by
``python tests/compat/lightning_reexports.py --write``; do not edit by hand.
``{our module: {source module: names}}``, paths relative to ``fabric_core`` (``""`` is the package): the
space-separated names are taken from the source module;
``name=original`` where Lightning imports under another name. :func:`reexported` gives one module's
``{name: source}``; :func:`fabric_core._deferred.lightning_reexports` serves them on first access.
"""

from __future__ import annotations

import functools
from typing import Final

# fmt: off
_SOURCES: Final[dict[str, dict[str, str]]] = {
    '': {
        'fabric': 'Fabric',
        '': '__version__',
        'utilities.warnings': 'disable_possible_user_warnings',
        'wrappers': 'is_wrapped',
        'utilities.seed': 'seed_everything',
    },
    '_graveyard.tpu': {
        'strategies.single_xla': 'SingleDeviceXLAStrategy',
        'accelerators': 'XLAAccelerator',
        'plugins.precision': 'XLAPrecision',
        'strategies': '_StrategyRegistry',
        'utilities.rank_zero': 'rank_zero_deprecation',
    },
    'accelerators': {
        'accelerators.accelerator': 'Accelerator',
        'accelerators.cpu': 'CPUAccelerator',
        'accelerators.cuda': 'CUDAAccelerator find_usable_cuda_devices',
        'accelerators.mps': 'MPSAccelerator',
        'accelerators.xla': 'XLAAccelerator',
        'accelerators.registry': '_AcceleratorRegistry',
        'utilities.registry': '_register_classes',
    },
    'accelerators.accelerator': {
        'accelerators.registry': '_AcceleratorRegistry',
    },
    'accelerators.cpu': {
        'accelerators.accelerator': 'Accelerator',
        'accelerators.registry': '_AcceleratorRegistry',
    },
    'accelerators.cuda': {
        'accelerators.accelerator': 'Accelerator',
        'accelerators.registry': '_AcceleratorRegistry',
        'utilities.rank_zero': 'rank_zero_info',
    },
    'accelerators.mps': {
        'accelerators.accelerator': 'Accelerator',
        'accelerators.registry': '_AcceleratorRegistry',
    },
    'accelerators.registry': {
        'utilities.exceptions': 'MisconfigurationException',
        'utilities.registry': '_register_classes',
    },
    'accelerators.xla': {
        'accelerators.accelerator': 'Accelerator',
        'accelerators.registry': '_AcceleratorRegistry',
        'utilities.device_parser': '_check_data_type',
    },
    'cli': {
        'accelerators': 'CPUAccelerator CUDAAccelerator MPSAccelerator',
        'strategies': 'STRATEGY_REGISTRY',
        'plugins.precision.precision': '_PRECISION_INPUT_STR _PRECISION_INPUT_STR_ALIAS',
        'utilities.load': '_load_distributed_checkpoint',
        'utilities.device_parser': '_parse_gpu_ids _select_auto_accelerator',
        'utilities.consolidate_checkpoint': '_process_cli_args',
        'utilities.distributed': '_suggested_max_num_threads',
    },
    'connector': {
        'accelerators': 'ACCELERATOR_REGISTRY',
        'accelerators.accelerator': 'Accelerator',
        'plugins': (
            'BitsandbytesPrecision CheckpointIO DeepSpeedPrecision HalfPrecision MixedPrecision Precision '
            'TransformerEnginePrecision XLAPrecision'
        ),
        'accelerators.cuda': 'CUDAAccelerator',
        'plugins.environments': (
            'ClusterEnvironment LSFEnvironment LightningEnvironment MPIEnvironment '
            'SLURMEnvironment TorchElasticEnvironment'
        ),
        'strategies': (
            'DeepSpeedStrategy ParallelStrategy STRATEGY_REGISTRY SingleDeviceStrategy '
            'SingleDeviceXLAStrategy Strategy XLAFSDPStrategy XLAStrategy'
        ),
        'plugins.precision.double': 'DoublePrecision',
        'plugins.precision.fsdp': 'FSDPPrecision',
        'strategies.fsdp': 'FSDPStrategy _FSDP_ALIASES',
        'accelerators.mps': 'MPSAccelerator',
        'strategies.model_parallel': 'ModelParallelStrategy',
        'accelerators.xla': 'XLAAccelerator',
        'strategies.ddp': '_DDP_FORK_ALIASES',
        'utilities.imports': '_IS_INTERACTIVE',
        'plugins.precision.precision': (
            '_PRECISION_INPUT _PRECISION_INPUT_INT _PRECISION_INPUT_STR '
            '_PRECISION_INPUT_STR_ALIAS _PRECISION_INPUT_STR_ALIAS_CONVERSION'
        ),
        'utilities.device_parser': '_determine_root_gpu_device',
        'utilities': 'rank_zero_info rank_zero_warn',
    },
    'fabric': {
        'accelerators.accelerator': 'Accelerator',
        'strategies': 'DataParallelStrategy DeepSpeedStrategy FSDPStrategy SingleDeviceStrategy Strategy XLAStrategy',
        'utilities.distributed': 'DistributedSamplerWrapper _InfiniteBarrier',
        'loggers': 'Logger',
        'utilities.warnings': 'PossibleUserWarning',
        'plugins': 'Precision',
        'utilities.types': 'ReduceOp',
        'strategies.strategy': 'TBroadcast _Sharded',
        'connector': '_Connector _PLUGIN_INPUT _PRECISION_INPUT _is_using_cli',
        'wrappers': '_FabricDataLoader _FabricModule _FabricOptimizer _to_compiled _unwrap_compiled _unwrap_objects',
        'strategies.launchers': '_MultiProcessingLauncher _XLALauncher',
        'utilities.data': '_auto_add_worker_init_fn _replace_dunder_methods _update_dataloader has_iterable_dataset',
        'utilities.init': '_has_meta_device_parameters_or_buffers',
        'utilities.registry': '_load_external_callbacks',
        'utilities.device_dtype_mixin': '_update_properties',
        'utilities.apply_func': 'convert_tensors_to_scalars convert_to_tensors',
        'utilities': 'move_data_to_device',
        'utilities.rank_zero': 'rank_zero_deprecation rank_zero_warn',
        'utilities.seed': 'seed_everything',
    },
    'loggers': {
        'loggers.csv_logs': 'CSVLogger',
        'loggers.logger': 'Logger',
        'loggers.tensorboard': 'TensorBoardLogger',
    },
    'loggers.csv_logs': {
        'loggers.logger': 'Logger rank_zero_experiment',
        'utilities.types': '_PATH',
        'utilities.logger': '_add_prefix',
        'utilities.cloud_io': '_is_dir get_filesystem',
        'utilities.rank_zero': 'rank_zero_only rank_zero_warn',
    },
    'loggers.logger': {
        'utilities.rank_zero': 'rank_zero_only',
    },
    'loggers.tensorboard': {
        'loggers.logger': 'Logger rank_zero_experiment',
        'utilities.types': '_PATH',
        'utilities.logger': '_add_prefix _convert_params _flatten_dict _utils_sanitize_params=_sanitize_params',
        'utilities.cloud_io': '_is_dir get_filesystem',
        'wrappers': '_unwrap_objects',
        'utilities.rank_zero': 'rank_zero_only rank_zero_warn',
    },
    'plugins': {
        'plugins.precision.bitsandbytes': 'BitsandbytesPrecision',
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'plugins.precision.deepspeed': 'DeepSpeedPrecision',
        'plugins.precision.double': 'DoublePrecision',
        'plugins.precision.fsdp': 'FSDPPrecision',
        'plugins.precision.half': 'HalfPrecision',
        'plugins.precision.amp': 'MixedPrecision',
        'plugins.precision.precision': 'Precision',
        'plugins.io.torch_io': 'TorchCheckpointIO',
        'plugins.precision.transformer_engine': 'TransformerEnginePrecision',
        'plugins.io.xla': 'XLACheckpointIO',
        'plugins.precision.xla': 'XLAPrecision',
    },
    'plugins.collectives': {
        'plugins.collectives.collective': 'Collective',
        'plugins.collectives.single_device': 'SingleDeviceCollective',
        'plugins.collectives.torch_collective': 'TorchCollective',
    },
    'plugins.collectives.collective': {
        'utilities.types': 'CollectibleGroup',
    },
    'plugins.collectives.single_device': {
        'utilities.types': 'CollectibleGroup',
        'plugins.collectives.collective': 'Collective',
    },
    'plugins.collectives.torch_collective': {
        'utilities.types': 'CollectibleGroup RedOpType ReduceOp',
        'plugins.collectives.collective': 'Collective',
    },
    'plugins.environments': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'plugins.environments.kubeflow': 'KubeflowEnvironment',
        'plugins.environments.lsf': 'LSFEnvironment',
        'plugins.environments.lightning': 'LightningEnvironment',
        'plugins.environments.mpi': 'MPIEnvironment',
        'plugins.environments.slurm': 'SLURMEnvironment',
        'plugins.environments.torchelastic': 'TorchElasticEnvironment',
        'plugins.environments.xla': 'XLAEnvironment',
    },
    'plugins.environments.kubeflow': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
    },
    'plugins.environments.lightning': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'utilities.rank_zero': 'rank_zero_only',
    },
    'plugins.environments.lsf': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'utilities.cloud_io': 'get_filesystem',
    },
    'plugins.environments.mpi': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'plugins.environments.lightning': 'find_free_network_port',
    },
    'plugins.environments.slurm': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'utilities.warnings': 'PossibleUserWarning',
        'utilities.imports': '_IS_WINDOWS',
        'utilities.rank_zero': 'rank_zero_warn',
    },
    'plugins.environments.torchelastic': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'utilities.rank_zero': 'rank_zero_warn',
    },
    'plugins.environments.xla': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'accelerators.xla': 'XLAAccelerator _XLA_AVAILABLE _XLA_GREATER_EQUAL_2_1',
    },
    'plugins.io': {
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'plugins.io.torch_io': 'TorchCheckpointIO',
        'plugins.io.xla': 'XLACheckpointIO',
    },
    'plugins.io.checkpoint_io': {
        'utilities.types': '_PATH',
    },
    'plugins.io.torch_io': {
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'utilities.types': '_PATH',
        'utilities.cloud_io': '_atomic_save get_filesystem pl_load=_load',
    },
    'plugins.io.xla': {
        'plugins.io.torch_io': 'TorchCheckpointIO',
        'utilities.types': '_PATH',
        'accelerators.xla': '_XLA_AVAILABLE',
        'utilities.cloud_io': 'get_filesystem',
    },
    'plugins.precision': {
        'plugins.precision.bitsandbytes': 'BitsandbytesPrecision',
        'plugins.precision.deepspeed': 'DeepSpeedPrecision',
        'plugins.precision.double': 'DoublePrecision',
        'plugins.precision.fsdp': 'FSDPPrecision',
        'plugins.precision.half': 'HalfPrecision',
        'plugins.precision.amp': 'MixedPrecision',
        'plugins.precision.precision': 'Precision',
        'plugins.precision.transformer_engine': 'TransformerEnginePrecision',
        'plugins.precision.xla': 'XLAPrecision',
    },
    'plugins.precision.amp': {
        'utilities.types': 'Optimizable',
        'plugins.precision.precision': 'Precision',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_4',
        'plugins.precision.utils': '_convert_fp_tensor',
    },
    'plugins.precision.bitsandbytes': {
        'plugins.precision.precision': 'Precision',
        'plugins.precision.utils': '_ClassReplacementContextManager _DtypeContextManager _convert_fp_tensor',
        'utilities.types': '_DEVICE',
    },
    'plugins.precision.deepspeed': {
        'plugins.precision.precision': 'Precision',
        'utilities.types': 'Steppable',
        'plugins.precision.utils': '_DtypeContextManager _convert_fp_tensor',
    },
    'plugins.precision.double': {
        'plugins.precision.precision': 'Precision',
        'plugins.precision.utils': '_DtypeContextManager _convert_fp_tensor',
    },
    'plugins.precision.fsdp': {
        'utilities.types': 'Optimizable',
        'plugins.precision.precision': 'Precision',
        'plugins.precision.utils': '_DtypeContextManager _convert_fp_tensor',
        'plugins.precision.amp': '_optimizer_handles_unscaling',
        'utilities': 'rank_zero_warn',
    },
    'plugins.precision.half': {
        'plugins.precision.precision': 'Precision',
        'plugins.precision.utils': '_DtypeContextManager _convert_fp_tensor',
    },
    'plugins.precision.precision': {
        'utilities.types': 'Optimizable _PARAMETERS',
    },
    'plugins.precision.transformer_engine': {
        'plugins.precision.precision': 'Precision',
        'plugins.precision.utils': '_ClassReplacementContextManager _DtypeContextManager _convert_fp_tensor',
        'utilities.rank_zero': 'rank_zero_info rank_zero_warn',
    },
    'plugins.precision.xla': {
        'utilities.types': 'Optimizable',
        'plugins.precision.precision': 'Precision',
        'accelerators.xla': '_XLA_AVAILABLE',
    },
    'strategies': {
        'strategies.ddp': 'DDPStrategy',
        'strategies.dp': 'DataParallelStrategy',
        'strategies.deepspeed': 'DeepSpeedStrategy',
        'strategies.fsdp': 'FSDPStrategy',
        'strategies.model_parallel': 'ModelParallelStrategy',
        'strategies.parallel': 'ParallelStrategy',
        'strategies.single_device': 'SingleDeviceStrategy',
        'strategies.single_xla': 'SingleDeviceXLAStrategy',
        'strategies.strategy': 'Strategy',
        'strategies.xla_fsdp': 'XLAFSDPStrategy',
        'strategies.xla': 'XLAStrategy',
        'strategies.registry': '_StrategyRegistry',
        'utilities.registry': '_register_classes',
    },
    'strategies.ddp': {
        'accelerators.accelerator': 'Accelerator',
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'strategies.parallel': 'ParallelStrategy',
        'plugins.precision': 'Precision',
        'utilities.distributed': (
            'ReduceOp _distributed_is_initialized _get_default_process_group_backend_for_device '
            '_group=group _init_dist_connection _sync_ddp_if_available'
        ),
        'strategies.strategy': 'TBroadcast _BackwardSyncControl',
        'strategies.launchers.multiprocessing': '_MultiProcessingLauncher',
        'strategies.registry': '_StrategyRegistry',
        'strategies.launchers.subprocess_script': '_SubprocessScriptLauncher',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_3',
        'plugins.collectives.torch_collective': 'default_pg_timeout',
        'utilities.rank_zero': 'rank_zero_only',
    },
    'strategies.deepspeed': {
        'accelerators': 'Accelerator CUDAAccelerator',
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'strategies.ddp': 'DDPStrategy',
        'plugins.precision': 'Precision',
        'utilities.types': '_PATH',
        'strategies.strategy': '_Sharded',
        'strategies.registry': '_StrategyRegistry',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_6',
        'utilities.load': '_move_state_into',
        'plugins.collectives.torch_collective': 'default_pg_timeout',
        'utilities.distributed': 'log',
        'utilities.rank_zero': 'rank_zero_info rank_zero_warn',
        'utilities.seed': 'reset_seed',
    },
    'strategies.dp': {
        'accelerators': 'Accelerator',
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'strategies.parallel': 'ParallelStrategy',
        'plugins.precision': 'Precision',
        'utilities.distributed': 'ReduceOp',
        'strategies.strategy': 'TBroadcast TReduce',
        'strategies.registry': '_StrategyRegistry',
        'utilities.apply_func': 'apply_to_collection',
    },
    'strategies.fsdp': {
        'accelerators': 'Accelerator',
        'plugins': 'CheckpointIO ClusterEnvironment Precision',
        'plugins.precision.fsdp': 'FSDPPrecision',
        'strategies.parallel': 'ParallelStrategy',
        'utilities.distributed': (
            'ReduceOp _distributed_is_initialized _get_default_process_group_backend_for_device '
            '_group=group _init_dist_connection _sync_ddp_if_available'
        ),
        'strategies.strategy': (
            'TBroadcast _BackwardSyncControl _Sharded _apply_filter '
            '_validate_keys_for_strict_loading'
        ),
        'utilities.load': '_METADATA_FILENAME _lazy_load _materialize_tensors _move_state_into',
        'utilities.types': '_PATH _Stateful',
        'strategies.registry': '_StrategyRegistry',
        'strategies.launchers.subprocess_script': '_SubprocessScriptLauncher',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_2 _TORCH_GREATER_EQUAL_2_3',
        'utilities.init': '_has_meta_device_parameters_or_buffers',
        'plugins.collectives.torch_collective': 'default_pg_timeout',
        'utilities.rank_zero': 'rank_zero_deprecation rank_zero_only rank_zero_warn',
        'utilities.seed': 'reset_seed',
    },
    'strategies.launchers': {
        'strategies.launchers.multiprocessing': '_MultiProcessingLauncher',
        'strategies.launchers.subprocess_script': '_SubprocessScriptLauncher',
        'strategies.launchers.xla': '_XLALauncher',
    },
    'strategies.launchers.multiprocessing': {
        'accelerators.cpu': 'CPUAccelerator',
        'utilities.imports': '_IS_INTERACTIVE',
        'strategies.launchers.launcher': '_Launcher',
        'utilities.seed': '_collect_rng_states _set_rng_states',
        'utilities.distributed': '_set_num_threads_if_needed',
        'utilities.apply_func': 'move_data_to_device',
    },
    'strategies.launchers.subprocess_script': {
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'strategies.launchers.launcher': '_Launcher',
        'utilities.distributed': '_set_num_threads_if_needed',
        'utilities.rank_zero': 'rank_prefixed_message',
    },
    'strategies.launchers.xla': {
        'strategies.launchers.multiprocessing': '_GlobalStateSnapshot',
        'strategies.launchers.launcher': '_Launcher',
        'accelerators.xla': '_XLA_AVAILABLE',
        'utilities.apply_func': 'move_data_to_device',
    },
    'strategies.model_parallel': {
        'plugins': 'CheckpointIO',
        'strategies.parallel': 'ParallelStrategy',
        'utilities.distributed': (
            'ReduceOp _distributed_is_initialized _get_default_process_group_backend_for_device '
            '_group=group _init_dist_connection _sync_ddp_if_available'
        ),
        'strategies.strategy': 'TBroadcast _BackwardSyncControl _apply_filter _validate_keys_for_strict_loading',
        'utilities.load': '_METADATA_FILENAME _lazy_load _move_state_into',
        'utilities.types': '_PATH _Stateful',
        'strategies.launchers.subprocess_script': '_SubprocessScriptLauncher',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_3 _TORCH_GREATER_EQUAL_2_4',
        'strategies.fsdp': (
            '_distributed_checkpoint_load _distributed_checkpoint_save _get_full_state_dict_context '
            '_is_full_checkpoint _is_sharded_checkpoint'
        ),
        'utilities.init': '_materialize_distributed_module',
        'plugins.collectives.torch_collective': 'default_pg_timeout',
        'utilities.rank_zero': 'rank_zero_only',
        'utilities.seed': 'reset_seed',
    },
    'strategies.parallel': {
        'accelerators.accelerator': 'Accelerator',
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'plugins.environments.cluster_environment': 'ClusterEnvironment',
        'plugins.precision': 'Precision',
        'utilities.types': 'ReduceOp',
        'strategies.strategy': 'Strategy',
        'utilities.distributed': '_all_gather_ddp_if_available',
    },
    'strategies.single_device': {
        'accelerators': 'Accelerator',
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'plugins.precision': 'Precision',
        'strategies.strategy': 'Strategy TBroadcast',
        'utilities.types': '_DEVICE',
    },
    'strategies.single_xla': {
        'accelerators': 'Accelerator',
        'plugins': 'CheckpointIO Precision XLAPrecision',
        'strategies.single_device': 'SingleDeviceStrategy',
        'plugins.io.xla': 'XLACheckpointIO',
        'utilities.types': '_DEVICE',
        'strategies': '_StrategyRegistry',
        'accelerators.xla': '_XLA_AVAILABLE',
    },
    'strategies.strategy': {
        'accelerators': 'Accelerator',
        'plugins.io.checkpoint_io': 'CheckpointIO',
        'utilities.types': 'Optimizable ReduceOp _PATH _Stateful',
        'plugins.precision': 'Precision',
        'plugins.io.torch_io': 'TorchCheckpointIO',
        'utilities.init': '_EmptyInit',
        'strategies.launchers.launcher': '_Launcher',
        'strategies.registry': '_StrategyRegistry',
        'utilities.apply_func': 'move_data_to_device',
    },
    'strategies.xla': {
        'accelerators': 'Accelerator',
        'plugins': 'CheckpointIO Precision XLAPrecision',
        'strategies': 'ParallelStrategy _StrategyRegistry',
        'utilities.types': 'ReduceOp _PATH',
        'strategies.strategy': 'TBroadcast',
        'plugins.io.xla': 'XLACheckpointIO',
        'plugins.environments': 'XLAEnvironment',
        'strategies.launchers.xla': '_XLALauncher',
        'accelerators.xla': '_XLA_GREATER_EQUAL_2_1',
        'utilities.rank_zero': 'rank_zero_only',
    },
    'strategies.xla_fsdp': {
        'accelerators': 'Accelerator',
        'plugins': 'CheckpointIO Precision XLAPrecision',
        'utilities.types': 'Optimizable ReduceOp _PATH',
        'strategies': 'ParallelStrategy _StrategyRegistry',
        'strategies.strategy': 'TBroadcast _BackwardSyncControl _Sharded _validate_keys_for_strict_loading',
        'plugins.io.xla': 'XLACheckpointIO',
        'plugins.environments': 'XLAEnvironment',
        'utilities.init': '_EmptyInit',
        'strategies.launchers.xla': '_XLALauncher',
        'accelerators.xla': '_XLA_AVAILABLE',
        'strategies.fsdp': '_apply_filter',
        'utilities.cloud_io': 'get_filesystem',
        'utilities.rank_zero': 'rank_zero_only rank_zero_warn',
    },
    'utilities': {
        'utilities.data': 'AttributeDict suggested_max_num_workers',
        'utilities.enums': 'LightningEnum',
        'utilities.throughput': 'Throughput ThroughputMonitor measure_flops',
        'utilities.warnings': 'disable_possible_user_warnings',
        'utilities.distributed': 'is_shared_filesystem',
        'utilities.apply_func': 'move_data_to_device',
        'utilities.rank_zero': 'rank_zero_deprecation rank_zero_info rank_zero_only rank_zero_warn',
    },
    'utilities.apply_func': {
        'utilities.types': '_DEVICE',
        'utilities.imports': '_NUMPY_AVAILABLE',
    },
    'utilities.cloud_io': {
        'utilities.types': '_MAP_LOCATION_TYPE _PATH',
    },
    'utilities.consolidate_checkpoint': {
        'utilities.load': '_METADATA_FILENAME _load_distributed_checkpoint',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_3',
    },
    'utilities.data': {
        'utilities.enums': 'LightningEnum',
        'utilities.exceptions': 'MisconfigurationException',
        'utilities.seed': 'pl_worker_init_function',
        'utilities.rank_zero': 'rank_zero_warn',
    },
    'utilities.device_dtype_mixin': {
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_3',
    },
    'utilities.device_parser': {
        'utilities.exceptions': 'MisconfigurationException',
        'utilities.types': '_DEVICE',
    },
    'utilities.distributed': {
        'utilities.types': 'ReduceOp _PATH',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_4',
        'utilities.cloud_io': '_is_local_file_protocol',
        'utilities.data': '_num_cpus_available',
        'utilities.rank_zero': 'rank_zero_info',
    },
    'utilities.init': {
        'utilities.types': '_DEVICE',
        'utilities.rank_zero': 'rank_zero_warn',
    },
    'utilities.load': {
        'utilities.types': '_PATH _Stateful',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_3',
    },
    'utilities.logger': {
        'utilities.imports': '_NUMPY_AVAILABLE',
    },
    'utilities.optimizer': {
        'utilities.types': '_DEVICE',
        'utilities.apply_func': 'apply_to_collection move_data_to_device',
    },
    'utilities.registry': {
        'utilities.imports': '_PYTHON_GREATER_EQUAL_3_10_0',
    },
    'utilities.seed': {
        'utilities.imports': '_NUMPY_AVAILABLE',
        'utilities.rank_zero': '_get_rank rank_prefixed_message rank_zero_only rank_zero_warn',
    },
    'utilities.spike': {
        'utilities.types': '_PATH',
        'utilities.imports': '_TORCHMETRICS_GREATER_EQUAL_1_0_0',
    },
    'utilities.testing': {
        'utilities.testing._runif': '_runif_reasons',
    },
    'utilities.testing._runif': {
        'accelerators.mps': 'MPSAccelerator',
        'accelerators': 'XLAAccelerator',
        'strategies.deepspeed': '_DEEPSPEED_AVAILABLE',
        'utilities.imports': '_TORCH_GREATER_EQUAL_2_4',
        'accelerators.cuda': 'num_cuda_devices',
    },
    'utilities.throughput': {
        'utilities.rank_zero': 'rank_zero_only rank_zero_warn',
    },
    'utilities.warnings': {
        'utilities.rank_zero': 'LightningDeprecationWarning',
    },
    'wrappers': {
        'utilities.types': 'Optimizable',
        'plugins': 'Precision',
        'strategies': 'Strategy',
        'utilities.device_dtype_mixin': '_DeviceDtypeModuleMixin',
        'utilities.data': '_set_sampler_epoch',
        'utilities': 'move_data_to_device',
    },
}
# fmt: on


@functools.cache
def reexported(module: str) -> dict[str, str]:
    """``{name: source}`` for ``module`` (source: ``module`` or ``module:original``); empty if none."""
    found: dict[str, str] = {}
    for source, names in _SOURCES.get(module.removeprefix("fabric_core").lstrip("."), {}).items():
        path = f"fabric_core.{source}" if source else "fabric_core"
        for entry in names.split():
            name, _, original = entry.partition("=")
            found[name] = f"{path}:{original}" if original else path
    return found


#: Every module that re-exports something, with its names: ``{module: {name: source}}``.
REEXPORTS: Final = {path: reexported(path) for path in (f"fabric_core.{m}".rstrip(".") for m in _SOURCES)}
