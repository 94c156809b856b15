"""Checkpoints written in the background: ``Fabric(plugins=[AsyncCheckpointIO()])``.

``fabric.save`` then returns as soon as the state is copied to host memory (a real copy: later optimizer steps
do not change what is written); the write itself runs in a background thread, through the wrapped checkpoint
I/O, so it keeps that I/O's guarantees (:class:`~fabric_core.io.torch_io.TorchCheckpointIO` writes a temp file
and renames it into place: a process killed during the background write leaves the previous checkpoint).

One write is in flight at a time. The next save, every load and remove, :meth:`AsyncCheckpointIO.wait`, the
strategy's teardown and the interpreter's exit wait for it first; a write that failed raises there, as a
:class:`~fabric_core.errors.CheckpointError` naming the path.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Final

import torch

from fabric_core.errors import CheckpointError
from fabric_core.io.checkpoint_io import CheckpointIO
from fabric_core.utilities.apply_func import apply_to_collection
from fabric_core.utilities.types import PathLike

__all__ = ["AsyncCheckpointIO", "snapshot_to_host", "wait_for_saves"]

#: Snapshot copies run in pieces of this many bytes on up to this many threads.
_PIECE: Final = 16 * 2**20
_COPY_THREADS: Final = min(4, os.cpu_count() or 1)


def snapshot_to_host(checkpoint: Any, buffers: list[torch.Tensor] | None = None) -> Any:
    """A copy of ``checkpoint`` whose tensors are new CPU tensors, unaffected by later in-place changes.

    Tensors that share a storage (views of one another) still share one copied storage, so the file
    written from the copy is what ``torch.save`` would have written from the original. Containers (dicts,
    lists, tuples, dataclasses) are rebuilt; other values are kept as they are.

    Args:
        checkpoint: What to copy.
        buffers: Host buffers to copy into, kept from the previous call (filled in on the first): copying
            into memory that is already mapped spares the page faults of fresh memory, which on a busy
            machine cost more than the copy itself. Only for a previous snapshot that nothing uses any more.
    """
    copies: dict[tuple[str, int], torch.UntypedStorage] = {}
    memcpys: list[tuple[torch.Tensor, torch.Tensor]] = []  # (host target, CPU source) copied at the end

    def copy(tensor: torch.Tensor) -> torch.Tensor:
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.layout != torch.strided:
            # Sparse, quantized, subclasses (DTensor): their own copy, which does not keep views shared.
            return tensor.detach().to("cpu", copy=True)
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        if key not in copies:
            copies[key] = _host_copy(storage, tensor.device, buffers, len(copies), memcpys)
        result = torch.empty((0,), dtype=tensor.dtype).set_(
            copies[key], tensor.storage_offset(), tensor.size(), tensor.stride()
        )
        if isinstance(tensor, torch.nn.Parameter):
            return torch.nn.Parameter(result, requires_grad=tensor.requires_grad)
        return result

    copied = apply_to_collection(checkpoint, torch.Tensor, copy)
    _memcpy_all(memcpys)
    return copied


def _memcpy_all(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Copy each CPU source into its host target with plain memcpys, in pieces, on a few threads.

    Not torch's ``copy_``: it splits each copy over its intra-op threads and waits for all of them, which on
    busy cores (data loader workers, other jobs) waits for descheduled threads: four times slower on 2 busy
    cores, measured. Pieces spread over a few threads instead (ctypes releases the GIL) finish as each
    thread gets its turn.
    """
    pieces = [
        (target.data_ptr() + start, source.data_ptr() + start, min(_PIECE, source.numel() - start))
        for target, source in pairs
        for start in range(0, source.numel(), _PIECE)
    ]
    workers = min(_COPY_THREADS, len(pieces))
    if workers <= 1:
        for piece in pieces:
            ctypes.memmove(*piece)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="fabric-core-snapshot") as pool:
        for _ in pool.map(lambda piece: ctypes.memmove(*piece), pieces):
            pass


