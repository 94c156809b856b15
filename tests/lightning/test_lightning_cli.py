"""Lightning's `fabric` command (`lightning.fabric.cli`) in zero-edit mode, against Lightning's own, and `fabric-core
run` with Lightning's option spellings.

The console script used is the one pip writes for lightning-fabric's entry point `fabric =
lightning_fabric.cli:_main`, put first on PATH: the installed `fabric` of the `lightning` distribution imports
`lightning.pytorch` too, which costs ten seconds of CPU per process here. Lightning's own
`test_run_through_fabric_entry_point`, run in zero-edit mode (docs/lightning-imports.md), covers that one.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fabric_core._lightning.alias import HANDOVER_PATH

JOBS = Path(__file__).parents[1] / "_jobs"
ZERO_EDIT = [sys.executable, "-m", "fabric_core.lightning_imports"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plain_environment() -> dict[str, str]:
    """This environment without zero-edit mode or a command line's variables (a fresh shell's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FABRIC_CORE_", "LT_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "OMP_NUM_THREADS"))
    }
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != HANDOVER_PATH]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


@pytest.fixture
def fabric_on_path(tmp_path: Path) -> dict[str, str]:
    """A `fabric` console script for lightning-fabric's entry point, first on PATH of the returned environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "fabric"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom lightning_fabric.cli import _main\n"
        "if __name__ == '__main__':\n    sys.exit(_main())\n"
    )
    script.chmod(0o755)
    env = plain_environment()
    env["PATH"] = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def run_options(port: int) -> list[str]:
    return [
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--precision",
        "bf16-mixed",
        f"--main_port={port}",
    ]


def check_two_ranks(outdir: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    got = [json.loads(p.read_text()) for p in sorted(outdir.glob("rank*.json"))]
    assert [r["rank"] for r in got] == [0, 1]
    for r in got:
        assert r["fabric"] == "fabric_core.fabric"
        assert (r["world_size"], r["strategy"], r["precision"]) == (2, "DDPStrategy", "MixedPrecision")
        assert r["synchronised"] is True
        lt = {"LT_CLI_USED": "1", "LT_ACCELERATOR": "cpu", "LT_STRATEGY": "ddp", "LT_DEVICES": "2"}
        assert r["lt"] == {**lt, "LT_NUM_NODES": "1", "LT_PRECISION": "bf16-mixed"}


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
@pytest.mark.parametrize("how", ["lightning_imports", "print-env"])
@pytest.mark.zero_edit
def test_fabric_run_trains_on_two_processes_with_fabric_core(
    how: str, fabric_on_path: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    fabric_run = ["fabric", "run", *run_options(port), str(JOBS / "lightning_cli_job.py"), str(tmp_path)]
    if how == "lightning_imports":  # `python -m fabric_core.lightning_imports fabric run ...`: fabric found on PATH
        command = [*ZERO_EDIT, *fabric_run]
    else:  # a job file: the printed lines, then Lightning's command as its users type it
        command = ["sh", "-c", f'eval "$({shlex.join([*ZERO_EDIT, "--print-env"])})" && {shlex.join(fabric_run)}']
    done = subprocess.run(command, env=fabric_on_path, capture_output=True, text=True, timeout=140)
    check_two_ranks(tmp_path, done)


def test_print_env_prints_shell_lines_that_put_the_handover_folder_first() -> None:
    done = subprocess.run([*ZERO_EDIT, "--print-env"], capture_output=True, text=True, timeout=60, check=True)
    env = {**plain_environment(), "PYTHONPATH": "/x"}
    shown = subprocess.run(
        ["sh", "-c", f'{done.stdout}echo "$PYTHONPATH" && echo "$FABRIC_CORE_LIGHTNING_IMPORTS"'],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert shown.stdout.split() == [f"{HANDOVER_PATH}:/x", "1"]


def test_a_name_that_is_neither_a_file_nor_a_console_script_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*ZERO_EDIT, "no-such-program-xyz", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "'no-such-program-xyz'" in done.stderr and "console script" in done.stderr


# -- the same `_run.main([...])` calls, torchrun replaced, on Lightning's module and on ours ----------------------

CASES: list[list[str]] = [
    ["SCRIPT"],
    ["SCRIPT", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--precision", "bf16-mixed", "x", "--y"],
    ["SCRIPT", "--num-nodes", "2", "--node_rank", "1", "--main_address", "10.1.2.3", "--main-port", "1234"],
    ["SCRIPT", "--num_nodes", "3", "--strategy", "fsdp", "--precision", "16"],
    ["SCRIPT", "--strategy", "dp", "--devices", "2"],
    ["SCRIPT", "--accelerator", "auto", "--devices", "auto", "--precision", "64"],
    ["SCRIPT", "--strategy", "ddp_spawn"],
    ["SCRIPT", "--strategy", "deepspeed_stage_3_offload"],
    ["SCRIPT", "--accelerator", "xpu"],
    ["SCRIPT", "--precision", "bf17"],
    ["SCRIPT", "--accelerator", "tpu"],
    ["SCRIPT", "--accelerator", "cpu", "--devices", "0"],
    ["SCRIPT", "--num-nodes", "two"],
    ["MISSING"],
]
#: Phrases both print for a refused case (click's own words, or Lightning's ValueError).
PHRASES = {
    6: "Invalid value for '--strategy': 'ddp_spawn'",
    7: "Invalid value for '--strategy': 'deepspeed_stage_3_offload'",
    8: "Invalid value for '--accelerator': 'xpu'",
    9: "Invalid value for '--precision': 'bf17'",
    10: "Launching processes for TPU through the CLI is not supported.",
    12: "Invalid value for '--num-nodes' / '--num_nodes': 'two'",
    13: "does not exist",
}


def drive(zero_edit: bool, argvs: list[list[str]]) -> list[dict[str, Any]]:
    driver = str(JOBS / "lightning_cli_driver.py")
    command = [*ZERO_EDIT, driver, json.dumps(argvs)] if zero_edit else [sys.executable, driver, json.dumps(argvs)]
    done = subprocess.run(command, env=plain_environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(240)
@pytest.mark.zero_edit
def test_run_main_matches_lightnings_variables_torchrun_arguments_and_exit_codes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    paths = {"SCRIPT": str(script), "MISSING": str(tmp_path / "missing.py")}
    argvs = [[paths.get(arg, arg) for arg in case] for case in CASES]
    theirs, ours = drive(False, argvs), drive(True, argvs)
    for i, (case, their, our) in enumerate(zip(CASES, theirs, ours, strict=True)):
        assert our["code"] == their["code"], (case, their["stderr"], our["stderr"])
        assert our["lt"] == their["lt"], case
        assert our["torchrun"] == their["torchrun"], case
        if i in PHRASES:
            assert PHRASES[i] in their["stderr"] and PHRASES[i] in our["stderr"], (case, their, our)
    assert ours[0]["torchrun"] == [
        "--nproc_per_node=1",
        "--nnodes=1",
        "--node_rank=0",
        "--master_addr=127.0.0.1",
        "--master_port=29400",
        str(script),
    ]
    assert ours[1]["torchrun"][0] == "--nproc_per_node=2" and ours[1]["torchrun"][-2:] == ["x", "--y"]
    assert ours[1]["lt"]["LT_PRECISION"] == "bf16-mixed"
    assert ours[11]["code"] == 1 and "devices" in ours[11]["stderr"]  # named, without a traceback
    assert ours[13]["code"] == 2


# -- Fabric() reads Lightning's variables as Lightning's connector does ---------------------------------------


@pytest.mark.parametrize("cli_used", [None, "1"])
@pytest.mark.parametrize(
    ("arg", "code", "value"),
    [
        ("devices", "auto", "2"),
        ("devices", 2, "2"),
        ("devices", 1, "2"),
        ("accelerator", "cpu", "cpu"),
        ("accelerator", "cuda", "cpu"),
        ("strategy", "auto", "ddp"),
        ("strategy", "fsdp", "ddp"),
        ("num_nodes", 1, "2"),
        ("num_nodes", 3, "2"),
        ("precision", None, "bf16-mixed"),
        ("precision", "16-mixed", "bf16-mixed"),
    ],
)
def test_lt_variables_override_the_arguments_as_in_lightnings_connector(
    arg: str, code: Any, value: str, cli_used: str | None
) -> None:
    from lightning_fabric.connector import _Connector

    from fabric_core._kernel.arguments import DEFAULTS, from_environment

    env = {f"LT_{arg.upper()}": value, **({"LT_CLI_USED": cli_used} if cli_used else {})}
    with pytest.MonkeyPatch.context() as mp:
        for name, text in env.items():
            mp.setenv(name, text)
        try:
            theirs: Any = _Connector._argument_from_env(arg, code, default=DEFAULTS[arg])
        except ValueError as error:
            theirs = error
    args = {**DEFAULTS, arg: code}
    try:
        ours: Any = from_environment(args, env)[arg]
    except ValueError as error:
        ours = error
    if isinstance(theirs, ValueError):
        assert isinstance(ours, ValueError), (theirs, ours)
        for phrase in (f"Fabric({arg}={code!r}, ...)", "conflicts with the value", f"--{arg}={value}"):
            assert phrase in str(theirs) and phrase in str(ours)
    else:
        assert ours == theirs


def test_fabric_core_variables_come_before_lightnings() -> None:
    from fabric_core._kernel.arguments import DEFAULTS, from_environment

    env = {"FABRIC_CORE_DEVICES": "3", "LT_DEVICES": "2", "LT_STRATEGY": "ddp"}
    got = from_environment(dict(DEFAULTS), env)
    assert (got["devices"], got["strategy"]) == ("3", "ddp")


# -- the module stays light; the commands exist only with click ------------------------------------------------


@pytest.mark.slow
def test_cli_module_imports_neither_click_nor_torch_until_a_command_is_asked_for() -> None:
    code = (
        "import sys, fabric_core.cli as c\n"
        "print('click' in sys.modules, 'torch' in sys.modules)\n"
        "c._run\n"
        "print('click' in sys.modules, c.torch is sys.modules['torch'])\n"
        "c._CLICK_AVAILABLE = False\n"
        "del c._main\n"  # built already: forget it, as a process without click never had it
        "print(hasattr(c, '_main'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "False", "True", "True", "False"]


# -- `fabric-core run` takes Lightning's spellings too --------------------------------------------------------


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.zero_edit
def test_fabric_core_run_accepts_lightnings_underscore_spellings(tmp_path: Path) -> None:
    options = ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--num_nodes", "1", "--node_rank", "0"]
    options += ["--main_address", "127.0.0.1", "--main_port", str(free_port())]
    command = [sys.executable, "-m", "fabric_core", "run", *options, str(JOBS / "cli_job.py"), str(tmp_path), "train"]
    done = subprocess.run(command, env=plain_environment(), capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    got = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert [(r["rank"], r["world_size"], r["strategy"]) for r in got] == [(0, 2, "DDPStrategy"), (1, 2, "DDPStrategy")]
    assert {r["master_port"] for r in got} == {options[-1]}
