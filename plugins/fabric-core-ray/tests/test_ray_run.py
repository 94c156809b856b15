"""fabric-core on a real local Ray cluster: Ray Train starts the processes, Fabric trains across them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fabric_core_ray

pytestmark = [pytest.mark.ray, pytest.mark.multiprocess]
JOBS = Path(__file__).parent / "_jobs"


@pytest.mark.timeout(150)
def test_ddp_on_two_ray_workers_averages_gradients(ray_cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = fabric_core_ray.run(
        JOBS / "ddp_grads.py",
        num_workers=2,
        args=[str(out)],
        accelerator="cpu",
        strategy="ddp",
        storage_path=str(tmp_path / "ray_results"),
    )
    assert result.error is None
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert {(r["world_size"], r["environment"], r["strategy"], r["backend"]) for r in ranks} == {
        (2, "RayEnvironment", "DDPStrategy", "gloo")
    }
    # Each rank saw its own data, so the local gradients differ; DDP made both the mean of the two.
    local = [torch.tensor([g for grads in r["local_grad"] for g in grads]) for r in ranks]
    assert not torch.allclose(local[0], local[1])
    for r in ranks:
        torch.testing.assert_close(
            torch.tensor([g for grads in r["synced_grad"] for g in grads]), (local[0] + local[1]) / 2
        )
    assert ranks[0]["params"] == ranks[1]["params"]
