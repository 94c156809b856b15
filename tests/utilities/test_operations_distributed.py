"""fabric_core.utilities.operations across two real processes (gloo on 127.0.0.1).

All checks run in one job (starting processes dominates the cost): this file, run as a script, spawns two
ranks with ``torch.multiprocessing``; each records what it saw in a JSON file, and the tests below read
those records. Running the file as a script (rather than spawning from pytest) lets the children import
the worker from ``__main__`` whatever pytest's import mode and working directory.
"""

from __future__ import annotations

import datetime
import json
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
# Collectives give up after this long, so that a rank left alone exits by itself instead of hanging.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=30)

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _checks(rank: int, marker: Path) -> dict[str, Any]:
    from fabric_core.utilities.operations import (
        broadcast,
        broadcast_object_list,
        gather,
        gather_object,
        pad_across_processes,
        reduce,
        synchronize_rng_states,
        wait_for_everyone,
    )
    from fabric_core.utilities.seed import set_seed

    seen: dict[str, Any] = {}
    seen["gather_even"] = gather(torch.arange(4).reshape(2, 2) + 10 * rank).tolist()
    seen["gather_uneven"] = gather(torch.full((3 if rank == 0 else 5, 2), rank)).tolist()
    seen["gather_one_empty"] = gather(torch.ones(0 if rank == 0 else 2, 3)).tolist()
    seen["gather_all_empty"] = list(gather(torch.ones(0, 3)).shape)
    seen["gather_scalar"] = gather(torch.tensor(float(rank))).tolist()
    at_one = gather(torch.arange(3 if rank == 0 else 5) + 10 * rank, dst=1)
    seen["gather_dst"] = None if at_one is None else at_one.tolist()
    at_zero_even = gather(torch.full((2,), rank), dst=0)
    seen["gather_dst_even"] = None if at_zero_even is None else at_zero_even.tolist()
    nested = gather({"a": torch.tensor([rank]), "b": [torch.full((rank + 1, 2), float(rank))]})
    seen["gather_nested"] = {"a": nested["a"].tolist(), "b": [nested["b"][0].tolist()]}
    try:
        gather(torch.zeros(2, 3 if rank == 0 else 4))
    except ValueError as error:
        seen["gather_mismatch"] = str(error)
    try:
        gather([torch.ones(1), "not a tensor"])
    except TypeError as error:
        seen["gather_type_error"] = str(error)

    values = torch.tensor([1.0, 2.0]) * (rank + 1)
    seen["reduce_sum"] = reduce(values, "sum").tolist()
    seen["reduce_mean"] = reduce(values, "mean").tolist()
    seen["reduce_max"] = reduce(values, "max").tolist()
    seen["reduce_min"] = reduce(values, "min").tolist()
    seen["reduce_scaled"] = reduce(values, "sum", scale=0.5).tolist()
    seen["reduce_int_mean"] = reduce(torch.tensor([rank + 1]), "mean").tolist()
    seen["reduce_nested"] = reduce({"x": [torch.tensor([float(rank)])]}, "sum")["x"][0].tolist()
    seen["reduce_input_untouched"] = values.tolist()

    rows = torch.ones(2 if rank == 0 else 4, 2) * (rank + 1)
    seen["pad_end"] = pad_across_processes(rows, pad_index=-1).tolist()
    seen["pad_first"] = pad_across_processes(rows, pad_index=-1, pad_first=True).tolist()
    seen["pad_dim1"] = list(pad_across_processes(torch.zeros(2, rank + 1), dim=1).shape)
    seen["pad_out_of_range"] = list(pad_across_processes(torch.zeros(3), dim=1).shape)

    seen["broadcast"] = broadcast(torch.full((3,), float(rank)), from_process=1).tolist()
    tree = broadcast({"x": torch.tensor([rank]), "y": [torch.tensor([rank * 2.0])]})
    seen["broadcast_nested"] = [tree["x"].tolist(), tree["y"][0].tolist()]
    seen["broadcast_object_list"] = broadcast_object_list([f"from {rank}", {"rank": rank}], from_process=1)
    seen["gather_object_lists"] = gather_object([rank, rank * 10])
    seen["gather_object_dicts"] = gather_object({"rank": rank})

    torch.manual_seed(rank)
    generator = torch.Generator().manual_seed(100 + rank)
    synchronize_rng_states(["torch", "generator"], generator=generator)
    seen["rng_torch"] = torch.rand(3).tolist()
    seen["rng_generator"] = torch.rand(3, generator=generator).tolist()

    set_seed(42, device_specific=True)
    seen["set_seed_device_specific"] = torch.rand(3).tolist()
    set_seed(42)
    seen["set_seed"] = torch.rand(3).tolist()

    if rank == 1:
        marker.write_text("rank 1 was here")
    wait_for_everyone()
    seen["marker_after_barrier"] = marker.read_text() if marker.exists() else None
    wait_for_everyone()  # rank 1 must not finish (and its test clean up) before rank 0 has looked
    return seen


