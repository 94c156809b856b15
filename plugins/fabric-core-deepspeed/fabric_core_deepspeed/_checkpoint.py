"""How a user's ``state`` dict maps onto a DeepSpeed checkpoint folder, and back.

DeepSpeed writes the engine's module and optimizer itself, one file per rank. Everything else in the
state (a step counter, a scheduler, another module) goes into DeepSpeed's ``client_state`` under its own keys,
as Lightning saves it, so that Lightning loads the folder too; a key that collides with one of DeepSpeed's own
(``global_steps``, ``lr_scheduler``...) is warned about, as in Lightning. Beside them, :data:`META_KEY` records
where the model and the optimizer were in the state (consolidation names the weights after it). Folders of
earlier versions, which kept the whole state under :data:`META_KEY`, load as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import InvalidConfigError
from fabric_core.io.locations import is_dir, is_url
from fabric_core.io.restore import restore_state
from fabric_core.utilities.rank_zero import rank_zero_warn
from fabric_core_deepspeed._trust import check_pickles

if TYPE_CHECKING:
    from fabric_core.utilities.types import ModuleLoader

__all__ = [
    "DEEPSPEED_KEYS",
    "META_KEY",
    "TAG",
    "Layout",
    "check_folder",
    "engines_in",
    "extras_from_client_state",
    "is_checkpoint_folder",
    "is_single_file",
    "load_folder",
    "model_states_file",
    "split_state",
    "warn_on_deepspeed_keys",
]

#: The tag (sub-folder) every checkpoint of this strategy is written under.
TAG: Final = "checkpoint"
#: The ``client_state`` key holding the layout of the user's state (earlier versions: the extras too).
META_KEY: Final = "fabric_core_deepspeed"
#: Top-level keys DeepSpeed writes into its model-states file; a checkpoint without :data:`META_KEY` (written
#: by Lightning) keeps the user's extras next to them.
DEEPSPEED_KEYS: Final = frozenset(
    {
        "module", "buffer_names", "optimizer", "param_shapes", "frozen_param_shapes", "shared_params",
        "frozen_param_fragments", "lr_scheduler", "data_sampler", "random_ltd", "sparse_tensor_module_names",
        "skipped_steps", "global_steps", "global_samples", "dp_world_size", "mp_world_size", "ds_config",
        "ds_version", "mp_rank", "zero_stage", "checkpoint_parallel_dimensions", "num_experts", "ds_autoep_layers",
        "autoep_layers", "universal_checkpoint_info", "folding",
    }
)  # fmt: skip


@dataclass
class Layout:
    """Where the engine sits in a user's state dict, and what else the state holds."""

    module_key: str
    engine: Any
    optimizer_key: str | None
    extras: dict[str, Any] = field(default_factory=dict)

    def client_state(self, extras: Mapping[str, Any]) -> dict[str, Any]:
        """What DeepSpeed saves beside the engine: the converted extras under their own keys, and the layout."""
        return {**extras, META_KEY: {"module": self.module_key, "optimizer": self.optimizer_key}}


def split_state(state: Mapping[str, Any], engines: Iterable[Any], action: str) -> Layout:
    """Find the one DeepSpeed engine in ``state``: one this strategy created (as the engine or as the module it
    wraps), or, as Lightning finds it, any ``DeepSpeedEngine`` among the state's modules and their submodules.

    Args:
        state: The user's state: the model, maybe its optimizer, and anything else.
        engines: The engines this strategy created.
        action: ``"save"`` or ``"load"``, for the error messages.

    Raises:
        ValueError: ``state`` holds no engine, or more than one.
    """
    known = list(engines)
    found: list[tuple[str, Any]] = []
    for key, value in state.items():
        engine = next((e for e in known if value is e or value is e.module), None)
        if engine is None and isinstance(value, Module):
            engine = next(iter(engines_in({key: value})), None)
        if engine is not None and all(engine is not other for _, other in found):
            found.append((key, engine))
    if not found:
        raise ValueError(
            f"Could not find a DeepSpeed model in the provided checkpoint state. Please provide the model as part "
            f"of the state like so: `fabric.{action}(..., state={{'model': model, ...}})`. Make sure you set up the "
            f"model (and optimizer if any) through `fabric.setup(model, optimizer)` before you {action} the "
            "checkpoint."
        )
    if len(found) > 1:
        raise ValueError(
            f"Found multiple DeepSpeed engine modules in the given state ({', '.join(repr(k) for k, _ in found)}). "
            "Saving checkpoints with DeepSpeed is currently limited to a single model per checkpoint. To save "
            "multiple models, call the save method for each model separately with a different path."
        )
    module_key, engine = found[0]
    optimizer = getattr(engine, "optimizer", None)
    optimizer_key = next((k for k, v in state.items() if v is not None and v is optimizer), None)
    extras = {k: v for k, v in state.items() if k not in (module_key, optimizer_key)}
    return Layout(module_key, engine, optimizer_key, extras)


