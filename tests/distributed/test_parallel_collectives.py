"""ParallelStrategy's collectives across two real processes (gloo on 127.0.0.1, forked from a fresh interpreter).

One job runs every check (tests/_jobs/collectives_job.py) and each rank writes what it saw; the tests below
read those results, so the processes are started once for the whole file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

JOB = Path(__file__).parents[1] / "_jobs" / "collectives_job.py"

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    outdir = tmp_path_factory.mktemp("collectives")
    result = subprocess.run([sys.executable, str(JOB), str(outdir)], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads((outdir / f"rank{r}.json").read_text()) for r in (0, 1)] + [
        json.loads((outdir / "launch_result.json").read_text())
    ]


def both(ranks: list[dict[str, Any]], key: str) -> list[Any]:
    return [ranks[0][key], ranks[1][key]]


def test_ranks_and_world_size(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "rank") == [0, 1]
    assert both(ranks, "world_size") == [2, 2]


def test_all_reduce_sum_is_in_place(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "sum") == [[3.0], [3.0]]
    assert both(ranks, "sum_in_place") == [True, True]


def test_all_reduce_mean_without_gloo_avg(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "mean") == [[1.5], [1.5]]
    assert both(ranks, "avg_op") == [[1.5], [1.5]]


def test_integer_mean_keeps_the_dtype_and_truncates(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "int_mean") == [[1], [1]]
    assert both(ranks, "int_mean_dtype") == ["torch.int64", "torch.int64"]


@pytest.mark.parametrize(("op", "expected"), [("max", 3.0), ("min", 2.0), ("product", 6.0)])
def test_all_reduce_other_ops(ranks: list[dict[str, Any]], op: str, expected: float) -> None:
    assert both(ranks, op) == [[expected], [expected]]


def test_all_reduce_nested_collection_and_python_numbers(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "nested_sum") == [{"a": [3.0], "b0": [4.0], "b1": 6}] * 2


def test_all_gather_stacks_along_a_new_first_dimension(ranks: list[dict[str, Any]]) -> None:
    expected = [[[0.0] * 3] * 2, [[1.0] * 3] * 2]
    assert both(ranks, "gather_2d") == [expected, expected]
    assert both(ranks, "gather_0d") == [[0, 1], [0, 1]]
    assert both(ranks, "gather_empty_shape") == [[2, 0], [2, 0]]


def test_all_gather_of_a_dict_with_mixed_dtypes(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks[:2]:
        mixed = rank["gather_mixed"]
        assert mixed["f"] == [[0.5, 0.5], [1.5, 1.5]]
        assert mixed["i"] == [[0, 10], [1, 11]]
        assert mixed["b"] == [[True, False], [False, True]]
        assert mixed["h"] == [[1.0], [2.0]]
        assert mixed["dtypes"] == ["torch.float32", "torch.int64", "torch.bool", "torch.bfloat16"]
        assert mixed["pair"] == ["Pair", [0, 2], "label"]  # namedtuple kept, non-tensor leaf untouched


def test_all_gather_of_many_tensors_overflowing_the_shape_header(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "gather_many") == [[[0.0, 1.0], [1.0, 2.0], 30]] * 2


def test_all_gather_sync_grads_sums_every_ranks_gradient(ranks: list[dict[str, Any]]) -> None:
    # Rank k's loss weighs the slot of rank j by (k + 1) * (j + 1): rank j's input gets 3 * (j + 1).
    assert both(ranks, "sync_grads") == [[3.0, 3.0], [6.0, 6.0]]


@pytest.mark.parametrize(
    ("key", "detail"),
    [
        ("uneven_shape", "rank 0: float32[2], rank 1: float32[3]"),
        ("uneven_count", "different numbers of tensors (rank 0: 2, rank 1: 3)"),
        ("uneven_dtype", "rank 0: float32[2], rank 1: float64[2]"),
    ],
)
def test_mismatched_all_gather_raises_the_same_error_on_every_rank(
    ranks: list[dict[str, Any]], key: str, detail: str
) -> None:
    messages = both(ranks, key)
    assert messages[0] == messages[1]
    assert detail in messages[0]
    assert "pad_across_processes" in messages[0]


def test_the_process_group_survives_a_mismatched_all_gather(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "after_errors") == [[2.0], [2.0]]


def test_broadcast_of_python_objects(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "broadcast") == [{"from": 0, "items": [1, "two", [3]]}] * 2
    assert both(ranks, "broadcast_src1") == ["rank 1", "rank 1"]


def test_reduce_boolean_decision(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "all_true") == [True, True]
    assert both(ranks, "one_true_all") == [False, False]
    assert both(ranks, "one_true_any") == [True, True]


def test_sampler_kwargs_per_rank(ranks: list[dict[str, Any]]) -> None:
    assert both(ranks, "sampler") == [{"num_replicas": 2, "rank": 0}, {"num_replicas": 2, "rank": 1}]


def test_launch_returns_rank_zeros_result_on_the_cpu(ranks: list[dict[str, Any]]) -> None:
    assert ranks[2] == {"rank": 0, "tensor": [0, 1, 2], "device": "cpu"}