def _worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=COLLECTIVE_TIMEOUT,
    )
    try:
        seen = _checks(rank, Path(out_dir, "marker"))
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(seen))


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out_dir = tmp_path_factory.mktemp("operations")
    try:
        job = run_in_own_session([sys.executable, __file__, str(out_dir)], timeout=50)
    except subprocess.TimeoutExpired as timed_out:
        pytest.fail(f"the two-process job did not finish in 50 s:\n{timed_out.output}")
    assert job.returncode == 0, job.stdout
    return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]


def _same_on_both(seen: list[dict[str, Any]], key: str) -> Any:
    assert seen[0][key] == seen[1][key], key
    return seen[0][key]


def test_gather_even_concatenates_in_rank_order(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "gather_even") == [[0, 1], [2, 3], [10, 11], [12, 13]]


def test_gather_uneven_keeps_exactly_the_rows_sent(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "gather_uneven") == [[0, 0]] * 3 + [[1, 1]] * 5


def test_gather_with_empty_ranks(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "gather_one_empty") == [[1.0, 1.0, 1.0]] * 2
    assert _same_on_both(seen, "gather_all_empty") == [0, 3]


def test_gather_scalars(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "gather_scalar") == [0.0, 1.0]


def test_gather_to_one_rank(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["gather_dst"] is None
    assert seen[1]["gather_dst"] == [0, 1, 2, 10, 11, 12, 13, 14]
    assert seen[0]["gather_dst_even"] == [0, 0, 1, 1]
    assert seen[1]["gather_dst_even"] is None


def test_gather_nested(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "gather_nested") == {"a": [0, 1], "b": [[[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]]}


def test_gather_mismatched_trailing_shapes_fail_on_every_rank(seen: list[dict[str, Any]]) -> None:
    for rank in range(WORLD_SIZE):
        assert "needs the same trailing shape and dtype on every process" in seen[rank]["gather_mismatch"]
    assert "rank 1" in seen[1]["gather_mismatch"]


def test_gather_non_tensor_leaf_fails_on_every_rank(seen: list[dict[str, Any]]) -> None:
    assert "Unsupported type str passed to `gather`" in _same_on_both(seen, "gather_type_error")


def test_reduce(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "reduce_sum") == [3.0, 6.0]
    assert _same_on_both(seen, "reduce_mean") == [1.5, 3.0]
    assert _same_on_both(seen, "reduce_max") == [2.0, 4.0]
    assert _same_on_both(seen, "reduce_min") == [1.0, 2.0]
    assert _same_on_both(seen, "reduce_scaled") == [1.5, 3.0]
    assert _same_on_both(seen, "reduce_int_mean") == [1.5]
    assert _same_on_both(seen, "reduce_nested") == [1.0]


def test_reduce_leaves_the_input_alone(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["reduce_input_untouched"] == [1.0, 2.0]
    assert seen[1]["reduce_input_untouched"] == [2.0, 4.0]


def test_pad_across_processes(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["pad_end"] == [[1.0, 1.0]] * 2 + [[-1.0, -1.0]] * 2
    assert seen[0]["pad_first"] == [[-1.0, -1.0]] * 2 + [[1.0, 1.0]] * 2
    assert seen[1]["pad_end"] == [[2.0, 2.0]] * 4
    assert _same_on_both(seen, "pad_dim1") == [2, 2]
    assert _same_on_both(seen, "pad_out_of_range") == [3]


def test_broadcast(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "broadcast") == [1.0, 1.0, 1.0]
    assert _same_on_both(seen, "broadcast_nested") == [[0], [0.0]]


def test_broadcast_object_list(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "broadcast_object_list") == ["from 1", {"rank": 1}]


def test_gather_object_flattens_one_level(seen: list[dict[str, Any]]) -> None:
    assert _same_on_both(seen, "gather_object_lists") == [0, 0, 1, 10]
    assert _same_on_both(seen, "gather_object_dicts") == [{"rank": 0}, {"rank": 1}]


def test_synchronize_rng_states_gives_every_rank_rank_zeros_numbers(seen: list[dict[str, Any]]) -> None:
    torch.manual_seed(0)
    assert _same_on_both(seen, "rng_torch") == torch.rand(3).tolist()
    assert _same_on_both(seen, "rng_generator") == torch.rand(3, generator=torch.Generator().manual_seed(100)).tolist()


def test_set_seed_device_specific_differs_per_rank(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["set_seed_device_specific"] != seen[1]["set_seed_device_specific"]
    torch.manual_seed(43)
    assert seen[1]["set_seed_device_specific"] == torch.rand(3).tolist()
    assert _same_on_both(seen, "set_seed") == seen[0]["set_seed_device_specific"]


def test_wait_for_everyone_orders_the_ranks(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["marker_after_barrier"] == "rank 1 was here"


if __name__ == "__main__":
    spawn: Any = mp.spawn  # type: ignore[attr-defined]  # torch's stubs neither export nor type it
    spawn(_worker, args=(_free_port(), sys.argv[1]), nprocs=WORLD_SIZE, join=True)
