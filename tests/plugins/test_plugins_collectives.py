"""plugins.collectives: TorchCollective across two real processes (gloo on 127.0.0.1), run side by side with
Lightning Fabric's on the same inputs, and SingleDeviceCollective in one process.

As in tests/utilities/test_operations_distributed.py, this file run as a script spawns the two ranks; each runs the same
scenario with our class and with Lightning's and records what it saw; the tests compare the records.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fabric_core.testing import run_in_own_session

WORLD_SIZE = 2
TIMEOUT = datetime.timedelta(seconds=30)  # a rank left alone gives up instead of hanging

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]

if __name__ != "__main__":  # the spawned job imports Lightning itself
    pytest.importorskip("lightning_fabric")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scenario(cls: Any, rank: int, port: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    collective = cls().setup(
        main_address="127.0.0.1", main_port=str(port), backend="gloo", world_size=WORLD_SIZE, rank=rank, timeout=TIMEOUT
    )
    seen["env_left"] = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k in os.environ]
    seen["manages"] = cls.manages_default_group
    seen["rank_world"] = [collective.rank, collective.world_size]
    seen["sum"] = collective.all_reduce(torch.tensor([rank + 1.0, 10.0]), op="sum").tolist()
    seen["max"] = collective.all_reduce(torch.tensor([rank + 2.0]), op=dist.ReduceOp.MAX).tolist()
    seen["broadcast"] = collective.broadcast(torch.tensor([rank * 5.0 + 1]), src=1).tolist()
    if rank == 0:
        collective.send(torch.tensor([7.0, 8.0]), dst=1, tag=3)
        seen["recv"] = None
    else:
        seen["recv"] = collective.recv(torch.zeros(2), src=0, tag=3).tolist()
    gathered = collective.all_gather([torch.zeros(2) for _ in range(WORLD_SIZE)], torch.full((2,), rank * 1.0))
    seen["all_gather"] = [t.tolist() for t in gathered]
    seen["objects"] = collective.all_gather_object([None] * WORLD_SIZE, {"rank": rank})
    seen["reduce_scatter"] = collective.reduce_scatter(
        torch.zeros(1), [torch.tensor([rank + 1.0]), torch.tensor([10.0 * (rank + 1)])], op="sum"
    ).tolist()
    try:
        cls._convert_to_native_op("bogus")
    except ValueError as err:
        seen["bad_op"] = str(err)

    only_one = cls().create_group(ranks=[1], timeout=TIMEOUT)  # every rank calls new_group
    if rank == 1:
        seen["one_rank_world"] = [only_one.rank, only_one.world_size]
        seen["one_sum"] = only_one.all_reduce(torch.tensor([3.0])).tolist()
    only_one.barrier()  # rank 0 is not a member: returns at once
    pair = cls().create_group(timeout=TIMEOUT)
    seen["pair_sum"] = pair.all_reduce(torch.tensor([rank * 1.0 + 1])).tolist()
    try:
        pair.create_group()
    except RuntimeError as err:
        seen["owns_twice"] = str(err)
    pair.teardown()
    try:
        pair.teardown()
    except RuntimeError as err:
        seen["teardown_twice"] = str(err)
    only_one.teardown()
    collective.barrier()
    collective.teardown()
    seen["initialized_after"] = dist.is_initialized()
    seen["manages_after"] = cls.manages_default_group
    return seen


def _worker(rank: int, ports: list[int], out_dir: str) -> None:
    from lightning_fabric.plugins.collectives import TorchCollective as Theirs

    from fabric_core.plugins.collectives import TorchCollective as Ours

    records = {"ours": _scenario(Ours, rank, ports[0]), "theirs": _scenario(Theirs, rank, ports[1])}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(records))


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out_dir = tmp_path_factory.mktemp("collectives")
    try:
        job = run_in_own_session([sys.executable, __file__, str(out_dir)], timeout=80)
    except subprocess.TimeoutExpired as timed_out:
        pytest.fail(f"the two-process job did not finish in 80 s:\n{timed_out.output}")
    assert job.returncode == 0, job.stdout
    return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]


@pytest.mark.parity
def test_torch_collective_does_what_lightnings_does(seen: list[dict[str, Any]]) -> None:
    for rank in range(WORLD_SIZE):
        ours, theirs = seen[rank]["ours"], seen[rank]["theirs"]
        for key in theirs.keys() - {"bad_op"}:
            assert ours[key] == theirs[key], (rank, key)
        assert set(ours) == set(theirs)
        assert "is not a member of `ReduceOp`" in ours["bad_op"] and "sum" in ours["bad_op"]


@pytest.mark.parity  # the same job as the comparison above: one run serves both
def test_torch_collective_results(seen: list[dict[str, Any]]) -> None:
    zero, one = seen[0]["ours"], seen[1]["ours"]
    assert zero["sum"] == one["sum"] == [3.0, 20.0]
    assert zero["max"] == one["max"] == [3.0]
    assert zero["broadcast"] == one["broadcast"] == [6.0]
    assert one["recv"] == [7.0, 8.0]
    assert zero["all_gather"] == [[0.0, 0.0], [1.0, 1.0]]
    assert zero["objects"] == [{"rank": 0}, {"rank": 1}]
    assert zero["reduce_scatter"] == [3.0] and one["reduce_scatter"] == [30.0]
    assert one["one_rank_world"] == [0, 1] and one["one_sum"] == [3.0]
    assert zero["pair_sum"] == [3.0]
    assert "already owns a group" in zero["owns_twice"]
    assert "does not own a group" in zero["teardown_twice"]
    assert zero["rank_world"] == [0, 2] and zero["env_left"] == [] and zero["manages"] is True
    assert zero["initialized_after"] is False and zero["manages_after"] is False


def test_single_device_collective_matches_lightning() -> None:
    from lightning_fabric.plugins.collectives import SingleDeviceCollective as Theirs

    from fabric_core.plugins.collectives import CollectibleGroup, Collective, SingleDeviceCollective

    x, y = torch.tensor([1.0]), torch.tensor([2.0])
    for cls in (SingleDeviceCollective, Theirs):
        c = cls().setup()
        assert (c.rank, c.world_size, c.is_available(), c.is_initialized()) == (0, 1, True, True)
        assert c.all_reduce(x, op="sum") is x and c.broadcast(x, src=0) is x and c.reduce(x, 0) is x
        assert c.all_gather([], x) == [x] and c.gather(x, []) == [x]
        assert c.scatter(x, [y]) is y and c.reduce_scatter(x, [y, x]) is y
        assert c.all_to_all([], [x, y]) == [x, y] and c.recv(x, 0) is x
        with pytest.raises(RuntimeError, match="does not own a group"):
            _ = c.group
        c.create_group()
        with pytest.raises(RuntimeError, match="already owns a group"):
            c.create_group()
        c.teardown()
    assert isinstance(SingleDeviceCollective().create_group().group, CollectibleGroup)
    assert issubclass(SingleDeviceCollective, Collective)


if __name__ == "__main__":
    mp.spawn(_worker, args=([_free_port(), _free_port()], sys.argv[1]), nprocs=WORLD_SIZE, join=True)
