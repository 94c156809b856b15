"""DDP on three CPU processes: the first backward is reduced in the layout DDP rebuilds its buckets in.

Usage: python stable_buckets_job.py OUTDIR; each rank writes OUTDIR/<case>-rank<N>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from fabric_core import Fabric


class OutOfOrder(nn.Module):
    """Layers registered in another order than the forward uses them, ~4.5 MB of weights (several buckets)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(600, 1)
        self.middle = nn.Linear(600, 600)
        self.stem = nn.Linear(8, 600)
        self.late = nn.Linear(600, 600)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.late(torch.relu(self.middle(torch.relu(self.stem(x)))))))


def local_grads(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """This rank's own gradients, from a plain copy of the model."""
    module.zero_grad()
    nn.functional.mse_loss(module(x), y).backward()
    return {name: p.grad.clone() for name, p in module.named_parameters()}


def run(fabric: Fabric, outdir: str, user_hook: bool) -> None:
    torch.manual_seed(0)
    plain = OutOfOrder()
    model = fabric.setup(OutOfOrder())
    model.load_state_dict(plain.state_dict())
    ddp = model._forward_module
    if user_hook:
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    names = {p: name for name, p in ddp.module.named_parameters()}
    generator = torch.Generator().manual_seed(fabric.global_rank)
    batches = [(torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator)) for _ in range(3)]

    mine = local_grads(plain, *batches[0])
    everyone = fabric.all_gather(mine)
    expected = {name: grads.mean(0) for name, grads in everyone.items()}
    record: dict[str, Any] = {}
    for step, (x, y) in enumerate(batches):
        model.zero_grad()
        fabric.backward(nn.functional.mse_loss(model(x), y))
        if step == 0:
            record["first_error"] = max(
                (p.grad - expected[names[p]]).abs().max().item() for p in ddp.module.parameters()
            )
            hooks = ddp._comm_hooks
            state = hooks[0][1] if hooks else None
            record["hook"] = type(state).__name__ if state is not None else None
            record["hook_name"] = ddp._get_ddp_logging_data().get("comm_hook")
            layout = getattr(state, "first_layout", [])
            record["first_layout"] = [[names[p] for p in group] for group in layout]
    record["rebuilt_layout"] = [
        [names[p] for p in bucket.parameters()] for bucket in ddp.reducer._get_zeros_like_grad_buckets()
    ]
    case = "user_hook" if user_hook else "default"
    Path(outdir, f"{case}-rank{fabric.global_rank}.json").write_text(json.dumps(record))


def both(fabric: Fabric, outdir: str) -> None:
    run(fabric, outdir, user_hook=False)
    run(fabric, outdir, user_hook=True)


def main(outdir: str) -> None:
    Fabric(accelerator="cpu", devices=3, strategy="ddp_spawn").launch(both, outdir)


if __name__ == "__main__":
    main(sys.argv[1])
