"""``fabric.save_raw`` and ``fabric.load_raw`` with real ``transformers`` models (issue 35, item 5), nothing downloaded.

A tiny Llama built from a config in the test trains on two processes with fsdp and is saved with
``fabric.save_raw(folder, model)``; the test writes ``config.json`` beside it, as a user would (before the save
in one case, after it in the other), and ``AutoModelForCausalLM.from_pretrained(folder)`` in this process gives
the logits the trained model gave under fsdp. A folder that ``save_pretrained(..., max_shard_size=...)`` wrote
in several shards loads with ``fabric.load_raw`` into a model set up with fsdp on two processes and with ddp
on two processes, and both give ``from_pretrained``'s logits; so does the tied model's folder that
``fabric.save_raw`` wrote, loaded back into both.

This file run as a script is the two-process job: ``python test_weights_transformers.py fsdp|ddp OUTDIR``
(the strategies' default launcher runs the script again as rank 1). Each rank writes what it computed to
``OUTDIR/<strategy>-rank<N>.pt``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core.testing import run_in_own_session

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300)]

if __name__ != "__main__":
    pytest.importorskip("safetensors")
    pytest.importorskip("transformers")

WORLD_SIZE = 2
JOB_TIMEOUT = 240  # seconds for one two-process job, transformers' import in each rank included
COLLECTIVE_TIMEOUT = 60  # a rank left alone in a collective gives up instead of hanging
SEED, OTHER_SEED, PRETRAINED_SEED = 0, 1, 3
STEPS = 3
ATOL = 1e-5
#: ``max_shard_size`` small enough for several files (the tiny model's weights are about 100 kB).
SMALL_SHARDS = "20KB"


def llama_config(tied: bool) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )


def new_model(tied: bool, seed: int) -> Any:
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(tied)).eval()


def tokens(seed: int, rows: int = 4, length: int = 12) -> torch.Tensor:
    return torch.randint(0, 64, (rows, length), generator=torch.Generator().manual_seed(seed))


def fixed_batch() -> torch.Tensor:
    """The batch every logits comparison runs on."""
    return tokens(seed=100)


@torch.no_grad()
def logits_of(model: Any) -> torch.Tensor:
    return model(input_ids=fixed_batch()).logits.detach().float().cpu()


# -- the two-process job -------------------------------------------------------------------------------------
def _train_and_save(fabric: Any, folder: Path, tied: bool, config_first: bool, **save: Any) -> torch.Tensor:
    """Train a Llama for a few steps (each rank on its half of each batch), save it with ``fabric.save_raw``,
    and return its logits on the fixed batch; rank 0 writes ``config.json`` before or after the save."""
    config = llama_config(tied)
    if config_first and fabric.is_global_zero:
        config.save_pretrained(folder)
    fabric.barrier()
    model = fabric.setup_module(new_model(tied, SEED).train())
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-2))
    rank, half = fabric.global_rank, 4 // WORLD_SIZE
    for step in range(STEPS):
        batch = tokens(seed=10 + step)[rank * half : (rank + 1) * half]
        fabric.backward(model(input_ids=batch, labels=batch).loss)
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    fabric.save_raw(folder, model, **save)
    if not config_first and fabric.is_global_zero:
        config.save_pretrained(folder)
    fabric.barrier()
    return logits_of(model)


def _load(fabric: Any, folder: Path, tied: bool) -> dict[str, Any]:
    """A model of another seed, set up by ``fabric``, then ``fabric.load_raw(folder, model)``: its logits."""
    model = fabric.setup_module(new_model(tied, OTHER_SEED))
    missing, unexpected = fabric.load_raw(folder, model)
    return {"logits": logits_of(model), "missing": list(missing), "unexpected": list(unexpected)}


def job(fabric: Any, kind: str, outdir: str) -> None:
    out = Path(outdir)
    seen: dict[str, Any] = {}
    if kind == "fsdp":
        # Untied, config.json already in the folder (it must survive the save), one model.safetensors.
        seen["untied"] = _train_and_save(fabric, out / "untied", tied=False, config_first=True)
        # Tied, config.json written after the save, the weights in shards with an index.
        seen["tied"] = _train_and_save(fabric, out / "tied", tied=True, config_first=False, max_shard_size=SMALL_SHARDS)
    # The tied folder the fsdp job wrote, back in through load_raw: lm_head.weight is embed_tokens.weight.
    seen["tied_loaded"] = _load(fabric, out / "tied", tied=True)
    seen["pretrained"] = _load(fabric, out / "pretrained", tied=False)
    torch.save(seen, out / f"{kind}-rank{fabric.global_rank}.pt")


# -- the tests ------------------------------------------------------------------------------------------------
def _run(kind: str, outdir: Path) -> list[dict[str, Any]]:
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MASTER_PORT", "LOCAL_RANK")}
    environ.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error")
    try:
        done = run_in_own_session([sys.executable, __file__, kind, str(outdir)], timeout=JOB_TIMEOUT, env=environ)
    except subprocess.TimeoutExpired as timed_out:
        pytest.fail(f"the two-process {kind} job did not finish in {JOB_TIMEOUT} s:\n{timed_out.output}")
    assert done.returncode == 0, f"the {kind} job exited with {done.returncode}:\n{done.stdout[-8000:]}"
    return [torch.load(outdir / f"{kind}-rank{r}.pt", weights_only=True) for r in range(WORLD_SIZE)]


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The jobs' folder, with ``pretrained/``: a Llama that ``save_pretrained`` wrote in several shards."""
    folder = tmp_path_factory.mktemp("weights_transformers")
    new_model(tied=False, seed=PRETRAINED_SEED).save_pretrained(folder / "pretrained", max_shard_size=SMALL_SHARDS)
    return folder