def _host_copy(
    storage: torch.UntypedStorage,
    device: torch.device,
    buffers: list[torch.Tensor] | None,
    index: int,
    memcpys: list[tuple[torch.Tensor, torch.Tensor]],
) -> torch.UntypedStorage:
    raw = torch.empty((0,), dtype=torch.uint8, device=device).set_(storage)
    if buffers is None:
        return raw.to("cpu", copy=True).untyped_storage()
    if index < len(buffers) and buffers[index].numel() == raw.numel():
        target = buffers[index]
    else:
        # Pinned for accelerator memory: the copy then runs at the bus's speed.
        target = torch.empty(raw.numel(), dtype=torch.uint8, pin_memory=device.type == "cuda")
        if index < len(buffers):
            buffers[index] = target
        else:
            buffers.append(target)
    if device.type == "cpu":
        memcpys.append((target, raw))  # `raw` keeps the source alive until the copy
    else:
        target.copy_(raw)
    return target.untyped_storage()


class _Write:
    """One background write: the thread, what it writes, and how it ended."""

    def __init__(self, path: str, work: Callable[[], None]) -> None:
        self.path = path
        self.error: BaseException | None = None
        self._work = work
        self._then: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._writing = True
        self.thread = threading.Thread(target=self._run, name="fabric-core-async-save", daemon=True)

    def _run(self) -> None:
        try:
            self._work()
            while True:
                with self._lock:
                    if not self._then:
                        self._writing = False
                        return
                    callback = self._then.pop(0)
                callback()
        except BaseException as err:
            self.error = err
        finally:
            with self._lock:
                self._writing = False
                self._then.clear()

    def then(self, callback: Callable[[], None]) -> bool:
        """Queue ``callback`` after the write; ``False`` (not queued) if the thread is done already."""
        with self._lock:
            if self._writing:
                self._then.append(callback)
                return True
            return False


def _wait_at_exit(ref: weakref.ref[AsyncCheckpointIO]) -> None:
    io = ref()
    if io is None:
        return
    try:
        io.wait()
    except BaseException as err:
        # An exception in an atexit handler does not change the exit code; the message at least is not lost.
        print(f"fabric-core: {err}", file=sys.stderr, flush=True)


