"""Hand a checkpoint that ``fabric.save`` wrote to Ray Train, so that Ray's run storage holds it too."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabric_core.errors import CheckpointError, EnvironmentSetupError

__all__ = ["CheckpointNotFoundError", "report"]


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The path given to :func:`report` does not exist on global rank 0 (a ``FileNotFoundError`` too)."""


def report(
    fabric: Any,
    path: str | os.PathLike[str],
    metrics: Mapping[str, Any] | None = None,
    *,
    checkpoint_dir_name: str | None = None,
) -> None:
    """Report ``metrics`` and the checkpoint at ``path`` to Ray Train (``ray.train.report``).

    Call it on every rank, right after ``fabric.save(path, state)`` (which every rank calls too): Ray Train
    makes ``report`` a barrier and counts the calls of each worker, so a rank that skips it stalls the others.
    What each rank hands over:

    - ``path`` is a file (``ddp``, one process writes it): global rank 0 hands it over, in a folder of its
      own; the others report the metrics only.
    - ``path`` is a folder (``fsdp``/``deepspeed`` sharded checkpoints): every rank that sees it hands it over,
      and Ray Train merges what the ranks upload into one checkpoint folder, so shards written on each node's
      local disk all arrive.

    Only rank 0's ``metrics`` are kept with the checkpoint (Ray Train's rule). The checkpoint is copied to
    the run's ``storage_path`` before this returns; ``ray.train.get_checkpoint()`` gives the newest one to a
    restarted run, and ``Result.checkpoint`` to the driver.

    Args:
        fabric: The ``Fabric`` that saved the checkpoint.
        path: What ``fabric.save`` wrote (a file or a folder).
        metrics: Numbers to keep with the checkpoint (``{"step": 100, "loss": 0.3}``).
        checkpoint_dir_name: The checkpoint's folder name in Ray's storage (default: Ray's, unique per report).

    Raises:
        EnvironmentSetupError: Not called in a Ray Train worker.
        CheckpointNotFoundError: ``path`` does not exist on global rank 0; raised before reporting, so Ray
            Train ends the run instead of the other ranks waiting in ``report`` for this one.
    """
    import ray.train

    from fabric_core_ray.environment import RayEnvironment

    if not RayEnvironment.detect():
        raise EnvironmentSetupError(
            "fabric_core_ray.report(...) runs in a Ray Train worker only. Start the script with "
            "`fabric-core run --launcher ray ...` or `fabric_core_ray.run(...)`."
        )
    source = Path(path)
    if fabric.global_rank == 0 and not source.exists():
        raise CheckpointNotFoundError(
            f"fabric_core_ray.report: {str(source)!r} does not exist. Pass the path given to `fabric.save`, after "
            "saving.",
            path=str(source),
        )
    with tempfile.TemporaryDirectory(prefix="fabric-core-ray-ckpt-") as staging:
        folder: Path | None = None
        if source.is_dir():
            folder = source
        elif source.is_file() and fabric.global_rank == 0:
            folder = Path(staging)
            shutil.copy2(source, folder / source.name)
        checkpoint = ray.train.Checkpoint.from_directory(str(folder)) if folder is not None else None
        ray.train.report(dict(metrics or {}), checkpoint=checkpoint, checkpoint_dir_name=checkpoint_dir_name)