@pytest.fixture(scope="module")
def fsdp_job(outdir: Path) -> list[dict[str, Any]]:
    return _run("fsdp", outdir)


@pytest.fixture(scope="module")
def ddp_job(outdir: Path, fsdp_job: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _run("ddp", outdir)  # after the fsdp job: it loads the tied folder that job saved


def from_pretrained(folder: Path) -> tuple[Any, dict[str, Any]]:
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    return model.eval(), info


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.shape == expected.shape == (4, 12, 64)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0)


def assert_differs(actual: torch.Tensor, other: torch.Tensor) -> None:
    """What a save or load that wrote nothing (or the wrong weights) would give instead is far off."""
    assert (actual - other).abs().max().item() > 1e-2


def weight_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(os.fspath(file), framework="pt") as opened:
            names.update(opened.keys())
    return names


def test_a_llama_trained_with_fsdp_and_saved_with_save_raw_loads_with_from_pretrained(
    fsdp_job: list[dict[str, Any]], outdir: Path
) -> None:
    folder = outdir / "untied"
    # config.json was there before the save and is still there, beside the one weights file and nothing else.
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is False
    model, info = from_pretrained(folder)
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())
    assert weight_names(folder) == set(model.state_dict())  # under the model's own names, lm_head included
    trained = [rank["untied"] for rank in fsdp_job]
    assert_close(trained[1], trained[0])
    loaded = logits_of(model)
    assert_close(loaded, trained[0])
    assert_differs(loaded, logits_of(new_model(tied=False, seed=SEED)))  # the training changed the weights


def test_tied_embeddings_saved_in_shards_with_save_raw_load_with_from_pretrained(
    fsdp_job: list[dict[str, Any]], outdir: Path
) -> None:
    folder = outdir / "tied"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert len(shards) >= 3 and set(index["weight_map"].values()) == set(shards)
    assert not (folder / "model.safetensors").exists()
    # The tied weight is written once, under the embedding's name, as save_pretrained writes it.
    assert "model.embed_tokens.weight" in index["weight_map"] and "lm_head.weight" not in index["weight_map"]
    assert weight_names(folder) == set(index["weight_map"])
    model, info = from_pretrained(folder)
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    loaded = logits_of(model)
    assert_close(loaded, fsdp_job[0]["tied"])
    assert_close(fsdp_job[1]["tied"], fsdp_job[0]["tied"])
    assert_differs(loaded, logits_of(new_model(tied=True, seed=SEED)))


def _assert_loads_pretrained(job: list[dict[str, Any]], outdir: Path) -> None:
    folder = outdir / "pretrained"
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("model-*-of-*.safetensors"))) >= 3
    model, _ = from_pretrained(folder)
    expected = logits_of(model)
    assert_differs(expected, logits_of(new_model(tied=False, seed=OTHER_SEED)))  # what a load of nothing gives
    for rank in job:
        assert (rank["pretrained"]["missing"], rank["pretrained"]["unexpected"]) == ([], [])
        assert_close(rank["pretrained"]["logits"], expected)


def test_a_sharded_save_pretrained_folder_loads_into_fsdp_with_load_raw(
    fsdp_job: list[dict[str, Any]], outdir: Path
) -> None:
    _assert_loads_pretrained(fsdp_job, outdir)


def test_a_sharded_save_pretrained_folder_loads_into_ddp_with_load_raw(
    ddp_job: list[dict[str, Any]], outdir: Path
) -> None:
    _assert_loads_pretrained(ddp_job, outdir)


def test_tied_weights_saved_by_save_raw_load_back_into_fsdp_and_ddp_with_load_raw(
    fsdp_job: list[dict[str, Any]], ddp_job: list[dict[str, Any]]
) -> None:
    for rank in [*fsdp_job, *ddp_job]:
        assert (rank["tied_loaded"]["missing"], rank["tied_loaded"]["unexpected"]) == ([], [])
        assert_close(rank["tied_loaded"]["logits"], fsdp_job[0]["tied"])
    assert_differs(fsdp_job[0]["tied"], logits_of(new_model(tied=True, seed=OTHER_SEED)))


if __name__ == "__main__":
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from fabric_core import Fabric, spec

    kind, folder = sys.argv[1:3]
    options: dict[str, Any] = {"auto_wrap_policy": {LlamaDecoderLayer}} if kind == "fsdp" else {}
    fabric = Fabric(accelerator="cpu", devices=WORLD_SIZE, strategy=spec(kind, timeout=COLLECTIVE_TIMEOUT, **options))
    fabric.launch(job, kind, folder)
