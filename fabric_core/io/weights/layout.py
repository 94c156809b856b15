"""Where a module's weights go: one safetensors file, a Hugging Face folder (shards and an index), or a torch file.

A Hugging Face folder holds ``model.safetensors`` alone, or ``model-00001-of-0000N.safetensors`` ... beside
``model.safetensors.index.json`` (``{"metadata": {"total_size": N}, "weight_map": {tensor: file}}``), as
``save_pretrained`` writes it and ``from_pretrained`` reads it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Final

import torch

from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io.weights.header import nbytes

__all__ = [
    "INDEX",
    "SINGLE",
    "Shard",
    "is_weight_file",
    "parse_shard_size",
    "plan_shards",
    "read_index",
    "target_kind",
]

SINGLE: Final = "model.safetensors"
INDEX: Final = "model.safetensors.index.json"
#: ``save_pretrained``'s default.
DEFAULT_SHARD_SIZE: Final = "5GB"
TORCH_SUFFIXES: Final = (".pt", ".pth", ".ckpt", ".bin")
_SHARD_NAME: Final = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
_UNITS: Final = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_IUNITS: Final = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


@dataclass(frozen=True)
class Shard:
    """One file of a save: its name and the tensors in it, in order (name, dtype, shape)."""

    file: str
    tensors: tuple[tuple[str, torch.dtype, tuple[int, ...]], ...]


def target_kind(path: str) -> str:
    """What ``fabric.save_raw(path, ...)`` writes: ``"safetensors"``, ``"folder"`` or ``"torch"``.

    Raises:
        InvalidConfigError: ``path`` ends in another suffix (named, with the valid ones).
    """
    name = path.rstrip("/").rsplit("/", 1)[-1]
    suffix = os.path.splitext(name)[1].lower()
    if path.endswith("/") or not suffix:
        return "folder"
    if suffix == ".safetensors":
        return "safetensors"
    if suffix in TORCH_SUFFIXES:
        return "torch"
    raise InvalidConfigError(
        f"`fabric.save_raw({path!r}, ...)`: cannot tell what to write from the suffix {suffix!r}. A path ending in "
        "`.safetensors` writes one safetensors file, a path without a suffix (or ending in `/`) a Hugging Face "
        f"folder, and one ending in {', '.join(f'`{s}`' for s in TORCH_SUFFIXES)} a torch file.",
        argument="path",
        value=path,
    )


def parse_shard_size(value: int | str) -> int:
    """Bytes from ``max_shard_size``: an int, or ``"5GB"``, ``"500MB"``, ``"2GiB"`` as ``save_pretrained`` reads them.

    Raises:
        InvalidConfigError: Not a positive size.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (match := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?B|B)?\s*", value.upper())):
        unit = match.group(2) or ""
        size = int(float(match.group(1)) * (_IUNITS.get(unit) or _UNITS[unit]))
    else:
        size = -1
    if size <= 0:
        raise InvalidConfigError(
            f"`max_shard_size={value!r}` is not a size: pass a number of bytes or a string such as '5GB', '500MB' "
            "or '2GiB'.",
            argument="max_shard_size",
            value=value,
        )
    return size


def plan_shards(tensors: Sequence[tuple[str, torch.dtype, tuple[int, ...]]], max_bytes: int | None) -> list[Shard]:
    """Split ``tensors`` into files of at most ``max_bytes`` each, in order (``None``: one file).

    A tensor larger than ``max_bytes`` gets a file of its own, as in ``save_pretrained``. One file is named
    ``model.safetensors``; several ``model-0000i-of-0000N.safetensors``.
    """
    groups: list[list[tuple[str, torch.dtype, tuple[int, ...]]]] = [[]]
    used = 0
    for tensor in tensors:
        size = nbytes(tensor[1], tensor[2])
        if max_bytes is not None and groups[-1] and used + size > max_bytes:
            groups.append([])
            used = 0
        groups[-1].append(tensor)
        used += size
    if len(groups) == 1:
        return [Shard(SINGLE, tuple(groups[0]))]
    count = len(groups)
    return [Shard(f"model-{i:05d}-of-{count:05d}.safetensors", tuple(group)) for i, group in enumerate(groups, 1)]


def is_weight_file(name: str) -> bool:
    """Whether ``name`` is one of the weight files of a Hugging Face folder (``model.safetensors`` or a shard)."""
    return name == SINGLE or _SHARD_NAME.fullmatch(name) is not None


def index_bytes(shards: Sequence[Shard]) -> bytes:
    """``model.safetensors.index.json`` for ``shards``."""
    total = sum(nbytes(dtype, shape) for shard in shards for _, dtype, shape in shard.tensors)
    weight_map = {name: shard.file for shard in shards for name, _, _ in shard.tensors}
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    return (json.dumps(index, indent=2) + "\n").encode()


def read_index(open_file: Callable[[str], IO[bytes]], name: str) -> dict[str, str]:
    """The weight map of the index file ``name`` (opened through ``open_file``): tensor name to file name.

    Raises:
        CheckpointError: ``reason="corrupt"``: not JSON, or no ``weight_map`` of names to file names.
    """
    with open_file(name) as file:
        data = file.read()
    try:
        index = json.loads(data)
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{name!r} is not a JSON index ({err}).", path=name, reason="corrupt") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and "/" not in v and v not in ("", ".", "..")
        for k, v in weight_map.items()
    ):
        raise CheckpointError(
            f"{name!r} has no `weight_map` of tensor names to file names in the same folder.",
            path=name,
            reason="corrupt",
        )
    return weight_map
