"""Lightning Fabric's private helpers that real code calls, run side by side with Lightning's.

LitGPT loads every checkpoint with ``_lazy_load`` and materialises meta-device models with
``_materialize_meta_tensors``; lightning.pytorch and user code import the process-group helpers, the wrappers'
private class names and ``_unwrap_compiled``. Each test calls ours and Lightning's with the same input and
compares what comes back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

lf = pytest.importorskip("lightning_fabric")

import lightning_fabric.utilities.distributed as lf_distributed  # noqa: E402
import lightning_fabric.utilities.init as lf_init  # noqa: E402
import lightning_fabric.utilities.load as lf_load  # noqa: E402

import fabric_core.utilities.distributed as fc_distributed  # noqa: E402
import fabric_core.utilities.init as fc_init  # noqa: E402
import fabric_core.utilities.load as fc_load  # noqa: E402
from fabric_core.errors import UnsafeCheckpointError  # noqa: E402


def _checkpoint(path: Path) -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    state = {
        "model": model.state_dict(),
        "param": torch.nn.Parameter(torch.randn(2, 2)),
        "half": torch.arange(6, dtype=torch.bfloat16).view(2, 3)[:, 1:],  # a view with an offset and stride
        "step": 7,
        "nested": [torch.ones(3, dtype=torch.int64), {"x": torch.zeros(1)}],
    }
    torch.save(state, path)
    return state


def test_lazy_load_gives_what_torch_load_and_lightning_give(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    saved = _checkpoint(path)
    ours, theirs = fc_load._lazy_load(path), lf_load._lazy_load(path)
    assert isinstance(ours["model"]["0.weight"], fc_load._NotYetLoadedTensor)
    assert type(theirs["model"]["0.weight"]).__name__ == "_NotYetLoadedTensor"
    assert ours["step"] == theirs["step"] == 7
    # metadata without reading the bytes
    assert ours["half"].shape == theirs["half"].shape == (2, 2)
    assert ours["half"].dtype == torch.bfloat16
    assert ours["param"].requires_grad == theirs["param"].requires_grad  # the meta tensor's, before the Parameter
    assert ours["model"]["0.weight"].device == torch.device("cpu")
    ours_loaded, theirs_loaded = fc_load._materialize_tensors(ours), lf_load._materialize_tensors(theirs)
    assert isinstance(ours_loaded["param"], torch.nn.Parameter)
    assert isinstance(theirs_loaded["param"], torch.nn.Parameter)
    for key in ("param", "half"):
        assert torch.equal(ours_loaded[key], saved[key]) and torch.equal(ours_loaded[key], theirs_loaded[key])
    assert torch.equal(ours_loaded["nested"][0], saved["nested"][0])
    # a model loads from the lazy dict one tensor at a time, as LitGPT does
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    model.load_state_dict(fc_load._lazy_load(path)["model"])
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved["model"].items())
    # torch functions read the data first (operators are not routed: neither class is a Tensor)
    assert torch.equal(torch.add(ours["half"], 1), torch.add(theirs["half"], 1))
    assert torch.equal(torch.add(ours["half"], 1), saved["half"] + 1)


def test_lazy_load_errors_as_lightning(tmp_path: Path) -> None:
    for loader in (fc_load._lazy_load, lf_load._lazy_load):
        with pytest.raises(FileNotFoundError, match="does not exist or is not a file"):
            loader(tmp_path / "missing.pt")


def test_lazy_load_runs_no_code_from_the_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.ones(1)}, "x": Payload()}, path)
    with pytest.raises(UnsafeCheckpointError, match=r"posix\.system|os\.system|nt\.system"):
        fc_load._lazy_load(path)
    assert not marker.exists()


@pytest.mark.slow
def test_lazy_load_keeps_the_data_on_disk_until_used(tmp_path: Path) -> None:
    """A 160 MB checkpoint: loading its structure costs a few MB; each tensor's bytes are read when used."""
    code = textwrap.dedent(
        """
        import resource, sys, torch
        from fabric_core.utilities.load import _lazy_load
        path = sys.argv[1]
        torch.save({f"w{i}": torch.ones(4_000_000) for i in range(10)} | {"small": torch.arange(5.0)}, path)
        import gc; gc.collect()
        def rss_mb():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
        before = rss_mb()
        state = _lazy_load(path)
        after_load = rss_mb()
        small = torch.add(state["small"], 0)
        one = torch.sum(state["w3"]).item()
        after_one = rss_mb()
        print(round(after_load - before), round(after_one - before), small.tolist(), one, sep="|")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "big.pt")], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    grown_by_load, grown_by_one, small, one = done.stdout.strip().split("|")
    assert int(grown_by_load) < 16, done.stdout  # the file holds 160 MB
    assert int(grown_by_one) < 48, done.stdout  # one 16 MB tensor read, not the other nine
    assert small == "[0.0, 1.0, 2.0, 3.0, 4.0]" and one == "4000000.0"


def _meta_model() -> torch.nn.Module:
    with torch.device("meta"):
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Sequential(torch.nn.LayerNorm(4)))


def test_materialize_meta_tensors_initialises_as_lightning() -> None:
    results = []
    for materialize in (fc_init._materialize_meta_tensors, lf_init._materialize_meta_tensors):
        model = _meta_model()
        torch.manual_seed(3)
        materialize(model, torch.device("cpu"))
        results.append(model.state_dict())
        assert not fc_init._has_meta_device_parameters_or_buffers(model)
    assert results[0].keys() == results[1].keys()
    assert all(torch.equal(results[0][k], results[1][k]) for k in results[0])


def test_materialize_errors_and_warnings_as_lightning() -> None:
    class NoReset(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(2))

    for materialize in (fc_init._materialize_meta_tensors, lf_init._materialize_meta_tensors):
        with torch.device("meta"):
            model = NoReset()
        with pytest.raises(TypeError, match=r"NoReset\.reset_parameters` method is implemented"):
            materialize(model, "cpu")
    for materialize in (fc_init._materialize_distributed_module, lf_init._materialize_distributed_module):
        with torch.device("meta"):
            model = torch.nn.Sequential(NoReset(), torch.nn.Linear(2, 2))
        with pytest.warns(UserWarning, match="NoReset"):
            materialize(model, torch.device("cpu"))
        assert model[1].weight.device.type == "cpu"
    for has_meta in (fc_init._has_meta_device_parameters_or_buffers, lf_init._has_meta_device_parameters_or_buffers):
        with pytest.raises(TypeError, match=r"Expected `torch\.nn\.Module` or `torch\.optim\.Optimizer`, got: int"):
            has_meta(3)  # type: ignore[arg-type]
        assert has_meta(torch.optim.SGD(_meta_model().parameters(), lr=0.1))


def test_empty_init_skips_initialisation_as_lightning() -> None:
    for empty_init in (fc_init._EmptyInit, lf_init._EmptyInit):
        torch.manual_seed(0)
        with empty_init(enabled=True):
            torch.nn.Linear(100, 100)
        after = torch.rand(1)
        torch.manual_seed(0)
        assert torch.equal(after, torch.rand(1))  # no random numbers were drawn


def test_move_state_into_as_lightning() -> None:
    for move in (fc_load._move_state_into, lf_load._move_state_into):
        model = torch.nn.Linear(2, 2)
        source = {"model": {"weight": torch.zeros(2, 2), "bias": torch.ones(2)}, "step": 5, "other": 1}
        destination: dict[str, object] = {"model": model, "step": 0}
        move(source, destination, keys={"model", "step", "absent"})
        assert torch.equal(model.weight, torch.zeros(2, 2)) and destination["step"] == 5
        assert source == {"other": 1}


def test_single_process_distributed_helpers_as_lightning() -> None:
    tensor = torch.arange(3.0)
    for module in (fc_distributed, lf_distributed):
        assert module._distributed_is_initialized() is False
        assert module._sync_ddp_if_available(tensor, reduce_op="mean") is tensor
        assert module._all_gather_ddp_if_available(tensor) is tensor
        assert module._get_default_process_group_backend_for_device(torch.device("cpu")) == "gloo"
        assert module._suggested_max_num_threads(1) >= 1
        with pytest.raises(ValueError, match="`num_processes` should be >= 1, got 0"):
            module._suggested_max_num_threads(0)
        with module._InfiniteBarrier() as barrier:
            barrier()
        assert module._is_dtensor(tensor) is False


_TWO_RANKS = """
import gc, os, sys, torch
package = sys.argv[1]
if package == "lightning":
    from lightning_fabric.plugins.environments import LightningEnvironment
    from lightning_fabric.utilities import distributed as d
else:
    from fabric_core.plugins.environments import LightningEnvironment
    from fabric_core.utilities import distributed as d
env = LightningEnvironment()
env.world_size = lambda: 2
env.global_rank = lambda: int(os.environ["RANK"])
d._init_dist_connection(env, "gloo")
rank = torch.distributed.get_rank()
mean = d._sync_ddp_if_available(torch.tensor([rank + 1.0, 4.0]), reduce_op="mean")
total = d._sync_ddp(torch.tensor([rank + 1]), reduce_op="sum")
stacked = d._all_gather_ddp_if_available(torch.tensor([rank, 10 * rank]))
uneven = d._gather_all_tensors(torch.ones(rank + 1, 2) * rank)
print(rank, mean.tolist(), total.tolist(), stacked.tolist(), [t.tolist() for t in uneven], flush=True)
# As fabric-core's teardown: free finished collectives' objects, meet, then destroy (an abort at exit otherwise,
# see tests.lightning_side_by_side.close_lightning_group, which this script, run alone, cannot import).
gc.collect()
torch.distributed.barrier()
d._destroy_dist_connection()
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("package", ["fabric_core", "lightning"])
@pytest.mark.parity
def test_process_group_helpers_on_two_ranks(package: str, tmp_path: Path) -> None:
    import socket

    script = tmp_path / "job.py"
    script.write_text(_TWO_RANKS)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), package],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outputs = []
    try:
        for rank in ranks:
            out, err = rank.communicate(timeout=120)
            assert rank.returncode == 0, err
            outputs.append(out.strip().splitlines()[-1])
    finally:
        for rank in ranks:
            rank.kill()
    expected_gather = "[[0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]]"
    assert outputs[0] == f"0 [1.5, 4.0] [3] [[0, 0], [1, 10]] [{expected_gather}]"
    assert outputs[1] == f"1 [1.5, 4.0] [3] [[0, 0], [1, 10]] [{expected_gather}]"


