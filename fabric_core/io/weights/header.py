"""The safetensors format: a little-endian ``u64`` header length, a JSON header, then the tensors' bytes.

A header maps each tensor's name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the
bytes after the header). :func:`read_header` checks everything a reader relies on before any tensor is read:
the length fits the file, the JSON is an object, every dtype is known, every shape's bytes match its
offsets, and the offsets tile the data exactly (no gap, no overlap, nothing missing at the end), so a
truncated file or a header that lies about its offsets is refused naming the file and the tensor.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

import torch

from fabric_core.errors import CheckpointError

__all__ = ["DTYPES", "Entry", "Header", "build_header", "byte_runs", "nbytes", "raw_bytes", "read_header"]

#: safetensors' dtype names and torch's dtypes.
DTYPES: Final[dict[str, torch.dtype]] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "C64": torch.complex64,
}
_NAMES: Final[dict[torch.dtype, str]] = {dtype: name for name, dtype in DTYPES.items()}
#: A header larger than this is not a header (the safetensors package refuses above 100 MB too).
MAX_HEADER_BYTES: Final = 100_000_000


@dataclass(frozen=True)
class Entry:
    """One tensor of a safetensors file: its name, dtype, shape and where its bytes are in the file."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    nbytes: int

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize


@dataclass(frozen=True)
class Header:
    """A checked header: the file's tensors by name, and its ``__metadata__``."""

    file: str
    entries: dict[str, Entry]
    metadata: dict[str, str]
    key: str = ""  # the name its folder knows it by (a reader's handle for the open file)


def nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    """The bytes of a tensor of ``dtype`` and ``shape``."""
    return math.prod(shape) * dtype.itemsize


def dtype_name(dtype: torch.dtype) -> str:
    """safetensors' name of ``dtype``.

    Raises:
        TypeError: safetensors has no name for it.
    """
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TypeError(
            f"safetensors cannot hold tensors of dtype {dtype}; it holds {', '.join(map(str, _NAMES))}."
        ) from None


def build_header(tensors: Sequence[tuple[str, torch.dtype, tuple[int, ...]]], metadata: Mapping[str, str]) -> bytes:
    """The length prefix and header of a file holding ``tensors`` back to back, in the order given.

    The JSON is padded with spaces to a multiple of 8 bytes, so that every tensor starts aligned.
    """
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for name, dtype, shape in tensors:
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype_name(dtype), "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _corrupt(file: str, detail: str) -> CheckpointError:
    return CheckpointError(f"{file!r} is not a valid safetensors file: {detail}", path=file, reason="corrupt")


def read_header(file: IO[bytes], size: int, name: str, key: str = "") -> Header:
    """Read and check the header of the open safetensors file ``file`` of ``size`` bytes.

    Args:
        file: Opened for binary reading, at any position.
        size: The file's size in bytes.
        name: The file's path or URL, for messages.
        key: The name its folder knows it by (:attr:`Header.key`).

    Raises:
        CheckpointError: ``reason="corrupt"``: the file is truncated, its header is not JSON, names an unknown
            dtype, or its offsets do not match the shapes or do not tile the data (the message names the
            tensor).
    """
    file.seek(0)
    prefix = file.read(8)
    if len(prefix) < 8:
        raise _corrupt(name, f"it has {size} bytes, fewer than the 8 of the header's length.")
    (length,) = struct.unpack("<Q", prefix)
    if length > min(MAX_HEADER_BYTES, size - 8):
        raise _corrupt(name, f"its header claims {length} bytes, but the file has {size} (truncated?).")
    try:
        raw = json.loads(file.read(length))
    except (UnicodeDecodeError, ValueError) as err:
        raise _corrupt(name, f"its header is not JSON ({err}).") from None
    if not isinstance(raw, dict):
        raise _corrupt(name, "its header is not a JSON object.")
    metadata = raw.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _corrupt(name, "its `__metadata__` is not a mapping of strings.")
    data_start = 8 + length
    entries = [_entry(name, data_start, key, value) for key, value in raw.items()]
    end = 0
    for entry in sorted(entries, key=lambda e: (e.start, e.nbytes)):
        begin = entry.start - data_start
        if begin != end:
            what = "overlaps the tensor before it" if begin < end else f"leaves a gap of {begin - end} bytes before it"
            raise _corrupt(name, f"the data of tensor {entry.name!r} (bytes {begin}-{begin + entry.nbytes}) {what}.")
        end = begin + entry.nbytes
    if data_start + end != size:
        if data_start + end > size:
            raise _corrupt(name, f"its tensors need {data_start + end} bytes but the file has {size}: it is truncated.")
        raise _corrupt(name, f"it has {size - data_start - end} bytes after its last tensor's data.")
    return Header(name, {entry.name: entry for entry in entries}, metadata, key)


def _entry(file: str, data_start: int, key: str, value: Any) -> Entry:
    if not isinstance(value, dict):
        raise _corrupt(file, f"the header entry of tensor {key!r} is not an object.")
    dtype = DTYPES.get(value.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise _corrupt(file, f"tensor {key!r} has dtype {value.get('dtype')!r}; known: {', '.join(DTYPES)}.")
    shape, offsets = value.get("shape"), value.get("data_offsets")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise _corrupt(file, f"tensor {key!r} has shape {shape!r}, not a list of sizes.")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise _corrupt(file, f"tensor {key!r} has data_offsets {offsets!r}, not [begin, end].")
    size = nbytes(dtype, shape)
    if offsets[1] - offsets[0] != size:
        raise _corrupt(
            file,
            f"tensor {key!r} of shape {shape} and dtype {value['dtype']} needs {size} bytes, but its offsets "
            f"{offsets} span {offsets[1] - offsets[0]}.",
        )
    return Entry(key, dtype, tuple(shape), data_start + offsets[0], size)


def byte_runs(
    shape: Sequence[int], offsets: Sequence[int], block: Sequence[int], itemsize: int
) -> Iterator[tuple[int, int, int]]:
    """The contiguous runs of bytes that a block of a row-major tensor occupies.

    Args:
        shape: The whole tensor's shape.
        offsets: Where the block starts, per dimension.
        block: The block's shape.
        itemsize: Bytes per element.

    Yields:
        ``(start in the tensor's bytes, start in the block's bytes, length)`` per run, in order. A block of
        whole rows (a ``Shard(0)`` slice, or the whole tensor) is one run; a block cut along a later dimension
        is one run per row of the dimensions before it.
    """
    if math.prod(block) == 0:
        return
    if not shape:
        yield 0, 0, itemsize
        return
    # From dimension `cut` on the block is contiguous: every later dimension is whole.
    cut = len(shape) - 1
    while cut > 0 and block[cut] == shape[cut] and offsets[cut] == 0:
        cut -= 1
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    run = math.prod(block[cut:]) * itemsize
    position = 0
    for index in itertools.product(*(range(n) for n in block[:cut])):
        element = offsets[cut] * strides[cut] + sum((offsets[d] + i) * strides[d] for d, i in enumerate(index))
        yield element * itemsize, position, run
        position += run


def raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of the contiguous CPU ``tensor``, writable, sharing its memory.

    Through its address rather than ``Tensor.numpy()``: numpy's view would pin the storage's size, and FSDP frees
    and regrows the storages of the parameters it gathers.
    """
    assert tensor.device.type == "cpu" and tensor.is_contiguous()
    size = tensor.numel() * tensor.element_size()
    if size == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * size).from_address(tensor.data_ptr())).cast("B")
