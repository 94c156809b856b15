"""GPU benchmark: a ~100M-parameter decoder-only transformer, raw PyTorch vs fabric-core vs Lightning Fabric.

One process measures every variant, interleaved: for each precision (``bf16-mixed``, ``bf16-true``) and mode
(eager, ``torch.compile``), each framework trains its own copy of the same model (same seed, same batches)
for ``--steps`` synchronized steps per round, the frameworks taking turns in a rotating order for
``--rounds`` rounds. Reported per variant: the median steps/s of each framework and the median of the
per-round ratios to raw PyTorch.

Also measured:

- MFU as fabric-core's ``throughput`` callback reports it (``throughput/device/mfu``), beside MFU worked out
  by hand: the FLOPs of one step from the model's shapes (``6 * tokens * matmul parameters`` plus attention)
  over the synchronized step time and the device's peak from the datasheet. ``measure_flops`` (a FLOP
  counter on the meta device) is printed beside the formula.
- How long ``fabric.save`` of the model and its Adam state blocks the loop: synchronous, and with
  ``AsyncCheckpointIO`` (until the host snapshot is taken), against raw ``torch.save`` of the state dicts.

    python bench/gpu_transformer.py --json out.json          # on a CUDA GPU
    python bench/gpu_transformer.py --device cpu --tiny      # a smoke run of the same code on the CPU

``--budget`` (seconds) bounds the whole run: variants that would start after it are reported as skipped.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

RAW, CORE, LIGHTNING = "raw", "fabric-core", "lightning"


@dataclass(frozen=True)
class Config:
    vocab: int = 32000
    seq: int = 1024
    dim: int = 768
    layers: int = 12
    heads: int = 12

    def matmul_params(self) -> int:
        """Parameters that take part in a matrix product per token: the blocks' linears and the output head."""
        return self.layers * 12 * self.dim * self.dim + self.vocab * self.dim

    def flops_per_step(self, batch: int) -> float:
        """Training FLOPs of one step by formula: 3x the forward's (2 per multiply-add), causal mask not discounted."""
        tokens = batch * self.seq
        matmuls = 2 * tokens * self.matmul_params()
        attention = 2 * 2 * tokens * self.seq * self.dim * self.layers  # Q @ K^T and P @ V
        return 3.0 * (matmuls + attention)


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim, bias=False)
        self.out = nn.Linear(4 * cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        loss: torch.Tensor = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        return loss


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Runner:
    """One framework's copy of the model and optimizer, and its training step."""

    def __init__(self, name: str, step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], state: Any) -> None:
        self.name, self.step, self.state = name, step, state
        self.fabric: Any = None
        self.monitor: Any = None
        self.compiled: bool | None = None