def test_wrapper_private_names_are_the_wrapper_classes() -> None:
    import fabric_core.fabric as fabric_module
    import fabric_core.wrappers as wrappers
    from fabric_core import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer = fabric.setup(torch.nn.Linear(2, 2), torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), 0.1))
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(range(4)))
    assert isinstance(model, wrappers._FabricModule) and isinstance(model, fabric_module._FabricModule)
    assert isinstance(optimizer, fabric_module._FabricOptimizer) and isinstance(loader, fabric_module._FabricDataLoader)
    inner, how = wrappers._unwrap_compiled(model)
    assert inner is model and how is None
    assert wrappers._in_fabric_backward is False
    assert wrappers._LIGHTNING_MODULE_STEP_METHODS == lf.wrappers._LIGHTNING_MODULE_STEP_METHODS


@pytest.mark.parametrize(
    ("path", "kind", "duplicate"),
    [
        ("accelerators.registry._AcceleratorRegistry", "accelerator", "MisconfigurationException"),
        ("strategies.registry._StrategyRegistry", "strategy", "ValueError"),
    ],
)
def test_registry_classes_fill_and_build_as_lightnings(path: str, kind: str, duplicate: str) -> None:
    """lightning.pytorch keeps its own ``AcceleratorRegistry = _AcceleratorRegistry()``; ours fills the same way."""
    import importlib

    module_path, name = path.rsplit(".", 1)
    outputs = []
    for package in ("fabric_core", "lightning_fabric"):
        registry = getattr(importlib.import_module(f"{package}.{module_path}"), name)()

        @registry.register("mine", description="a test entry", value=3)
        class Thing:
            def __init__(self, value: int) -> None:
                self.value = value

        registry.register("other", Thing, value=4)
        with pytest.raises(Exception) as raised:
            registry.register("mine", Thing)
        with pytest.raises(KeyError, match="'absent' not found in registry"):
            registry.get("absent")
        built = registry.get("mine")
        entry = registry["mine"]
        registry.remove("other")
        outputs.append(
            (
                type(raised.value).__name__,
                "already present in the registry" in str(raised.value),
                built.value,
                sorted(entry),
                entry[f"{kind}_name"],
                entry["init_params"],
                str(registry),
                sorted(registry),
                registry.get("absent", default=1),
            )
        )
    assert outputs[0] == outputs[1]
    assert outputs[0][0] == duplicate


