"""The 2-process DDP steps/s row under Ray (``--launcher ray``), as a ratio to the same row under ``fabric-core run``.

Two launchers cannot share processes, so this is not an interleaved row of ``run.py``: each round starts the
same job once under ``fabric-core run --devices 2`` and once on 2 Ray Train workers (alternating, A B A B, so
that load on the machine hits both alike), and each job times its own steady-state steps after a warm-up
(start-up is excluded: it is Ray's cluster and worker start, paid once per run). The ratio is Ray's median
steps/s over ``fabric-core run``'s, with every round's ratio shown. The job is ``rows_ddp``'s row: the MLP
784-256-10, batch 64 per process, gloo on 127.0.0.1, one thread per process.

    python bench/ray_ddp.py [--rounds 3] [--steps 300] [--json bench/ray_ddp.json]

Needs ``pip install -e plugins/fabric-core-ray`` (without it, the plugin is made discoverable the way its tests do).
A local Ray cluster of 2 CPUs on 127.0.0.1 is started for the run and shut down after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "fabric-core-ray"

JOB = """
import json, sys, time
import torch
import torch.nn.functional as F
from torch import nn
from fabric_core import Fabric

steps, out = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
fabric = Fabric()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer = fabric.setup(model, optimizer)
g = torch.Generator().manual_seed(fabric.global_rank)
x, y = torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g)

def step():
    optimizer.zero_grad()
    fabric.backward(F.cross_entropy(model(x), y))
    optimizer.step()

for _ in range(30):
    step()
fabric.barrier()
start = time.perf_counter()
for _ in range(steps):
    step()
fabric.barrier()
rate = steps / (time.perf_counter() - start)
if fabric.global_rank == 0:
    with open(out, "w") as f:
        json.dump({"steps_per_s": rate, "world_size": fabric.world_size,
                   "environment": type(fabric.strategy.cluster_environment).__name__}, f)
"""


def _under_run(job: Path, steps: int, out: Path) -> dict[str, object]:
    command = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--strategy", "ddp"]
    subprocess.run([*command, "--devices", "2", str(job), str(steps), str(out)], check=True, timeout=600)
    return json.loads(out.read_text())


def _under_ray(job: Path, steps: int, out: Path, storage: Path) -> dict[str, object]:
    import fabric_core_ray

    fabric_core_ray.run(
        job, 2, args=[str(steps), str(out)], accelerator="cpu", strategy="ddp", storage_path=str(storage)
    )
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", default=None, help="Write the figures here too.")
    options = parser.parse_args()

    import ray

    temp = Path(tempfile.mkdtemp(prefix="fcrb-", dir="/tmp"))
    stack = contextlib.ExitStack()
    if str(PLUGIN) not in sys.path:
        sys.path.insert(0, str(PLUGIN))
    if not any(ep.name == "ray" for ep in metadata.entry_points(group="fabric_core.plugins")):
        from fabric_core.testing import fake_distribution

        folder = stack.enter_context(
            fake_distribution("fabric-core-ray", entry_points={"ray": "fabric_core_ray._plugin"}, root=temp / "d")
        )
        os.environ["PYTHONPATH"] = os.pathsep.join([str(folder), str(PLUGIN), os.environ.get("PYTHONPATH", "")])
    os.environ.pop("RAY_ADDRESS", None)
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=str(temp))
    job = temp / "ddp_steps_job.py"
    job.write_text(JOB)
    runs, rays = [], []
    try:
        for index in range(options.rounds):
            runs.append(_under_run(job, options.steps, temp / f"run{index}.json"))
            rays.append(_under_ray(job, options.steps, temp / f"ray{index}.json", temp / "results"))
            run_rate, ray_rate = runs[-1]["steps_per_s"], rays[-1]["steps_per_s"]
            print(f"round {index}: fabric-core run {run_rate:.1f} steps/s, ray {ray_rate:.1f} steps/s", flush=True)
    finally:
        ray.shutdown()
        stack.close()
        shutil.rmtree(temp, ignore_errors=True)
    assert {r["environment"] for r in rays} == {"RayEnvironment"}, rays
    assert {r["world_size"] for r in runs + rays} == {2}
    run_rate = statistics.median(float(r["steps_per_s"]) for r in runs)
    ray_rate = statistics.median(float(r["steps_per_s"]) for r in rays)
    per_round = [float(a["steps_per_s"]) / float(b["steps_per_s"]) for a, b in zip(rays, runs)]
    figures = {
        "row": "ddp_steps under --launcher ray / under fabric-core run",
        "fabric_core_run_steps_per_s": run_rate,
        "ray_steps_per_s": ray_rate,
        "ratio": ray_rate / run_rate,
        "ratio_per_round": per_round,
        "goal": ">= 0.95",
        "rounds": options.rounds,
        "steps": options.steps,
    }
    print(json.dumps(figures, indent=2))
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
