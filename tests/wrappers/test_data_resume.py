"""Exact data resume: the loader ``setup_dataloaders`` returns saves and restores its position in the data.

The end-to-end tests run a real script in new processes: an uninterrupted run, a run that saves a run
checkpoint mid-epoch and stops, and a resumed run; the resumed run must see exactly the batches the
uninterrupted one saw after the same step, and load only those (its dataset counts ``__getitem__`` calls).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from fabric_core import Fabric
from fabric_core.errors import InvalidConfigError
from fabric_core.wrappers import FabricDataLoader

SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, Dataset
from fabric_core import Fabric, RunCheckpoints

class Counting(Dataset):
    loads = 0
    def __len__(self):
        return 40
    def __getitem__(self, index):
        Counting.loads += 1
        return torch.tensor([index])

directory, total, stop, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
fabric = Fabric()
log = open(f"{out}.{fabric.global_rank}", "w")  # one file per rank: lines of two processes on one pipe mix
def print(*args, **kwargs):
    log.write(" ".join(map(str, args)) + "\\n")
    log.flush()
fabric.seed_everything(7, verbose=False)
loader = fabric.setup_dataloaders(DataLoader(Counting(), batch_size=4, shuffle=True))
ckpt = RunCheckpoints(fabric, directory, keep_last=None, signals=())
state = {"loader": loader}
step = ckpt.resume(state) or 0
print(f"rank {fabric.global_rank} resumed {step}", flush=True)
while step < total:
    for batch in loader:
        torch.rand(3)  # the training step draws from the global generator too
        step += 1
        print(f"rank {fabric.global_rank} step {step} batch {batch.flatten().tolist()}", flush=True)
        if step == stop:
            ckpt.save(step, state)
            print(f"rank {fabric.global_rank} loads {Counting.loads}", flush=True)
            sys.exit(0)
        if step == total:
            break
print(f"rank {fabric.global_rank} loads {Counting.loads}", flush=True)
"""
TIMEOUT_S = 60


