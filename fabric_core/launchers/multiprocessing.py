"""Start one process per device with ``torch.multiprocessing`` (``ddp_spawn``, ``ddp_fork``)."""

from __future__ import annotations

import itertools
import os
import pickle
import random
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessRaisedException

from fabric_core.errors import InvalidConfigError
from fabric_core.launchers._failure import record_failure
from fabric_core.launchers._threads import set_num_threads_if_needed
from fabric_core.launchers.launcher import START_METHODS, FunctionLauncher
from fabric_core.utilities.apply_func import apply_to_collection, move_data_to_device
from fabric_core.utilities.types import LaunchedStrategy

__all__ = ["MultiProcessingLauncher"]

#: The start methods of ``multiprocessing`` among :data:`~fabric_core.launchers.launcher.START_METHODS`.
_PROCESS_START_METHODS: Final = tuple(m for m in START_METHODS if m != "popen")


class MultiProcessingLauncher(FunctionLauncher):
    """Run a function in ``num_processes`` new processes and return local rank 0's result.

    With ``"spawn"`` (and ``"forkserver"``) the function, its arguments and the strategy are pickled by
    ``torch.multiprocessing``, which moves the tensors among the arguments to shared memory, as in Lightning:
    a worker's in-place write to such a tensor is seen by this process. The parameters and buffers of
    modules are copied in each worker, so ranks never share them. The random, deterministic and cuDNN
    settings of this process are restored in each worker. With ``"fork"`` the workers inherit this process
    as it is; it works in notebooks but not once CUDA is initialised.

    The processes are started through ``torch.multiprocessing`` (the module global ``mp``, Lightning's name,
    where Lightning's tests patch it) and joined before ``launch`` returns. Rank 0's result travels through a
    file of a temporary folder, read once every worker has ended, so a result of any size never blocks its
    sender.

    Args:
        strategy: The strategy the workers run; its ranks are set in each worker.
        start_method: ``"spawn"``, ``"fork"`` or ``"forkserver"``.

    Raises:
        InvalidConfigError: An unknown start method, or one this platform does not support (a ``ValueError``).
    """

    def __init__(self, strategy: LaunchedStrategy, start_method: str = "spawn") -> None:
        if start_method not in _PROCESS_START_METHODS:
            raise InvalidConfigError(
                f"`start_method={start_method!r}` is not a multiprocessing start method. Valid choices: "
                f"{', '.join(repr(m) for m in _PROCESS_START_METHODS)}.",
                argument="start_method",
                value=start_method,
            )
        available = mp.get_all_start_methods()
        if start_method not in available:
            raise InvalidConfigError(
                f"The start method {start_method!r} is not available on this platform ({sys.platform}). Available "
                f"methods are: {', '.join(available)}. Use `strategy='ddp_spawn'` instead.",
                argument="start_method",
                value=start_method,
            )
        self.strategy = strategy
        self.start_method = start_method

    @property
    def _strategy(self) -> LaunchedStrategy:
        """Lightning's name for :attr:`strategy`."""
        return self.strategy

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` in every worker; return local rank 0's result, on the CPU.

        Raises:
            RuntimeError: Spawning from a module without an ``if __name__ == "__main__":`` guard, or
                forking after CUDA was initialised.
            torch.multiprocessing.ProcessRaisedException: A worker raised (its traceback is included);
                the other workers are terminated.
        """
        # Called by Lightning's names, the module globals its tests patch. 'forkserver' is checked for CUDA as
        # Lightning checks it, and for the main guard as 'spawn' is (its server imports the main module too).
        if self.start_method in ("fork", "forkserver"):
            _check_bad_cuda_fork()
        if self.start_method != "fork":
            _check_missing_main_guard()
        environment = self.strategy.cluster_environment
        if environment is not None:
            os.environ["MASTER_ADDR"] = str(environment.main_address)
            os.environ["MASTER_PORT"] = str(environment.main_port)
        # Not pickled here: torch.multiprocessing pickles each worker's arguments itself, with its reductions
        # that put tensors in shared memory (one handle per worker).
        failures = mp.get_context(self.start_method).SimpleQueue()
        with tempfile.TemporaryDirectory(prefix="fabric-core-launch-") as folder:
            channel = _Channel(os.path.join(folder, "result.pickle"), failures)
            process_args: tuple[Any, ...] = (function, args, kwargs, channel)
            if self.start_method != "fork":  # a fresh process: it gets this one's settings
                process_args += (GlobalState.capture(),)
            try:
                mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
                    self._wrapping_function,
                    args=process_args,
                    nprocs=self.strategy.num_processes,
                    start_method=self.start_method,
                )
            except ProcessRaisedException as error:
                raise _root_cause(error, failures) from None
            return channel.read()

    def _wrapping_function(
        self,
        process_index: int,
        function: Callable[..., Any],
        args: Any,
        kwargs: Any,
        channel: _Channel,
        global_state: GlobalState | None = None,
    ) -> None:
        """Run in each worker (Lightning's name): set it up, run ``function``, hand rank 0's result over."""
        if global_state is not None:  # spawned: restore this process's settings, take modules out of shared memory
            global_state.restore()
            args, kwargs = _unshare_module_memory((args, kwargs))
        set_num_threads_if_needed(self.strategy.num_processes)
        os.environ["LOCAL_RANK"] = str(process_index)
        self.strategy.set_world_ranks()
        try:
            output = function(*args, **kwargs)
        except BaseException:
            # Recorded before this process's exit closes its connections: the parent reports the first failure
            # (the cause), and the exit hook must not wait for the other ranks.
            channel.failures.put((process_index, os.getpid(), traceback.format_exc()))
            record_failure()
            raise
        if process_index == 0:
            channel.write(move_data_to_device(output, "cpu"))


@dataclass(frozen=True)
class _Channel:
    """What the workers hand back: rank 0's result (a file, read after the join) and each failure (a queue)."""

    result_path: str
    failures: Any

    def write(self, output: Any) -> None:
        with open(self.result_path, "wb") as file:
            pickle.dump(output, file)

    def read(self) -> Any:
        if not os.path.exists(self.result_path):
            return None
        with open(self.result_path, "rb") as file:
            return pickle.load(file)  # written by rank 0 of this launch, in a folder of its own


def check_main_guard() -> None:
    """Refuse to start processes from a spawned worker that is importing the main module.

    Raises:
        RuntimeError: The script starts processes at import time (no ``if __name__ == "__main__":`` guard).
    """
    if getattr(mp.current_process(), "_inheriting", False):
        raise RuntimeError(
            "`fabric.launch()` was called while a spawned worker was importing the main module: launching processes "
            "with the 'spawn' start method requires that your script guards the main function with "
            '`if __name__ == "__main__":`, and this script starts processes at import time. Put the code that '
            'creates `Fabric` and calls `launch()` under that guard, or use `strategy="ddp"`.'
        )


def check_can_fork() -> None:
    """Refuse to fork when CUDA is initialised here: a forked process cannot use it.

    Raises:
        RuntimeError: CUDA is initialised (or torch reports a bad fork state) in this process.
    """
    # Lightning's two messages. torch's bad-fork flag is set in a process forked after CUDA was initialised;
    # unlike Lightning, a CUDA initialised here is refused also where torch has that flag (a forked worker
    # would fail on its first CUDA call instead).
    in_bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    if callable(in_bad_fork) and in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize CUDA in forked subprocess: this process was forked after CUDA was initialised, "
            "so it cannot start processes that use CUDA. Use the 'spawn' start method (`strategy='ddp_spawn'`), "
            "or do not initialise CUDA in the main process before `fabric.launch()`."
        )
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        raise RuntimeError(
            "Lightning can't create new processes if CUDA is already initialized: a forked process cannot use "
            "it. Remove what touched CUDA before `fabric.launch()` (`torch.cuda.*` calls, a model or tensor "
            "moved to the GPU), or use `strategy='ddp_spawn'`."
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


def _root_cause(error: ProcessRaisedException, failures: Any) -> ProcessRaisedException:
    """The error of the worker that failed first.

    When one worker raises, its peers' collectives fail too, and torch reports whichever failed worker it
    notices first. Each worker records its traceback before its exit closes any connection, so the first
    record is the cause, not a consequence.
    """
    if failures.empty():
        return error
    index, pid, trace = failures.get()
    if index == error.error_index:
        return error
    message = f"\n\n-- Process {index} terminated with the following error:\n{trace}"
    return ProcessRaisedException(message, index, pid)


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


# Lightning's private names at this module's Lightning path (``strategies.launchers.multiprocessing``); `launch`
# calls the two checks by these names.
_MultiProcessingLauncher = MultiProcessingLauncher
_GlobalStateSnapshot = GlobalState
_check_bad_cuda_fork = check_can_fork
_check_missing_main_guard = check_main_guard
_disable_module_memory_sharing = _unshare_module_memory