def load_folder(
    strategy: ModuleLoader,
    engines: list[Any],
    folder: Path,
    state: dict[str, Any],
    strict: bool,
    weights_only: bool | None = None,
) -> dict[str, Any]:
    """Restore ``state`` from a checkpoint folder: DeepSpeed restores the engine (and its optimizer when ``state``
    holds it); the other entries come from the client state, in place. Returns the extras not asked for.

    DeepSpeed unpickles its files with ``weights_only=False``; unless ``weights_only`` is ``False``, every
    pickle in the folder is checked first (:func:`~fabric_core_deepspeed._trust.check_pickles`).

    Raises:
        CheckpointError: A file of the folder holds objects a DeepSpeed checkpoint does not consist of
            (nothing of it was unpickled), or is damaged.
        ValueError: ``state`` holds none of ``engines`` (those the strategy created), or more than one.
        KeyError: With ``strict``, ``state`` asks for an extra the checkpoint lacks.
        RuntimeError: DeepSpeed could not read the folder.
    """
    layout = split_state(state, engines, "load")
    if weights_only is not False:
        check_pickles(folder, TAG)
    # As Lightning asks: the optimizer's state where the state holds an optimizer.
    wants_optimizer = layout.optimizer_key is not None or any(isinstance(v, Optimizer) for v in state.values())
    _, client_state = layout.engine.load_checkpoint(
        folder,
        tag=TAG,
        load_optimizer_states=wants_optimizer,
        load_lr_scheduler_states=False,
        load_module_strict=strict,
    )
    if client_state is None:
        raise RuntimeError(
            f"DeepSpeed was unable to load the checkpoint {os.fspath(folder)!r}. Ensure you passed in a DeepSpeed "
            "checkpoint folder, or a single consolidated checkpoint file."
        )
    _, extras = extras_from_client_state(client_state)
    wanted = dict(layout.extras)
    remainder = restore_state(strategy, wanted, extras, strict=strict)
    state.update(wanted)
    return remainder


