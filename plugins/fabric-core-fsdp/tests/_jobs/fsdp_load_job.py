"""One process (strategy "fsdp", devices=1) loads a sharded checkpoint that two processes wrote.

Compares with the full file written next to it; writes OUTDIR/result.json.
Usage: python fsdp_load_job.py CHECKPOINT_DIR OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, make_model

from fabric_core import Fabric, spec


def main(checkpoints: str, outdir: str) -> None:
    fabric = Fabric(accelerator="cpu", devices=1, strategy=spec("fsdp", auto_wrap_policy={Block}))
    fabric.launch()
    model: Any = fabric.setup_module(make_model(seed=9))
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.5))
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(Path(checkpoints, "sharded"), state)
    reference = torch.load(Path(checkpoints, "full.pt"), weights_only=True)
    names = list(reference["model"])
    out: dict[str, Any] = {"world_size": fabric.world_size, "step": state["step"]}
    out["model_equal"] = all(
        torch.equal(p.full_tensor(), reference["model"][name])
        for name, p in zip(names, model.parameters(), strict=True)
    )
    out["optimizer_equal"] = all(
        torch.equal(optimizer.state[p][key].full_tensor() if key != "step" else optimizer.state[p][key], saved[key])
        for p, saved in zip(model.parameters(), reference["optimizer"]["state"].values(), strict=True)
        for key in saved
    )
    whole = fabric.load(Path(checkpoints, "sharded"))
    out["whole_keys"] = sorted(whole)
    out["whole_model_equal"] = all(torch.equal(whole["model"][k], v) for k, v in reference["model"].items())
    Path(outdir, "result.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
