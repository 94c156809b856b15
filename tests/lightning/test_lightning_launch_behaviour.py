"""``Fabric.launch`` and its neighbours compared with Lightning Fabric: the same call on both, the same result.

The launch guards, ``rank_zero_first``, ``no_backward_sync``, ``sharded_model`` and the loaders created in
``fabric.launch(fn)``. Where a test stands in for a strategy it does as Lightning's tests do
(``Mock(spec=DDPStrategy)``), with each package's own class. Skipped without ``lightning_fabric``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("lightning_fabric")

import fabric_core

PACKAGES = ("lightning_fabric", "fabric_core")


@pytest.fixture(params=PACKAGES, ids=["lightning", "fabric-core"])
def library(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


def _fabric(library: ModuleType, **kwargs: Any) -> Any:
    kwargs.setdefault("accelerator", "cpu")
    kwargs.setdefault("devices", 1)
    return library.Fabric(**kwargs)


# -- launch ----------------------------------------------------------------------------------------------
def test_launch_under_lightnings_cli_refuses_with_lightnings_exact_sentence(
    library: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LT_CLI_USED", "1")
    with pytest.raises(RuntimeError) as error:
        _fabric(library).launch()
    assert "Calling  `.launch()` again is not allowed" in str(error.value)  # two spaces, as Lightning's


class _Launcher:
    """A launcher of the user's own that subclasses nothing: it runs the function here and counts."""

    def __init__(self) -> None:
        self.calls = 0

    def launch(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return function(*args, **kwargs)


def test_launch_without_a_function_runs_a_launcher_that_does_not_declare_needing_one(library: ModuleType) -> None:
    fabric = _fabric(library)
    fabric._strategy._launcher = launcher = _Launcher()
    fabric.launch()
    assert launcher.calls == 1 and fabric._launched


@pytest.mark.parametrize("method", ["setup", "setup_module", "setup_dataloaders", "broadcast", "barrier", "all_gather"])
def test_a_multi_process_strategy_needs_launch_before_the_methods_that_use_it(library: ModuleType, method: str) -> None:
    fabric = _fabric(library)
    fabric._strategy = mock.Mock(spec=library.strategies.DDPStrategy)
    with pytest.raises(RuntimeError, match=r"you must call `.launch\(\)`"):
        getattr(fabric, method)(mock.Mock())
    fabric._strategy = mock.Mock(spec=library.strategies.SingleDeviceStrategy)
    fabric._validate_launched()


# -- rank_zero_first ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [0, 1])
def test_rank_zero_first_waits_at_the_infinite_barrier_after_rank_zero_ran(
    library: ModuleType, rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    barrier = importlib.import_module(f"{library.__name__}.utilities.distributed")._InfiniteBarrier
    monkeypatch.setattr(barrier, "__call__", lambda self: order.append("barrier"))
    fabric = _fabric(library)
    fabric._strategy = mock.Mock(global_rank=rank)
    with fabric.rank_zero_first():
        order.append("run")
    assert order == (["run", "barrier"] if rank == 0 else ["barrier", "run"])


# -- no_backward_sync and sharded_model --------------------------------------------------------------------
def test_no_backward_sync_warns_where_the_strategy_cannot_skip_the_synchronisation(library: ModuleType) -> None:
    fabric = _fabric(library)
    model = fabric.setup(torch.nn.Linear(2, 2))
    warning = importlib.import_module(f"{library.__name__}.utilities.warnings").PossibleUserWarning
    fabric._strategy = mock.Mock(spec=library.strategies.ParallelStrategy, _backward_sync_control=None)
    with pytest.warns(warning, match="The `ParallelStrategy` does not support skipping the"):
        with fabric.no_backward_sync(model):
            pass
    fabric._strategy = mock.Mock(spec=library.strategies.SingleDeviceStrategy, _backward_sync_control=mock.MagicMock())
    with fabric.no_backward_sync(model):
        pass
    fabric._strategy._backward_sync_control.no_backward_sync.assert_not_called()
    fabric._strategy = mock.Mock(_backward_sync_control=mock.MagicMock())
    with fabric.no_backward_sync(model, enabled=False):
        pass
    fabric._strategy._backward_sync_control.no_backward_sync.assert_called_once_with(model._forward_module, False)


def test_sharded_model_is_the_sharding_context_of_a_sharding_strategy_and_nothing_otherwise(
    library: ModuleType,
) -> None:
    fabric = _fabric(library)
    fabric._launched = True
    with pytest.warns(DeprecationWarning, match="sharded_model"), fabric.sharded_model():
        module = torch.nn.Linear(2, 2, dtype=torch.float64)
    assert module.weight.dtype == torch.float64 and module.weight.device.type == "cpu"
    sharded = importlib.import_module(f"{library.__name__}.strategies.strategy")._Sharded
    fabric._strategy = mock.MagicMock(spec=sharded)
    with pytest.warns(DeprecationWarning, match="sharded_model"), fabric.sharded_model():
        pass
    fabric._strategy.module_sharded_context.assert_called_once()


def test_save_hands_a_folder_to_a_save_checkpoint_set_on_the_strategy(library: ModuleType, tmp_path: Path) -> None:
    # The strategy's class writes one file, but this instance's `save_checkpoint` decides what a path means.
    fabric = _fabric(library)
    saved: list[Any] = []
    fabric.strategy.save_checkpoint = lambda **kwargs: saved.append(kwargs["path"])
    fabric.save(tmp_path, {"step": 1})
    assert saved == [tmp_path]


# -- loaders created in launch(fn) -------------------------------------------------------------------------
def test_the_launched_function_runs_with_the_loader_arguments_recorded(library: ModuleType) -> None:
    recorded: list[bool] = []

    def run(fabric: Any) -> None:
        recorded.append(hasattr(DataLoader([1, 2]), "__pl_saved_args"))

    with mock.patch(f"{library.__name__}.fabric._replace_dunder_methods") as replace:  # as Lightning's test does
        _fabric(library).launch(run)
    assert replace().__enter__.call_count == replace().__exit__.call_count == 2  # DataLoader, BatchSampler
    _fabric(library).launch(run)
    assert recorded == [False, True]
    assert not hasattr(DataLoader([1, 2]), "__pl_saved_args")  # restored after the function


_LOADER_SCRIPT = """
import importlib, json, sys
import torch
from torch.utils.data import DataLoader

library = importlib.import_module(sys.argv[1])


class Loader(DataLoader):
    def __init__(self, data, size, **kwargs):  # `data` and `size` are not kept as attributes of those names
        super().__init__(data, batch_size=size, **kwargs)


def run(fabric, outside):
    inside = fabric.setup_dataloaders(Loader(list(range(8)), 4))
    report = {"batches": [batch.tolist() for batch in inside], "sampler": type(inside.sampler).__name__}
    try:
        fabric.setup_dataloaders(outside)
    except Exception as error:
        exceptions = importlib.import_module(sys.argv[1] + ".utilities.exceptions")
        report["outside"] = [isinstance(error, exceptions.MisconfigurationException),
                             "The missing attributes are ['data', 'size']" in str(error)]
    return report


fabric = library.Fabric(accelerator="cpu", devices=1, strategy="ddp")
print(json.dumps(fabric.launch(run, Loader(list(range(8)), 4))))
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_a_loader_created_in_launch_is_rebuilt_from_its_recorded_arguments(tmp_path: Path) -> None:
    # One process with a gloo process group (ddp on one device): the loader gets a DistributedSampler.
    script = tmp_path / "loaders.py"
    script.write_text(_LOADER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "LOCAL_RANK", "WORLD_SIZE", "RANK"))}
    env.update(MASTER_ADDR="127.0.0.1", PYTHONWARNINGS="ignore")
    reports = []
    for package in PACKAGES:
        done = subprocess.run(
            [sys.executable, str(script), package], capture_output=True, text=True, timeout=200, env=env, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-3000:]
        reports.append(json.loads(done.stdout.splitlines()[-1]))
    assert (
        reports[0]
        == reports[1]
        == {
            "batches": [[0, 1, 2, 3], [4, 5, 6, 7]],
            "sampler": "DistributedSampler",
            "outside": [True, True],  # created before launch: nothing recorded, so it cannot be rebuilt
        }
    )


def test_loader_classes_are_restored_when_the_launched_function_raises() -> None:
    # Lightning leaves DataLoader's methods patched after the function raised; fabric-core restores them.
    def fail(fabric: Any) -> None:
        raise KeyError("on purpose")

    with pytest.raises(KeyError, match="on purpose"):
        fabric_core.Fabric(accelerator="cpu", devices=1).launch(fail)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not hasattr(DataLoader([1, 2]), "__pl_saved_args")
