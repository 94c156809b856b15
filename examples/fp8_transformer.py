"""Float8 training of a small decoder-only transformer, checked against the same run in bfloat16.

The model (about 26M parameters: token and position embeddings, 8 pre-norm blocks of causal self-attention and
a GELU MLP, an output head; every ``nn.Linear`` dimension a multiple of 16, as float8 matrix multiplies need)
trains twice on one device, from the same initial weights on the same batches:

1. ``bf16``: ``Fabric(precision="bf16-true")``, every matmul in bfloat16;
2. ``fp8``: the same, but the blocks' ``nn.Linear`` layers are swapped for torchao's ``Float8Linear``
   (``torchao.float8.convert_to_float8_training``): their inputs, weights and output gradients are cast to
   float8 with a dynamic per-tensor scale and multiplied with ``torch._scaled_mm``. The output head stays in
   bfloat16, as Lightning's example keeps its decoder (a vocabulary size need not be a multiple of 16).

Both runs use fabric-core's ``ModelParallelStrategy`` (the ``fabric-core-fsdp`` plugin, as Lightning's float8
example does) on one process: its ``parallelize_fn`` converts the layers to float8 (fp8 run only) and applies
FSDP2's ``fully_shard`` to each block and to the whole model, over a data-parallel mesh of size 1 here, and
with ``--compile`` returns ``torch.compile(model)``. (With one process ``fully_shard`` shards nothing; the point
is the wiring that a multi-GPU float8 run uses, as in Lightning's example.)

``bf16-true`` rather than ``bf16-mixed``: float8 training keeps bfloat16 as its high-precision dtype, the
parameters are bfloat16 as in Lightning's example, and the two runs then differ only in the float8 matmuls
(with ``bf16-mixed`` the float32 master weights and autocast would blur that comparison and cost memory).

The task learns in a few dozen steps: each sequence follows a fixed random permutation of the vocabulary
(``next = perm[token]`` from a random first token), so the loss falls from ``ln(vocab)`` as the blocks learn the
map. The last line is the verdict, and the exit code follows it::

    fp8 check: PASS <details>   (exit 0)  at least one Float8Linear, finite fp8 losses, the fp8 loss fell
                                           (mean of the last 5 steps < 0.8 x mean of the first 5), and the
                                           fp8 run's last-5 mean is within 10% of bf16's (or 2% of bf16's
                                           first-5 mean, where the loss nears zero), and so is its mean
                                           loss over all steps (within 10%)
    fp8 check: SKIP <reason>    (exit 0)  no CUDA, compute capability below 8.9, or torchao not importable
    fp8 check: FAIL <details>   (exit 1)  a criterion missed, or an exception (its type and message)

    python examples/fp8_transformer.py --steps 30            # one GPU of compute capability 8.9+ (H100, L4, ...)
    python examples/fp8_transformer.py --device cpu --dim 128 --layers 2 --vocab 256 --seq-len 64 --steps 30

``--device cpu`` runs the same code on the CPU, where torch has float8 ``_scaled_mm`` kernels (slow; a check of
the wiring, not of speed). Step times are synchronized wall-clock milliseconds, the median after the warm-up.
Needs ``pip install torchao`` (not a fabric-core dependency).

Speed: float8 pays off only on large matrix products. Measured on an H200 (docs/benchmarks.md), at this
width (512) a float8 step took 3.05x as long as a bfloat16 one in eager mode and 1.35x with ``--compile``; at
``--dim 4096 --heads 32 --layers 4 --batch-size 8 --seq-len 2048 --compile`` it took 0.72x (1.39x the speed).
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PREFIX = "fp8 check:"
#: The fp8 run's final loss may differ from the bf16 run's by REL_TOLERANCE of that final loss or, where the
#: loss nears zero, by FLOOR_TOLERANCE of the bf16 run's starting loss (about 0.13 nats here).
REL_TOLERANCE = 0.10
FLOOR_TOLERANCE = 0.02
#: The fp8 loss must fall: mean of the last WINDOW steps < LEARN_RATIO x mean of the first WINDOW steps.
LEARN_RATIO = 0.8
WINDOW = 5
WARMUP_STEPS = 5
MIN_CAPABILITY = (8, 9)  # Ada and Hopper: the first with float8 tensor cores


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then a GELU MLP, each added to the residual."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, dim // self.heads).unbind(2)
        attended = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, dim))
        out: Tensor = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return out


class DecoderLM(nn.Module):
    """Token + learned position embeddings, ``layers`` blocks, a final norm and the output head."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, 4 * dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.head(self.norm(x))
        return logits


