"""Start one process per device with ``torch.multiprocessing`` (``ddp_spawn``, ``ddp_fork``)."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import random
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import torch
from torch.multiprocessing.spawn import ProcessRaisedException, start_processes

from fabric_core.errors import InvalidConfigError
from fabric_core.launchers._failure import record_failure
from fabric_core.launchers._threads import set_num_threads_if_needed
from fabric_core.launchers.launcher import START_METHODS, Launcher
from fabric_core.utilities.apply_func import apply_to_collection, move_data_to_device
from fabric_core.utilities.types import LaunchedStrategy

__all__ = ["MultiProcessingLauncher"]

#: The start methods of ``multiprocessing`` among :data:`~fabric_core.launchers.launcher.START_METHODS`.
_PROCESS_START_METHODS: Final = tuple(m for m in START_METHODS if m != "popen")
_JOIN_POLL_SECONDS: Final = 0.05


class MultiProcessingLauncher(Launcher):
    """Run a function in ``num_processes`` new processes and return local rank 0's result.

    With ``"spawn"`` (and ``"forkserver"``) the function, its arguments and the strategy are pickled by
    ``torch.multiprocessing``, which moves the tensors among the arguments to shared memory, as in Lightning:
    a worker's in-place write to such a tensor is seen by this process. The parameters and buffers of
    modules are copied in each worker, so ranks never share them. The random, deterministic and cuDNN
    settings of this process are restored in each worker. With ``"fork"`` the workers inherit this process
    as it is; it works in notebooks but not once CUDA is initialised.

    Args:
        strategy: The strategy the workers run; its ranks are set in each worker.
        start_method: ``"spawn"``, ``"fork"`` or ``"forkserver"``.

    Raises:
        InvalidConfigError: An unknown start method, or one this platform does not support.
    """

    def __init__(self, strategy: LaunchedStrategy, start_method: str = "spawn") -> None:
        if start_method not in _PROCESS_START_METHODS:
            raise InvalidConfigError(
                f"`start_method={start_method!r}` is not a multiprocessing start method. Valid choices: "
                f"{', '.join(repr(m) for m in _PROCESS_START_METHODS)}.",
                argument="start_method",
                value=start_method,
            )
        if start_method not in multiprocessing.get_all_start_methods():
            raise InvalidConfigError(
                f"`start_method={start_method!r}` is not supported on this platform ({sys.platform}); "
                f"available: {', '.join(multiprocessing.get_all_start_methods())}. "
                "Use `strategy='ddp_spawn'` instead.",
                argument="start_method",
                value=start_method,
            )
        self.strategy = strategy
        self.start_method = start_method

    @property
    def is_interactive_compatible(self) -> bool:
        return self.start_method == "fork"

    @property
    def requires_function(self) -> bool:
        return True

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` in every worker; return local rank 0's result, on the CPU.

        Raises:
            RuntimeError: Spawning from a module without an ``if __name__ == "__main__":`` guard, or
                forking after CUDA was initialised.
            torch.multiprocessing.ProcessRaisedException: A worker raised (its traceback is included);
                the other workers are terminated.
        """
        self._check_can_start()
        environment = self.strategy.cluster_environment
        if environment is not None:
            os.environ["MASTER_ADDR"] = environment.main_address
            os.environ["MASTER_PORT"] = str(environment.main_port)
        num_processes = self.strategy.num_processes
        set_num_threads_if_needed(num_processes)
        work: tuple[Any, ...] = (function, args, kwargs, self.strategy)
        # Not pickled here: torch.multiprocessing pickles each worker's arguments itself, with its reductions
        # that put tensors in shared memory (one handle per worker).
        payload = work if self.start_method == "fork" else (*work, GlobalState.capture())
        mp_context = multiprocessing.get_context(self.start_method)
        results, failures = mp_context.SimpleQueue(), mp_context.SimpleQueue()
        context = start_processes(  # type: ignore[no-untyped-call]
            _run_worker,
            args=(payload, results, failures),
            nprocs=num_processes,
            start_method=self.start_method,
            join=False,
        )
        # Read while joining: a result larger than the pipe buffer blocks its sender until it is read.
        received: bytes | None = None
        while True:
            if received is None and not results.empty():
                received = results.get()
            try:
                if context.join(timeout=_JOIN_POLL_SECONDS):
                    break
            except ProcessRaisedException as error:
                raise _root_cause(error, failures, context.pids()) from None
        if received is None and not results.empty():
            received = results.get()
        return pickle.loads(received) if received is not None else None

    def _check_can_start(self) -> None:
        if self.start_method == "fork":
            check_can_fork()
        else:
            check_main_guard()