def _env() -> dict[str, str]:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "SLURM_", "MASTER_", "WORLD_SIZE", "RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(script: Path, directory: Path, total: int, stop: int, devices: int) -> str:
    out = directory.parent / f"{directory.name}-{stop}.out"
    args = [str(script), str(directory), str(total), str(stop), str(out)]
    if devices == 1:
        command = [sys.executable, *args]
    else:
        command = [
            *(sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", str(devices)),
            *("--strategy", "ddp", "--main-port", str(_free_port()), *args),
        ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(), start_new_session=True, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return "".join(Path(f"{out}.{rank}").read_text() for rank in range(devices))


def _batches(out: str, rank: int) -> dict[int, list[int]]:
    return {
        int(step): [int(i) for i in batch.split(", ")]
        for step, batch in re.findall(rf"^rank {rank} step (\d+) batch \[([\d, ]+)\]$", out, re.MULTILINE)
    }


def _loads(out: str, rank: int) -> int:
    (loads,) = re.findall(rf"^rank {rank} loads (\d+)$", out, re.MULTILINE)
    return int(loads)


@pytest.mark.multiprocess
@pytest.mark.parametrize(("devices", "per_epoch"), [(1, 10), (2, 5)], ids=["one_process", "two_ranks"])
@pytest.mark.timeout(150)
@pytest.mark.kill_resume
def test_a_resumed_run_sees_the_batches_of_an_uninterrupted_one(tmp_path: Path, devices: int, per_epoch: int) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    total = 3 * per_epoch  # epochs 0, 1 and 2
    stop = per_epoch + per_epoch // 2 + 1  # in the middle of epoch 1
    straight = _run(script, tmp_path / "straight", total, total + 1, devices)
    _run(script, tmp_path / "broken", total, stop, devices)
    resumed = _run(script, tmp_path / "broken", total, total + 1, devices)
    epochs: list[list[int]] = [[], [], []]
    for rank in range(devices):
        assert f"rank {rank} resumed {stop}" in resumed
        expected = _batches(straight, rank)
        assert sorted(expected) == list(range(1, total + 1))
        for step, batch in expected.items():
            epochs[(step - 1) // per_epoch] += batch
        # Every epoch is a new permutation, so a loader that restarted its epoch or its order would differ.
        assert expected[1] != expected[per_epoch + 1]
        got = _batches(resumed, rank)
        assert got == {step: batch for step, batch in expected.items() if step > stop}
        # Only the batches it yielded were loaded: the skipped ones were dropped as indices.
        assert _loads(resumed, rank) == 4 * (total - stop)
    assert [sorted(epoch) for epoch in epochs] == [list(range(40))] * 3  # all ranks together: each item once


# -- in-process ----------------------------------------------------------------------------------------


class Counting(Dataset[torch.Tensor]):
    def __init__(self, size: int) -> None:
        self.size = size
        self.loads = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        self.loads += 1
        return torch.tensor([index])


class Stream(IterableDataset[torch.Tensor]):
    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self) -> Any:
        return (torch.tensor([i]) for i in range(self.size))


def _flat(batches: Any) -> list[list[int]]:
    return [b.flatten().tolist() for b in batches]


def _take(iterator: Any, count: int) -> list[list[int]]:
    return [next(iterator).flatten().tolist() for _ in range(count)]


@pytest.mark.parametrize("generator", [False, True], ids=["global_rng", "own_generator"])
def test_mid_epoch_state_restores_the_same_permutation_without_loading_skipped_batches(generator: bool) -> None:
    def make() -> tuple[FabricDataLoader, Counting]:
        dataset = Counting(20)
        gen = torch.Generator().manual_seed(5) if generator else None
        return FabricDataLoader(DataLoader(dataset, batch_size=3, shuffle=True, generator=gen)), dataset

    torch.manual_seed(0)
    loader, _ = make()
    iterator = iter(loader)
    first = _take(iterator, 2)
    state = loader.state_dict()
    rng = torch.get_rng_state()
    rest = _flat(iterator)
    following = _flat(loader)
    assert sorted(i for batch in first + rest for i in batch) == list(range(20))

    torch.manual_seed(123)  # a new process: another generator state, restored below as a run checkpoint would
    again, dataset = make()
    again.load_state_dict(state)
    # Saved again before it is iterated (preempted at once after resuming): the same position.
    assert again.state_dict()["epoch"] == state["epoch"] and again.state_dict()["batches_yielded"] == 2
    again.load_state_dict(again.state_dict())
    torch.set_rng_state(rng)
    assert _flat(again) == rest
    assert dataset.loads == sum(len(b) for b in rest)
    assert _flat(again) == following


def test_state_after_a_finished_epoch_starts_the_next_one() -> None:
    loader = FabricDataLoader(DataLoader(Counting(8), batch_size=4, shuffle=False))
    assert _flat(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 2
    again = FabricDataLoader(DataLoader(Counting(8), batch_size=4, shuffle=False))
    again.load_state_dict(state)
    assert _flat(again) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert again.state_dict()["epoch"] == 2


def test_an_iterable_dataset_resumes_by_loading_and_dropping() -> None:
    loader = FabricDataLoader(DataLoader(Stream(10), batch_size=2))
    assert _take(iter(loader), 2) == [[0, 1], [2, 3]]
    again = FabricDataLoader(DataLoader(Stream(10), batch_size=2))
    again.load_state_dict(loader.state_dict())
    assert _flat(again) == [[4, 5], [6, 7], [8, 9]]


def test_the_distributed_sampler_seed_is_restored() -> None:
    sampler = torch.utils.data.DistributedSampler(Counting(12), num_replicas=2, rank=1, shuffle=True, seed=9)
    loader = FabricDataLoader(DataLoader(Counting(12), batch_size=2, sampler=sampler))
    list(loader)
    iterator = iter(loader)
    first = _take(iterator, 1)
    state = loader.state_dict()
    rest = _flat(iterator)
    assert state["sampler"] == {"epoch": 1, "seed": 9}
    other = torch.utils.data.DistributedSampler(Counting(12), num_replicas=2, rank=1, shuffle=True, seed=0)
    again = FabricDataLoader(DataLoader(Counting(12), batch_size=2, sampler=other))
    again.load_state_dict(state)
    assert other.seed == 9
    assert _flat(again) == rest
    assert len(first + rest) == 3


def test_fabric_save_and_load_carry_the_loader_state(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(1)
    loader = fabric.setup_dataloaders(DataLoader(Counting(10), batch_size=2, shuffle=True))
    iterator = iter(loader)
    _take(iterator, 3)
    fabric.save(tmp_path / "ckpt", {"loader": loader})
    rng = torch.get_rng_state()
    rest = _flat(iterator)
    again = fabric.setup_dataloaders(DataLoader(Counting(10), batch_size=2, shuffle=True))
    fabric.load(tmp_path / "ckpt", {"loader": again})
    torch.set_rng_state(rng)
    assert _flat(again) == rest


def test_a_stateful_dataloader_uses_its_own_state() -> None:
    stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")

    def make() -> Any:
        return FabricDataLoader(stateful_dataloader.StatefulDataLoader(Counting(20), batch_size=3, shuffle=True))

    torch.manual_seed(2)
    loader = make()
    iterator = iter(loader)
    _take(iterator, 3)
    state = loader.state_dict()
    assert "loader" in state
    rest = _flat(iterator)
    following = _flat(loader)
    torch.manual_seed(99)
    again = make()
    again.load_state_dict(state)
    assert _flat(again) == rest
    assert again.state_dict()["epoch"] == 1
    assert len(_flat(again)) == len(following)


def test_a_bad_state_names_what_is_wrong() -> None:
    loader = FabricDataLoader(DataLoader(Counting(4), batch_size=2))
    with pytest.raises(InvalidConfigError, match="batches_yielded") as info:
        loader.load_state_dict({"epoch": 1})
    assert isinstance(info.value, KeyError | ValueError)


@pytest.mark.parametrize("generator", [False, True], ids=["global_rng", "own_generator"])
def test_persistent_workers_resume_the_same_order_mid_epoch(generator: bool) -> None:
    # With persistent workers an uninterrupted run reuses its worker iterator from the second epoch on
    # (drawing no new worker seed), while the resumed loader must create a new one.
    dataset = torch.utils.data.TensorDataset(torch.arange(20))

    def make() -> FabricDataLoader:
        gen = torch.Generator().manual_seed(3) if generator else None
        loader = DataLoader(dataset, batch_size=3, shuffle=True, num_workers=1, persistent_workers=True, generator=gen)
        return FabricDataLoader(loader)

    torch.manual_seed(0)
    loader = make()
    list(loader)
    iterator = iter(loader)
    next(iterator), next(iterator)
    state, rng = loader.state_dict(), torch.get_rng_state()
    rest = [b[0].tolist() for b in iterator]
    following = [b[0].tolist() for b in loader]
    torch.manual_seed(5)
    again = make()
    again.load_state_dict(state)
    torch.set_rng_state(rng)
    assert [b[0].tolist() for b in again] == rest
    assert [b[0].tolist() for b in again] == following


def test_a_stateful_dataloader_is_split_across_ranks_and_resumes_its_share() -> None:
    stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")
    from fabric_core.utilities import data as data_utils

    original = stateful_dataloader.StatefulDataLoader(Counting(20), batch_size=2, shuffle=True)

    def share(rank: int) -> FabricDataLoader:
        sampler = data_utils.distributed_sampler_for(original, num_replicas=2, rank=rank, seed=4)
        return FabricDataLoader(data_utils.replace_sampler(original, sampler))

    # Each process draws the same seeded permutation: the two shares never overlap.
    assert sorted(i for rank in (0, 1) for batch in _flat(share(rank)) for i in batch) == list(range(20))
    loader = share(1)
    list(loader)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    rest, following = _flat(iterator), _flat(loader)
    again = share(1)
    again.load_state_dict(state)
    assert _flat(again) == rest
    assert _flat(again) == following
