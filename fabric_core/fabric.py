"""``Fabric``: the Lightning Fabric API, with components chosen through the plugin catalog.

Two cohesive groups of its methods live in its base classes: the collectives and ``print``
(:mod:`fabric_core._fabric.collectives`) and ``save`` / ``load`` / ``load_raw``
(:mod:`fabric_core._fabric.checkpoints`); their argument checks are in :mod:`fabric_core._fabric.checks`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect  # noqa: F401  # an attribute of Lightning's module, through which code patches inspect.signature
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer
from torch.utils.data import BatchSampler, DataLoader

from fabric_core import wrappers
from fabric_core._deferred import lightning_reexports
from fabric_core._fabric import checks as checks
from fabric_core._fabric.assembly import assemble
from fabric_core._fabric.checkpoints import Checkpoints
from fabric_core._lightning import module as lightning_module
from fabric_core._run.worker import launched_by_cli as _launched_by_cli
from fabric_core._signature import call_with_accepted, call_with_keywords, hooks
from fabric_core.loggers._aggregate import reduce_metrics
from fabric_core.precision.precision import Precision
from fabric_core.strategies.strategy import Strategy, _Sharded
from fabric_core.utilities import data as data_utils
from fabric_core.utilities._active import set_active_strategy
from fabric_core.utilities.apply_func import convert_tensors_to_scalars, move_data_to_device
from fabric_core.utilities.data import _replace_dunder_methods
from fabric_core.utilities.rank_zero import rank_zero_deprecation, rank_zero_warn
from fabric_core.utilities.seed import seed_everything as _seed_everything
from fabric_core.wrappers import FabricDataLoader, FabricModule, FabricOptimizer, unwrap_compiled, unwrap_objects

if TYPE_CHECKING:
    from fabric_core._kernel.manager import PluginManager
    from fabric_core.accelerators.accelerator import Accelerator
    from fabric_core.callbacks.profiler import Profiler
    from fabric_core.loggers.logger import Logger

__all__ = ["Fabric"]


def _do_nothing(*_: Any) -> None:
    pass


class Fabric(Checkpoints):
    """Scale a PyTorch training loop across devices, strategies and precisions.

    Components are named by strings (or given as instances) and resolved through the plugin catalog:
    ``Fabric(accelerator="cuda", strategy="ddp", devices=4, precision="bf16-mixed")``.

    Args:
        accelerator: ``"cpu"``, ``"cuda"``, ``"mps"``, ``"tpu"``, ``"auto"``, ... or an ``Accelerator``.
        strategy: ``"ddp"``, ``"fsdp"``, ``"deepspeed"``, ``"auto"``, ..., a ``fabric_core.spec(...)``, a Strategy.
        devices: Devices per node: a count, a list or string of indices, or ``"auto"``.
        num_nodes: Number of machines.
        precision: ``"32-true"`` (default), ``"64-true"``, ``"16-mixed"``, ``"bf16-mixed"``, ... or a plugin's name.
        plugins: Precision, checkpoint I/O and cluster environment instances (or names).
        callbacks: One object or a list; :meth:`call` runs their methods by name.
        loggers: One logger or a list; :meth:`log` and :meth:`log_dict` write to all of them.
        plugin_manager: The plugin manager to resolve names with; the process-wide one by default.

    Raises:
        UnknownNameError: A name that no installed plugin provides.
        InvalidConfigError: A value or combination that cannot run.
        TypeError: An argument of the wrong type, or ``run`` is overridden under ``fabric-core run``.
    """

    def __init__(
        self,
        *,
        accelerator: str | Accelerator = "auto",
        strategy: str | Strategy | Any = "auto",
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        precision: str | int | None = None,
        plugins: Any = None,
        callbacks: list[Any] | Any | None = None,
        loggers: Logger | list[Logger] | None = None,
        plugin_manager: PluginManager | None = None,
    ) -> None:
        components = assemble(
            plugin_manager,
            accelerator=accelerator,
            strategy=strategy,
            devices=devices,
            num_nodes=num_nodes,
            precision=precision,
            plugins=plugins,
            loggers=loggers,
            callbacks=callbacks,
        )
        self._strategy: Strategy = components.strategy
        self._accelerator: Accelerator = components.accelerator
        self._precision: Precision = self._strategy.precision
        self._loggers: list[Logger] = list(components.loggers)
        self._callbacks: list[Any] = list(components.callbacks)
        # The callbacks' `on_log` methods, looked up at the first log after the callbacks last changed: that
        # event fires on every logged step (`call` looks hooks up at each call, as users expect of it).
        self._log_hooks: list[tuple[Callable[..., Any], frozenset[str] | None]] | None = None
        self._cluster_environment: Any = components.cluster_environment  # kept for one process too (SLURM requeue)
        self._launched = False
        self._models_setup = 0  # models `setup`/`setup_module` wrapped: Lightning's counter, kept for its users
        # Decided by the step plan, made with the wrappers in `setup` (after `launch()`: a precision may ask the
        # device about its dtype only then). Until a model is set up, backward takes the general path.
        self._plain_backward = False
        self._direct_backward = False
        set_active_strategy(self._strategy)
        self._prepare_run_method()
        if _launched_by_cli() or components.processes_exist:
            # The processes exist already: join the process group now, so that everything works at once.
            self._strategy.setup_environment()
            self._launched = True

    # -- properties ----------------------------------------------------------------------------------------
    @property
    def accelerator(self) -> Accelerator:
        return self._accelerator

    @property
    def strategy(self) -> Strategy:
        return self._strategy

    @property
    def device(self) -> torch.device:
        """The device of this process: create tensors here."""
        return self._strategy.root_device

    @property
    def global_rank(self) -> int:
        """The index of this process across all devices and nodes."""
        return self._strategy.global_rank

    @property
    def local_rank(self) -> int:
        """The index of this process among the processes of its node."""
        return self._strategy.local_rank

    @property
    def node_rank(self) -> int:
        """The index of this node."""
        return self._strategy.node_rank

    @property
    def world_size(self) -> int:
        """The number of processes across all devices and nodes (known before ``launch()``)."""
        return self._strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        """Whether this is the process of global rank 0."""
        return self._strategy.is_global_zero

    @property
    def loggers(self) -> list[Logger]:
        """Every logger given to ``Fabric``."""
        return self._loggers

    @property
    def logger(self) -> Logger:
        """The first logger (``NoLoggerError``, an ``IndexError``, if there is none)."""
        return self._loggers[0] if self._loggers else checks.no_logger()

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Override to put the training code here; ``fabric.run(...)`` then launches it in every process."""

    # -- setup ---------------------------------------------------------------------------------------------
    def setup(
        self,
        module: Module,
        *optimizers: Optimizer,
        scheduler: Any = None,
        move_to_device: bool = True,
        _reapply_compile: bool = True,
    ) -> Any:
        """Set up a model and its optimizers for the chosen strategy and precision.

        Args:
            module: The model.
            *optimizers: Its optimizers (none is fine).
            scheduler: An LR scheduler, returned as it is (some strategies set it up with the optimizers).
            move_to_device: Move the model to :attr:`device`.
            _reapply_compile: Strip ``torch.compile`` for the strategy's wrapping and compile again after.

        Returns:
            The wrapped model alone without optimizers; else ``(model, *optimizers[, scheduler])``.

        Raises:
            ValueError: The model or an optimizer was set up already.
            TypeError: ``module`` is not a ``torch.nn.Module``, or an optimizer not an optimizer.
            RuntimeError: ``launch()`` is needed first.
        """
        self._validate_launched()
        self._record("setup")
        checks.check_model_and_optimizers(module, optimizers, "setup")
        model, wrapped, scheduler = self._wrap(module, optimizers, scheduler, move_to_device, _reapply_compile)
        lightning_module.attach_optimizers(model, wrapped)
        self.call("on_after_setup", fabric=self, module=model)
        if not wrapped:
            return model
        return (model, *wrapped, scheduler) if scheduler is not None else (model, *wrapped)

    def setup_module(self, module: Module, move_to_device: bool = True, _reapply_compile: bool = True) -> FabricModule:
        """Set up a model alone (strategies like FSDP need the model set up before the optimizer exists).

        Raises:
            ValueError: The model was set up already.
            RuntimeError: ``launch()`` is needed first.
        """
        self._validate_launched()
        self._record("setup_module")
        checks.check_model_and_optimizers(module, (), "setup_module")
        return self._wrap(module, (), None, move_to_device, _reapply_compile)[0]

    def _wrap(
        self,
        module: Module,
        optimizers: tuple[Optimizer, ...],
        scheduler: Any,
        move_to_device: bool,
        reapply_compile: bool,
    ) -> tuple[FabricModule, list[FabricOptimizer], Any]:
        module, compiled = unwrap_compiled(module) if reapply_compile else (module, None)
        original = module
        module = self._precision.convert_module(module)
        if move_to_device:
            self._move_model_to_device(module, optimizers)
        if optimizers:
            module, set_up, scheduler = self._strategy.setup_module_and_optimizers(module, list(optimizers), scheduler)
        else:
            module, set_up = self._strategy.setup_module(module), []
        if compiled is not None:
            module = wrappers.recompile(module, compiled)
        model = FabricModule(module, self._strategy, original_module=original)
        self._models_setup += 1
        plan = wrappers.step_plan(self._strategy)
        # When neither the strategy nor the precision changes backward, it is `loss.backward()`; direct when the
        # model outputs carry no guard that must see `fabric.backward` running.
        self._plain_backward = plan.plain_backward
        self._direct_backward = plan.direct_backward
        lightning_module.attach(self, model, self._callbacks, move_to_device)  # before the optimizers are wrapped
        self._log_hooks = None  # the module may have joined the callbacks
        wrapped = [FabricOptimizer(opt, self._strategy, self._callbacks) for opt in set_up]
        return model, wrapped, scheduler

    def _move_model_to_device(self, module: Module, optimizers: tuple[Optimizer, ...]) -> None:
        checks.warn_if_on_several_devices(module)
        before = list(module.parameters())
        self.to_device(module)
        # Some devices (XLA) give moved parameters new identities: point the optimizers at the new ones.
        moved = {id(old): new for old, new in zip(before, module.parameters(), strict=True) if old is not new}
        if moved:
            for opt in optimizers:
                for group in opt.param_groups:
                    group["params"] = [moved.get(id(p), p) for p in group["params"]]

    def setup_optimizers(self, *optimizers: Optimizer) -> FabricOptimizer | tuple[FabricOptimizer, ...]:
        """Set up optimizers created after :meth:`setup_module`; return one wrapped optimizer or a tuple.

        Raises:
            RuntimeError: The strategy needs model and optimizers together, an optimizer holds parameters
                on the meta device, or ``launch()`` is needed first.
            ValueError: No optimizer, or one that was set up already.
            TypeError: Something that is not an optimizer.
        """
        self._validate_launched()
        checks.check_optimizers(self._strategy, optimizers)
        strategy = self._strategy
        wrapped = tuple(FabricOptimizer(strategy.setup_optimizer(o), strategy, self._callbacks) for o in optimizers)
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def setup_dataloaders(
        self, *dataloaders: DataLoader[Any], use_distributed_sampler: bool = True, move_to_device: bool = True
    ) -> Any:
        """Set up dataloaders: each process gets its share of the data, and batches land on the device.

        Args:
            *dataloaders: One or more ``torch.utils.data.DataLoader``.
            use_distributed_sampler: Split the data across processes with a ``DistributedSampler`` when the
                strategy runs several (set ``False`` to keep a custom sampler).
            move_to_device: Move every batch to :attr:`device`.

        Returns:
            One wrapped dataloader, or a list of them.

        Raises:
            ValueError: No dataloader, or one that was set up already.
            TypeError: Something that is not a ``DataLoader``.
        """
        self._validate_launched()
        checks.check_dataloaders(dataloaders)
        wrapped = [self._setup_dataloader(dl, use_distributed_sampler, move_to_device) for dl in dataloaders]
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def _setup_dataloader(
        self, dataloader: DataLoader[Any], use_distributed_sampler: bool, move_to_device: bool
    ) -> FabricDataLoader:
        sampler_kwargs = self._strategy.distributed_sampler_kwargs
        if (
            use_distributed_sampler
            and sampler_kwargs is not None
            and data_utils.requires_distributed_sampler(dataloader)
        ):
            sampler = data_utils.distributed_sampler_for(dataloader, **sampler_kwargs)
            dataloader = data_utils.replace_sampler(dataloader, sampler)
        data_utils._auto_add_worker_init_fn(dataloader, self.global_rank)
        dataloader = self._strategy.process_dataloader(dataloader)
        return FabricDataLoader(dataloader, self.device if move_to_device else None)

    # -- the training step ---------------------------------------------------------------------------------
    def backward(self, tensor: Tensor, *args: Any, model: FabricModule | Module | None = None, **kwargs: Any) -> None:
        """Replace ``loss.backward()``: runs what the strategy and precision need (e.g. loss scaling).

        Args:
            tensor: The loss.
            *args: Passed to the underlying backward.
            model: The model the loss came from, for strategies that need it (DeepSpeed with several models).
            **kwargs: Passed to the underlying backward.
        """
        if self._direct_backward:
            if args or kwargs:
                tensor.backward(*args, **kwargs)  # type: ignore[no-untyped-call]
            else:
                tensor.backward()  # type: ignore[no-untyped-call]
            return
        state = wrappers.backward_state
        if self._plain_backward:  # the outputs carry the guard (the precision overrides a backward hook)
            state.active = True
            try:
                tensor.backward(*args, **kwargs)  # type: ignore[no-untyped-call]
            finally:
                state.active = False
            return
        if model is None and self._models_setup > 1:
            needs_model = getattr(self._strategy.__class__, "backward_needs_model", None)
            if needs_model:
                raise ValueError(needs_model)
        module, _ = unwrap_compiled(model)
        if isinstance(module, FabricModule):
            module, _ = unwrap_compiled(module._forward_module)
        state.active = True
        try:
            self._strategy.backward(tensor, module, *args, **kwargs)
        finally:
            state.active = False

    def clip_gradients(
        self,
        module: Module,
        optimizer: Optimizer,
        clip_val: float | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> Tensor | None:
        """Clip the gradients of the optimizer's parameters by value or by total norm (unscaled first if scaled).

        Returns:
            The total norm before clipping (a scalar tensor) with ``max_norm``; ``None`` with ``clip_val``.

        Raises:
            ValueError: Both or neither of ``clip_val`` and ``max_norm`` are set.
            TypeError: ``optimizer`` is not an optimizer.
        """
        checks.check_clip_arguments(clip_val, max_norm)
        module, optimizer = unwrap_objects(module), unwrap_objects(optimizer)
        try:  # the objects are checked only once it failed: nothing is added to a training step
            if clip_val is None:
                assert max_norm is not None
                return self._strategy.clip_gradients_norm(
                    module, optimizer, max_norm=max_norm, norm_type=norm_type, error_if_nonfinite=error_if_nonfinite
                )
            self._strategy.clip_gradients_value(module, optimizer, clip_val=clip_val)
        except (AttributeError, TypeError):
            checks.check_clip_objects(module, optimizer)
            raise
        return None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The precision's forward context, for operations outside the model's ``forward``."""
        return self._precision.forward_context()

    def no_backward_sync(self, module: FabricModule, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
        """Skip the gradient synchronisation of ``module`` (for gradient accumulation).

        Forward and ``fabric.backward`` must both run inside. A no-op on one device; strategies that
        cannot skip it warn and do nothing.

        Raises:
            TypeError: ``module`` was not set up by this ``Fabric``.
        """
        forward_module = checks.check_set_up_module(module)
        # The class's declaration (read on `__class__`, which a stand-in made with `Mock(spec=...)` answers too).
        if getattr(self._strategy.__class__, "backward_sync_is_noop", False):
            return contextlib.nullcontext()
        control = self._strategy._backward_sync_control  # Lightning's attribute, which every strategy sets
        if control is None:
            checks.warn_no_backward_sync(self._strategy)
            return contextlib.nullcontext()
        return control.no_backward_sync(forward_module, enabled)

    # -- devices and initialisation ------------------------------------------------------------------------
    def to_device(self, obj: Any) -> Any:
        """Move a module (in place, returned) or a nested collection of tensors to :attr:`device`."""
        if isinstance(obj, Module):
            self._accelerator.setup_device(self.device)
            self._strategy.module_to_device(obj)
            return obj
        return move_data_to_device(obj, self.device)

    def init_tensor(self) -> contextlib.AbstractContextManager[Any]:
        """Tensors created inside are created on :attr:`device` in the precision's dtype."""
        return self._strategy.tensor_init_context()

    def init_module(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """Modules created inside get their parameters on :attr:`device`, in the precision's dtype.

        Args:
            empty_init: Skip the initialisation of parameters (uninitialised memory, no random numbers
                drawn): for models whose weights are loaded from a checkpoint right after.
        """
        self._validate_launched()
        return self._strategy.module_init_context(empty_init=empty_init)

    def sharded_model(self) -> contextlib.AbstractContextManager[Any]:
        """Deprecated: use :meth:`init_module`. A sharding strategy's ``module_sharded_context()``, else nothing."""
        rank_zero_deprecation("`Fabric.sharded_model()` is deprecated in favor of `Fabric.init_module()`.")
        self._validate_launched()
        if isinstance(self._strategy, _Sharded):
            return self._strategy.module_sharded_context()
        return contextlib.nullcontext()

    # -- processes ------------------------------------------------------------------------------------------
    def launch(self, function: Callable[..., Any] = _do_nothing, *args: Any, **kwargs: Any) -> Any:
        """Start the processes of the strategy and set up each one (process group, device).

        Args:
            function: Run in every process as ``function(fabric, *args, **kwargs)``; spawn- and fork-based
                strategies need one. Without it, the processes run the rest of the script.
            *args: Passed to ``function``.
            **kwargs: Passed to ``function``.

        Returns:
            What ``function`` returned on rank 0.

        Raises:
            RuntimeError: The script was started by ``fabric-core run``.
            TypeError: ``function`` is not callable or takes no argument, or the strategy needs one.
        """
        given = function is not _do_nothing
        checks.check_launch(self._strategy, function, cli=_launched_by_cli(), given=given)
        if not given and self._launched:
            return None
        return self._wrap_and_launch(function, self, *args, **kwargs)

    def _prepare_run_method(self) -> None:
        if type(self).run is not Fabric.run and _launched_by_cli():
            raise TypeError(
                "Overriding `Fabric.run()` and launching from the CLI is not allowed. Run the script normally,"
                " or change your code to directly call `fabric = Fabric(...); fabric.setup(...)` etc."
            )
        # `fabric.run(...)` launches the processes, then runs the (overridden) method in each.
        setattr(self, "run", functools.partial(self._wrap_and_launch, self.run))  # noqa: B010 - shadows a method

    def _wrap_and_launch(self, to_run: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._launched = True
        in_process = functools.partial(self._run_with_setup, to_run)
        launcher = self._strategy.launcher
        if launcher is not None:
            return launcher.launch(in_process, *args, **kwargs)
        return in_process(*args, **kwargs)

    def _run_with_setup(self, to_run: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # In a spawned worker this Fabric is an unpickled copy: its strategy is the one helpers must use.
        set_active_strategy(self._strategy)
        self._strategy.setup_environment()
        # Loaders and batch samplers created in the launched code record their arguments, so that
        # `setup_dataloaders` can build them again around a distributed sampler (read here: Lightning's name).
        with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
            return to_run(*args, **kwargs)

    # -- callbacks and loggers -----------------------------------------------------------------------------
    def call(self, hook_name: str, *args: Any, **kwargs: Any) -> None:
        """Call ``hook_name`` on every callback that has it.

        Each gets the positional arguments and the keyword arguments its signature accepts (all of them if
        it takes ``**kwargs``). Callbacks without the method are skipped.
        """
        for callback in self._callbacks:
            method = getattr(callback, hook_name, None)
            if method is None:
                continue
            if not callable(method):
                rank_zero_warn(
                    f"Skipping the callback `{type(callback).__name__}.{hook_name}` because it is not callable."
                )
                continue
            call_with_accepted(method, args, kwargs)

    def log(
        self,
        name: str,
        value: Any,
        step: int | None = None,
        *,
        reduce: str | None = None,
        every_n_steps: int | None = None,
    ) -> None:
        """Log one scalar (tensors are converted with ``.item()``) to every logger; see :meth:`log_dict`."""
        self.log_dict({name: value}, step=step, reduce=reduce, every_n_steps=every_n_steps)

    def log_dict(
        self,
        metrics: Mapping[str, Any],
        step: int | None = None,
        *,
        reduce: str | None = None,
        every_n_steps: int | None = None,
    ) -> None:
        """Log scalars (tensors are converted with ``.item()``) to every logger, then call callbacks' ``on_log``.

        Args:
            metrics: Names and values.
            step: The step to log at (the loggers' own count when ``None``).
            reduce: ``"mean"``, ``"sum"``, ``"max"`` or ``"min"``: reduce each value across processes first
                (every process must make the call); ``None`` logs this process's values as they are.
            every_n_steps: Keep each value on this process and log one value every this many calls: the
                window's ``reduce`` (its mean for ``None``), then reduced across processes in one collective.

        Raises:
            ValueError: A tensor has more than one element, or a bad ``reduce`` / ``every_n_steps``.
        """
        if reduce is not None or every_n_steps is not None:
            metrics = reduce_metrics(self, metrics, reduce, every_n_steps)
            if not metrics:
                return
        scalars = convert_tensors_to_scalars(metrics)
        for logger in self._loggers:
            logger.log_metrics(metrics=scalars, step=step)
        if self._log_hooks is None:
            self.call("on_log", metrics=scalars, step=step)  # warns of a non-callable `on_log`, once
            self._log_hooks = hooks(self._callbacks, "on_log")
            return
        for hook, keywords in self._log_hooks:  # callbacks that show metrics (the progress bar)
            call_with_keywords(hook, keywords, (), {"metrics": scalars, "step": step})

    def profile(self, **options: Any) -> contextlib.AbstractContextManager[Profiler]:
        """Profile the code in a ``with`` block with ``torch.profiler``; call ``.step()`` on what it yields.

        Takes the options of :class:`~fabric_core.callbacks.profiler.Profiler` (``wait``, ``warmup``,
        ``active``, ``repeat``, ``dirpath``, ...). Traces go to the first logger's folder, one per process.
        """
        from fabric_core.callbacks.profiler import profile

        return profile(self, **options)

    @staticmethod
    def seed_everything(seed: int | None = None, workers: bool | None = None, verbose: bool = True) -> int:
        """Seed every random number generator, DataLoader workers too unless ``workers=False``; return the seed.

        Raises:
            ValueError: ``seed`` is not an integer in ``[0, 2**32 - 1]`` (also a ``TypeError`` for a wrong type).
        """
        return _seed_everything(seed=seed, workers=True if workers is None else workers, verbose=verbose)


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
