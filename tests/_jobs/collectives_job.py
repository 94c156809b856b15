"""Two forked processes run every ParallelStrategy collective; each writes what it saw to OUTDIR/rank<N>.json.

Usage: python collectives_job.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any

import torch

from fabric_core.launchers.multiprocessing import MultiProcessingLauncher
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import connect_to_cpus

Pair = namedtuple("Pair", ["left", "right"])


def expect_error(fn: Any) -> str:
    try:
        fn()
    except ValueError as err:
        return str(err)
    return "no error"


def run(strategy: ParallelStrategy, outdir: str) -> Any:
    strategy.setup_environment()
    r = strategy.global_rank
    out: dict[str, Any] = {"rank": r, "world_size": strategy.world_size}

    t = torch.tensor([r + 1.0])
    same = strategy.all_reduce(t, reduce_op="sum")
    out["sum"], out["sum_in_place"] = same.tolist(), same is t
    out["mean"] = strategy.all_reduce(torch.tensor([r + 1.0]), reduce_op="mean").tolist()
    out["avg_op"] = strategy.all_reduce(torch.tensor([r + 1.0]), reduce_op=torch.distributed.ReduceOp.AVG).tolist()
    int_mean = strategy.all_reduce(torch.tensor([r + 1]), reduce_op="mean")
    out["int_mean"], out["int_mean_dtype"] = int_mean.tolist(), str(int_mean.dtype)
    for op in ("max", "min", "product"):
        out[op] = strategy.all_reduce(torch.tensor([r + 2.0]), reduce_op=op).tolist()
    nested: Any = strategy.all_reduce({"a": torch.tensor([r + 1.0]), "b": [torch.tensor([2.0]), 3]}, reduce_op="sum")
    out["nested_sum"] = {"a": nested["a"].tolist(), "b0": nested["b"][0].tolist(), "b1": nested["b"][1].tolist()}

    out["gather_2d"] = strategy.all_gather(torch.full((2, 3), float(r))).tolist()
    out["gather_0d"] = strategy.all_gather(torch.tensor(r)).tolist()
    out["gather_empty_shape"] = list(strategy.all_gather(torch.empty(0)).shape)
    mixed: Any = strategy.all_gather(
        {
            "f": torch.full((2,), r + 0.5),
            "i": torch.tensor([r, 10 + r]),
            "b": torch.tensor([r == 0, r == 1]),
            "h": torch.tensor([r + 1.0], dtype=torch.bfloat16),
            "p": Pair(torch.tensor(r * 2), "label"),
        }
    )
    out["gather_mixed"] = {
        "f": mixed["f"].tolist(),
        "i": mixed["i"].tolist(),
        "b": mixed["b"].tolist(),
        "h": mixed["h"].float().tolist(),
        "dtypes": [str(mixed[k].dtype) for k in ("f", "i", "b", "h")],
        "pair": [type(mixed["p"]).__name__, mixed["p"].left.tolist(), mixed["p"].right],
    }
    many: Any = strategy.all_gather([torch.full((1, 1, 1), float(i + r)) for i in range(30)])
    out["gather_many"] = [m.flatten().tolist() for m in many[:2]] + [len(many)]

    x = torch.full((2,), r + 1.0, requires_grad=True)
    weights = torch.tensor([[1.0], [2.0]]) * (r + 1)  # rank k's loss weighs slot j by (k + 1) * (j + 1)
    (strategy.all_gather(x, sync_grads=True) * weights).sum().backward()
    out["sync_grads"] = x.grad.tolist() if x.grad is not None else None

    out["uneven_shape"] = expect_error(lambda: strategy.all_gather(torch.zeros(2 + r)))
    out["uneven_count"] = expect_error(lambda: strategy.all_gather([torch.zeros(1)] * (2 + r)))
    out["uneven_dtype"] = expect_error(
        lambda: strategy.all_gather(torch.zeros(2, dtype=torch.float32 if r == 0 else torch.float64))
    )
    out["after_errors"] = strategy.all_reduce(torch.tensor([1.0]), reduce_op="sum").tolist()

    out["broadcast"] = strategy.broadcast({"from": r, "items": [1, "two", (3,)]} if r == 0 else None)
    out["broadcast_src1"] = strategy.broadcast(f"rank {r}", src=1)
    strategy.barrier("checks")
    out["all_true"] = strategy.reduce_boolean_decision(True)
    out["one_true_all"] = strategy.reduce_boolean_decision(r == 0)
    out["one_true_any"] = strategy.reduce_boolean_decision(r == 0, all=False)
    out["sampler"] = strategy.distributed_sampler_kwargs

    Path(outdir, f"rank{r}.json").write_text(json.dumps(out, default=list))
    strategy.teardown()
    return {"rank": r, "tensor": torch.arange(3)}


if __name__ == "__main__":
    strategy = connect_to_cpus(ParallelStrategy())
    result = MultiProcessingLauncher(strategy, start_method="fork").launch(run, strategy, sys.argv[1])
    Path(sys.argv[1], "launch_result.json").write_text(
        json.dumps(
            {"rank": result["rank"], "tensor": result["tensor"].tolist(), "device": str(result["tensor"].device)}
        )
    )
