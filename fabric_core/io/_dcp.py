"""Reading ``torch.distributed.checkpoint`` folders without running code stored in them.

torch's ``FileSystemReader`` unpickles ``.metadata`` with plain ``pickle``, and its default load planner
builds the non-tensor values of the shard files (optimizer hyperparameters, ...) with
``torch.load(weights_only=False)``: both run whatever a crafted folder asks. Unless ``weights_only=False``,
the reader here unpickles ``.metadata`` with an allow-list of the types DCP metadata consists of, and the
planners here build the non-tensor values with ``torch.load(weights_only=True)``. Tensors are loaded
weights-only by torch already.

A missing or truncated shard file, which DCP reports as a ``CheckpointException`` (a ``BaseException``)
with every rank's traceback, becomes a :class:`~fabric_core.errors.CheckpointError` naming the file.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, ReadItem

from fabric_core.errors import CheckpointError, UnsafeCheckpointError
from fabric_core.io.folder import Folder, OpenFolder, RemoteFolder
from fabric_core.io.locations import Location, is_url, location
from fabric_core.io.safe_pickle import RefusedGlobal, load_restricted, refused_error

__all__ = ["SafeFileSystemReader", "dcp_errors", "metadata_globals", "safe_load_planner"]

# Every global found in the `.metadata` of folders written by `dcp.save` (FSDP on two ranks, model-parallel,
# and `dcp.save(no_dist=True)`), listed with pickletools; dtypes are added for every dtype torch has.
_METADATA_GLOBALS = frozenset(
    {
        ("pathlib", "PosixPath"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        *(
            ("torch.distributed.checkpoint.metadata", name)
            for name in (
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "Metadata",
                "MetadataIndex",
                "StorageMeta",
                "TensorProperties",
                "TensorStorageMetadata",
                "_MEM_FORMAT_ENCODING",
            )
        ),
    }
)


@functools.cache
def metadata_globals() -> frozenset[tuple[str, str]]:
    """The ``(module, name)`` globals a DCP ``.metadata`` may name: its dataclasses, ``torch.Size``, dtypes."""
    dtypes = {("torch", name) for name, value in vars(torch).items() if isinstance(value, torch.dtype)}
    return _METADATA_GLOBALS | dtypes


def _corrupt(path: str | os.PathLike[str], detail: str) -> CheckpointError:
    text = os.fspath(path)
    return CheckpointError(
        f"Sharded checkpoint file {text!r} is missing, truncated or damaged ({detail}). If the checkpoint was "
        "being written when the writer stopped, or was copied incompletely, use the previous checkpoint.",
        path=text,
        reason="corrupt",
    )


class SafeFileSystemReader(FileSystemReader):
    """A ``FileSystemReader`` that reads ``.metadata`` with an allow-list and checks shard files before reading.

    A URL (``s3://bucket/ckpt``), or a :class:`~fabric_core.io.folder.RemoteFolder`, is read through fsspec
    (torch's own fsspec filesystem for DCP), with the same checks.

    Args:
        path: The checkpoint folder: an :class:`~fabric_core.io.folder.OpenFolder` to read one folder while
            another process may replace it (see :func:`~fabric_core.io.folder.read_one_folder`).
        weights_only: ``None``/``True``: ``.metadata`` may name only :func:`metadata_globals`; ``False``:
            torch's plain unpickling (a folder you trust).
    """

    def __init__(self, path: str | os.PathLike[str] | Folder, *, weights_only: bool | None = None) -> None:
        # An opened folder is read through its descriptor (one folder, whatever is renamed onto its path),
        # and named by its path in messages.
        self.folder = path if isinstance(path, OpenFolder | RemoteFolder) else None
        root = path.root if isinstance(path, OpenFolder | RemoteFolder) else path
        super().__init__(root if not is_url(root) else ".")
        if is_url(root):
            # Never `Path(url)`, which is the local folder "s3:": torch's fsspec filesystem keeps the URL.
            from torch.distributed.checkpoint._fsspec_filesystem import FileSystem as FsspecFileSystem

            self.fs = FsspecFileSystem()  # type: ignore[assignment]  # torch's two FileSystem classes share a base
            self.path = self.fs.init_path(os.fspath(root))
        self.weights_only = weights_only
        self._metadata: Metadata | None = None

    @property
    def remote(self) -> bool:
        """Whether the folder is read through fsspec (a URL)."""
        return is_url(self.path)

    def shown(self, path: str | os.PathLike[str]) -> Location:
        """``path`` (under :attr:`path`) as the user knows it, for messages."""
        return self.folder.shown(path) if self.folder is not None else location(path)

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        super().reset(checkpoint_id)
        self._metadata = None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The folder's metadata, unpickled with :func:`metadata_globals` only (unless ``weights_only=False``).

        The result is kept: call this before handing the reader to DCP, which logs a failed read and goes on
        to look for per-rank metadata files instead of stopping, burying the reason in a long message.

        Raises:
            CheckpointError: The file names another global (``reason="unsafe"``), or is not DCP metadata
                (``reason="corrupt"``).
        """
        rank = kwargs.get("rank")
        if rank is None and self._metadata is not None:
            return self._metadata
        found = self._get_metadata_path(rank)
        metadata = self._read_metadata(found if self.remote else Path(found), *args, **kwargs)
        if rank is None:
            self._metadata = metadata
        return metadata

    def _read_metadata(self, path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> Metadata:
        shown = self.shown(path)
        if self.weights_only is False:
            try:
                return super().read_metadata(*args, **kwargs)
            except (OSError, EOFError, pickle.UnpicklingError) as err:
                raise _corrupt(shown, f"{type(err).__name__}: {err}") from None
        try:
            with self.fs.create_stream(path, "rb") as file:
                metadata = load_restricted(cast(IO[bytes], file), metadata_globals())
        except RefusedGlobal as refused:
            raise refused_error(shown, refused) from None
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as err:
            raise _corrupt(shown, f"{type(err).__name__}: {err}") from None
        if not isinstance(metadata, Metadata):
            raise _corrupt(shown, f"it holds a {type(metadata).__name__}, not DCP metadata")
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id  # what torch's reader does
        metadata.storage_meta = storage_meta
        return metadata

    def _size(self, file: str | os.PathLike[str]) -> int:
        if self.remote:
            fs: Any = getattr(self.fs, "fs", None)
            fs.invalidate_cache()
            return int(fs.size(os.fspath(file)))
        return Path(file).stat().st_size

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Any:
        """Check that every shard file of ``plan`` exists and is long enough, then read them.

        Raises:
            CheckpointError: A file is missing or shorter than the metadata says (``reason="corrupt"``).
        """
        needed: dict[str, int] = {}
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            end = info.offset + info.length
            needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
        for relative, end in needed.items():
            file = self.fs.concat_path(self.path, relative)
            try:
                size = self._size(file)
            except FileNotFoundError:
                raise _corrupt(self.shown(file), "the file does not exist") from None
            if size < end:
                raise _corrupt(self.shown(file), f"{size} bytes, but the metadata places data up to byte {end}")
        try:
            return super().read_data(plan, planner)
        except CheckpointError:
            raise
        except (OSError, EOFError, RuntimeError, pickle.UnpicklingError) as err:
            files = ", ".join(sorted(needed))
            raise _corrupt(self.shown(self.path), f"reading {files}: {type(err).__name__}: {err}") from None


class _WeightsOnlyBytes(DefaultLoadPlanner):
    """Builds the non-tensor values of a checkpoint with ``torch.load(weights_only=True)``."""

    reader: SafeFileSystemReader | None = None
    weights_only: bool | None = None

    def load_bytes(self, read_item: ReadItem, value: Any) -> None:
        if self.weights_only is False:
            super().load_bytes(read_item, value)
            return
        from torch.distributed.checkpoint._traverse import set_element

        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as err:
            where: Location = read_item.dest_index.fqn
            if self.reader is not None:
                relative = self.reader.storage_data[read_item.storage_index].relative_path
                where = self.reader.shown(self.reader.fs.concat_path(self.reader.path, relative))
            detail = str(err.__cause__ or err.__context__ or err)
            raise UnsafeCheckpointError(
                f"Checkpoint file {os.fspath(where)!r} holds a value for {read_item.dest_index.fqn!r} that is not a "
                "tensor or plain container; building it could run code stored in the file, so loading was refused "
                "(`weights_only=True` is the default). Only if you trust the source of this checkpoint, load it "
                f"with `weights_only=False`. Detail: {detail.strip()}",
                path=os.fspath(where),
            ) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


class _SafeLoadPlanner(_WeightsOnlyBytes):
    pass


class _SafeEmptyLoadPlanner(_WeightsOnlyBytes, _EmptyStateDictLoadPlanner):
    pass


def safe_load_planner(
    reader: SafeFileSystemReader, *, empty: bool = False, allow_partial_load: bool = False
) -> DefaultLoadPlanner:
    """A DCP load planner that builds non-tensor values as ``reader.weights_only`` says.

    Args:
        reader: The reader of the folder (its ``weights_only``; the file named in errors).
        empty: Rebuild the whole state from the metadata (for an empty ``state_dict``), as torch's
            ``dcp_to_torch_save`` does.
        allow_partial_load: Keys of the state that the checkpoint lacks are not an error.
    """
    planner: _WeightsOnlyBytes = (
        _SafeEmptyLoadPlanner()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        if empty
        else _SafeLoadPlanner(allow_partial_load=allow_partial_load)
    )
    planner.reader = reader
    planner.weights_only = reader.weights_only
    return planner


@contextlib.contextmanager
def dcp_errors(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Turn DCP's ``CheckpointException`` (a ``BaseException``) into the :class:`CheckpointError` it carries.

    DCP collects each rank's exception and raises them together on every rank; the first ``CheckpointError``
    (from this module's reader or planner, on any rank) is raised as it is, anything else becomes a
    ``CheckpointError`` naming the folder and the first rank's failure.
    """
    try:
        yield
    except CheckpointException as exc:
        failures = [f[0] if isinstance(f, tuple) else f for _, f in sorted(exc.failures.items())]
        for failure in failures:
            if isinstance(failure, CheckpointError):
                raise failure from None
        first = failures[0] if failures else exc
        raise _corrupt(folder, f"{type(first).__name__}: {first}") from None