def _new_model(cfg: Config, seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(cfg)


def raw_runner(cfg: Config, device: torch.device, precision: str, compiled: bool) -> Runner:
    model = _new_model(cfg, 0).to(device)
    if precision == "bf16-true":
        model = model.to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    forward: Any = torch.compile(model) if compiled else model
    mixed = precision == "bf16-mixed"

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed):
            loss: torch.Tensor = forward(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return Runner(RAW, step, {"model": model, "optimizer": optimizer})


def fabric_runner(
    name: str, cfg: Config, device: torch.device, precision: str, compiled: bool, flops_per_step: float, window: int
) -> Runner:
    """The same loop written for a Fabric (``setup``, ``fabric.backward``); fabric-core's logs throughput."""
    monitor = None
    if name == CORE:
        from fabric_core import Fabric
        from fabric_core.callbacks.throughput import ThroughputMonitor

        # Logged every step; `compute()` after the last round gives the rates of its last `window` steps, which
        # start once the host is a steady distance ahead of the GPU (it runs freely ahead for the first few).
        monitor = ThroughputMonitor(log_every_n_steps=1, window=window, flops_per_step=flops_per_step)
        fabric: Any = Fabric(accelerator=device.type, devices=1, precision=precision, callbacks=[monitor])
    else:
        from lightning.fabric import Fabric as LightningFabric

        fabric = LightningFabric(accelerator=device.type, devices=1, precision=precision)
    with fabric.init_module():
        model: Any = _new_model(cfg, 0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    if compiled:
        model = torch.compile(model)
    model, optimizer = fabric.setup(model, optimizer)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = model(x, y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    runner = Runner(name, step, {"model": model, "optimizer": optimizer})
    runner.fabric, runner.monitor = fabric, monitor
    # Both Fabrics strip torch.compile for their wrapping and compile again: the module that runs is compiled.
    runner.compiled = type(model._forward_module).__name__ == "OptimizedModule"
    return runner


def _timed_steps(runner: Runner, batches: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    for x, y in batches:
        loss = runner.step(x, y)
    _sync(device)
    elapsed = time.perf_counter() - start
    if not math.isfinite(loss.item()):
        raise RuntimeError(f"{runner.name}: the loss is {loss.item()}")
    return elapsed


def measure_variant(
    cfg: Config,
    device: torch.device,
    batch: int,
    precision: str,
    compiled: bool,
    frameworks: list[str],
    steps: int,
    rounds: int,
    warmup: int,
) -> dict[str, Any]:
    flops = cfg.flops_per_step(batch)
    generator = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randint(cfg.vocab, (batch, cfg.seq), generator=generator).to(device),
            torch.randint(cfg.vocab, (batch, cfg.seq), generator=generator).to(device),
        )
        for _ in range(4)
    ]
    timed = [batches[i % len(batches)] for i in range(steps)]
    started = time.perf_counter()
    runners = []
    for name in frameworks:
        if name == RAW:
            runners.append(raw_runner(cfg, device, precision, compiled))
        else:
            runners.append(fabric_runner(name, cfg, device, precision, compiled, flops, max(1, steps - 4)))
    warmup_seconds = {}
    for runner in runners:  # compilation, cuBLAS/flash-attention plans, the allocator's first blocks
        t0 = time.perf_counter()
        for x, y in batches[:warmup]:
            runner.step(x, y)
        _sync(device)
        warmup_seconds[runner.name] = time.perf_counter() - t0
    seconds: dict[str, list[float]] = {r.name: [] for r in runners}
    for round_index in range(rounds):
        shift = round_index % len(runners)
        for runner in runners[shift:] + runners[:shift]:
            seconds[runner.name].append(_timed_steps(runner, timed, device))
    result: dict[str, Any] = {
        "precision": precision,
        "compiled": compiled,
        "batch": batch,
        "tokens_per_step": batch * cfg.seq,
        "warmup_s": warmup_seconds,
        "steps_per_s": {name: steps / statistics.median(values) for name, values in seconds.items()},
        "round_seconds": seconds,
        "flops_per_step_formula": flops,
        "runs_compiled": {r.name: r.compiled for r in runners if r.compiled is not None},
    }
    if compiled and not all(result["runs_compiled"].values()):
        raise RuntimeError(f"a Fabric dropped torch.compile: {result['runs_compiled']}")
    if RAW in seconds:
        result["ratio_to_raw"] = {
            name: statistics.median(r / s for r, s in zip(seconds[RAW], values))
            for name, values in seconds.items()
            if name != RAW
        }
    core = next((r for r in runners if r.name == CORE), None)
    if core is not None and core.monitor is not None:
        metrics = core.monitor.compute()
        result["callback"] = {k: v for k, v in metrics.items() if k.startswith("throughput/")}
        peak = _peak_flops(device)
        step_seconds = statistics.median(seconds[CORE]) / steps
        result["mfu_by_hand"] = flops / step_seconds / peak if peak else None
        result["peak_flops"] = peak
        result["core_step_ms"] = 1000 * step_seconds
    result["variant_s"] = time.perf_counter() - started
    result["_runners"] = runners
    return result


def _peak_flops(device: torch.device) -> float | None:
    """The datasheet's dense bf16 peak for this card, looked up independently of the callback's table."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device).lower()
    datasheet = {"h100 80gb hbm3": 989.4e12, "h100 sxm": 989.4e12, "h200": 989.4e12, "h100 pcie": 756e12}
    for key, value in datasheet.items():
        if key in name:
            return value
    from fabric_core.utilities.throughput import get_available_flops

    found = get_available_flops(device, torch.bfloat16)
    return float(found) if found else None


def measure_save(runners: list[Runner], device: torch.device, rounds: int = 3) -> dict[str, float]:
    """Median seconds the loop is blocked by a save of model + Adam state: raw, fabric-core sync and async."""
    from fabric_core import Fabric
    from fabric_core.io.async_io import AsyncCheckpointIO

    by_name = {r.name: r for r in runners}
    core = by_name[CORE]
    background_io = AsyncCheckpointIO()
    background = Fabric(accelerator=device.type, devices=1, plugins=[background_io])
    results: dict[str, list[float]] = {"torch.save": [], "fabric.save": [], "fabric.save async": []}
    state = core.state
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_CHECKPOINT_DIR")) as tmp:
        root = Path(tmp)
        for i in range(rounds + 1):
            measures: dict[str, Callable[[], Any]] = {
                "torch.save": lambda: torch.save(
                    {"model": state["model"].state_dict(), "optimizer": state["optimizer"].state_dict()},
                    root / "raw.pt",
                ),
                "fabric.save": lambda: core.fabric.save(root / "sync.pt", state),
                "fabric.save async": lambda: background.save(root / "async.pt", state),
            }
            for name, save in measures.items():
                _sync(device)
                start = time.perf_counter()
                save()
                elapsed = time.perf_counter() - start
                background_io.wait()
                os.sync()
                if i:  # the first round warms the page cache and the pinned buffers
                    results[name].append(elapsed)
        sizes = {p.name: p.stat().st_size for p in root.iterdir()}
    summary = {name: statistics.median(values) for name, values in results.items()}
    summary["bytes"] = float(max(sizes.values()))
    return summary


def measured_flops(cfg: Config, batch: int) -> float | None:
    """FLOPs of one training step counted by ``measure_flops`` on a meta-device copy (no memory, no time)."""
    from fabric_core.utilities.throughput import measure_flops

    with torch.device("meta"):
        model = GPT(cfg)
        x = torch.randint(cfg.vocab, (batch, cfg.seq))
    return float(measure_flops(model, lambda: model(x, x), lambda loss: loss))


def pick_batch(device: torch.device, cfg: Config, requested: int | None) -> int:
    """The largest of 8, 16, 32, 64 whose estimated peak (about 0.7 MB a token, 3 models' states) fits 60%."""
    if requested:
        return requested
    if device.type != "cuda":
        return 2
    total = torch.cuda.get_device_properties(device).total_memory
    fits = [b for b in (8, 16, 32, 64) if b * cfg.seq * 0.7e6 + 6e9 < 0.6 * total]
    return fits[-1] if fits else 4


def table(results: list[dict[str, Any]], frameworks: list[str]) -> str:
    lines = [
        "| precision | compile | batch x seq | "
        + " | ".join(f"{f} steps/s" for f in frameworks)
        + " | "
        + " | ".join(f"{f} / raw" for f in frameworks if f != RAW)
        + " | MFU (callback) | MFU (by hand) |",
        "|" + "---|" * (3 + 2 * len(frameworks) - 1 + 2),
    ]
    for r in results:
        if r.get("skipped"):
            lines.append(f"| {r['precision']} | {'yes' if r['compiled'] else 'no'} | skipped: {r['skipped']} |")
            continue
        rates = " | ".join(f"{r['steps_per_s'].get(f, float('nan')):.2f}" for f in frameworks)
        ratios = " | ".join(f"{r.get('ratio_to_raw', {}).get(f, float('nan')):.3f}" for f in frameworks if f != RAW)
        mfu_cb = (r.get("callback") or {}).get("throughput/device/mfu")
        mfu_hand = r.get("mfu_by_hand")
        seq = r["tokens_per_step"] // r["batch"]
        lines.append(
            f"| {r['precision']} | {'yes' if r['compiled'] else 'no'} | {r['batch']} x {seq}"
            f" | {rates} | {ratios} | {_pct(mfu_cb)} | {_pct(mfu_hand)} |"
        )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="A few-layer model (smoke runs on the CPU).")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--steps", type=int, default=15, help="Timed steps per framework per round.")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--precisions", default="bf16-mixed,bf16-true")
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--budget", type=float, default=240.0, help="Seconds; later variants are skipped.")
    parser.add_argument("--json", default=None, help="Write the results here.")
    args = parser.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_transformer: no CUDA device visible", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = Config(vocab=512, seq=64, dim=64, layers=2, heads=4) if args.tiny else Config()
    frameworks = [RAW, CORE]
    try:
        import lightning.fabric  # noqa: F401

        frameworks.append(LIGHTNING)
    except ImportError:
        print("gpu_transformer: lightning is not installed; measuring raw and fabric-core only", file=sys.stderr)
    batch = pick_batch(device, cfg, args.batch)
    with torch.device("meta"):
        params = sum(p.numel() for p in GPT(cfg).parameters())
    header: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "params": params,
        "config": asdict(cfg),
        "batch": batch,
        "steps_per_round": args.steps,
        "rounds": args.rounds,
        "flops_per_step_formula": cfg.flops_per_step(batch),
    }
    try:
        header["flops_per_step_measure_flops"] = measured_flops(cfg, batch)
    except Exception as error:  # reported, not fatal: the formula stands on its own
        header["flops_per_step_measure_flops"] = f"{type(error).__name__}: {error}"
    print(json.dumps(header), flush=True)

    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    save: dict[str, float] | None = None
    for mode in args.modes.split(","):
        for precision in args.precisions.split(","):
            compiled = mode == "compile"
            if time.perf_counter() - started > args.budget:
                results.append({"precision": precision, "compiled": compiled, "skipped": "over --budget"})
                continue
            try:
                result = measure_variant(
                    cfg, device, batch, precision, compiled, frameworks, args.steps, args.rounds, args.warmup
                )
            except Exception as error:
                results.append(
                    {"precision": precision, "compiled": compiled, "skipped": f"{type(error).__name__}: {error}"[:300]}
                )
                print(f"gpu_transformer: {precision} compile={compiled} failed: {error!r}", file=sys.stderr, flush=True)
                continue
            runners = result.pop("_runners")
            if save is None and precision == "bf16-mixed" and not compiled:
                try:
                    save = measure_save(runners, device)
                except Exception as error:
                    save = {"error": f"{type(error).__name__}: {error}"[:300]}  # type: ignore[dict-item]
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "round_seconds"}), flush=True)
            del runners
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print()
    print(f"{header['device']}, torch {header['torch']}, {params / 1e6:.0f}M parameters, batch {batch} x {cfg.seq}")
    print(table(results, frameworks))
    if save:
        print("\nsave of model + AdamW state, seconds the loop is blocked (median):")
        print(json.dumps(save))
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "results": results, "save": save}, indent=1))
    failed = [r for r in results if r.get("skipped") and r["skipped"] != "over --budget"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
