"""Offline inputs for running LitGPT's commands: a corpus, a BPE tokenizer, a tiny model config, and data.

Nothing here downloads anything. The tokenizer is trained on the corpus with the ``tokenizers`` library and
saved as LitGPT's ``Tokenizer`` reads it (``tokenizer.json``, ``tokenizer_config.json``,
``generation_config.json``). ``TokenText`` is a LitGPT ``DataModule`` for ``litgpt pretrain --data
litgpt_offline.TokenText``: it tokenizes one text file into fixed-length rows, in order, without litdata.
The finetuning commands use LitGPT's own ``JSON`` data module on the file ``write_assets`` writes.

This file is imported by the LitGPT processes (it is put on their PYTHONPATH) and by the test; it imports
litgpt only inside ``TokenText``'s module scope, which the default test run never reaches (the folder's
test file skips itself before importing this module when litgpt is missing).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch
from litgpt.data import DataModule
from litgpt.tokenizer import Tokenizer
from torch.utils.data import DataLoader, Dataset

VOCAB_SIZE = 384
BLOCK_SIZE = 256  # the prompt of `litgpt generate` after an alpaca-style finetune fits; training uses 64

# A pythia-like GPT-NeoX model, small enough that a training step takes milliseconds on one CPU core.
MODEL_CONFIG = {
    "name": "pythia-tiny",
    "block_size": BLOCK_SIZE,
    "vocab_size": VOCAB_SIZE,
    "padded_vocab_size": VOCAB_SIZE,
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 32,
    "intermediate_size": 128,
    "rotary_percentage": 0.25,
    "parallel_residual": True,
    "bias": True,
    "norm_class_name": "LayerNorm",
    "mlp_class_name": "GptNeoxMLP",
}

_SUBJECTS = ["the cat", "a dog", "the farmer", "my sister", "the old man", "a small bird", "the teacher"]
_VERBS = ["sees", "likes", "carries", "paints", "finds", "follows", "builds"]
_OBJECTS = ["a red ball", "the green house", "an apple", "the river", "a long road", "the blue boat", "bread"]
_ENDINGS = ["in the morning", "at night", "near the hill", "with care", "every day", "before the rain"]


def corpus(n_sentences: int, seed: int) -> str:
    """Sentences from a small grammar, one per line, the same for the same seed."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_sentences):
        words = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_ENDINGS)]
        lines.append(" ".join(words).capitalize() + ".")
    return "\n".join(lines) + "\n"


def write_tokenizer(text_file: Path, out_dir: Path) -> None:
    """Train a byte-level BPE tokenizer of ``VOCAB_SIZE`` tokens on ``text_file``; save it for LitGPT."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(text_file)], trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    eos = tokenizer.token_to_id("<|endoftext|>")
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "GPTNeoXTokenizer",
                "bos_token": "<|endoftext|>",
                "eos_token": "<|endoftext|>",
                "add_bos_token": False,
            }
        )
    )
    (out_dir / "generation_config.json").write_text(json.dumps({"bos_token_id": eos, "eos_token_id": eos}))


def write_assets(root: Path) -> dict[str, Path]:
    """Write every input the LitGPT commands need under ``root``; return their paths by name."""
    root.mkdir(parents=True, exist_ok=True)
    train_txt, val_txt = root / "train.txt", root / "val.txt"
    train_txt.write_text(corpus(1500, seed=1))
    val_txt.write_text(corpus(200, seed=2))
    tokenizer_dir = root / "tokenizer"
    write_tokenizer(train_txt, tokenizer_dir)

    # Instruction data for LitGPT's JSON data module (finetune_lora, finetune_full).
    rng = random.Random(3)
    samples = []
    for _ in range(64):
        subject, verb, obj = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)
        samples.append({"instruction": f"What does {subject} do?", "input": "", "output": f"{subject} {verb} {obj}."})
    sft_json = root / "sft.json"
    sft_json.write_text(json.dumps(samples))
    return {"train_txt": train_txt, "val_txt": val_txt, "tokenizer_dir": tokenizer_dir, "sft_json": sft_json}


class _Rows(Dataset):
    def __init__(self, tokens: torch.Tensor, row_length: int) -> None:
        n_rows = len(tokens) // row_length
        self.rows = tokens[: n_rows * row_length].view(n_rows, row_length)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]


@dataclass
class TokenText(DataModule):
    """Pretraining data from two local text files: tokenized once, cut into rows of ``max_seq_length + 1``."""

    train_file: Path
    """A text file to train on."""
    val_file: Path
    """A text file to validate on."""

    tokenizer: Tokenizer | None = field(default=None, init=False, repr=False)
    batch_size: int = field(default=1, init=False, repr=False)
    max_seq_length: int = field(default=-1, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__init__()

    def connect(self, tokenizer: Tokenizer | None = None, batch_size: int = 1, max_seq_length: int = -1) -> None:
        if tokenizer is None:
            raise ValueError("TokenText needs a tokenizer: pass --tokenizer_dir")
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length + 1  # each row holds the inputs and the next token

    def _loader(self, path: Path) -> DataLoader:
        assert self.tokenizer is not None
        tokens = self.tokenizer.encode(Path(path).read_text(), bos=False, eos=False)
        return DataLoader(_Rows(tokens, self.max_seq_length), batch_size=self.batch_size, shuffle=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_file)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_file)
