"""The ``progress`` callback: what it draws, when it stays silent, and that one rank draws in a 2-process job."""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core import Fabric, spec
from fabric_core.callbacks import ProgressBar
from fabric_core.errors import InvalidConfigError
from fabric_core.testing import make_manager, run_in_own_session

JOBS = Path(__file__).parents[1] / "_jobs"


class Terminal(io.StringIO):
    """A stream that says it is a terminal, to exercise the live bar."""

    def isatty(self) -> bool:
        return True


def train(fabric: Fabric, steps: int, epochs: int = 1) -> None:
    model = torch.nn.Linear(4, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for epoch in range(epochs):
        fabric.call("on_train_epoch_start", epoch=epoch)
        for step in range(steps):
            fabric.backward(model(torch.ones(2, 4)).sum())
            optimizer.step()
            optimizer.zero_grad()
            fabric.log("loss", torch.tensor(1.0 / (step + 1)))
            fabric.log_dict({"lr": 0.125, "note": "warm"})
    fabric.call("on_train_end")


def build(stream: Any, **options: Any) -> Fabric:
    return Fabric(
        accelerator="cpu", callbacks=[spec("progress", stream=stream, **options)], plugin_manager=make_manager()
    )


def test_forced_bar_on_a_file_shows_steps_epoch_and_logged_metrics() -> None:
    out = io.StringIO()
    fabric = build(out, force=True, total_steps=6, total_epochs=2)
    assert isinstance(fabric._callbacks[0], ProgressBar)
    train(fabric, steps=3, epochs=2)
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("epoch 1/2 | step 6/6 | ")
    assert re.search(r"\d+\.\d\d it/s", last)
    assert "loss=0.3333 lr=0.125 note=warm" in last
    assert re.search(r"\d\d:\d\d<\d\d:\d\d", last)  # elapsed < ETA (0 left at the end)


def test_totals_can_come_from_the_loop() -> None:
    out = io.StringIO()
    fabric = build(out, force=True)
    fabric.call("on_train_start", total_steps=4, total_epochs=2)
    train(fabric, steps=2, epochs=2)
    assert out.getvalue().splitlines()[-1].startswith("epoch 1/2 | step 4/4 | ")
    with pytest.raises(InvalidConfigError, match="on_train_start\\(total_steps=-1\\)"):
        fabric.call("on_train_start", total_steps=-1)


def test_a_file_gets_one_line_per_refresh_at_most() -> None:
    out = io.StringIO()
    # One refresh every 1000 s: only the final line is written, whatever the number of steps.
    train(build(out, force=True, refresh_per_second=0.001), steps=50)
    assert out.getvalue().count("\n") == 1
    assert "step 50 |" in out.getvalue()


def test_silent_when_the_output_is_not_a_terminal() -> None:
    out = io.StringIO()
    fabric = build(out, total_steps=5)
    train(fabric, steps=5)
    assert out.getvalue() == ""
    assert fabric._callbacks[0].steps == 5  # it counted, it just did not draw


def test_live_bar_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    out = Terminal()
    fabric = build(out, total_steps=4, refresh_per_second=1000)
    fabric.call("on_train_start")
    fabric._callbacks[0].on_after_optimizer_step()  # the live display is up
    print("a line of the script")  # a bar on its own stream leaves stdout alone
    train(fabric, steps=3)
    assert capsys.readouterr().out == "a line of the script\n"
    text = out.getvalue()
    assert "4/4" in text and "loss=0.3333" in text and "it/s" in text
    assert "\x1b[" in text  # drawn with terminal control codes, not as log lines


def test_other_ranks_draw_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")  # how a launcher announces the second process
    out = Terminal()
    bar = ProgressBar(force=True, stream=out)
    for _ in range(3):
        bar.on_after_optimizer_step()
    bar.on_log({"loss": 1.0})
    bar.on_train_end()
    assert out.getvalue() == "" and bar.steps == 3


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"total_steps": 0}, "total_steps=0"),
        ({"total_epochs": "2"}, "total_epochs='2'"),
        ({"refresh_per_second": 0}, "refresh_per_second=0"),
        ({"metrics_format": "%d"}, "metrics_format='%d'"),
    ],
)
def test_bad_options_are_refused_at_construction(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(named)) as info:
        ProgressBar(**options)
    assert isinstance(info.value, ValueError)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_processes_under_fabric_core_run_draw_one_bar(tmp_path: Path) -> None:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    command = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2"]
    result = run_in_own_session([*command, str(JOBS / "progress_job.py")], timeout=100, env=env)
    assert result.returncode == 0, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if "| step " in line]
    assert lines, result.stdout[-3000:]
    # Whole lines from rank 0 only: rank 1 logged rank_tag=101 and drew nothing.
    pattern = re.compile(r"^epoch [01]/2 \| step [0-8]/8 \| \S+ it/s \| \S+<\S+( \| rank_tag=100 loss=0\.25)?$")
    assert all(pattern.match(line) for line in lines), lines
    assert lines[-1].startswith("epoch 1/2 | step 8/8 |") and lines[-1].endswith("rank_tag=100 loss=0.25")
    assert "rank_tag=101" not in result.stdout


def test_without_rich_the_fabric_is_refused_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)  # what an environment without rich looks like to find_spec
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'fabric-core\[progress\]'") as raised:
        Fabric(accelerator="cpu", callbacks=["progress"], plugin_manager=make_manager())
    assert raised.value.name == "rich"
