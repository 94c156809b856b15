"""DeepSpeed's ZeRO: optimizer states, gradients and (stage 3) parameters sharded across processes."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import InvalidConfigError
from fabric_core.io.atomic import write_folder_collectively
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.strategies.strategy import LoadTarget
from fabric_core.strategies.wiring import ParallelWiring, Placement, wired
from fabric_core.utilities.types import PathLike, StateFilter
from fabric_core_deepspeed import _checkpoint, _comm, _config

# The order of Lightning's positional parameters, and Lightning's private names at its ``strategies.deepspeed`` path,
# which this module backs (most of them unused here).
from fabric_core_deepspeed._lightning import (  # noqa: F401
    _DEEPSPEED_AVAILABLE,
    _DEEPSPEED_GREATER_EQUAL_0_16,
    POSITIONAL,
    _format_precision_config,
    _get_deepspeed_engines_from_state,
    _is_deepspeed_checkpoint,
    _validate_checkpoint_directory,
    _validate_device_index_selection,
    _validate_state_keys,
)
from fabric_core_deepspeed._weights import ZeroWeights
from fabric_core_deepspeed.precision import DeepSpeedPrecision

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fabric_core.precision.precision import Precision

__all__ = ["DeepSpeedStrategy"]


class DeepSpeedStrategy(ZeroWeights, ParallelStrategy):
    """Train with DeepSpeed's ZeRO: each process holds a shard of the optimizer state (stage 1), also of the
    gradients (stage 2), and also of the parameters (stage 3); shards can be offloaded to CPU or NVMe.

    The model and its one optimizer are set up together by ``deepspeed.initialize``; backward and the
    optimizer step go through the resulting engine. The DeepSpeed config is built from the options below
    unless ``config`` is given; the precision adds its ``fp16``/``bf16`` section and a batch size is added
    for DeepSpeed's logs. Checkpoints are DeepSpeed checkpoint folders (one file per rank);
    :func:`fabric_core_deepspeed.consolidate` turns one into a single file.

    Args:
        zero_optimization: Put a ``zero_optimization`` section in the generated config.
        stage: ZeRO stage: 0 (off), 1, 2 or 3.
        remote_device: Where ``fabric.init_module()`` creates stage-3 parameters (``"cpu"``, ``"nvme"``);
            ``None`` for this process's device.
        offload_optimizer: Keep the optimizer state (and its step) on ``offload_optimizer_device``.
        offload_parameters: Keep stage-3 parameters on ``offload_params_device``.
        offload_params_device: ``"cpu"`` or ``"nvme"``.
        offload_optimizer_device: ``"cpu"`` or ``"nvme"``.
        nvme_path: Folder for NVMe offloading.
        pin_memory: Pin the offloaded CPU memory.
        params_buffer_count: Buffers for parameter offloading.
        params_buffer_size: Size of each such buffer (elements).
        max_in_cpu: Parameters kept in CPU memory with NVMe offloading.
        optimizer_buffer_count: Buffers for optimizer offloading to NVMe.
        block_size, queue_depth, single_submit, overlap_events, thread_count: The ``aio`` section (NVMe I/O).
        sub_group_size: Stage-3 parameter group size for the optimizer step.
        contiguous_gradients: Copy gradients into one buffer as they are produced.
        overlap_comm: Overlap gradient reduction with backward.
        allgather_partitions: All-gather (instead of broadcast) the updated partitions.
        reduce_scatter: Reduce gradients with reduce-scatter.
        allgather_bucket_size: Elements all-gathered at once.
        reduce_bucket_size: Elements reduced at once.
        zero_allow_untested_optimizer: Allow optimizers DeepSpeed has not tested with ZeRO (any torch one).
        logging_batch_size_per_gpu: The micro batch size DeepSpeed logs throughput with (default 1).
        config: A DeepSpeed config dict or a path to a JSON file; replaces the options above (except the
            precision and batch-size additions). Also read from ``FABRIC_CORE_DEEPSPEED_CONFIG_PATH``.
        logging_level: Level of DeepSpeed's logger.
        loss_scale: fp16 loss scale; 0 means dynamic scaling.
        initial_scale_power: Dynamic scaling starts at ``2**initial_scale_power``.
        loss_scale_window: Steps without overflow before the scale grows.
        hysteresis: Overflows tolerated before the scale shrinks.
        min_loss_scale: The smallest dynamic loss scale.
        partition_activations, cpu_checkpointing, contiguous_memory_optimization,
            synchronize_checkpoint_boundary: The ``activation_checkpointing`` section.
        exclude_frozen_parameters: Leave parameters without ``requires_grad`` out of checkpoints.
        load_full_weights: ``fabric.load`` reads a single file holding the whole model's state dict (e.g. a
            consolidated checkpoint), not a DeepSpeed checkpoint folder. A file is recognised as such
            without it too; with it, a folder is refused.
        **wiring: As for :class:`~fabric_core.strategies.parallel.ParallelStrategy` (``accelerator``,
            ``parallel_devices``, ..., ``timeout``); ``precision`` must be a :class:`DeepSpeedPrecision` (usually
            filled in by selection), and ``start_method`` is ``"popen"`` (run the script again per device)
            unless it is ``"spawn"``, ``"fork"`` or ``"forkserver"`` (``fabric.launch(fn)`` starts workers
            running ``fn``).
    Raises:
        InvalidConfigError: An unknown stage, offload device or start method, or a config file that cannot
            be read.
    """

    requires_joint_setup: ClassVar[bool] = True
    backward_needs_model: ClassVar[str | None] = (  # one engine per model: `fabric.backward` asks which
        "When using multiple models + deepspeed, please provide the model used to perform the optimization: "
        "`fabric.backward(loss, model=model)`"
    )
    #: Lightning's variable naming a config file (``FABRIC_CORE_DEEPSPEED_CONFIG_PATH`` is read first).
    DEEPSPEED_ENV_VAR: ClassVar[str] = _config.LIGHTNING_CONFIG_PATH_VARIABLE

    @wired(ParallelWiring, positional=POSITIONAL, start_method="popen")
    def __init__(
        self,
        zero_optimization: bool = True,
        stage: int = 2,
        remote_device: str | None = None,
        offload_optimizer: bool = False,
        offload_parameters: bool = False,
        offload_params_device: str = "cpu",
        nvme_path: str = "/local_nvme",
        params_buffer_count: int = 5,
        params_buffer_size: int = 100_000_000,
        max_in_cpu: int = 1_000_000_000,
        offload_optimizer_device: str = "cpu",
        optimizer_buffer_count: int = 4,
        block_size: int = 1_048_576,
        queue_depth: int = 8,
        single_submit: bool = False,
        overlap_events: bool = True,
        thread_count: int = 1,
        pin_memory: bool = False,
        sub_group_size: int = 1_000_000_000_000,
        contiguous_gradients: bool = True,
        overlap_comm: bool = True,
        allgather_partitions: bool = True,
        reduce_scatter: bool = True,
        allgather_bucket_size: int = 200_000_000,
        reduce_bucket_size: int = 200_000_000,
        zero_allow_untested_optimizer: bool = True,
        logging_batch_size_per_gpu: int | None = None,
        config: Mapping[str, Any] | PathLike | None = None,
        logging_level: int = logging.WARNING,
        loss_scale: float = 0,
        initial_scale_power: int = 16,
        loss_scale_window: int = 1000,
        hysteresis: int = 2,
        min_loss_scale: int = 1,
        partition_activations: bool = False,
        cpu_checkpointing: bool = False,
        contiguous_memory_optimization: bool = False,
        synchronize_checkpoint_boundary: bool = False,
        exclude_frozen_parameters: bool = False,
        load_full_weights: bool = False,
        **wiring: Unpack[ParallelWiring],
    ) -> None:
        super().__init__(**wiring)
        _config.check_choice("stage", stage, _config.STAGES)
        _config.check_choice("offload_params_device", offload_params_device, _config.OFFLOAD_DEVICES)
        _config.check_choice("offload_optimizer_device", offload_optimizer_device, _config.OFFLOAD_DEVICES)
        self.remote_device = remote_device
        self.logging_batch_size_per_gpu = logging_batch_size_per_gpu
        self.exclude_frozen_parameters = exclude_frozen_parameters
        self.load_full_weights = load_full_weights
        self._logging_level = logging_level
        self._loss_scaling = {
            "loss_scale": loss_scale,
            "initial_scale_power": initial_scale_power,
            "loss_scale_window": loss_scale_window,
            "hysteresis": hysteresis,
            "min_loss_scale": min_loss_scale,
        }
        loaded = _config.load_config(config)
        if loaded is None:
            loaded = _config.generated_config(
                zero_optimization=zero_optimization,
                stage=stage,
                offload_optimizer=offload_optimizer,
                offload_parameters=offload_parameters,
                offload_params_device=offload_params_device,
                offload_optimizer_device=offload_optimizer_device,
                nvme_path=nvme_path,
                pin_memory=pin_memory,
                params_buffer_count=params_buffer_count,
                params_buffer_size=params_buffer_size,
                max_in_cpu=max_in_cpu,
                optimizer_buffer_count=optimizer_buffer_count,
                aio={
                    "block_size": block_size,
                    "queue_depth": queue_depth,
                    "single_submit": single_submit,
                    "overlap_events": overlap_events,
                    "thread_count": thread_count,
                },
                zero={
                    "sub_group_size": sub_group_size,
                    "contiguous_gradients": contiguous_gradients,
                    "overlap_comm": overlap_comm,
                    "allgather_partitions": allgather_partitions,
                    "reduce_scatter": reduce_scatter,
                    "allgather_bucket_size": allgather_bucket_size,
                    "reduce_bucket_size": reduce_bucket_size,
                },
                activation_checkpointing={
                    "partition_activations": partition_activations,
                    "cpu_checkpointing": cpu_checkpointing,
                    "contiguous_memory_optimization": contiguous_memory_optimization,
                    "synchronize_checkpoint_boundary": synchronize_checkpoint_boundary,
                },
                zero_allow_untested_optimizer=zero_allow_untested_optimizer,
            )
        self._config: dict[str, Any] = loaded
        self._engines: list[Any] = []

    # -- configuration -----------------------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        """The DeepSpeed config given to ``deepspeed.initialize`` (changes made here before setup count).

        As in Lightning, it is the config as given (or built from the options) until the processes are set up
        (:meth:`setup_environment`); then the precision's ``fp16``/``bf16`` section and a micro batch size are
        added, unless the config has them.
        """
        return self._config

    @config.setter
    def config(self, config: dict[str, Any]) -> None:
        self._config = config

    def _format_config(self) -> dict[str, Any]:
        """Add what the precision needs and a micro batch size to the config (Lightning's name); return it."""
        _config.add_precision(self._config, self.precision.precision, self._loss_scaling)
        _config.add_batch_size(self._config, self.logging_batch_size_per_gpu)
        return self._config

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage of the config (0 when ZeRO is off)."""
        return _config.zero_stage(self._config)

    @property
    def zero_stage_3(self) -> bool:
        return self.zero_stage == 3

    @property
    def model(self) -> Any:
        """The DeepSpeed engine of the most recent :meth:`setup_module_and_optimizers`/:meth:`setup_module`.

        ``None`` before any model is set up (Lightning's property of the same name).
        """
        return self._engines[-1] if self._engines else None

    @property
    def precision(self) -> DeepSpeedPrecision:
        """The precision plugin: ``DeepSpeedPrecision("32-true")`` unless another was connected."""
        if self._precision is None:
            self._precision = DeepSpeedPrecision()
        if not isinstance(self._precision, DeepSpeedPrecision):
            raise InvalidConfigError(
                f"`DeepSpeedStrategy` needs a `DeepSpeedPrecision`, got `{type(self._precision).__name__}`. Pass the "
                "precision as a string (`Fabric(precision='bf16-mixed')`) or as "
                "`fabric_core_deepspeed.DeepSpeedPrecision('bf16-mixed')`.",
                argument="precision",
                value=self._precision,
            )
        return self._precision

    @precision.setter
    def precision(self, precision: Precision | None) -> None:
        self._precision = precision

    def place(self, placement: Placement) -> None:
        """Take the placement like every parallel strategy, then check that the precision is DeepSpeed's."""
        super().place(placement)
        _ = self.precision

    def setup_environment(self) -> None:
        """Join the process group, let DeepSpeed's communication layer use it, then complete the config.

        Raises:
            RuntimeError: The devices' indices are not the local ranks (see :meth:`init_process_group`).
            InvalidConfigError: DeepSpeed picked an accelerator other than this process's device type.
        """
        self.set_world_ranks()
        if self.root_device.type == "cpu":
            # Without this DeepSpeed would take any GPU it finds, whatever `Fabric(accelerator=...)` says.
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        super().setup_environment()
        self._init_deepspeed_distributed()
        self._format_config()

    def init_process_group(self) -> None:
        """Check that the device indices are the local ranks, then join the process group.

        DeepSpeed places each process on the device of its local rank, so ``Fabric(devices=[1])`` is refused
        as in Lightning (select GPUs with ``CUDA_VISIBLE_DEVICES``). CPU devices have no index to check.

        Raises:
            RuntimeError: The indices are not ``0, 1, ..., n - 1``.
        """
        devices = self.parallel_devices or []
        if devices and all(device.index is not None for device in devices):
            _validate_device_index_selection(list(devices))
        super().init_process_group()

    def _init_deepspeed_distributed(self) -> None:
        """Let DeepSpeed's communication layer use the process group (Lightning's name).

        DeepSpeed reads its ranks from ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
        ``MASTER_PORT``; they are set for this process from the cluster environment, except on Windows, where
        DeepSpeed sets itself up (as in Lightning).
        """
        if platform.system() != "Windows":
            self._set_node_environment_variables()
        _comm.init_distributed(self.root_device, self._get_process_group_backend(), self._timeout, self._logging_level)

    def _set_node_environment_variables(self) -> None:
        os.environ.update(_comm.node_variables(self))

    # -- modules and optimizers --------------------------------------------------------------------------
    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        """Hand the model, its one optimizer and the scheduler to ``deepspeed.initialize``.

        Returns:
            The DeepSpeed engine, ``[DeepSpeed's optimizer]`` and DeepSpeed's scheduler (which the engine steps).

        Raises:
            ValueError: Zero or more than one optimizer.
        """
        if len(optimizers) != 1:
            raise ValueError(
                f"Currently only one optimizer is supported with DeepSpeed. Got {len(optimizers)} optimizers instead."
                " Combine the parameter groups into one optimizer, or set up each model with its own optimizer "
                "through separate `fabric.setup(model, optimizer)` calls."
            )
        engine, optimizer, scheduler = self._initialize_engine(module, optimizers[0], scheduler)
        return engine, [optimizer], scheduler

    def setup_module(self, module: Module) -> Module:
        """Wrap a model without an optimizer in a DeepSpeed engine (for evaluation, or stage-3 inference).

        With an ``optimizer`` section in the config, DeepSpeed builds the optimizer and the engine keeps the
        config's stage, as in Lightning. Without one, stages 1 and 2 have nothing to shard (they shard
        optimizer state and gradients) and DeepSpeed refuses them: such a model gets an engine without ZeRO,
        where Lightning fails with DeepSpeed's "zero stage 2 requires an optimizer".
        """
        config = None
        if self.zero_stage in (1, 2) and "optimizer" not in self._format_config():
            config = copy.deepcopy(self.config)
            config["zero_optimization"]["stage"] = 0
        engine, _, _ = self._initialize_engine(module, config=config)
        return engine  # type: ignore[no-any-return]

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """Not possible: DeepSpeed needs the model and the optimizer together.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError(
            f"The `{type(self).__name__}` does not support setting up the module and optimizer(s) independently."
            " Please call `fabric.setup(model, optimizer)` to set them up jointly."
        )

    def _initialize_engine(
        self,
        module: Module,
        optimizer: Optimizer | None = None,
        scheduler: Any = None,
        config: dict[str, Any] | None = None,
    ) -> Any:
        import argparse

        import deepspeed

        index = self.root_device.index
        engine, ds_optimizer, _, ds_scheduler = deepspeed.initialize(
            args=argparse.Namespace(device_rank=index) if index is not None else None,
            config=config if config is not None else self._format_config(),
            model=module,
            model_parameters=[p for p in module.parameters() if p.requires_grad],
            optimizer=optimizer,
            lr_scheduler=scheduler,
            dist_init_required=False,
        )
        self._engines.append(engine)
        return engine, ds_optimizer, ds_scheduler

    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """With ZeRO stage 3, parameters are partitioned as they are created (``deepspeed.zero.Init``).

        Raises:
            NotImplementedError: ``empty_init=False`` with stage 3: partitioned creation cannot run the
                initialisers on whole tensors.
        """
        if not self.zero_stage_3:
            return super().module_init_context(empty_init)
        if empty_init is False:
            raise NotImplementedError(
                f"`empty_init={empty_init}` is not a valid choice with `DeepSpeedStrategy` when ZeRO stage 3 is "
                "enabled: parameters are created partitioned. Use `fabric.init_module()` or "
                "`fabric.init_module(empty_init=True)` and load the weights after `fabric.setup(...)`."
            )
        stack = contextlib.ExitStack()
        stack.enter_context(self.precision.module_init_context())
        stack.enter_context(self.module_sharded_context())
        return stack

    def module_sharded_context(self) -> contextlib.AbstractContextManager[Any]:
        """Modules created inside have their parameters partitioned as they are created (ZeRO stage 3 only).

        As in Lightning: ``deepspeed.zero.Init`` with this strategy's config, as it is at the time of the call
        (later changes to :attr:`config` do not reach it); below stage 3 a context that changes nothing.
        """
        if not self.zero_stage_3:
            return contextlib.nullcontext()
        import deepspeed

        init: contextlib.AbstractContextManager[Any] = deepspeed.zero.Init(
            enabled=True, remote_device=self.remote_device, config_dict_or_path=self._format_config()
        )
        return init

    def gathered_parameters(
        self, params: Iterable[Tensor], modifier_rank: int | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """Inside, stage-3 parameters are whole on every rank; changes made on ``modifier_rank`` are kept."""
        if not self.zero_stage_3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(params), modifier_rank=modifier_rank)  # type: ignore[no-any-return]

    # -- the training step -------------------------------------------------------------------------------
    def backward(self, tensor: Tensor, module: Module | None, *args: Any, **kwargs: Any) -> None:
        """Backward through the engine that ``module`` is (or wraps); the only engine when ``module`` is None."""
        super().backward(tensor, self._engine_for(module), *args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Step the engine that owns ``optimizer`` (it also steps DeepSpeed's scheduler and zeroes gradients).

        Raises:
            ValueError: ``optimizer`` is not the optimizer of an engine set up by this strategy.
        """
        engine = next((e for e in self._engines if e.optimizer is optimizer), None)
        if engine is None:
            raise ValueError(
                f"The optimizer {type(optimizer).__name__} was not set up by this `DeepSpeedStrategy`. Step the "
                "optimizer returned by `fabric.setup(model, optimizer)`."
            )
        return self.precision.optimizer_step(engine, **kwargs)

    def _engine_for(self, module: Module | None) -> Any:
        if module is None:
            if not self._engines:
                raise RuntimeError("No models were set up for backward. Did you forget to call `fabric.setup()`?")
            if len(self._engines) > 1:
                raise ValueError(self.backward_needs_model)
            return self._engines[0]
        engine = next((e for e in self._engines if module is e or module is e.module), None)
        if engine is None:
            raise ValueError(
                f"The model {type(module).__name__} was not set up by this `DeepSpeedStrategy`; pass the model "
                "returned by `fabric.setup(model, optimizer)`."
            )
        return engine

    def _clip_norm(
        self, module: Module, optimizer: Optimizer, max_norm: float, norm_type: float, error_if_nonfinite: bool
    ) -> Tensor:
        """Not possible from outside the engine.

        Raises:
            NotImplementedError: Always; set ``gradient_clipping`` in the DeepSpeed config instead.
        """
        raise NotImplementedError(_config.CLIPPING_MESSAGE)

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float | int) -> None:
        """Not possible from outside the engine.

        Raises:
            NotImplementedError: Always; set ``gradient_clipping`` in the DeepSpeed config instead.
        """
        raise NotImplementedError(_config.CLIPPING_MESSAGE)

    # -- checkpoints -------------------------------------------------------------------------------------
    def save_checkpoint(
        self, path: PathLike, state: Mapping[str, Any], storage_options: Any = None, filter: StateFilter | None = None
    ) -> None:
        """Write a DeepSpeed checkpoint folder at ``path``; every rank writes its shards (call it on all).

        The engine's module and optimizer are saved by DeepSpeed; the rest of ``state`` (modules, stateful
        objects and plain values) goes into DeepSpeed's client state. The folder is written under a temp
        name and replaces ``path`` in one step once every rank has written its part: by rank 0 where all
        nodes share the folder's filesystem, else by each node's first process on that node's disk (see
        :func:`~fabric_core.io.atomic.write_folder_collectively`).

        Raises:
            TypeError: ``storage_options`` or ``filter`` was given: DeepSpeed writes its own files.
            ValueError: ``state`` holds no DeepSpeed model, or more than one.
            InvalidConfigError: ``path`` is a URL (``s3://...``): DeepSpeed writes with local file operations.
        """
        _checkpoint.refuse_url(path, "save")
        reasons = {"storage_options": "does not use the `CheckpointIO`", "filter": "manages the state serialization"}
        for name, value in (("storage_options", storage_options), ("filter", filter)):
            if value is not None:
                raise TypeError(
                    f"`{type(self).__name__}.save_checkpoint(..., {name}=...)` is not supported because "
                    f"`{type(self).__name__}` {reasons[name]} internally: DeepSpeed writes each rank's shards itself. "
                    f"Remove `{name}`, or consolidate the folder to one file first."
                )
        layout = _checkpoint.split_state(state, self._engines, "save")
        _checkpoint.warn_on_deepspeed_keys(layout.extras)
        extras = self.state_to_save(layout.extras)

        def write(temp: Path) -> None:
            temp.mkdir(parents=True, exist_ok=True)  # as DeepSpeed does: an engine that writes nothing saves a folder
            layout.engine.save_checkpoint(
                os.fspath(temp),
                client_state=layout.client_state(extras),
                tag=_checkpoint.TAG,
                exclude_frozen_parameters=self.exclude_frozen_parameters,
            )

        # DeepSpeed writes into the folder it is given; a temp folder put in place in one step keeps an
        # interrupted save from leaving a mix of two checkpoints (or nothing) at ``path``.
        write_folder_collectively(self, path, write, "deepspeed")

    def load_checkpoint(
        self, path: PathLike, state: LoadTarget = None, strict: bool = True, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Restore ``state`` from a DeepSpeed checkpoint folder, or from a single (consolidated) file.

        From a folder, ``state`` must hold the model set up by this strategy (DeepSpeed restores its module and,
        if ``state`` holds it, its optimizer); the other entries are restored from the client state. A file (not
        one inside a checkpoint folder) is loaded like any checkpoint file, into the whole module even under
        stage 3.

        Returns:
            The extras of the checkpoint that ``state`` did not ask for.

        Raises:
            ValueError: ``state`` is empty or holds no DeepSpeed model (folder), or more than one.
            FileNotFoundError: ``path`` is neither a file nor a checkpoint folder of this strategy, or lies inside
                one (the message names the folder).
            KeyError: With ``strict``, ``state`` asks for a key the checkpoint lacks.
            CheckpointError: A file holds objects a checkpoint does not consist of (unless
                ``weights_only=False``), or is damaged.
        """
        if isinstance(state, (Module, Optimizer)) or _checkpoint.is_single_file(path):
            return super().load_checkpoint(path, state, strict=strict, weights_only=weights_only)
        if self.load_full_weights:
            if os.path.isfile(path):
                _checkpoint.check_folder(path)  # a file inside a checkpoint folder: the message names the folder
            raise FileNotFoundError(
                f"`DeepSpeedStrategy(load_full_weights=True)` loads a single checkpoint file with the full weights, "
                f"but {os.fspath(path)!r} is not a file. Pass the consolidated file, or `load_full_weights=False` "
                "to load a DeepSpeed checkpoint folder."
            )
        if not state:
            raise ValueError(
                f"Got DeepSpeedStrategy.load_checkpoint(..., state={state!r}) but a state with at least a model "
                "instance to reload is required. Pass it in like so: `fabric.load(path, state={'model': model, ...})`."
            )
        folder = _checkpoint.check_folder(path, _is_deepspeed_checkpoint)
        return _checkpoint.load_folder(self, self._engines, folder, state, strict, weights_only)

    # -- teardown ----------------------------------------------------------------------------------------
    def release_modules(self) -> None:
        """Drop the engines, which hold DeepSpeed's communication buffers and process groups."""
        self._engines.clear()

    def __getstate__(self) -> dict[str, Any]:
        # Spawned workers get a pickled copy of the strategy before any engine exists; engines stay per process.
        state = self.__dict__.copy()
        state["_engines"] = []
        return state
