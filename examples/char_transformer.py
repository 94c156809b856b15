"""Train a tiny character-level transformer on a bundled text file, then sample from it.

Runs on CPU in well under a minute. The same script runs on one process or many, with any installed strategy:

    python examples/char_transformer.py
    fabric-core run --accelerator cpu --devices 2 --strategy ddp examples/char_transformer.py
    fabric-core run --accelerator cpu --devices 2 --strategy fsdp examples/char_transformer.py
    fabric-core run --accelerator cpu --devices 2 --strategy deepspeed_stage_2 examples/char_transformer.py

Metrics go to ``<out>/logs/version_<n>/metrics.csv``.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from fabric_core import Fabric
from fabric_core.loggers import CSVLogger

CORPUS = Path(__file__).parent / "data" / "tiny_corpus.txt"


class CharDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Every window of ``block_size + 1`` characters: the input and the same text shifted by one."""

    def __init__(self, ids: torch.Tensor, block_size: int) -> None:
        self.ids = ids
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.ids) - self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.ids[index : index + self.block_size + 1]
        return chunk[:-1], chunk[1:]


class CharTransformer(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, d_model: int, num_layers: int, num_heads: int) -> None:
        super().__init__()
        self.block_size = block_size
        self.token = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(block_size, d_model)
        # Built one by one rather than by `nn.TransformerEncoder`, which deep-copies one layer: the copies would
        # start from the same weights, and copies of parameters that DeepSpeed stage 3 created partitioned
        # (under `fabric.init_module()`) are broken.
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d_model, num_heads, dim_feedforward=4 * d_model, dropout=0.1, batch_first=True, norm_first=True
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        positions = torch.arange(length, device=ids.device)
        x = self.token(ids) + self.position(positions)
        # Each position may look only at itself and earlier characters.
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=ids.device)
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits


@torch.no_grad()
def sample(model: nn.Module, prompt: torch.Tensor, length: int, block_size: int, seed: int) -> torch.Tensor:
    """Extend ``prompt`` (1-D ids) by ``length`` characters drawn from the model's predictions."""
    generator = torch.Generator().manual_seed(seed)
    ids = prompt
    for _ in range(length):
        logits = model(ids[-block_size:].unsqueeze(0))[0, -1].float()
        probabilities = torch.softmax(logits / 0.8, dim=-1).cpu()
        ids = torch.cat([ids, torch.multinomial(probabilities, 1, generator=generator).to(ids.device)])
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="Optimizer steps.")
    parser.add_argument("--batch-size", type=int, default=32, help="Sequences per process and step.")
    parser.add_argument("--block-size", type=int, default=64, help="Characters of context.")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--max-norm", type=float, default=1.0, help="Clip the gradient norm to this (0: off).")
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--sample-length", type=int, default=200)
    parser.add_argument("--out", default=os.path.join("runs", "char_transformer"))
    args = parser.parse_args()

    # No arguments: `fabric-core run --devices 2 --strategy ...` decides (one CPU process without it).
    fabric = Fabric(loggers=CSVLogger(root_dir=args.out, name="logs"))
    fabric.seed_everything(42)
    # torch's fused inference path for encoder layers is far slower on the CPU at these sizes (about 40 ms
    # against 1 ms a call with this torch): evaluation and sampling use the ordinary path.
    torch.backends.mha.set_fastpath_enabled(False)

    text = CORPUS.read_text(encoding="utf-8")
    vocab = sorted(set(text))
    to_id = {ch: i for i, ch in enumerate(vocab)}
    ids = torch.tensor([to_id[ch] for ch in text], dtype=torch.long)
    split = int(0.9 * len(ids))
    train = DataLoader(
        CharDataset(ids[:split], args.block_size), batch_size=args.batch_size, shuffle=True, drop_last=True
    )
    val = DataLoader(CharDataset(ids[split:], args.block_size), batch_size=64)
    # Under ddp/fsdp/deepspeed each process gets its own share of the windows (a DistributedSampler).
    train, val = fabric.setup_dataloaders(train, val)

    sizes = (len(vocab), args.block_size, args.d_model, args.layers, args.heads)
    with fabric.init_module():
        model = CharTransformer(*sizes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    with torch.device("meta"):  # counted on a shapes-only copy: sharding strategies hold parts of the real one
        size = sum(p.numel() for p in CharTransformer(*sizes).parameters())
    fabric.print(
        f"{len(text)} characters, vocabulary {len(vocab)}, {size} parameters, "
        f"world size {fabric.world_size}, strategy {type(fabric.strategy).__name__}"
    )

    max_norm = args.max_norm
    step, window, history = 0, [], []  # losses of this log interval; averages of the past ones
    model.train()
    while step < args.steps:
        for inputs, targets in train:
            logits = model(inputs)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
            optimizer.zero_grad()
            fabric.backward(loss)
            if max_norm > 0:
                try:
                    fabric.clip_gradients(model, optimizer, max_norm=max_norm)
                except NotImplementedError as exc:
                    # DeepSpeed clips inside its own step (`gradient_clipping` in its config), not from outside.
                    fabric.print(f"not clipping gradients: {exc}")
                    max_norm = 0.0
            optimizer.step()
            window.append(loss.detach())
            step += 1
            if step % args.log_every == 0 or step == args.steps:
                average = fabric.all_reduce(torch.stack(window).mean()).item()
                window.clear()
                history.append(average)
                fabric.log("train/loss", average, step=step)
                fabric.print(f"step {step:4d}  train loss {average:.4f}")
            if step == args.steps:
                break

    model.eval()
    total, count = torch.zeros((), device=fabric.device), torch.zeros((), device=fabric.device)
    with torch.no_grad():
        for inputs, targets in val:
            logits = model(inputs)
            total += nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
            count += targets.numel()
    val_loss = (fabric.all_reduce(total, reduce_op="sum") / fabric.all_reduce(count, reduce_op="sum")).item()
    fabric.log("val/loss", val_loss, step=step)
    fabric.print(f"val loss {val_loss:.4f} (perplexity {math.exp(val_loss):.2f})")
    fabric.print(f"train loss {history[0]:.4f} -> {history[-1]:.4f}")

    # Every process samples (the same characters: same seed), because a sharded model's forward needs all of
    # them; only rank 0 prints.
    prompt = torch.tensor([to_id[ch] for ch in "The river "], device=fabric.device)
    generated = sample(model, prompt, args.sample_length, args.block_size, seed=0)
    fabric.print("sample: " + repr("".join(vocab[i] for i in generated.tolist())))
    fabric.logger.finalize("success")


if __name__ == "__main__":
    main()
