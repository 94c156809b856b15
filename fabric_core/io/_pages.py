"""Copies out of a mapped checkpoint that do not leave the file's pages counted against the process.

A tensor of a mapped load (``torch.load(mmap=True)``) reads the file's pages as it is touched, and every page
touched stays resident in this process (its RSS) until the whole mapping is gone, which is after the load.
Copying the optimizer state out of the mapping would then hold the pages copied from on top of the copies:
the checkpoint twice. :meth:`FilePages.copy_out` copies one tensor and hands the pages it was read from back
to the kernel at once (``madvise(MADV_DONTNEED)``). That is done only for memory that maps a file, which the
process's own map (``/proc/self/maps``) tells: there a page handed back is read from the file again when it
is next touched, unchanged, whereas a page of ordinary memory would come back as zeros.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import torch

__all__ = ["FilePages"]

_PAGE: Final = mmap.PAGESIZE
_MAPS: Final = Path("/proc/self/maps")


def _madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


_MADVISE: Final = _madvise()


class FilePages:
    """The file mappings of this process as they are now, and copies out of them that free their pages.

    Made once per load, after the checkpoint was mapped (a mapping made later is not seen, and is then
    treated as ordinary memory: copied, its pages kept until it goes).
    """

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        if _MADVISE is None:
            return
        try:
            lines = _MAPS.read_text().splitlines()
        except OSError:
            return
        for line in lines:
            # "start-end perms offset dev inode [path]": inode 0 is anonymous memory (the heap, malloc's maps).
            fields = line.split(maxsplit=5)
            if len(fields) < 5 or fields[4] == "0":
                continue
            start, _, end = fields[0].partition("-")
            self._starts.append(int(start, 16))
            self._ends.append(int(end, 16))

    def maps_file(self, tensor: torch.Tensor) -> bool:
        """Whether all of ``tensor``'s storage lies in one mapping of a file."""
        if not self._starts or tensor.device.type != "cpu":
            return False
        storage = tensor.untyped_storage()
        start = storage.data_ptr()
        index = bisect.bisect_right(self._starts, start) - 1
        return index >= 0 and start + storage.nbytes() <= self._ends[index]

    def release(self, tensor: torch.Tensor) -> None:
        """Hand back the whole pages of ``tensor``'s storage if it maps a file (see the module); else nothing.

        Call it only once nothing needs what was written into those pages since they were mapped: here, on
        tensors of a checkpoint that was only read from.
        """
        if _MADVISE is None or not self.maps_file(tensor):
            return
        storage = tensor.untyped_storage()
        start = -(-storage.data_ptr() // _PAGE) * _PAGE  # the first page boundary at or after the start
        end = (storage.data_ptr() + storage.nbytes()) // _PAGE * _PAGE
        if end > start:
            _MADVISE(start, end - start, mmap.MADV_DONTNEED)  # a refusal only leaves the pages where they are

    def copy_out(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of ``tensor`` in memory of its own; the file's pages it was read from are handed back."""
        copy = tensor.clone()
        self.release(tensor)
        return copy