def test_load_distributed_checkpoint_reads_a_sharded_folder_as_lightning(tmp_path: Path) -> None:
    """A folder written by ``torch.distributed.checkpoint`` plus the ``meta.pt`` of the other entries."""
    import torch.distributed.checkpoint as dcp

    model = torch.nn.Linear(3, 2)
    folder = tmp_path / "sharded"
    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"model": model.state_dict()}, checkpoint_id=folder)
    torch.save({"step": 9, "note": "kept"}, folder / fc_load._METADATA_FILENAME)
    assert fc_load._METADATA_FILENAME == lf_load._METADATA_FILENAME == "meta.pt"
    ours, theirs = fc_load._load_distributed_checkpoint(folder), lf_load._load_distributed_checkpoint(folder)
    assert ours.keys() == theirs.keys() == {"model", "step", "note"}
    assert ours["step"] == theirs["step"] == 9
    for name, tensor in model.state_dict().items():
        assert torch.equal(ours["model"][name], tensor) and torch.equal(theirs["model"][name], tensor)


def test_optimizers_to_device_as_lightning() -> None:
    import lightning_fabric.utilities.optimizer as lf_optimizer

    import fabric_core.utilities.optimizer as fc_optimizer

    for module in (fc_optimizer, lf_optimizer):
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        module._optimizers_to_device([optimizer], torch.device("meta"))
        states = [value for state in optimizer.state.values() for value in state.values()]
        assert {t.device.type for t in states if isinstance(t, torch.Tensor) and t.dim() > 0} == {"meta"}
