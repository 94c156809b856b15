"""Argument checks of ``Fabric``'s methods (with Lightning Fabric's messages), and their small helpers.

Everything here runs when something is set up or called rarely (``setup``, ``save``, ``launch``, ``call``),
never inside a training step.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from torch.nn import Module
from torch.optim import Optimizer
from torch.utils.data import DataLoader

from fabric_core.errors import (
    ArgumentTypeError,
    InvalidConfigError,
    NoLoggerError,
    ParentNotADirectoryError,
    PathIsADirectoryError,
    PossibleUserWarning,
)
from fabric_core.io.locations import is_url
from fabric_core.launchers.launcher import Launcher
from fabric_core.strategies.strategy import Strategy
from fabric_core.utilities.rank_zero import rank_zero_warn
from fabric_core.wrappers import FabricDataLoader, FabricModule, FabricOptimizer, unwrap_compiled

__all__ = [
    "check_clip_arguments",
    "check_clip_objects",
    "check_dataloaders",
    "check_launch",
    "check_load_state",
    "check_model_and_optimizers",
    "check_optimizers",
    "check_save",
    "check_save_filter",
    "check_set_up_module",
    "no_logger",
    "warn_if_on_several_devices",
    "warn_no_backward_sync",
]


def check_model_and_optimizers(module: Module, optimizers: Sequence[Optimizer], method: str) -> None:
    """Refuse objects that ``fabric.setup`` or ``fabric.setup_module`` (``method``) has wrapped already.

    Raises:
        ValueError: The module or an optimizer is a wrapper.
        ArgumentTypeError: The module is not a ``torch.nn.Module`` or an optimizer not an optimizer.
    """
    if not isinstance(module, Module):
        raise ArgumentTypeError(
            f"`fabric.{method}(module={module!r})`: expected a `torch.nn.Module`, got {type(module).__name__}.",
            argument="module",
            value=module,
        )
    _check_optimizer_types(optimizers, method)
    if isinstance(module, FabricModule):
        raise ValueError(f"A model should be passed only once to the `{method}` method.")
    if any(isinstance(opt, FabricOptimizer) for opt in optimizers):
        raise ValueError(f"An optimizer should be passed only once to the `{method}` method.")


def check_optimizers(strategy: Strategy, optimizers: Sequence[Optimizer]) -> None:
    """Validate ``fabric.setup_optimizers(*optimizers)``.

    Raises:
        RuntimeError: The strategy sets up model and optimizers together only, or an optimizer holds
            parameters on the meta device.
        ValueError: No optimizer, or one that was set up already.
    """
    if strategy.requires_joint_setup:
        raise RuntimeError(
            f"The `{type(strategy).__name__}` requires the model and optimizer(s) to be set up jointly"
            " through `.setup(model, optimizer, ...)`."
        )
    if not optimizers:
        raise ValueError("`setup_optimizers` requires at least one optimizer as input.")
    _check_optimizer_types(optimizers, "setup_optimizers")
    if any(isinstance(opt, FabricOptimizer) for opt in optimizers):
        raise ValueError("An optimizer should be passed only once to the `setup_optimizers` method.")
    if any(param.is_meta for opt in optimizers for group in opt.param_groups for param in group["params"]):
        raise RuntimeError(
            "The optimizer has references to the model's meta-device parameters. Materializing them is"
            " currently not supported. Create the optimizer after setting up the model, then call"
            " `fabric.setup_optimizers(optimizer)`."
        )


def _is_optimizer(obj: object) -> bool:
    # Optimizers of other libraries that do not subclass torch's pass on what the wrappers use.
    return isinstance(obj, Optimizer) or (callable(getattr(obj, "step", None)) and hasattr(obj, "param_groups"))


def _check_optimizer_types(optimizers: Sequence[object], method: str) -> None:
    for position, opt in enumerate(optimizers, start=1):
        if not _is_optimizer(opt):
            raise ArgumentTypeError(
                f"`fabric.{method}(...)`: optimizer number {position} is {opt!r} ({type(opt).__name__}); "
                "expected a `torch.optim.Optimizer` (or nothing).",
                argument="optimizers",
                value=opt,
            )


def check_dataloaders(dataloaders: Sequence[object]) -> None:
    """Validate ``fabric.setup_dataloaders(*dataloaders)``.

    Raises:
        ValueError: No dataloader, or one that was set up already.
        TypeError: Something that is not a ``torch.utils.data.DataLoader``.
    """
    if not dataloaders:
        raise ValueError("`setup_dataloaders` requires at least one dataloader as input.")
    if any(isinstance(dl, FabricDataLoader) for dl in dataloaders):
        raise ValueError("A dataloader should be passed only once to the `setup_dataloaders` method.")
    if any(not isinstance(dl, DataLoader) for dl in dataloaders):
        raise TypeError("Only PyTorch DataLoader are currently supported in `setup_dataloaders`.")


def warn_if_on_several_devices(module: Module) -> None:
    """Warn when ``fabric.setup(move_to_device=True)`` is about to gather parameters from several devices."""
    named = iter(module.named_parameters())
    first = next(named, None)
    if first is None:
        return
    first_name, first_param = first
    elsewhere = [(name, param.device) for name, param in named if param.device != first_param.device]
    if elsewhere:
        rank_zero_warn(
            f"The model passed to `Fabric.setup()` has {len(elsewhere)} parameters on different devices (for"
            f" example {elsewhere[0][0]!r} on {elsewhere[0][1]} and {first_name!r} on {first_param.device})."
            " Since `move_to_device=True`, all parameters will be moved to the new device. If this is not"
            " desired, set `Fabric.setup(..., move_to_device=False)`.",
            category=PossibleUserWarning,
            stacklevel=5,  # the user's `fabric.setup(...)` line
        )


def check_save_filter(filter: object, state: Mapping[str, Any]) -> None:
    """Validate ``fabric.save(..., filter=...)``.

    Raises:
        TypeError: ``filter`` is not a dict, or one of its values is not callable.
        ValueError: ``filter`` has keys that ``state`` does not.
    """
    if not isinstance(filter, dict):
        raise TypeError(f"Filter should be a dictionary, given {filter!r}")
    if not set(filter).issubset(state):
        raise ValueError(f"The filter keys {filter.keys() - state} are not present in the state keys {set(state)}.")
    for key, value in filter.items():
        if not callable(value):
            raise TypeError(f"Expected `fabric.save(filter=...)` for key {key!r} to be a callable, given {value!r}")


def check_save(strategy: Strategy, path: object, state: object, filter: object) -> None:
    """Validate ``fabric.save(path, state, filter)`` before anything is written.

    Raises:
        ArgumentTypeError: ``state`` is not a dict, or ``path`` not a path.
        InvalidConfigError: ``path`` is empty.
        ParentNotADirectoryError: A parent of ``path`` is a file.
        PathIsADirectoryError: ``path`` is a folder but the strategy writes one file there.
        TypeError, ValueError: See :func:`check_save_filter`.
    """
    if not isinstance(state, Mapping):
        raise ArgumentTypeError(
            f"`fabric.save(path, state={state!r})`: `state` must be a dict of names to modules, optimizers "
            f"and other values, e.g. `{{'model': model, 'step': 10}}`; got {type(state).__name__}.",
            argument="state",
            value=state,
        )
    if filter is not None:
        check_save_filter(filter, state)
    target = check_save_path(path)
    if not isinstance(target, Path):
        return  # a URL: what is there is the store's to say, and asking costs a request
    # The base strategy writes `path` as one file through the CheckpointIO; others (and a `save_checkpoint` set
    # on the instance) may write folders there.
    writes_one_file = getattr(strategy.save_checkpoint, "__func__", None) is Strategy.save_checkpoint
    if writes_one_file and target.is_dir():
        raise PathIsADirectoryError(
            f"`fabric.save(path={os.fspath(target)!r})`: the path is a folder, but the {type(strategy).__name__} "
            "saves a checkpoint as one file. Pass a file path inside it, e.g. "
            f"{os.fspath(target / 'checkpoint.ckpt')!r}, or remove the folder.",
            argument="path",
            value=path,
        )


def check_save_path(path: object) -> Path | str:
    """Return ``path`` as a ``Path`` after refusing what no save can write: empty, or under a file.

    A URL (``s3://bucket/last.ckpt``) is returned as it is, a ``str``: ``Path`` would turn it into the local
    folder ``s3:``.

    Raises:
        ArgumentTypeError: ``path`` is not a str or ``os.PathLike``.
        InvalidConfigError: ``path`` is empty.
        ParentNotADirectoryError: A parent of ``path`` is a file.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(
            f"`fabric.save(path={path!r})`: expected a str or `os.PathLike`, got {type(path).__name__}.",
            argument="path",
            value=path,
        )
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise InvalidConfigError(
            f"`fabric.save(path={text!r})`: the path is empty. Pass the file (or folder) to write, e.g. "
            "'checkpoints/last.ckpt'.",
            argument="path",
            value=path,
        )
    if is_url(text):
        return text
    target = Path(text)
    for parent in target.parents:
        if parent.is_dir():
            break
        if parent.exists() or parent.is_symlink():
            raise ParentNotADirectoryError(
                f"`fabric.save(path={text!r})`: cannot write there because {os.fspath(parent)!r} is a file, not a "
                "folder. Choose another path, or move that file away.",
                argument="path",
                value=path,
            )
    return target


def check_load_state(state: object, method: str = "load") -> None:
    """Validate the ``state`` of ``fabric.load(path, state)``: ``None`` or a dict.

    Raises:
        ArgumentTypeError: Anything else (a string would be read as its characters).
    """
    if state is not None and not isinstance(state, dict):
        raise ArgumentTypeError(
            f"`fabric.{method}(path, state={state!r})`: `state` must be a dict of names to what to restore, "
            f"e.g. `{{'model': model, 'optimizer': optimizer}}`, or None for the whole checkpoint; got "
            f"{type(state).__name__}.",
            argument="state",
            value=state,
        )


def check_clip_objects(module: object, optimizer: object) -> None:
    """Explain a failed ``fabric.clip_gradients`` whose optimizer is not one (called only once it failed).

    Raises:
        ArgumentTypeError: ``optimizer`` is not an optimizer.
    """
    if not _is_optimizer(optimizer):
        raise ArgumentTypeError(
            f"`fabric.clip_gradients(module, optimizer={optimizer!r})`: expected the `torch.optim.Optimizer` "
            "(set up or not) whose parameters' gradients to clip.",
            argument="optimizer",
            value=optimizer,
        )


def no_logger() -> NoReturn:
    """Raise the error of ``fabric.logger`` when ``Fabric`` has no logger.

    Raises:
        NoLoggerError: Always (an ``IndexError``, as in Lightning Fabric).
    """
    raise NoLoggerError(
        "`fabric.logger`: this Fabric has no logger. Pass one, e.g. `Fabric(loggers='csv')` or "
        "`Fabric(loggers=[CSVLogger(root_dir)])`, or check `fabric.loggers` (a list, empty here) first."
    )


def check_launch(strategy: Strategy, function: object, cli: bool, *, given: bool = True) -> None:
    """Validate ``fabric.launch(function)``; ``given`` is false when the call named no function.

    Raises:
        RuntimeError: The processes were started by ``fabric-core run`` already (``cli``).
        TypeError: ``function`` is not callable or takes no argument (it receives the ``Fabric``), or none
            was given but the strategy's launcher needs one.
    """
    if cli:
        # Lightning's sentence, its two spaces included (code matches it), then what to do.
        raise RuntimeError(
            "This script was launched through the CLI, and processes have already been created. Calling  "
            "`.launch()` again is not allowed. Remove the `fabric.launch()` call, or run the script with plain "
            "`python` to let `launch()` start the processes."
        )
    if not given:
        launcher = strategy.launcher
        if isinstance(launcher, Launcher) and launcher.requires_function:
            raise TypeError(
                f"To spawn processes with the `{type(strategy).__name__}` strategy, `.launch()` needs to be"
                " called with a function that contains the code to launch in processes."
            )
        return
    if not callable(function):
        raise TypeError(
            f"`Fabric.launch(...)` needs to be a callable, but got {function}."
            " HINT: do `.launch(your_fn)` instead of `.launch(your_fn())`"
        )
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # no signature to check (some builtins): let the call decide
        return
    if not parameters:
        raise TypeError(
            f"`Fabric.launch(function={function})` needs to take at least one argument. The launcher will"
            " pass in the `Fabric` object so you can use it inside the function."
        )


def check_clip_arguments(clip_val: float | None, max_norm: float | None) -> None:
    """Validate ``fabric.clip_gradients``: exactly one of ``clip_val`` and ``max_norm``.

    Raises:
        ValueError: Both or neither are set.
    """
    if clip_val is not None and max_norm is not None:
        raise ValueError(
            "Only one of `clip_val` or `max_norm` can be set as this specifies the underlying clipping algorithm!"
        )
    if clip_val is None and max_norm is None:
        raise ValueError("You have to specify either `clip_val` or `max_norm` to do gradient clipping!")


def check_set_up_module(module: object) -> Module:
    """Return the strategy's module inside a module that ``fabric.setup`` returned (compiled or not).

    Raises:
        TypeError: ``module`` was not set up (``fabric.no_backward_sync`` needs the strategy's module).
    """
    module, _ = unwrap_compiled(module)
    if not isinstance(module, FabricModule):
        raise TypeError(
            "You need to set up the model first before you can call `fabric.no_backward_sync()`:"
            " `model = fabric.setup(model, ...)`"
        )
    forward_module: Module = unwrap_compiled(module._forward_module)[0]
    return forward_module


def warn_no_backward_sync(strategy: Strategy) -> None:
    """Warn that ``strategy`` cannot skip the gradient synchronisation ``fabric.no_backward_sync`` asks for."""
    rank_zero_warn(
        f"The `{strategy.__class__.__name__}` does not support skipping the gradient synchronization."
        " Remove `.no_backward_sync()` from your code or choose a different strategy.",
        category=PossibleUserWarning,
        stacklevel=3,  # the user's `fabric.no_backward_sync(...)` line
    )
