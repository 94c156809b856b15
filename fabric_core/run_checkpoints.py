"""Checkpoints of a run: step-numbered, committed atomically, pruned, resumed with one call.

A script that survives kills, restarts and preemptions::

    ckpt = RunCheckpoints(fabric, "runs/exp1", every=100, keep_last=3)
    state = {"model": model, "optimizer": optimizer}
    step = ckpt.resume(state) or 0           # the newest complete checkpoint, or a fresh start
    while step < total:
        train_one_step()
        step += 1
        ckpt.step_end(step, state)           # saves every 100 steps; on SIGTERM saves and exits

Layout of the directory: one folder per checkpoint, ``step-00000100/``, holding ``state`` (what
``fabric.save`` writes: one file, or a folder under sharded strategies) and ``COMMITTED``, a JSON marker
written last, after the state is on disk, with the step, the world size and a sha256 digest of every file.
The folder is filled under a hidden temp name and renamed into place in one step; a folder without its
marker is never chosen and never pruned. In object storage (``s3://bucket/run``), which cannot rename
folders, the state is uploaded under the step's own name and the marker after it, in one upload: a folder
without it is never chosen, and the next save deletes it (see :mod:`fabric_core.io.committed`).

The saved state holds, next to the user's entries, every rank's RNG states (torch, Python, numpy, CUDA)
under :data:`RNG_KEY`, and what names each logger's run (an MLflow or W&B run id, a CSV or TensorBoard
version) under :data:`LOGGERS_KEY`, so that a resumed job logs into the same runs (see
``Logger.run_identity``). Anything else with ``state_dict()`` and ``load_state_dict()`` (a stateful data
loader, say) is saved and restored by putting it in ``state``.

With ``Fabric(plugins=[AsyncCheckpointIO()])`` the state is written in the background, and the commit (the
marker, the rename into place, pruning) runs in the background too, after the write has finished; until
then the folder keeps its temp name and is never chosen. :meth:`RunCheckpoints.wait` waits for it, as do the
next save, :meth:`RunCheckpoints.resume`, the exit on preemption and the interpreter's exit.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from fabric_core._run import preemption as _preemption
from fabric_core._run import rng_states as _rng_states
from fabric_core.errors import ArgumentTypeError, CheckpointError, InvalidConfigError
from fabric_core.io._remote import remove_remote_folder
from fabric_core.io.async_io import AsyncCheckpointIO
from fabric_core.io.atomic import remove_stale_temps, replace_path, temp_path_for
from fabric_core.io.committed import (
    MARKER,
    check_digests,
    digests,
    read_marker,
    remove_folder,
    set_aside,
    step_folders,
    write_marker,
)
from fabric_core.io.locations import Location, join, location
from fabric_core.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabric_core.fabric import Fabric

__all__ = ["LOGGERS_KEY", "MARKER", "RNG_KEY", "STATE", "RunCheckpoints", "check_digests", "read_marker"]

#: What ``fabric.save`` writes inside each checkpoint folder (a file, or a folder under sharded strategies).
STATE: Final = "state"
#: The entry of the saved state that holds every rank's RNG states (reserved: ``state`` must not use it).
RNG_KEY: Final = "rng_states"
#: The entry of the saved state that holds the loggers' run identities (reserved like :data:`RNG_KEY`).
LOGGERS_KEY: Final = "loggers"
_FORMAT: Final = 1
_NAME: Final = re.compile(r"step-(\d+)")
# The temp names of `temp_path_for(<dir>/step-N)`: ".step-N.<host>-<pid>-<random>.tmp" (or ".old").
_TEMP: Final = re.compile(r"\.(step-\d+)\..*\.(tmp|old)")


class RunCheckpoints:
    """Step-numbered checkpoints of one run in ``directory``; call every method on every process.

    Args:
        fabric: The run's Fabric (launched).
        directory: The run directory (created on the first save). On several nodes, a filesystem they share,
            or a URL of object storage (``s3://bucket/run``, any fsspec protocol whose filesystem is installed),
            which keeps its form: :attr:`directory`, :meth:`latest` and :meth:`save` give it back as a ``str``.
        every: :meth:`step_end` saves when ``step % every == 0``; ``None``: only on preemption.
        keep_last: How many complete checkpoints to keep; older ones are deleted after each save (never the
            one just written, never an incomplete one). ``None`` keeps all.
        verify: Check each file's sha256 digest against the marker before resuming from a checkpoint. A
            checkpoint that fails is renamed to ``step-N.corrupt`` with a warning naming the file, and the
            next older complete one is tried; if none passes, :meth:`resume` raises :class:`CheckpointError`.
        signals: The signals that mean "preempted": each sets :attr:`preempted`, and the next
            :meth:`step_end` or :meth:`save` saves on every rank and exits. ``None``: ``SIGTERM``, plus the
            cluster environment's ``requeue_signal`` (``SIGUSR1`` on SLURM); ``()``: catch none.

    Raises:
        InvalidConfigError: A bad ``every``, ``keep_last`` or ``signals`` (also a ``TypeError`` for a wrong type).
    """

    def __init__(
        self,
        fabric: Fabric,
        directory: str | os.PathLike[str],
        *,
        every: int | None = None,
        keep_last: int | None = 3,
        verify: bool = False,
        signals: Iterable[int] | None = None,
    ) -> None:
        if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
            raise ArgumentTypeError(
                f"`RunCheckpoints(directory={directory!r})`: expected a non-empty path.", argument="directory"
            )
        self.every = _positive_or_none("every", every)
        self.keep_last = _positive_or_none("keep_last", keep_last)
        self.verify = bool(verify)
        self.directory: Location = location(directory)
        self._fabric = fabric
        # A single-device strategy holds no cluster environment; Fabric keeps the one it chose (SLURM's, say).
        self._environment = getattr(fabric.strategy, "cluster_environment", None) or fabric._cluster_environment
        chosen = _preemption.default_signals(self._environment) if signals is None else tuple(signals)
        self._flag = _preemption.PreemptionFlag(chosen)
        self._saved_step: int | None = None

    # -- reading -------------------------------------------------------------------------------------------
    def latest(self) -> Location | None:
        """The newest complete checkpoint folder in the directory (by step), or ``None``; this process's view."""
        complete = self._complete()
        return complete[-1][1] if complete else None

    def resume(self, state: dict[str, Any], *, strict: bool = True) -> int | None:
        """Restore ``state`` (and every rank's RNG states) from the newest complete checkpoint.

        Call once, at the top of the script, after setting up the model and optimizers. Global rank 0 picks
        the checkpoint and tells the others, so every rank resumes from the same one.

        Args:
            state: What to restore, as for ``fabric.load``: modules, optimizers and stateful objects in
                place, plain values written into the dict.
            strict: As for ``fabric.load``.

        Returns:
            The step of the checkpoint restored, or ``None`` (and nothing changed) when there is none.

        Raises:
            CheckpointError: With ``verify=True``, every complete checkpoint failed its digest check.
        """
        _check_state(state, "resume")
        self.wait()  # a checkpoint this process is still writing is chosen only once committed
        choice: tuple[str, int] | str | None = None
        if self._fabric.is_global_zero:
            try:
                choice = self._choose()
            except CheckpointError as err:
                choice = str(err)
        choice = self._fabric.strategy.broadcast(choice, src=0)
        if isinstance(choice, str):
            raise CheckpointError(choice, path=os.fspath(self.directory), reason="corrupt")
        if choice is None:
            return None
        path, step = location(choice[0]), choice[1]
        merged: dict[str, Any] = {**state, RNG_KEY: None}
        remainder = self._fabric.load(join(path, STATE), merged, strict=strict)
        for key in state:
            state[key] = merged[key]
        self._restore_rng(merged[RNG_KEY], path)
        self._reattach_loggers(remainder.get(LOGGERS_KEY))
        return step

    def _choose(self) -> tuple[str, int] | None:
        failures: list[str] = []
        for step, path, marker in reversed(self._complete()):
            if not self.verify:
                return os.fspath(path), step
            try:
                check_digests(path, marker)
            except CheckpointError as err:
                failures.append(str(err))
                aside = set_aside(path)
                rank_zero_warn(f"{err} Skipping it (renamed to {aside}) and trying the previous checkpoint.")
                continue
            return os.fspath(path), step
        if failures:
            raise CheckpointError(
                f"No checkpoint in {os.fspath(self.directory)!r} passed its digest check: " + " ".join(failures),
                path=os.fspath(self.directory),
                reason="corrupt",
            )
        return None

    def _complete(self) -> list[tuple[int, Location, dict[str, Any]]]:
        """The committed checkpoints, oldest first, with their markers."""
        found = []
        for name, marked in step_folders(self.directory, _NAME).items():
            if not marked:
                continue
            step = int(name.removeprefix("step-"))
            folder = join(self.directory, name)
            marker = read_marker(folder)
            if marker is not None and marker.get("step") == step:
                found.append((step, folder, marker))
        return sorted(found, key=lambda item: item[0])

    def _restore_rng(self, rows: Any, path: Location) -> None:
        fabric = self._fabric
        if not isinstance(rows, Mapping) or "torch" not in rows:
            rank_zero_warn(f"{os.fspath(path)!r} holds no RNG states; the generators were not restored.")
            return
        saved_by = int(rows["torch"].shape[0])
        if saved_by != fabric.world_size:
            rank_zero_warn(
                f"{os.fspath(path)!r} was saved by {saved_by} processes and is resumed by {fabric.world_size}: "
                "the RNG states were not restored, so random draws differ from an uninterrupted run."
            )
            return
        # Each state is one flat row; `reshape` also reads the rows that one-process ddp runs saved with a
        # stray extra dimension before the gather above was fixed.
        _rng_states.restore({key: value[fabric.global_rank].reshape(-1) for key, value in rows.items()}, fabric.device)

    def _reattach_loggers(self, saved: Any) -> None:
        """Point each logger at the run it had when the checkpoint was saved (a checkpoint may predate this)."""
        loggers = self._fabric.loggers
        if not isinstance(saved, list):
            return
        if len(saved) != len(loggers):
            rank_zero_warn(
                f"The run checkpoint names the runs of {len(saved)} loggers but this Fabric has {len(loggers)}; "
                "none was reattached, each starts a new run."
            )
            return
        for logger, entry in zip(loggers, saved, strict=True):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("identity"), Mapping):
                continue
            if entry.get("logger") != type(logger).__name__:
                rank_zero_warn(
                    f"The run checkpoint holds the run of a {entry.get('logger')} where this Fabric has a "
                    f"{type(logger).__name__}; that logger starts a new run."
                )
                continue
            logger.reattach(entry["identity"])

    def _logger_identities(self) -> list[dict[str, Any]]:
        # Every rank asks (a logger may flush or create its run); rank 0's answer is what every rank saves.
        fabric = self._fabric
        found = [{"logger": type(logger).__name__, "identity": logger.run_identity()} for logger in fabric.loggers]
        return found if fabric.world_size == 1 else fabric.strategy.broadcast(found, src=0)

    # -- writing -------------------------------------------------------------------------------------------
    def save(self, step: int, state: dict[str, Any]) -> Location:
        """Save ``state`` as the checkpoint of ``step`` (replacing one of the same step); then act on preemption.

        Returns:
            The checkpoint folder (with an async checkpoint I/O, committed there once the background write
            has finished: see :meth:`wait`).

        Raises:
            CheckpointError: The marker or the rename failed (the previous checkpoints are untouched); with an
                async checkpoint I/O, also the previous checkpoint's background write or commit.
        """
        _check_step(step)
        _check_state(state, "save")
        path = self._save(step, state)
        self._exit_if_preempted(step, state)
        return path

    def step_end(self, step: int, state: dict[str, Any]) -> Location | None:
        """Call at the end of every step: saves when ``step % every == 0``, and saves and exits if preempted.

        The preemption check is one all-reduce of a flag (none on one process); it is the point where every
        rank agrees to stop after the same step.

        Returns:
            The checkpoint folder, if this call saved one (and did not exit).
        """
        _check_step(step)
        path = None
        if self.every is not None and step % self.every == 0:
            _check_state(state, "step_end")
            path = self._save(step, state)
        self._exit_if_preempted(step, state)
        return path

    @property
    def preempted(self) -> bool:
        """Whether this process received a preemption signal (this process's view, without asking the others)."""
        return self._flag.received is not None

    def close(self) -> None:
        """Put back the signal handlers that were there before this object installed its own."""
        self._flag.restore()

    def _save(self, step: int, state: dict[str, Any]) -> Location:
        for reserved, what in ((RNG_KEY, "the RNG states"), (LOGGERS_KEY, "the loggers' runs")):
            if reserved in state:
                raise InvalidConfigError(
                    f"`state` has the key {reserved!r}, which run checkpoints keep for {what}. Rename that entry.",
                    argument="state",
                    value=reserved,
                )
        fabric = self._fabric
        background = _background_io(fabric)
        if background is not None:
            # The previous checkpoint is committed (or its failure raised) before this one starts.
            background.wait()
        mine = _rng_states.capture(fabric.device)
        gathered = fabric.all_gather(mine)
        # One row per process. A single-device strategy returns a lone process's states as they are, a
        # distributed one (ddp of one process) stacks them, so the shape decides, not the world size. Own
        # copies: a strategy may gather the dict in one buffer, and torch.save refuses views of one storage
        # as different dtypes.
        rows = {
            key: (value if value.dim() > mine[key].dim() else value.unsqueeze(0)).cpu().clone()
            for key, value in gathered.items()
        }
        target = join(self.directory, f"step-{step:08d}")
        temp: Location | str = ""
        if fabric.is_global_zero:
            self._sweep()
            if isinstance(target, Path):
                target.parent.mkdir(parents=True, exist_ok=True)
                temp = os.fspath(temp_path_for(target))
                os.mkdir(temp)
            else:
                # Object storage cannot rename a folder: the state goes straight under the step's own name,
                # without a marker until the commit. A checkpoint of this step saved before is deleted first,
                # marker first, so that no moment shows old and new files under one marker.
                remove_folder(target)
                temp = target
        temp = location(fabric.strategy.broadcast(temp, src=0))
        fabric.save(join(temp, STATE), {**state, RNG_KEY: rows, LOGGERS_KEY: self._logger_identities()})
        if background is not None:
            # The state is still being written: the marker goes in (and the folder into place) only after
            # the write has finished, in the background; its failure surfaces at the next call.
            if fabric.is_global_zero:
                background.then(functools.partial(self._commit_or_raise, temp, target, step))
            self._saved_step = step
            return target
        error = None
        if fabric.is_global_zero:
            error = self._commit(temp, target, step)
        error = fabric.strategy.broadcast(error, src=0)
        if error is not None:
            raise CheckpointError(error, path=os.fspath(target))
        self._saved_step = step
        return target

    def _commit(self, temp: Location, target: Location, step: int) -> str | None:
        """Write the marker (last), put the folder in place, prune; an error's text, or ``None``.

        In object storage ``temp`` is ``target``: the marker, one upload after every file of the state, is
        the commit.
        """
        try:
            marker = {
                "format": _FORMAT,
                "step": step,
                "world_size": self._fabric.world_size,
                "files": dict(digests(temp)),
            }
            write_marker(temp, marker)
            if isinstance(temp, Path):
                replace_path(temp, target)
        except OSError as err:
            if isinstance(temp, Path):
                shutil.rmtree(temp, ignore_errors=True)
            return f"Could not commit the checkpoint of step {step} at {os.fspath(target)!r}: {err}"
        self._prune(target)
        return None

    def _commit_or_raise(self, temp: Location, target: Location, step: int) -> None:
        error = self._commit(temp, target, step)
        if error is not None:
            raise CheckpointError(error, path=os.fspath(target))

    def wait(self) -> None:
        """Block until a checkpoint being written in the background is committed (a no-op without one).

        With an :class:`~fabric_core.io.async_io.AsyncCheckpointIO`, :meth:`save` returns before the state is
        on disk; the checkpoint's marker is written, and its folder put in place, once it is. The next save,
        :meth:`resume` and the exit wait for it too.

        Raises:
            CheckpointError: The background write or the commit failed (the previous checkpoints are untouched).
        """
        background = _background_io(self._fabric)
        if background is not None:
            background.wait()

    def _prune(self, just_written: Location) -> None:
        if self.keep_last is None:
            return
        complete = self._complete()
        keep = {path for _, path, _ in complete[-self.keep_last :]} | {just_written}
        for _, path, _ in complete:
            if path not in keep:
                # Renamed away first (object storage: its marker deleted first): a kill during the deletion
                # leaves a hidden temp or a folder without marker (swept later), never a folder that has its
                # marker but not all its files.
                remove_folder(path)

    def _sweep(self) -> None:
        """Remove what killed saves (and prunes) in this directory left; a live writer's temps stay.

        In object storage, where a killed save leaves a step folder without marker (and this run's rank 0 is
        the only writer, its previous save committed), those folders are deleted.
        """
        if isinstance(self.directory, str):
            for name, marked in step_folders(self.directory, _NAME).items():
                if not marked:
                    remove_remote_folder(os.fspath(join(self.directory, name)))
            return
        if not self.directory.is_dir():
            return
        targets = set()
        for entry in os.scandir(self.directory):
            match = _TEMP.fullmatch(entry.name)
            if match is not None:
                targets.add(match.group(1))
        for name in targets:
            remove_stale_temps(self.directory / name)

    def _exit_if_preempted(self, step: int, state: dict[str, Any]) -> None:
        fabric = self._fabric
        local = self._flag.received or 0
        if fabric.world_size == 1:
            received = [local]
        else:
            if not fabric.strategy.reduce_boolean_decision(local != 0, all=False):
                return
            received = [int(n) for n in self._gather_int(local)]
        if not any(received):
            return
        self._exit(step, state, received)

    def _gather_int(self, value: int) -> list[int]:
        import torch

        gathered = self._fabric.all_gather(torch.tensor([value], dtype=torch.int64))
        return [int(n) for n in gathered.reshape(-1).tolist()]

    def _exit(self, step: int, state: dict[str, Any], received: list[int]) -> NoReturn:
        fabric = self._fabric
        self._flag.ignore_while_exiting()  # a SIGTERM from here on must not replace the exit code
        requeue_on = _preemption.requeue_signal(self._environment)
        signum = requeue_on if requeue_on in received else next(n for n in received if n)
        path = join(self.directory, f"step-{step:08d}") if self._saved_step == step else self._save(step, state)
        self.wait()  # committed before the job says so and exits
        requeued = False
        if signum == requeue_on:
            requeued = _preemption.requeue(self._environment.job_id()) if fabric.is_global_zero else True
        requeued = bool(fabric.strategy.broadcast(requeued, src=0))
        code = _preemption.exit_code(signum, requeued)
        what = "requeued the job, " if requeued else ""
        fabric.print(
            f"preempted by {_preemption.signal_name(signum)} at step {step}: saved {os.fspath(path)}, "
            f"{what}exiting with code {code}",
            flush=True,
        )
        raise SystemExit(code)


def _background_io(fabric: Fabric) -> AsyncCheckpointIO | None:
    io = fabric.strategy.checkpoint_io
    return io if isinstance(io, AsyncCheckpointIO) else None


def _positive_or_none(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(
            f"`RunCheckpoints({name}={value!r})`: expected a positive int or None.", argument=name, value=value
        )
    if value < 1:
        raise InvalidConfigError(
            f"`RunCheckpoints({name}={value!r})`: expected a positive int or None.", argument=name, value=value
        )
    return value


def _check_step(step: Any) -> None:
    if isinstance(step, bool) or not isinstance(step, int):
        raise ArgumentTypeError(f"`step={step!r}`: expected an int >= 0 (the number of steps done).", value=step)
    if step < 0:
        raise InvalidConfigError(f"`step={step!r}`: expected an int >= 0 (the number of steps done).", value=step)


def _check_state(state: Any, method: str) -> None:
    if not isinstance(state, dict):
        raise ArgumentTypeError(
            f"`RunCheckpoints.{method}(state=...)` got a {type(state).__name__}: expected a dict such as "
            "`{'model': model, 'optimizer': optimizer}`.",
            argument="state",
        )
