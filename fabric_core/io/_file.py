"""Reading one checkpoint file written by ``torch.save``: the plain reader, below every dispatch.

It knows nothing of folders, URLs or checkpoint I/O classes: it is given an open file (and, to map it, its
local path) and returns what it holds, safely by default. :class:`~fabric_core.io.torch_io.TorchCheckpointIO`
decides whether a path is a file, a sharded folder or a URL and sends single files here; the sharded
folder reader (:mod:`fabric_core.io.distributed`) reads its ``meta.pt`` here too.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, Final

import torch

from fabric_core.errors import CheckpointError, UnsafeCheckpointError
from fabric_core.io.safe_pickle import resolve_weights_only

__all__ = ["read_open_file"]

# The checkpoint format torch wrote before 1.6 starts with this pickled constant instead of a zip archive.
_LEGACY_MAGIC: Final = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)[2:-1]
# Messages of torch's weights-only unpickler that mean "a well-formed object it will not build", as opposed
# to bytes it cannot parse.
_REFUSED: Final = re.compile(r"GLOBAL|allowlist|Can only|must be imported")
# RuntimeErrors of torch.load that mean a damaged file (others, e.g. a CUDA map_location on a machine
# without CUDA, are passed on as they are).
_DAMAGED: Final = re.compile(
    r"PytorchStreamReader|inline_container|hasRecord|zip archive|magic number|corrupt|crc", re.IGNORECASE
)


def _checkpoint_format(file: BinaryIO) -> str | None:
    """``"zip"`` (torch.save since 1.6), ``"legacy"`` (before), or ``None`` for anything else.

    Reads the open ``file`` (and leaves it at its start), so that the format is that of the very file the
    load then reads, whatever happens to its path meanwhile.
    """
    try:
        if zipfile.is_zipfile(file):
            try:
                with zipfile.ZipFile(file) as archive:
                    # torch.save puts every record under one folder: "<folder>/data.pkl", "<folder>/data/0", ...
                    if any(name.rpartition("/")[2] == "data.pkl" for name in archive.namelist()):
                        return "zip"
            except (zipfile.BadZipFile, OSError):
                pass
            return None
        file.seek(0)
        # Room for the protocol header and a FRAME opcode when a newer pickle protocol was used.
        return "legacy" if _LEGACY_MAGIC in file.read(32) else None
    finally:
        file.seek(0)


#: Where Linux shows each open descriptor as a name that opens the very file the descriptor holds.
_FD_FOLDER: Final = Path("/proc/self/fd")
#: Mapped loads by path (no descriptor folder) retried when the path was replaced meanwhile, before reading.
_MAPPED_ATTEMPTS: Final = 3


def _identity(status: os.stat_result) -> tuple[int, int, int, int]:
    return (status.st_dev, status.st_ino, status.st_mtime_ns, status.st_size)


def _is_opened_file(path: Path, file: BinaryIO) -> bool:
    try:
        return _identity(os.stat(path)) == _identity(os.fstat(file.fileno()))
    except OSError:
        return False


def _load_mapped(path: Path, file: BinaryIO, location: Any, safe: bool) -> dict[str, Any] | None:
    """Map the file open as ``file`` (its path is ``path``); ``None`` where that cannot be done safely.

    ``torch.load(mmap=True)`` takes only a name, which it opens twice more (the records' index, then the
    mapping). Through ``/proc/self/fd/N`` both open the file this load opened, even if a save renames
    another file onto ``path`` meanwhile. Without that folder, the load goes by ``path`` and is kept only if
    ``path`` named the opened file (same device, inode, mtime and size) both before and after it: an
    atomic save always puts a new inode at the path, and the one replaced never comes back, so the
    opens between saw the opened file too. ``None`` sends the caller to read ``file`` instead.
    """
    alias = _FD_FOLDER / str(file.fileno())
    if _FD_FOLDER.is_dir() and os.path.exists(alias):
        try:
            mapped: dict[str, Any] = torch.load(alias, map_location=location, weights_only=safe, mmap=True)
            return mapped
        except RuntimeError as err:
            if "mmap" not in str(err):
                raise
            return None  # a filesystem that cannot map files (some network mounts)
    for _ in range(_MAPPED_ATTEMPTS):
        if not _is_opened_file(path, file):
            return None
        try:
            mapped = torch.load(path, map_location=location, weights_only=safe, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err) and _is_opened_file(path, file):
                raise
            return None
        if _is_opened_file(path, file):
            return mapped
        del mapped
    return None


def _corrupt(path: Path | str, detail: str) -> CheckpointError:
    return CheckpointError(
        f"Checkpoint file {os.fspath(path)!r} is truncated or is not a PyTorch checkpoint ({detail}). "
        "If it was being written when the writer stopped, use the previous checkpoint.",
        path=os.fspath(path),
        reason="corrupt",
    )


def _refused(path: Path | str, detail: str) -> CheckpointError:
    found = re.search(r"GLOBAL ([\w.]+)", detail)
    what = f" such as `{found.group(1)}`" if found else ""
    return UnsafeCheckpointError(
        f"Checkpoint file {os.fspath(path)!r} holds Python objects{what} that are not tensors or plain "
        "containers; building them could run code stored in the file, so loading was refused "
        "(`weights_only=True` is the default). Only if you trust the source of this file, load it with "
        "`weights_only=False` (e.g. `fabric.load(path, weights_only=False)`), or allow the classes with "
        f"`torch.serialization.add_safe_globals([...])`. Detail: {detail}",
        path=os.fspath(path),
    )


def read_open_file(
    target: Path | str, file: BinaryIO, map_location: Any, weights_only: bool | None, mmap: bool
) -> dict[str, Any]:
    """Load the checkpoint open as ``file`` (named ``target`` in messages; mapped only from a local ``Path``).

    Args:
        target: The file's name: a local ``Path`` (which ``mmap`` needs) or a URL.
        file: The open file, read from its start.
        map_location: Where to put the tensors; ``None`` keeps them on the CPU.
        weights_only: ``None``/``True``: only tensors, plain containers and the types torch allows.
        mmap: Map the file instead of reading it (zip-format files on a local path only; see
            ``TorchCheckpointIO.load_checkpoint``).

    Raises:
        CheckpointError: Truncated or not a checkpoint (``reason="corrupt"``), or holding objects that
            ``weights_only`` refused (``reason="unsafe"``).
    """
    file_format = _checkpoint_format(file)
    if file_format is None:
        raise _corrupt(target, "it is neither a torch zip archive nor a legacy torch file")
    safe = resolve_weights_only(weights_only)
    location = "cpu" if map_location is None else map_location
    try:
        if mmap and file_format == "zip" and isinstance(target, Path):
            mapped = _load_mapped(target, file, location, safe)
            if mapped is not None:
                return mapped
            # Not mappable here (some network mounts), or replaced meanwhile: read the opened file.
            file.seek(0)
        loaded: dict[str, Any] = torch.load(file, map_location=location, weights_only=safe)
    except pickle.UnpicklingError as err:
        # torch wraps the unpickler's own one-line reason in a long advice text; keep the reason.
        inner = err.__cause__ or err.__context__
        detail = str(inner if isinstance(inner, pickle.UnpicklingError) else err).strip()
        if safe and _REFUSED.search(detail):
            raise _refused(target, detail) from err
        raise _corrupt(target, detail) from err
    except (EOFError, KeyError, zipfile.BadZipFile) as err:
        raise _corrupt(target, f"{type(err).__name__}: {err or 'unexpected end of data'}") from err
    except RuntimeError as err:
        if _DAMAGED.search(str(err)):
            raise _corrupt(target, str(err).split(". ")[0].strip()) from err
        raise
    return loaded