class AsyncCheckpointIO(CheckpointIO):
    """Writes checkpoints in a background thread through another checkpoint I/O.

    ``save_checkpoint`` waits for the previous write, copies the checkpoint's tensors to host memory
    (:func:`snapshot_to_host`), starts the write and returns. Everything else waits for the write first.
    Sharded strategies hand their own background work to :meth:`submit` (``torch.distributed.checkpoint``'s
    ``async_save``), with the same rules.

    Args:
        checkpoint_io: What writes and reads the files; ``None``: a
            :class:`~fabric_core.io.torch_io.TorchCheckpointIO`.

    Raises:
        TypeError: ``checkpoint_io`` is not a ``CheckpointIO``, or is itself an ``AsyncCheckpointIO``.
    """

    #: Passed on to the wrapped checkpoint I/O only where it declares it (see ``load_checkpoint``).
    supports_mmap: ClassVar[bool] = True

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        if checkpoint_io is not None and (
            not isinstance(checkpoint_io, CheckpointIO) or isinstance(checkpoint_io, AsyncCheckpointIO)
        ):
            raise TypeError(
                f"`AsyncCheckpointIO(checkpoint_io={checkpoint_io!r})`: expected a CheckpointIO that writes "
                "synchronously (such as `TorchCheckpointIO()`), or None for the default."
            )
        self._checkpoint_io = checkpoint_io
        self._pending: _Write | None = None
        self._waits_at_exit = False
        self._buffers: list[torch.Tensor] = []
        if hasattr(os, "register_at_fork"):
            # A forked child has no copy of the parent's thread: the parent finishes its own write.
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _forget(ref))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(checkpoint_io={self.checkpoint_io!r})"

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to a spawned process (with its strategy) starts with no write of its own in flight.
        state = self.__dict__.copy()
        state.update(_pending=None, _waits_at_exit=False, _buffers=[])
        return state

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The checkpoint I/O that writes and reads the files."""
        if self._checkpoint_io is None:
            from fabric_core.io.torch_io import TorchCheckpointIO

            self._checkpoint_io = TorchCheckpointIO()
        return self._checkpoint_io

    @property
    def pending(self) -> bool:
        """Whether a background write is still running."""
        return self._pending is not None and self._pending.thread.is_alive()

    # -- writing -------------------------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None) -> None:
        """Copy ``checkpoint`` to host memory and write it to ``path`` in the background.

        Waits for the previous write first (and raises its failure, if it failed). Returns once the copy is
        made: changing the model or optimizer afterwards does not change what is written.

        Raises:
            TypeError: ``storage_options`` with the default checkpoint I/O, which takes none.
            CheckpointError: The previous background write failed (naming its path).
        """
        self.wait()
        inner = self.checkpoint_io
        if storage_options is not None and type(inner).save_checkpoint is _torch_save_method():
            raise TypeError(
                f"`{type(inner).__name__}.save_checkpoint(..., storage_options={storage_options!r})`: "
                "`storage_options` is not supported by this CheckpointIO. Pass `storage_options=None`, or "
                "use a CheckpointIO plugin that takes options."
            )
        # The previous write has finished (waited for above): its buffers are free to be copied into again.
        snapshot = snapshot_to_host(checkpoint, self._buffers)
        self.submit(path, lambda: inner.save_checkpoint(snapshot, path, storage_options=storage_options))

    def submit(self, path: PathLike, work: Callable[[], None]) -> None:
        """Run ``work`` (which writes ``path``) in the background, after the previous write.

        ``work`` must only use what it was given: copies of the state, never live tensors.

        Raises:
            CheckpointError: The previous background write failed.
        """
        self.wait()
        if not self._waits_at_exit:
            # Registered at the first write, after the strategy registered its own exit hook (which destroys
            # the process group): handlers run last-in first-out, so this wait comes before that.
            atexit.register(_wait_at_exit, weakref.ref(self))
            self._waits_at_exit = True
        write = _Write(os.fspath(path), work)
        self._pending = write
        write.thread.start()

    def then(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` in the background once the pending write has succeeded; now if none is pending.

        What it raises surfaces like a failed write. Run checkpoints use this to write their commit marker
        only after the state is on disk.
        """
        pending = self._pending
        if pending is not None and pending.then(callback):
            return
        self.wait()
        callback()

    def wait(self) -> None:
        """Block until the background write (if any) has finished.

        Raises:
            CheckpointError: It failed; a ``CheckpointError`` it raised is raised as it is, anything else is
                wrapped in one naming the path (and chained to it). Raised once: the next call starts clean.
        """
        pending = self._pending
        if pending is None:
            return
        pending.thread.join()
        self._pending = None
        err = pending.error
        if err is None:
            return
        if isinstance(err, CheckpointError):
            raise err
        raise CheckpointError(
            f"The background save of {pending.path!r} failed: {type(err).__name__}: {err}. The checkpoint "
            "that was there before, if any, is unchanged.",
            path=pending.path,
        ) from err

    # -- reading -------------------------------------------------------------------------------------------
    def load_checkpoint(
        self, path: PathLike, map_location: Any = None, weights_only: bool | None = None, *, mmap: bool = False
    ) -> dict[str, Any]:
        """Wait for the pending write, then read through the wrapped checkpoint I/O."""
        self.wait()
        inner = self.checkpoint_io
        if mmap and inner.supports_mmap:
            loaded: dict[str, Any] = inner.load_checkpoint(  # type: ignore[call-arg]
                path, map_location=map_location, weights_only=weights_only, mmap=True
            )
            return loaded
        return inner.load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: PathLike) -> None:
        """Wait for the pending write, then delete ``path``."""
        self.wait()
        self.checkpoint_io.remove_checkpoint(path)

    def teardown(self) -> None:
        """Wait for the pending write (raising its failure), then release the wrapped checkpoint I/O."""
        self.wait()
        self.checkpoint_io.teardown()


def _forget(ref: weakref.ref[AsyncCheckpointIO]) -> None:
    io = ref()
    if io is not None:
        io._pending = None


def _torch_save_method() -> Any:
    from fabric_core.io.torch_io import TorchCheckpointIO

    return TorchCheckpointIO.save_checkpoint


def wait_for_saves(checkpoint_io: CheckpointIO) -> None:
    """Wait for ``checkpoint_io``'s background write, if it writes in the background (no-op otherwise)."""
    if isinstance(checkpoint_io, AsyncCheckpointIO):
        checkpoint_io.wait()