def keep_in_high_precision(module: nn.Module, fqn: str) -> bool:
    """``module_filter_fn`` for torchao: convert every Linear but the output head."""
    return fqn != "head"


def parallelize(model: nn.Module, device_mesh: Any, float8: bool, compile_model: bool) -> nn.Module:
    """The strategy's ``parallelize_fn``: float8 layers (fp8 run only), FSDP2 per block and overall, compile."""
    from torch.distributed.fsdp import fully_shard

    if float8:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=keep_in_high_precision)
    mesh = device_mesh["data_parallel"]
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if not compile_model:
        return model
    compiled = torch.compile(model)
    assert isinstance(compiled, nn.Module)  # an OptimizedModule around the sharded model
    return compiled


def make_batches(args: argparse.Namespace) -> list[tuple[Tensor, Tensor]]:
    """``args.steps`` batches of permutation chains: ``seq[t + 1] = perm[seq[t]]`` from a random first token."""
    generator = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(args.vocab, generator=generator)
    batches = []
    for _ in range(args.steps):
        seq = torch.empty(args.batch_size, args.seq_len + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(args.vocab, (args.batch_size,), generator=generator)
        for t in range(args.seq_len):
            seq[:, t + 1] = perm[seq[:, t]]
        batches.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return batches


@dataclass(frozen=True)
class RunResult:
    """One training run: its per-step losses and synchronized step times, and how many Float8Linear it had."""

    name: str
    losses: list[float]
    step_ms: list[float]
    float8_layers: int

    @property
    def first(self) -> float:
        return statistics.fmean(self.losses[:WINDOW])

    @property
    def last(self) -> float:
        return statistics.fmean(self.losses[-WINDOW:])

    @property
    def mean(self) -> float:
        return statistics.fmean(self.losses)

    @property
    def median_ms(self) -> float:
        warm_up = min(WINDOW, len(self.step_ms) // 3)  # the first steps pay for CUDA/cuBLAS setup and compiling
        return statistics.median(self.step_ms[warm_up:])


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(name: str, args: argparse.Namespace, batches: list[tuple[Tensor, Tensor]]) -> RunResult:
    """Train a fresh model from ``args.seed`` on ``batches``; ``name == "fp8"`` converts its Linear layers."""
    from fabric_core import Fabric
    from fabric_core.strategies import ModelParallelStrategy

    parallelize_fn = partial(parallelize, float8=name == "fp8", compile_model=args.compile)
    strategy = ModelParallelStrategy(parallelize_fn=parallelize_fn)
    fabric = Fabric(accelerator=args.device, devices=1, precision="bf16-true", strategy=strategy)
    fabric.launch()
    torch.manual_seed(args.seed)  # the same initial weights in both runs
    model = fabric.setup_module(DecoderLM(args.vocab, args.dim, args.layers, args.heads, args.seq_len))
    float8_layers = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    parameters = sum(p.numel() for p in model.parameters())
    fabric.print(f"[{name}] {parameters / 1e6:.1f}M parameters, {float8_layers} Float8Linear layers")
    optimizer = fabric.setup_optimizers(
        torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    )
    assert not isinstance(optimizer, tuple)  # one optimizer in, one out
    # A short linear warm-up: without it Adam's first large steps make the loss jump about, which would make
    # the two runs' last losses differ for reasons other than float8.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))

    losses, step_ms = [], []
    for step, (x, y) in enumerate(batches):
        x, y = x.to(fabric.device), y.to(fabric.device)
        synchronize(fabric.device)
        start = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        fabric.backward(loss)
        fabric.clip_gradients(model, optimizer, max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        synchronize(fabric.device)
        step_ms.append((time.perf_counter() - start) * 1e3)
        losses.append(loss.item())
        if step % 10 == 0 or step == len(batches) - 1:
            fabric.print(f"[{name}] step {step:3d}  loss {losses[-1]:.4f}  {step_ms[-1]:.1f} ms")
    return RunResult(name, losses, step_ms, float8_layers)


def judge(bf16: RunResult, fp8: RunResult) -> tuple[bool, str]:
    """The verdict and its details: float8 layers present, finite losses, learning, agreement with bf16."""
    tolerance = max(REL_TOLERANCE * bf16.last, FLOOR_TOLERANCE * bf16.first)
    difference = abs(fp8.last - bf16.last)
    details = (
        f"{fp8.float8_layers} Float8Linear; loss mean of first/last {WINDOW} steps: "
        f"bf16 {bf16.first:.4f} -> {bf16.last:.4f}, fp8 {fp8.first:.4f} -> {fp8.last:.4f} "
        f"(|diff| {difference:.4f}, tolerance {tolerance:.4f}); mean over all steps: bf16 {bf16.mean:.4f}, "
        f"fp8 {fp8.mean:.4f}; median step ms: bf16 {bf16.median_ms:.2f}, "
        f"fp8 {fp8.median_ms:.2f} ({fp8.median_ms / bf16.median_ms:.2f}x)"
    )
    problems = []
    if fp8.float8_layers < 1:
        problems.append("no Float8Linear after conversion")
    for run in (bf16, fp8):
        if not all(math.isfinite(v) for v in run.losses):
            problems.append(f"{run.name} losses not finite")
    if not fp8.last < LEARN_RATIO * fp8.first:
        problems.append(f"fp8 loss did not fall below {LEARN_RATIO} x its start")
    if not difference <= tolerance:  # also true for NaN
        problems.append("fp8 final loss too far from bf16's")
    if not abs(fp8.mean - bf16.mean) <= REL_TOLERANCE * bf16.mean:  # the whole curve, not only its end
        problems.append(f"fp8 mean loss over all steps more than {REL_TOLERANCE:.0%} from bf16's")
    if problems:
        return False, "; ".join(problems) + " | " + details
    return True, details


def skip_reason(device: str) -> str | None:
    """Why float8 training cannot run here, or ``None`` when it can."""
    if device == "cuda":
        if not torch.cuda.is_available():
            return "no CUDA device (pass --device cpu to run on the CPU)"
        capability = torch.cuda.get_device_capability()
        if capability < MIN_CAPABILITY:
            name = torch.cuda.get_device_name()
            return f"{name} has compute capability {capability[0]}.{capability[1]}, float8 needs 8.9 or higher"
    try:
        importlib.import_module("torchao.float8")
    except Exception as error:  # ImportError, or a torchao built for another torch failing as it loads
        return f"torchao not importable ({type(error).__name__}: {error}); pip install torchao"
    if device == "cpu":
        a = torch.ones(16, 16).to(torch.float8_e4m3fn)
        one = torch.ones((), dtype=torch.float32)
        try:
            torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        except Exception as error:
            return f"this torch has no float8 matmul on the CPU ({type(error).__name__}: {error})"
    return None


def end_process_group() -> None:
    """Leave the process group before the verdict, so that no shutdown warning is printed after it."""
    try:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    except Exception as error:  # the verdict matters more than a clean shutdown
        print(f"destroy_process_group: {type(error).__name__}: {error}", file=sys.stderr)
    sys.stderr.flush()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (adds compile time)")
    args = parser.parse_args(argv)
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps {args.steps}: needs at least {2 * WINDOW} (first and last {WINDOW} are compared)")
    if args.dim % 16 or args.dim % args.heads:
        parser.error(f"--dim {args.dim}: float8 needs a multiple of 16, and of --heads {args.heads}")
    if (args.batch_size * args.seq_len) % 16:
        parser.error("--batch-size x --seq-len must be a multiple of 16 (the inner dimension of the weight gradient)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exit_:
        if exit_.code in (0, None):  # --help
            raise
        print(f"{PREFIX} FAIL bad arguments (see the usage above)", flush=True)
        return 1
    try:
        reason = skip_reason(args.device)
        if reason is not None:
            print(f"{PREFIX} SKIP {reason}", flush=True)
            return 0
        batches = make_batches(args)
        bf16 = train("bf16", args, batches)
        fp8 = train("fp8", args, batches)
        passed, details = judge(bf16, fp8)
    except Exception as error:
        traceback.print_exc()
        end_process_group()
        message = " ".join(str(error).split())[:500]
        print(f"{PREFIX} FAIL {type(error).__name__}: {message}", flush=True)
        return 1
    end_process_group()
    print(f"{PREFIX} {'PASS' if passed else 'FAIL'} {details}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
