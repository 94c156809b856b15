"""Thread settings shared by the launchers."""

from __future__ import annotations

import os

__all__ = ["set_num_threads_if_needed", "suggested_num_threads"]


def suggested_num_threads(local_world_size: int) -> int:
    """Intra-op threads per process so that the processes of one node do not oversubscribe its CPUs."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(local_world_size, 1))


def set_num_threads_if_needed(local_world_size: int) -> None:
    """Set ``OMP_NUM_THREADS`` (inherited by the processes started next) unless the user already did."""
    if "OMP_NUM_THREADS" in os.environ:
        return
    threads = suggested_num_threads(local_world_size)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