def check_main_guard() -> None:
    """Refuse to start processes from a spawned worker that is importing the main module.

    Raises:
        RuntimeError: The script starts processes at import time (no ``if __name__ == "__main__":`` guard).
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "`fabric.launch()` was called while a spawned worker was importing the main module: the script "
            'starts processes at import time. Put the code that creates `Fabric` and calls `launch()` under `if '
            '__name__ == "__main__":`, or use `strategy="ddp"`.'
        )


def check_can_fork() -> None:
    """Refuse to fork when CUDA is initialised here: a forked process cannot use it.

    Raises:
        RuntimeError: CUDA is initialised (or torch reports a bad fork state) in this process.
    """
    in_bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    if (callable(in_bad_fork) and in_bad_fork()) or torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        raise RuntimeError(
            "Cannot fork new processes: CUDA is already initialised in this process, and a forked "
            "process cannot use it. Use `strategy='ddp_spawn'`, or avoid touching CUDA (creating tensors "
            "on it, `torch.cuda.*` calls) before `fabric.launch()`."
        )


@dataclass(frozen=True)
class GlobalState:
    """Settings a spawned worker would otherwise lose: RNG states and determinism flags."""

    deterministic: bool
    deterministic_warn_only: bool
    cudnn_benchmark: bool
    torch_rng: torch.Tensor
    python_rng: Any
    numpy_rng: Any

    @classmethod
    def capture(cls) -> GlobalState:
        numpy = sys.modules.get("numpy")
        return cls(
            deterministic=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            cudnn_benchmark=torch.backends.cudnn.benchmark,
            torch_rng=torch.get_rng_state(),
            python_rng=random.getstate(),
            numpy_rng=numpy.random.get_state() if numpy is not None else None,
        )

    def restore(self) -> None:
        torch.use_deterministic_algorithms(self.deterministic, warn_only=self.deterministic_warn_only)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        torch.set_rng_state(self.torch_rng)
        random.setstate(self.python_rng)
        if self.numpy_rng is not None:
            import numpy

            numpy.random.set_state(self.numpy_rng)


def _root_cause(error: ProcessRaisedException, failures: Any, pids: list[int]) -> ProcessRaisedException:
    """The error of the worker that failed first.

    When one worker raises, its peers' collectives fail too, and torch reports whichever failed worker it
    notices first. Each worker records its traceback before its exit closes any connection, so the first
    record is the cause, not a consequence.
    """
    if failures.empty():
        return error
    index, trace = failures.get()
    if index == error.error_index:
        return error
    message = f"\n\n-- Process {index} terminated with the following error:\n{trace}"
    return ProcessRaisedException(message, index, pids[index])


def _unshare_module_memory(data: Any) -> Any:
    """Copy the shared-memory parameters and buffers of the modules in ``data`` into this process's memory.

    Received through ``torch.multiprocessing``, they would be one storage for every rank: each rank's
    optimizer step would write the others' weights.
    """

    @torch.no_grad()
    def unshare(module: torch.nn.Module) -> torch.nn.Module:
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            if tensor.device.type == "cpu" and tensor.is_shared():  # type: ignore[no-untyped-call]
                tensor.data = tensor.data.clone()
        return module

    return apply_to_collection(data, torch.nn.Module, unshare)


def _run_worker(process_index: int, payload: tuple[Any, ...], results: Any, failures: Any) -> None:
    function, args, kwargs, strategy, *state = payload
    if state:  # spawned: restore this process's settings, and take the modules out of shared memory
        state[0].restore()
        args, kwargs = _unshare_module_memory((args, kwargs))
    os.environ["LOCAL_RANK"] = str(process_index)
    strategy.set_world_ranks()
    try:
        output = function(*args, **kwargs)
    except BaseException:
        # Recorded before this process's exit closes its connections: the parent reports the first failure
        # (the cause), and the exit hook must not wait for the other ranks.
        failures.put((process_index, traceback.format_exc()))
        record_failure()
        raise
    if process_index == 0:
        results.put(pickle.dumps(move_data_to_device(output, "cpu")))


# Lightning's private names at this module's Lightning path (``strategies.launchers.multiprocessing``).
_MultiProcessingLauncher = MultiProcessingLauncher
_GlobalStateSnapshot = GlobalState
_check_bad_cuda_fork = check_can_fork
_check_missing_main_guard = check_main_guard
_disable_module_memory_sharing = _unshare_module_memory
