"""Turn a DeepSpeed checkpoint folder into one ordinary checkpoint file that any strategy can load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from fabric_core.io.atomic import atomic_write
from fabric_core.utilities.types import PathLike
from fabric_core_deepspeed import _checkpoint
from fabric_core_deepspeed._trust import check_pickles

__all__ = ["consolidate"]


def consolidate(
    folder: PathLike, output: PathLike | None = None, *, tag: str | None = None, weights_only: bool | None = None
) -> Path:
    """Merge the shards of a DeepSpeed checkpoint folder into one ``torch.save`` file with fp32 weights.

    The file holds ``{<model key>: <fp32 state dict>, **extras}``: the model under the key it had in
    ``fabric.save(path, {"model": model, ...})`` and the other entries of that state except the optimizer
    (whose ZeRO shards are not merged). Load it with ``fabric.load(file, {"model": model})`` under any
    strategy, DeepSpeed included. Runs in one process, on the CPU, without a process group.

    DeepSpeed's files are unpickled without restrictions; unless ``weights_only=False``, every pickle in the
    folder is checked first, and a folder holding anything but what the DeepSpeed strategy saves is refused.

    Args:
        folder: The folder written by ``fabric.save`` under the DeepSpeed strategy.
        output: The file to write; default ``<folder>.consolidated``.
        tag: The checkpoint tag (sub-folder); default the one ``fabric.save`` uses, else DeepSpeed's
            ``latest`` file.
        weights_only: ``None``/``True``: check the folder first; ``False``: a folder you trust.

    Returns:
        The path of the file written.

    Raises:
        FileNotFoundError: ``folder`` is not a DeepSpeed checkpoint folder.
        FileExistsError: ``output`` exists already.
        CheckpointError: A file of the folder was refused, or is damaged.
    """
    source = Path(folder)
    if not source.is_dir():
        raise FileNotFoundError(f"The DeepSpeed checkpoint folder {os.fspath(folder)!r} does not exist.")
    tag = tag or _default_tag(source)
    target = Path(output) if output is not None else source.with_name(source.name + ".consolidated")
    if target.exists():
        raise FileExistsError(f"The output {os.fspath(target)!r} exists already; remove it or choose another `output`.")
    if weights_only is not False:
        check_pickles(source, tag)
    client_state: dict[str, Any] = torch.load(
        _checkpoint.model_states_file(source, tag), map_location="cpu", weights_only=False
    )
    meta, extras = _checkpoint.extras_from_client_state(client_state)
    weights = _fp32_state_dict(source, tag, client_state)
    result = {meta.get("module") or "model": weights, **extras}
    with atomic_write(target) as file:
        torch.save(result, file)
    return target


def _default_tag(folder: Path) -> str:
    if (folder / _checkpoint.TAG).is_dir():
        return _checkpoint.TAG
    latest = folder / "latest"
    if latest.is_file():
        return latest.read_text().strip()
    raise FileNotFoundError(
        f"{os.fspath(folder)!r} is not a DeepSpeed checkpoint folder: it has neither a {_checkpoint.TAG!r} "
        "sub-folder nor a 'latest' file. Pass `tag=` to name the sub-folder."
    )


def _fp32_state_dict(folder: Path, tag: str, client_state: dict[str, Any]) -> dict[str, Any]:
    """The whole model in fp32: merged from the ZeRO shards, or as saved when ZeRO was off (stage 0)."""
    if not any((folder / tag).glob("*optim_states.pt")):
        module: dict[str, Any] = client_state["module"]
        return {k: v.float() if v.is_floating_point() else v for k, v in module.items()}
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    weights: dict[str, Any] = get_fp32_state_dict_from_zero_checkpoint(os.fspath(folder), tag=tag)
    return weights
