"""``fabric_core.io._pages``: copies out of a mapped checkpoint hand the file's pages back, and nothing else's."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest
import torch

from fabric_core.io._pages import FilePages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")

_MIB = 2**20


def _resident_bytes_of(path: Path) -> int:
    """The bytes of ``path`` resident in this process, summed over its mappings (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):  # a mapping's first line: "start-end perms ... [path]"
            inside = line.rstrip().endswith(str(path))
        elif inside and head == "Rss:":
            total += int(line.split()[1]) * 1024
    return total


@pytest.fixture
def mapped(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    path = tmp_path / "checkpoint.pt"
    torch.save({"big": torch.arange(4 * _MIB, dtype=torch.float32), "small": torch.ones(3)}, path)
    return path, torch.load(path, mmap=True)


def test_copy_out_copies_and_hands_the_pages_back(mapped: tuple[Path, dict[str, torch.Tensor]]) -> None:
    path, checkpoint = mapped
    pages = FilePages()
    assert pages.maps_file(checkpoint["big"])
    assert float(checkpoint["big"].sum()) > 0  # touches every page of the 16 MiB tensor
    assert _resident_bytes_of(path) >= 16 * _MIB
    copy = pages.copy_out(checkpoint["big"])
    assert _resident_bytes_of(path) < _MIB  # at most the pages at the tensor's edges and the archive's index
    assert copy.untyped_storage().data_ptr() != checkpoint["big"].untyped_storage().data_ptr()
    assert torch.equal(copy, torch.arange(4 * _MIB, dtype=torch.float32))
    # A page handed back is read from the file again when touched: the mapped tensor is unchanged.
    assert torch.equal(checkpoint["big"], copy)
    del checkpoint, copy
    gc.collect()


def test_memory_that_maps_no_file_is_left_alone() -> None:
    pages = FilePages()
    ordinary = torch.full((4 * _MIB,), 7.0)  # malloc's own mapping: handed back, it would read as zeros
    assert not pages.maps_file(ordinary)
    pages.release(ordinary)
    copy = pages.copy_out(ordinary)
    assert bool((ordinary == 7.0).all()) and torch.equal(copy, ordinary)
    assert not pages.maps_file(torch.ones(3, device="meta"))


def test_a_mapping_made_after_the_pages_were_read_is_treated_as_memory(tmp_path: Path) -> None:
    pages = FilePages()
    path = tmp_path / "later.pt"
    torch.save({"w": torch.arange(2 * _MIB, dtype=torch.float32)}, path)
    later = torch.load(path, mmap=True)["w"]
    assert not pages.maps_file(later)
    pages.release(later)  # not known as a file's: nothing handed back
    assert torch.equal(later, torch.arange(2 * _MIB, dtype=torch.float32))
