"""Start one process per XLA device with torch_xla's ``xmp.spawn``."""

from __future__ import annotations

import copy
import multiprocessing
import time
from collections.abc import Callable
from typing import Any, Final

from fabric_core.launchers.launcher import FunctionLauncher
from fabric_core.utilities.apply_func import move_data_to_device
from fabric_core.utilities.types import LaunchedStrategy
from fabric_core_xla import accelerator, device

__all__ = ["XLALauncher", "rank_teardown"]

# Lightning's flag at its ``strategies.launchers.xla`` path (this module backs it), read here at call time.
_XLA_AVAILABLE = accelerator.XLA_AVAILABLE


class XLALauncher(FunctionLauncher):
    """Run a function in one process per XLA device and return local rank 0's result.

    torch_xla decides how many processes to start (one per TPU chip, or one holding every device for
    ``PJRT_DEVICE=CPU``) and hands out the ranks; the function and its arguments are pickled to each
    process. Processes are forked where the platform can (notebooks work), spawned elsewhere.

    Args:
        strategy: The strategy whose processes are started.

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    def __init__(self, strategy: LaunchedStrategy) -> None:
        device.require_torch_xla(type(self).__name__, _XLA_AVAILABLE)
        self.strategy = strategy
        self.start_method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` on every XLA device; return local rank 0's result, on the CPU.

        Raises:
            Exception: Whatever a process raised (torch_xla re-raises it here).
        """
        import torch_xla.distributed.xla_multiprocessing as xmp

        # A manager's queue proxy survives the pickling torch_xla's process pool applies to every argument.
        with multiprocessing.get_context(self.start_method).Manager() as manager:
            results = manager.Queue()
            # nprocs=1 runs the function in this process; None means one process per device.
            nprocs = 1 if self.strategy.num_processes == 1 else None
            xmp.spawn(
                _run_worker,
                args=(function, args, kwargs, results),
                nprocs=nprocs,
                start_method=self.start_method,
            )
            return results.get() if not results.empty() else None


def _run_worker(process_index: int, function: Callable[..., Any], args: Any, kwargs: Any, results: Any) -> None:
    import torch_xla.runtime as xr

    if xr.addressable_device_count() > 1:
        # Several devices in one process run as threads sharing these objects: give each its own copy.
        function, args, kwargs = copy.deepcopy((function, args, kwargs))
    output = function(*args, **kwargs)
    rank = xr.local_ordinal()
    if rank == 0:
        results.put(move_data_to_device(output, "cpu"))
    rank_teardown(rank)


def rank_teardown(rank: int) -> None:
    """End a launched process: wait for every other, then let local rank 0 leave last (imports torch_xla).

    Nobody leaves before everyone is done, so no process tears the runtime down under the others; rank 0's
    exit ends the process group, hence its short wait (pytorch/xla issue 2190).
    """
    import torch_xla.core.xla_model as xm

    xm.rendezvous("fabric_core_xla.launcher.end")
    if rank == 0:
        time.sleep(1)


# Lightning's names at its ``strategies.launchers.xla`` path, which this module backs.
_XLALauncher: Final = XLALauncher
_rank_teardown: Final = rank_teardown
