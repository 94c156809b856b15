"""Checkpoint folders every rank writes a part of: put in place in one step on disk, or written into object storage.

:func:`write_folder_collectively` writes into a temp folder and replaces the target with it
(:func:`~fabric_core.io.replace.replace_path`); :func:`write_remote_folder_collectively` writes under the URL
itself, the file that completes the folder last.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from fabric_core.io._remote import _url_to_fs, is_remote_url, remove_remote_folder
from fabric_core.io.replace import folder_in_the_way, replace_path
from fabric_core.io.temp_names import _remove, remove_stale_temps, temp_path_for
from fabric_core.utilities.types import PathLike

__all__ = ["write_folder_collectively", "write_remote_folder_collectively"]

_T = TypeVar("_T")


class _Ranks(Protocol):
    """What :func:`write_folder_collectively` needs of a strategy (``local_rank``, ``node_rank``,
    ``num_nodes`` and ``num_processes`` are read where it has them: one node otherwise)."""

    @property
    def world_size(self) -> int: ...

    @property
    def global_rank(self) -> int: ...

    @property
    def is_global_zero(self) -> bool: ...

    def broadcast(self, obj: _T, src: int = 0) -> _T: ...

    def barrier(self, name: str | None = None) -> None: ...

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool: ...


def write_folder_collectively(ranks: _Ranks, target: PathLike, write: Callable[[Path], None], name: str) -> None:
    """Have every rank write its part of a checkpoint folder, then put the folder at ``target`` in one step.

    Call on every rank. ``write(temp)`` runs on every rank with a temp folder next to ``target``; after a
    barrier the folder is put in place (:func:`replace_path`), and what killed saves of ``target`` left is
    removed first (:func:`remove_stale_temps`). An interrupted save leaves the previous checkpoint at
    ``target`` (never a mix, never nothing); a failed one removes its temp folder.

    Who does the replace depends on where the folder lives. On one node, or on several that share the
    folder's filesystem (checked by :func:`~fabric_core.utilities.distributed.is_shared_filesystem`), rank 0
    alone does, once. Where each node has its own disk, each node has its own temp folder (named by its first
    process) and its first process replaces the node's copy of ``target``: every node ends with a complete
    folder of what its ranks wrote.

    Args:
        ranks: The strategy (ranks, ``broadcast``, ``barrier``, ``reduce_boolean_decision``).
        target: The checkpoint folder to create or replace.
        write: Writes this rank's files into the folder it is given.
        name: Names the barriers (e.g. the strategy's name), for hang reports.
    """
    from fabric_core.utilities.distributed import _layout, is_shared_filesystem

    if is_remote_url(target):
        # `write` would be handed a local temp folder named after the URL (`s3:/bucket/...`): refused before
        # anything is written, on every rank (all are given the same path).
        from fabric_core.errors import InvalidConfigError

        raise InvalidConfigError(
            f"{name} writes its checkpoint folder with local file operations and cannot write to "
            f"{os.fspath(target)!r}. Save to a local path (or a bucket mounted as a local folder), then copy the "
            "folder to the bucket.",
            argument="path",
            value=os.fspath(target),
        )
    target = Path(target)
    node, local, num_nodes = _layout(ranks)
    if num_nodes > 1:
        target.parent.mkdir(parents=True, exist_ok=True)  # on every node: it may have its own disk
        shared = is_shared_filesystem(ranks, target.parent)
    else:
        shared = True
    replacer = ranks.is_global_zero if shared else local == 0
    in_the_way = folder_in_the_way(target) if replacer else None
    if replacer and in_the_way is None:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(target)
    mine = (os.fspath(temp_path_for(target)) if in_the_way is None else "", in_the_way) if replacer else ("", None)
    if shared:
        temp_name, in_the_way = ranks.broadcast(mine, src=0)
    else:
        # Each node's first process names its node's temp folder (its host and pid, for the sweep of a later
        # save on that node); ranks are numbered node by node (node_rank * num_processes + local_rank).
        per_node = int(getattr(ranks, "num_processes", 0)) or ranks.world_size // num_nodes
        answers = [ranks.broadcast(mine, src=n * per_node) for n in range(num_nodes)]
        temp_name = answers[node][0]
        in_the_way = next((why for _, why in answers if why is not None), None)
    if in_the_way is not None:  # every rank raises, before anything is written
        from fabric_core.errors import FolderInTheWayError

        raise FolderInTheWayError(in_the_way, argument="path", value=os.fspath(target))
    temp = Path(temp_name)
    try:
        write(temp)
        ranks.barrier(f"{name}-save")
        if replacer:
            replace_path(temp, target)
    finally:
        if replacer and os.path.lexists(temp):
            _remove(os.fspath(temp))
    ranks.barrier(f"{name}-save-done")


def write_remote_folder_collectively(
    ranks: _Ranks, url: str, write: Callable[[str], None], name: str, complete: str = ".metadata"
) -> None:
    """Have every rank write its part of a checkpoint folder straight into object storage at ``url``.

    Call on every rank. An object store cannot rename a folder into place, so the folder is written under its
    own name, and ``write`` must write the file named ``complete`` (what makes the folder a checkpoint: DCP's
    ``.metadata``) last, once every rank's files are there. Before anything is written, rank 0 deletes the
    previous checkpoint at ``url``, ``complete`` first, so that no moment shows a checkpoint whose files come
    from two saves; a save killed part-way leaves a folder without ``complete``, which no load takes for a
    checkpoint (and the previous checkpoint of the same name is gone: keep several names, as run checkpoints
    do, to always have one). A folder of other files at ``url`` is refused as locally.

    Args:
        ranks: The strategy (ranks, ``broadcast``, ``barrier``).
        url: The checkpoint folder's URL.
        write: Writes this rank's files into the folder it is given (the URL).
        name: Names the barrier (e.g. the strategy's name), for hang reports.
        complete: The file written last, deleted first.

    Raises:
        FolderInTheWayError: ``url`` holds other files than a checkpoint's; nothing is written, on every rank.
    """
    in_the_way = None
    if ranks.is_global_zero:
        in_the_way = folder_in_the_way(url)
        if in_the_way is None:
            fs, key = _url_to_fs(url)
            if fs.isfile(key):
                fs.rm_file(key)  # a single-file checkpoint saved at the same name before
            remove_remote_folder(url, first=(complete,))
    in_the_way = ranks.broadcast(in_the_way, src=0)
    if in_the_way is not None:
        from fabric_core.errors import FolderInTheWayError

        raise FolderInTheWayError(in_the_way, argument="path", value=url)
    write(url)
    ranks.barrier(f"{name}-save-done")