def extras_from_client_state(client_state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(meta, extras)`` from what ``engine.load_checkpoint`` returned as the client state.

    The extras are the keys DeepSpeed does not own (a checkpoint written by Lightning has no :data:`META_KEY`);
    one of an earlier version holds them under :data:`META_KEY`.
    """
    meta = client_state.get(META_KEY)
    if isinstance(meta, dict) and isinstance(meta.get("state"), dict):
        return meta, dict(meta["state"])
    extras = {k: v for k, v in client_state.items() if k not in DEEPSPEED_KEYS and k != META_KEY}
    layout = meta if isinstance(meta, dict) else {"module": None, "optimizer": None}
    return {**layout, "state": extras}, extras


def is_checkpoint_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder with the :data:`TAG` sub-folder that every DeepSpeed checkpoint has."""
    folder = Path(path)
    return folder.is_dir() and (folder / TAG).is_dir()


def is_single_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a checkpoint file of its own: a file, but not one inside a checkpoint folder.

    A URL (object storage) that is not a folder counts as one: a consolidated file there loads as any file does.
    """
    if is_url(path):
        return not is_dir(path)
    file = Path(path)
    return file.is_file() and not any(is_checkpoint_folder(outer) for outer in (file.parent, file.parent.parent))


def check_folder(
    path: str | os.PathLike[str], is_folder: Callable[[str | os.PathLike[str]], bool] = is_checkpoint_folder
) -> Path:
    """Return ``path`` as a checkpoint folder written by ``DeepSpeedStrategy.save_checkpoint``; ``is_folder``
    tells one (the strategy passes the name Lightning's tests patch).

    Raises:
        InvalidConfigError: ``path`` is a URL (see :func:`refuse_url`).
        FileNotFoundError: Nothing exists at ``path``, or it is not a checkpoint folder; when it lies inside
            one (the tag sub-folder, or a file in it), the message names the folder to pass instead.
    """
    refuse_url(path, "load")
    folder = Path(path)
    if is_folder(folder):
        return folder
    invalid = f"The provided path is not a valid DeepSpeed checkpoint: {os.fspath(path)}"
    what = "a file" if folder.is_file() else "a subfolder"
    for outer in (folder.parent, folder.parent.parent):
        if is_checkpoint_folder(outer):
            raise FileNotFoundError(
                f"{invalid}. It looks like you passed the path to {what} inside a DeepSpeed checkpoint folder. Try "
                f"to load using this parent directory instead: {outer}"
            )
    reason = "nothing exists there" if not folder.exists() else f"it has no {TAG!r} sub-folder"
    raise FileNotFoundError(
        f"{invalid} ({reason}). Pass the folder given to `fabric.save(path, ...)` with the DeepSpeed strategy, or "
        "a single file consolidated with `fabric_core_deepspeed.consolidate(folder, output)`."
    )


def engines_in(state: Mapping[str, Any]) -> list[Any]:
    """Every DeepSpeed engine among the modules of ``state`` and their submodules (imports deepspeed)."""
    from deepspeed import DeepSpeedEngine

    modules = chain.from_iterable(value.modules() for value in state.values() if isinstance(value, Module))
    return [module for module in modules if isinstance(module, DeepSpeedEngine)]


def warn_on_deepspeed_keys(state: Mapping[str, Any]) -> None:
    """Warn, as Lightning does, when ``state`` has keys DeepSpeed writes itself: saved as its ``client_state``,
    they are merged into DeepSpeed's own state, where one of the two values is lost."""
    colliding = sorted(DEEPSPEED_KEYS.union({META_KEY}).intersection(state))
    if colliding:
        rank_zero_warn(
            "Your state has keys that collide with DeepSpeed's internal engine state, so DeepSpeed may overwrite "
            f"their values (or they DeepSpeed's): {', '.join(colliding)}. Give them other names.",
            category=UserWarning,
        )


def model_states_file(folder: Path, tag: str = TAG) -> Path:
    """The file holding rank 0's module state and the client state (named by ZeRO stage 3 or not).

    Raises:
        FileNotFoundError: Neither file exists under ``folder/tag``.
    """
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        candidate = folder / tag / name
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{os.fspath(folder / tag)!r} holds no DeepSpeed model-states file (mp_rank_00_model_states.pt); is it a "
        "complete DeepSpeed checkpoint?"
    )


def refuse_url(path: str | os.PathLike[str], what: str) -> None:
    """Refuse a URL where DeepSpeed would read or write a checkpoint folder with local file operations.

    Raises:
        InvalidConfigError: ``path`` is a URL (``s3://bucket/ckpt``), which ``Path`` would turn into ``s3:/...``.
    """
    if is_url(path):
        raise InvalidConfigError(
            f"DeepSpeedStrategy cannot {what} the checkpoint folder {os.fspath(path)!r}: DeepSpeed reads and writes "
            "its folders with local file operations. Use a local path (or a bucket mounted as a local folder) and "
            "copy the folder; a file consolidated from it (`fabric-core consolidate`) loads from a URL.",
            argument="path",
            value=os.fspath(path),
        )
