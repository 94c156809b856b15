"""LitGPT 0.5.13 run unchanged, twice per command: on Lightning, and on fabric-core in zero-edit mode.

Each LitGPT command runs as a real process, ``litgpt ARGS`` (Lightning) beside
``python -m fabric_core.lightning_imports -m litgpt ARGS`` (fabric-core), in the same venv, with the same
inputs, at the same time (one core each). Every command after pretraining reads what Lightning's
pretraining wrote, so a difference shows up in the command that makes it. The tests then compare exit codes,
the losses LitGPT logged (CSV logger), the weights written, and the generated text.

Offline throughout: the tokenizer is trained here, the model is random, the data is written here
(``litgpt_offline``). Environment, not code: ``TORCHDYNAMO_DISABLE=1`` turns LitGPT's ``torch.compile`` of
the pretraining model into a no-op (Inductor takes minutes on two cores; the losses are the same to the
printed digits either way), and ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` lets ``convert_pretrained_checkpoint``
read the pretraining checkpoint, which holds a pickled ``DataLoader`` that torch >= 2.6 refuses to load with
``weights_only=True``.

Run by scripts/litgpt_check.sh (``python -m pytest -m litgpt tests/litgpt``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import litgpt_offline  # noqa: E402

pytestmark = [pytest.mark.litgpt, pytest.mark.timeout(1200)]

LIGHTNING, FABRIC_CORE = "lightning", "fabric-core"
SIDES = (LIGHTNING, FABRIC_CORE)
COMMAND_TIMEOUT_S = 300
LEARNING_RATE = 3e-3
# One process, float32, the same machine, the same operations in the same order: the sides agree bitwise;
# the tolerance only leaves room for a summation order fabric-core is free to choose (a foreach norm in
# gradient clipping, a fused optimizer kernel), which moves float32 results by a few ulps per step.
LOSS_RTOL = 1e-5


@dataclass
class Result:
    side: str
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    def tail(self, lines: int = 25) -> str:
        return "\n".join((self.stdout + "\n" + self.stderr).strip().splitlines()[-lines:])


def _argv(side: str, args: list[str]) -> list[str]:
    if side == LIGHTNING:
        return [str(Path(sys.executable).parent / "litgpt"), *args]
    return [sys.executable, "-m", "fabric_core.lightning_imports", "-m", "litgpt", *args]


def _env(work: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "PL_", "LT_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p),
        HF_HUB_OFFLINE="1",
        HF_HOME=str(work / "hf-home"),
        TORCHDYNAMO_DISABLE="1",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONHASHSEED="0",
    )
    env.update(extra)
    return env


def run_both(work: Path, name: str, args_for: dict[str, list[str]], extra_env: dict[str, str] | None = None):
    """Start the command on both sides at once; wait for both; keep their output under ``work/logs``."""
    env = _env(work, extra_env or {})
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    started = {}
    for side in SIDES:
        argv = _argv(side, args_for[side])
        out = open(logs / f"{name}.{side}.out", "w+")  # noqa: SIM115 - closed below
        err = open(logs / f"{name}.{side}.err", "w+")  # noqa: SIM115
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=err, start_new_session=True)
        started[side] = (proc, argv, out, err, time.perf_counter())
    results = {}
    deadline = time.perf_counter() + COMMAND_TIMEOUT_S
    while len(results) < len(started):
        for side, (proc, argv, out, err, t0) in started.items():
            if side in results:
                continue
            returncode = proc.poll()
            if returncode is None and time.perf_counter() < deadline:
                continue
            if returncode is None:
                os.killpg(proc.pid, 9)
                returncode = proc.wait(timeout=30)
                err.write(f"\n[test] killed after {COMMAND_TIMEOUT_S} s\n")
            wall = time.perf_counter() - t0
            out.seek(0)
            err.seek(0)
            results[side] = Result(side, argv, returncode, out.read(), err.read(), wall)
            out.close()
            err.close()
        time.sleep(0.1)
    return results


def both(args: list[str]) -> dict[str, list[str]]:
    return {side: list(args) for side in SIDES}


def per_side(make) -> dict[str, list[str]]:
    return {side: make(side) for side in SIDES}


def _adamw(lr: float) -> str:
    return json.dumps({"class_path": "torch.optim.AdamW", "init_args": {"lr": lr}})


def pretrain_args(assets: dict[str, Path], out_dir: str, devices: int) -> list[str]:
    return [
        "pretrain", "pythia-tiny",
        "--model_config", json.dumps(litgpt_offline.MODEL_CONFIG),
        "--tokenizer_dir", str(assets["tokenizer_dir"]),
        "--data", "litgpt_offline.TokenText",
        "--data.train_file", str(assets["train_txt"]),
        "--data.val_file", str(assets["val_txt"]),
        "--out_dir", out_dir,
        "--devices", str(devices),
        "--precision", "32-true",
        "--logger_name", "csv",
        "--optimizer", _adamw(LEARNING_RATE),
        # A constant learning rate (no warmup, min_lr = lr): the schedule plays no part in what is compared.
        "--train.min_lr", str(LEARNING_RATE),
        "--train.lr_warmup_steps", "0",
        "--train.max_tokens", "5120",  # 20 micro-batches of 4 x 64 tokens: 10 optimizer steps
        "--train.max_seq_length", "64",
        "--train.micro_batch_size", "4",
        "--train.global_batch_size", "8",
        "--train.log_interval", "1",
        "--eval.interval", "5",
        "--eval.max_iters", "2",
    ]  # fmt: skip


def finetune_args(command: str, checkpoint_dir: str, out_dir: str, sft_json: Path, extra: list[str]) -> list[str]:
    return [
        command, checkpoint_dir,
        "--out_dir", out_dir,
        "--precision", "32-true",
        "--logger_name", "csv",
        "--data", "JSON",
        "--data.json_path", str(sft_json),
        "--data.val_split_fraction", "0.25",
        "--data.num_workers", "0",
        "--optimizer", _adamw(1e-2),
        "--train.epochs", "1",
        "--train.max_steps", "6",
        "--train.micro_batch_size", "2",
        "--train.global_batch_size", "4",
        "--train.lr_warmup_steps", "1",
        "--train.max_seq_length", "64",
        "--eval.interval", "3",
        "--eval.max_iters", "2",
        "--eval.max_new_tokens", "8",
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every command on both sides, in LitGPT's order; later commands start from Lightning's outputs."""
    work = Path(os.environ.get("LITGPT_WORK_DIR") or tmp_path_factory.mktemp("litgpt"))  # a place to look after
    for old in ("out", "logs"):
        shutil.rmtree(work / old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    assets = litgpt_offline.write_assets(work / "assets")
    sft = assets["sft_json"]
    r = {}
    r["pretrain"] = run_both(work, "pretrain", per_side(lambda s: pretrain_args(assets, f"out/{s}/pretrain", 1)))
    r["pretrain_2"] = run_both(work, "pretrain_2", per_side(lambda s: pretrain_args(assets, f"out/{s}/pretrain2", 2)))
    r["convert_pretrained"] = run_both(
        work,
        "convert_pretrained",
        per_side(lambda s: ["convert_pretrained_checkpoint", "out/lightning/pretrain/final", f"out/{s}/base"]),
        {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"},
    )
    base = "out/lightning/base"
    r["finetune_lora"] = run_both(
        work,
        "finetune_lora",
        per_side(lambda s: finetune_args("finetune_lora", base, f"out/{s}/lora", sft, ["--lora_r", "4"])),
    )
    r["finetune_full"] = run_both(
        work, "finetune_full", per_side(lambda s: finetune_args("finetune_full", base, f"out/{s}/full", sft, []))
    )
    # merge_lora on its own: Lightning's LoRA output without the merged file that finetune_lora wrote.
    for side in SIDES:
        unmerged = work / "out" / side / "unmerged"
        if (work / "out/lightning/lora/final").is_dir():
            shutil.copytree(work / "out/lightning/lora/final", unmerged)
            (unmerged / "lit_model.pth").unlink(missing_ok=True)
    r["merge_lora"] = run_both(
        work, "merge_lora", per_side(lambda s: ["merge_lora", f"out/{s}/unmerged", "--precision", "32-true"])
    )
    r["generate"] = run_both(
        work,
        "generate",
        both(["generate", base, "--prompt", "The cat", "--max_new_tokens", "24", "--precision", "32-true"]),
    )
    r["convert_from_litgpt"] = run_both(
        work, "convert_from_litgpt", per_side(lambda s: ["convert_from_litgpt", base, f"out/{s}/hf"])
    )
    lines = [f"{'command':<22}{'lightning rc':>13}{'s':>7}{'fabric-core rc':>16}{'s':>7}"]
    for name, pair in r.items():
        lo, fc = pair[LIGHTNING], pair[FABRIC_CORE]
        lines.append(f"{name:<22}{lo.returncode:>13}{lo.wall_s:>7.1f}{fc.returncode:>16}{fc.wall_s:>7.1f}")
    (work / "timings.txt").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    return work, r


# --------------------------------------------------------------------------------------------- helpers


def assert_ok(result: Result) -> None:
    assert result.returncode == 0, f"{result.side}: {' '.join(result.argv[:6])} ... exited {result.returncode}:\n" + (
        result.tail()
    )


def metrics(out_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The CSV logger's ``loss`` and ``val_loss`` columns as (step, value) pairs, in row order."""
    (path,) = sorted(out_dir.glob("logs/csv/version_*/metrics.csv"))
    series: dict[str, list[tuple[int, float]]] = {"loss": [], "val_loss": []}
    with open(path) as f:
        for row in csv.DictReader(f):
            for key, values in series.items():
                if row.get(key):
                    values.append((int(row["step"]), float(row[key])))
    return series


def assert_same_losses(work: Path, lightning_dir: str, ours_dir: str, rtol: float = LOSS_RTOL) -> None:
    theirs, ours = metrics(work / lightning_dir), metrics(work / ours_dir)
    assert theirs["loss"], f"Lightning logged no loss in {lightning_dir}"
    for key in ("loss", "val_loss"):
        assert [s for s, _ in ours[key]] == [s for s, _ in theirs[key]], key
        expected = torch.tensor([v for _, v in theirs[key]], dtype=torch.float64)
        actual = torch.tensor([v for _, v in ours[key]], dtype=torch.float64)
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=0, msg=lambda m, k=key: f"{k}: {m}")


def state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a LitGPT checkpoint file; under its "model" key when it has one (training checkpoints)."""
    # Our own files, written by this test's processes: the pretraining one holds a pickled DataLoader.
    loaded = torch.load(path, map_location="cpu", weights_only=False)
    state = loaded["model"] if isinstance(loaded.get("model"), dict) else loaded
    return {name.replace("_orig_mod.", ""): t for name, t in state.items() if isinstance(t, torch.Tensor)}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol=0.0, atol=0.0) -> None:
    assert a, "no tensors"
    assert sorted(a) == sorted(b)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


# ----------------------------------------------------------------------------------------------- tests


def test_pretrain_one_process_same_losses_and_weights(runs):
    work, r = runs
    assert_ok(r["pretrain"][LIGHTNING])
    assert_ok(r["pretrain"][FABRIC_CORE])
    assert_same_losses(work, "out/lightning/pretrain", "out/fabric-core/pretrain")
    losses = [v for _, v in metrics(work / "out/lightning/pretrain")["loss"]]
    # Logged every optimizer step (2 micro-batches): 10 rows; and it learned something.
    assert len(losses) == 10 and losses[-1] < losses[0] - 0.5, losses
    assert_same_weights(
        state_dict(work / "out/lightning/pretrain/final/lit_model.pth"),
        state_dict(work / "out/fabric-core/pretrain/final/lit_model.pth"),
        rtol=LOSS_RTOL,
        atol=1e-7,
    )


def test_pretrain_two_processes_lightning_refuses_fsdp_on_cpu_fabric_core_trains(runs):
    """LitGPT picks FSDPStrategy for --devices 2. Lightning refuses FSDP on a CPU; fabric-core's fsdp trains on
    two processes (gloo) and writes a whole checkpoint with Lightning's keys and shapes.

    The weights are not compared with a one-process run: with ``empty_init`` under FSDP, LitGPT initialises the
    model through ``reset_parameters`` on each rank's shards, and on a CPU each rank draws its shards from its
    own random stream, so the starting point (and so the end) differs from the one-process initialisation.
    """
    work, r = runs
    lightning = r["pretrain_2"][LIGHTNING]
    assert lightning.returncode == 1, lightning.tail()
    assert "You selected the FSDP strategy but FSDP is only available on GPU" in lightning.stderr
    ours = r["pretrain_2"][FABRIC_CORE]
    assert_ok(ours)
    logged = metrics(work / "out/fabric-core/pretrain2")["loss"]
    # 10 iterations of one micro-batch per process, one optimizer step and one log row each (LitGPT logs at
    # step=iter-1, which the CSV logger writes in its step column).
    assert [step for step, _ in logged] == list(range(10)), logged
    losses = [loss for _, loss in logged]
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0], losses
    theirs = state_dict(work / "out/lightning/pretrain/final/lit_model.pth")
    mine = state_dict(work / "out/fabric-core/pretrain2/final/lit_model.pth")
    assert {k: tuple(v.shape) for k, v in mine.items()} == {k: tuple(v.shape) for k, v in theirs.items()}


def test_convert_pretrained_checkpoint(runs):
    work, r = runs
    assert_ok(r["convert_pretrained"][LIGHTNING])
    assert_ok(r["convert_pretrained"][FABRIC_CORE])
    assert_same_weights(
        state_dict(work / "out/lightning/base/lit_model.pth"), state_dict(work / "out/fabric-core/base/lit_model.pth")
    )


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_finetune_same_losses_and_weights(runs, kind):
    work, r = runs
    assert_ok(r[f"finetune_{kind}"][LIGHTNING])
    assert_ok(r[f"finetune_{kind}"][FABRIC_CORE])
    assert_same_losses(work, f"out/lightning/{kind}", f"out/fabric-core/{kind}")
    files = ["lit_model.pth", "lit_model.pth.lora"] if kind == "lora" else ["lit_model.pth"]
    for name in files:
        assert_same_weights(
            state_dict(work / f"out/lightning/{kind}/final/{name}"),
            state_dict(work / f"out/fabric-core/{kind}/final/{name}"),
            rtol=LOSS_RTOL,
            atol=1e-7,
        )


def test_merge_lora_matches_finetunes_own_merge(runs):
    work, r = runs
    assert_ok(r["merge_lora"][LIGHTNING])
    assert_ok(r["merge_lora"][FABRIC_CORE])
    merged_by_finetune = state_dict(work / "out/lightning/lora/final/lit_model.pth")
    for side in SIDES:
        assert_same_weights(merged_by_finetune, state_dict(work / f"out/{side}/unmerged/lit_model.pth"))


def test_generate_same_text(runs):
    _, r = runs
    lightning, ours = r["generate"][LIGHTNING], r["generate"][FABRIC_CORE]
    assert_ok(lightning)
    assert_ok(ours)
    # stdout: LitGPT's pprint of the arguments (a dict, up to its closing brace), then the prompt and the sample.
    text = lightning.stdout[lightning.stdout.index("}\n") + 2 :]
    assert text.startswith("The cat") and len(text) > len("The cat") + 10, lightning.stdout
    assert ours.stdout == lightning.stdout


def test_convert_from_litgpt_same_weights(runs):
    work, r = runs
    assert_ok(r["convert_from_litgpt"][LIGHTNING])
    assert_ok(r["convert_from_litgpt"][FABRIC_CORE])
    theirs = state_dict(work / "out/lightning/hf/model.pth")
    assert any(name.startswith("gpt_neox.") for name in theirs), sorted(theirs)[:5]  # Hugging Face's names
    assert_same_weights(theirs, state_dict(work / "out/fabric-core/hf/model.pth"))
