"""examples/fp8_transformer.py: its verdict without a float8 device, and the rules of that verdict.

The float8 run itself needs a GPU of compute capability 8.9+ and torchao; a GPU script runs it there.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

pytestmark = pytest.mark.examples

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "fp8_transformer.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fp8_transformer_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "LOCAL_RANK"))}
    env["CUDA_VISIBLE_DEVICES"] = ""  # as on a machine without a GPU, also where this one has one
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.timeout(40)
@pytest.mark.slow
def test_without_cuda_the_script_skips_with_a_reason_and_exits_0() -> None:
    done = run_script("--steps", "30")
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert last.startswith("fp8 check: SKIP no CUDA device"), last
    assert "[bf16]" not in done.stdout  # it stopped before training anything


@pytest.mark.timeout(40)
@pytest.mark.slow
def test_bad_arguments_give_the_fail_line_and_exit_1() -> None:
    done = run_script("--dim", "100")
    assert done.returncode == 1
    assert done.stdout.strip().splitlines()[-1] == "fp8 check: FAIL bad arguments (see the usage above)"
    assert "--dim 100: float8 needs a multiple of 16" in done.stderr


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_on_the_cpu_it_trains_both_runs_or_says_why_it_cannot() -> None:
    small = ("--device", "cpu", "--dim", "32", "--layers", "1", "--heads", "2", "--vocab", "64", "--seq-len", "16")
    done = run_script(*small, "--batch-size", "8", "--steps", "20", "--lr", "1e-2")
    last = done.stdout.strip().splitlines()[-1]
    if importlib.util.find_spec("torchao") is None:
        assert done.returncode == 0, done.stderr[-2000:]
        assert last.startswith("fp8 check: SKIP torchao not importable"), last
    else:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert last.startswith("fp8 check: PASS 4 Float8Linear;"), last  # qkv, proj, fc1, fc2; not the head


def result(module: ModuleType, name: str, losses: list[float], float8_layers: int = 4) -> object:
    return module.RunResult(name, losses, [10.0] * len(losses), float8_layers)


def test_the_verdict_passes_a_learning_fp8_run_close_to_bf16_and_names_every_missed_criterion() -> None:
    module = load_script()
    falling = [5.0 - 0.15 * step for step in range(30)]  # first-5 mean 4.7, last-5 mean 0.95
    passed, details = module.judge(result(module, "bf16", falling), result(module, "fp8", [v + 0.05 for v in falling]))
    assert passed, details
    assert "bf16 4.7000 -> 0.9500, fp8 4.7500 -> 1.0000" in details
    assert "tolerance 0.0950" in details  # 10% of bf16's 0.95

    cases = {
        "no Float8Linear after conversion": result(module, "fp8", falling, float8_layers=0),
        "fp8 losses not finite": result(module, "fp8", [*falling[:-1], float("nan")]),
        "fp8 loss did not fall": result(module, "fp8", [5.0] * 30),
        "fp8 final loss too far from bf16's": result(module, "fp8", [v + 0.2 for v in falling]),
        "fp8 mean loss over all steps more than 10% from bf16's": result(module, "fp8", [*[6.0] * 25, *falling[-5:]]),
    }
    for problem, fp8 in cases.items():
        passed, details = module.judge(result(module, "bf16", falling), fp8)
        assert not passed and problem in details, (problem, details)


def test_an_exception_ends_in_the_fail_line_with_its_type_and_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load_script()

    def broken(args: object) -> None:
        raise ValueError("no batches\ntoday")

    monkeypatch.setattr(module, "skip_reason", lambda device: None)
    monkeypatch.setattr(module, "make_batches", broken)
    assert module.main(["--device", "cpu"]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1] == "fp8 check: FAIL ValueError: no batches today"
    assert "Traceback" in captured.err  # the traceback too, on stderr


def test_only_the_output_head_keeps_its_linear_layer() -> None:
    module = load_script()
    torchao_float8 = pytest.importorskip("torchao.float8")
    model = module.DecoderLM(vocab=64, dim=32, layers=2, heads=2, seq_len=16)
    torchao_float8.convert_to_float8_training(model, module_filter_fn=module.keep_in_high_precision)
    converted = sorted(name for name, m in model.named_modules() if type(m).__name__ == "Float8Linear")
    assert len(converted) == 8 and "head" not in converted
    assert type(model.head) is torch.nn.Linear
