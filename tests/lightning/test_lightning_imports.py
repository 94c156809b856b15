"""Zero-edit mode: ``lightning_fabric`` / ``lightning.fabric`` served as fabric_core's own modules.

Every check runs in a fresh interpreter (the mode changes ``sys.meta_path`` and ``sys.modules`` for good), with
the installed ``lightning`` distribution or with it hidden. Hiding is done below the mode, in the path search
itself (a ``sitecustomize`` that makes ``PathFinder`` miss the installed ``lightning`` and ``pytorch_lightning``),
so the mode sees exactly what a machine without the distribution shows it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.zero_edit

JOB = Path(__file__).parents[1] / "_jobs" / "lightning_imports_job.py"

HIDE_LIGHTNING = """
from importlib.machinery import PathFinder

_find = PathFinder.find_spec


def find_spec(fullname, path=None, target=None):
    spec = _find(fullname, path, target)
    hidden = fullname.partition(".")[0] in ("lightning", "pytorch_lightning")
    if hidden and spec is not None and "/_lightning/handover/" not in (spec.origin or ""):
        return None
    return spec


PathFinder.find_spec = staticmethod(find_spec)
"""

# The lead is still adding Lightning Fabric's module-level names that lightning.pytorch imports.


@pytest.fixture(params=["installed", "stand-in"])
def lightning(request: pytest.FixtureRequest) -> str:
    """Whether ``lightning`` is the installed distribution or zero-edit mode's stand-in."""
    return str(request.param)


def environment(tmp_path: Path, lightning: str = "installed") -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "WORLD_SIZE", "NODE_RANK"))
    }
    env.pop("PYTHONPATH", None)
    if lightning == "stand-in":
        hide = tmp_path / "hide"
        hide.mkdir(exist_ok=True)
        (hide / "sitecustomize.py").write_text(HIDE_LIGHTNING)
        env["PYTHONPATH"] = str(hide)
    return env


def python(
    args: list[str], tmp_path: Path, lightning: str = "installed", timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env=environment(tmp_path, lightning),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or tmp_path,
    )


def run_code(code: str, tmp_path: Path, lightning: str = "installed") -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object on its last line."""
    done = python(["-c", textwrap.dedent(code)], tmp_path, lightning)
    succeeded(done, lightning)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def succeeded(done: subprocess.CompletedProcess[str], lightning: str) -> None:
    assert done.returncode == 0, done.stderr[-3000:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reports(outdir: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(outdir.glob("rank*.json"))]


# -- one process ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_the_three_names_are_one_module_object(tmp_path: Path) -> None:
    got = run_code(
        """
        import importlib, json, sys
        from fabric_core.compat import provide_lightning_fabric
        provide_lightning_fabric()
        paths = ["", ".fabric", ".strategies", ".strategies.ddp", ".strategies.fsdp", ".utilities.seed",
                 ".utilities.load", ".plugins.precision", ".accelerators.cpu"]
        same = {}
        for p in paths:
            ours = importlib.import_module("fabric_core" + p)
            same[p] = ours is importlib.import_module("lightning_fabric" + p) is sys.modules["fabric_core" + p]
        plugin = importlib.import_module("lightning_fabric.strategies.ddp")
        print(json.dumps({"same": same, "ddp": plugin.__name__, "spec": plugin.__spec__.name}))
        """,
        tmp_path,
        "stand-in",
    )
    assert got["same"] == dict.fromkeys(got["same"], True) and len(got["same"]) == 9  # type: ignore[arg-type]
    # a path that fabric_core serves from a plugin is the plugin's module, under its own spec
    assert got["ddp"] == got["spec"] == "fabric_core_ddp.ddp"


@pytest.mark.timeout(90)
def test_isinstance_and_mock_patch_agree_across_names(tmp_path: Path) -> None:
    got = run_code(
        """
        import json
        from unittest import mock
        from fabric_core.compat import provide_lightning_fabric
        provide_lightning_fabric()
        import lightning_fabric
        from lightning.fabric.strategies import DDPStrategy as LightningDDP
        from lightning_fabric.accelerators import Accelerator
        import fabric_core
        from fabric_core.strategies import DDPStrategy
        from fabric_core.accelerators import CPUAccelerator
        import fabric_core.utilities.seed as seed
        with mock.patch("lightning.fabric.utilities.seed.seed_everything", return_value=1234):
            patched = seed.seed_everything(7)
        with mock.patch("lightning_fabric.fabric.Fabric.print") as printed:
            fabric_core.Fabric(accelerator="cpu", devices=1).print("hello")
        print(json.dumps({
            "ddp": isinstance(DDPStrategy(), LightningDDP),
            "accelerator": isinstance(CPUAccelerator(), Accelerator),
            "class": LightningDDP is DDPStrategy,
            "patched": patched,
            "restored": seed.seed_everything(7),
            "print": printed.call_args.args,
        }))
        """,
        tmp_path,
        "stand-in",
    )
    assert got == {"ddp": True, "accelerator": True, "class": True, "patched": 1234, "restored": 7, "print": ["hello"]}


@pytest.mark.timeout(90)
def test_lightning_is_the_installed_distribution_with_its_own_pytorch(tmp_path: Path) -> None:
    got = run_code(
        """
        import json
        from fabric_core.compat import provide_lightning_fabric
        provide_lightning_fabric()
        import lightning as L, lightning.pytorch, fabric_core
        print(json.dumps({
            "fabric": L.Fabric is fabric_core.Fabric, "seed": L.seed_everything is fabric_core.seed_everything,
            "module": L.fabric is fabric_core, "lightning": L.__file__, "pytorch": lightning.pytorch.__file__,
        }))
        """,
        tmp_path,
        "installed",
    )
    assert got["fabric"] is got["seed"] is got["module"] is True
    assert "site-packages" in str(got["lightning"]) and "site-packages" in str(got["pytorch"])


@pytest.mark.timeout(120)
def test_lightning_pytorch_runs_on_fabric_core_modules(tmp_path: Path) -> None:
    """The real lightning.pytorch imports dozens of Lightning Fabric helpers; on fabric-core's it still trains."""
    got = run_code(
        """
        import json, torch
        from fabric_core.compat import provide_lightning_fabric
        provide_lightning_fabric()
        import lightning as L
        from lightning.pytorch.accelerators import AcceleratorRegistry
        from lightning.pytorch.strategies import StrategyRegistry
        from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
        from lightning.pytorch.cli import instantiate_class
        import lightning.fabric.accelerators.accelerator as fabric_accelerator

        class Model(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)
            def training_step(self, batch, index):
                return self.layer(batch).sum()
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        fabric = L.Fabric(accelerator="cpu", devices=1)
        model, optimizer = fabric.setup(Model(), torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1))
        trainer = L.Trainer(max_steps=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Model(), torch.utils.data.DataLoader(torch.ones(8, 2), batch_size=4))
        print(json.dumps({
            "fabric": type(fabric).__module__, "steps": trainer.global_step,
            "accelerators": sorted(AcceleratorRegistry), "ddp": "ddp" in StrategyRegistry,
            "base": issubclass(type(trainer.accelerator), fabric_accelerator.Accelerator),
        }))
        """,
        tmp_path,
        "installed",
    )
    assert got["fabric"] == "fabric_core.fabric" and got["steps"] == 2
    assert {"cpu", "cuda", "mps", "tpu"} <= set(got["accelerators"]) and got["ddp"] is True  # type: ignore[arg-type]
    assert got["base"] is True  # lightning.pytorch's accelerators subclass fabric-core's base class


@pytest.mark.timeout(60)
def test_without_lightning_a_stand_in_provides_fabric_only(tmp_path: Path) -> None:
    got = run_code(
        """
        import json
        from fabric_core.compat import provide_lightning_fabric
        provide_lightning_fabric()
        import lightning as L, fabric_core
        errors = {}
        for name in ("Trainer", "LightningModule", "pytorch"):
            try:
                getattr(L, name)
            except AttributeError as exc:
                errors[name] = str(exc)
        try:
            import lightning.pytorch
        except ModuleNotFoundError as exc:
            errors["import"] = str(exc)
        print(json.dumps({"fabric": L.Fabric is fabric_core.Fabric, "seed": L.seed_everything is
                          fabric_core.seed_everything, "module": L.fabric is fabric_core, "errors": errors}))
        """,
        tmp_path,
        "stand-in",
    )
    assert got["fabric"] is got["seed"] is got["module"] is True
    errors = got["errors"]
    assert isinstance(errors, dict) and set(errors) == {"Trainer", "LightningModule", "pytorch", "import"}
    for message in errors.values():
        assert "Lightning Fabric only" in message and "pip install lightning" in message


LOGGING_SCRIPT = """
import io, json, logging, os
import lightning.fabric
from lightning.fabric import seed_everything

captured = io.StringIO()
logging.getLogger("lightning.fabric.utilities.seed").addHandler(logging.StreamHandler(captured))
seed_everything(7)
names = []


class Grab(logging.Handler):
    def emit(self, record):
        names.append(record.name)


logging.getLogger().addHandler(Grab())
logging.getLogger("lightning.fabric").propagate = True  # as Lightning's tests make caplog see its records
seed_everything(8)
logging.getLogger("lightning.fabric").setLevel(logging.ERROR)  # how a Lightning user silences the lines
seed_everything(9)
print(json.dumps({
    "captured": captured.getvalue().splitlines(),
    "names": names,
    "nvml": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
}))
"""


@pytest.mark.timeout(90)
def test_log_records_carry_lightnings_logger_names_and_the_nvml_check_is_set_as_lightning_does(
    tmp_path: Path,
) -> None:
    script = tmp_path / "logs.py"
    script.write_text(LOGGING_SCRIPT)
    lightning = python([str(script)], tmp_path)
    ours = python(["-m", "fabric_core.lightning_imports", str(script)], tmp_path)
    succeeded(lightning, "installed")
    succeeded(ours, "installed")
    expected = {
        "captured": ["Seed set to 7", "Seed set to 8"],
        "names": ["lightning.fabric.utilities.seed"],
        "nvml": "1",
    }
    assert json.loads(lightning.stdout.splitlines()[-1]) == expected
    assert json.loads(ours.stdout.splitlines()[-1]) == expected


IMPORT_EFFECTS_SCRIPT = """
import importlib, json, os
import torch
import lightning.fabric

os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK")
importlib.reload(lightning.fabric)  # as Lightning's test_force_nvml_based_cuda_check does
model = torch.nn.Linear(1, 2)
compiled = torch.compile(model, dynamic=False)
fabric_model = lightning.fabric.Fabric(accelerator="cpu", devices=1).setup(compiled)
print(json.dumps({
    "nvml": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
    "recorded": compiled._compile_kwargs,
    "set_up": fabric_model._forward_module._compile_kwargs,
    "original": fabric_model._original_module is model,
}))
"""


@pytest.mark.timeout(90)
def test_importing_lightning_names_has_lightnings_effects_on_torch_compile_and_the_environment(
    tmp_path: Path,
) -> None:
    # Lightning's import makes torch.compile record its arguments (test_setup_compiled_module) and sets the
    # NVML check again when lightning.fabric is reloaded; fabric-core's own import does neither.
    script = tmp_path / "effects.py"
    script.write_text(IMPORT_EFFECTS_SCRIPT)
    lightning = python([str(script)], tmp_path)
    ours = python(["-m", "fabric_core.lightning_imports", str(script)], tmp_path)
    succeeded(lightning, "installed")
    succeeded(ours, "installed")
    expected = {"nvml": "1", "recorded": {"dynamic": False}, "set_up": {"dynamic": False}, "original": True}
    assert json.loads(lightning.stdout.splitlines()[-1]) == expected
    assert json.loads(ours.stdout.splitlines()[-1]) == expected
    plain = python(["-c", "import torch, fabric_core.wrappers; print(torch.compile.__module__)"], tmp_path)
    succeeded(plain, "installed")
    assert plain.stdout.split()[-1] == "torch"


RANK_AGAIN_SCRIPT = """
import json, os, sys
import lightning.fabric
from lightning.fabric.utilities.rank_zero import rank_zero_only

rank_zero_only.rank = 0  # assigned, as a strategy (or Lightning's test fixture) does
os.environ["RANK"] = "1"
seen = [rank_zero_only(lambda: "ran")()]
del sys.modules["lightning.fabric.utilities.rank_zero"]
sys.modules.pop("lightning_utilities.core.rank_zero", None)
from lightning.fabric.utilities.rank_zero import rank_zero_only
seen.append(rank_zero_only(lambda: "ran")())  # imported anew: the rank from the environment
print(json.dumps(seen))
"""


@pytest.mark.timeout(90)
def test_a_rank_zero_module_imported_again_reads_the_rank_from_the_environment_as_lightnings(tmp_path: Path) -> None:
    # Lightning's utilities/test_rank_zero.py::test_rank_zero_known_environment_variables[env_vars5-8].
    script = tmp_path / "rank_again.py"
    script.write_text(RANK_AGAIN_SCRIPT)
    lightning = python([str(script)], tmp_path)
    ours = python(["-m", "fabric_core.lightning_imports", str(script)], tmp_path)
    succeeded(lightning, "installed")
    succeeded(ours, "installed")
    assert json.loads(lightning.stdout.splitlines()[-1]) == ["ran", None]
    assert json.loads(ours.stdout.splitlines()[-1]) == ["ran", None]


@pytest.mark.timeout(90)
def test_imports_and_runs_where_torch_has_no_distributed_package(tmp_path: Path) -> None:
    # A torch built without torch.distributed (as Lightning's own test pretends it): Lightning's paths import,
    # a one-process run works, and what needs the package (FSDP's module) fails only when used, saying why.
    script = tmp_path / "no_dist.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, torch
            for name in list(torch.distributed.__dict__):
                if not name.startswith("__"):
                    delattr(torch.distributed, name)
            torch.distributed.is_available = lambda: False
            import lightning_fabric
            from lightning_fabric.strategies import FSDPStrategy
            from lightning_fabric.utilities.distributed import group
            fabric = lightning_fabric.Fabric(accelerator="cpu", devices=1)
            try:
                FSDPStrategy()
                error = None
            except ModuleNotFoundError as exc:
                error = str(exc)
            print(json.dumps([group.WORLD, fabric.all_reduce(torch.tensor(2.0)).item(), error]))
            """
        )
    )
    done = python(["-m", "fabric_core.lightning_imports", str(script)], tmp_path)
    succeeded(done, "installed")
    world, reduced, error = json.loads(done.stdout.splitlines()[-1])
    assert (world, reduced) == (None, 2.0)
    assert "`FSDPStrategy` comes with the fabric-core plugin fabric-core-fsdp" in error
    assert "failed to import" in error and "Store" in error


@pytest.mark.timeout(60)
def test_a_module_fabric_core_lacks_names_both_paths(tmp_path: Path) -> None:
    got = run_code(
        """
        import json
        from fabric_core.compat import provide_lightning_fabric
        provide_lightning_fabric()
        try:
            import lightning.fabric.no_such_module
        except ModuleNotFoundError as exc:
            print(json.dumps({"message": str(exc), "name": exc.name}))
        """,
        tmp_path,
        "stand-in",
    )
    assert got["name"] == "lightning.fabric.no_such_module"
    assert "'lightning.fabric.no_such_module'" in str(got["message"])
    assert "'fabric_core.no_such_module'" in str(got["message"])


@pytest.mark.timeout(60)
def test_refused_after_the_real_lightning_fabric_was_imported(tmp_path: Path) -> None:
    got = run_code(
        """
        import json, sys
        import lightning_fabric
        from fabric_core.compat import lightning_fabric_provided, provide_lightning_fabric
        from fabric_core.errors import InvalidConfigError
        try:
            provide_lightning_fabric()
        except InvalidConfigError as exc:
            message = str(exc)
        print(json.dumps({"message": message, "on": lightning_fabric_provided(),
                          "real": sys.modules["lightning_fabric"] is lightning_fabric}))
        """,
        tmp_path,
    )
    assert got["on"] is False and got["real"] is True  # nothing changed: no second copy
    message = str(got["message"])
    assert "imported already" in message and "site-packages/lightning_fabric" in message
    assert "provide_lightning_fabric()" in message and "python -m fabric_core.lightning_imports" in message


@pytest.mark.timeout(60)
def test_a_second_call_changes_nothing(tmp_path: Path) -> None:
    got = run_code(
        """
        import json, os, sys
        from fabric_core.compat import provide_lightning_fabric
        from fabric_core._lightning.alias import HANDOVER_PATH, LightningImportsFinder
        provide_lightning_fabric()
        import lightning_fabric
        provide_lightning_fabric()
        print(json.dumps({
            "finders": sum(isinstance(f, LightningImportsFinder) for f in sys.meta_path),
            "first": isinstance(sys.meta_path[0], LightningImportsFinder),
            "path": sys.path.count(HANDOVER_PATH),
            "pythonpath": os.environ["PYTHONPATH"].split(os.pathsep).count(HANDOVER_PATH),
            "env": os.environ["FABRIC_CORE_LIGHTNING_IMPORTS"],
        }))
        """,
        tmp_path,
        "stand-in",
    )
    assert got == {"finders": 1, "first": True, "path": 1, "pythonpath": 1, "env": "1"}


@pytest.mark.timeout(60)
def test_off_by_default(tmp_path: Path) -> None:
    got = run_code(
        """
        import json, sys
        import fabric_core, fabric_core.strategies
        import lightning_fabric
        from fabric_core.compat import lightning_fabric_provided
        print(json.dumps({"file": lightning_fabric.__file__, "same": lightning_fabric is fabric_core,
                          "on": lightning_fabric_provided()}))
        """,
        tmp_path,
    )
    assert got["same"] is False and got["on"] is False
    assert str(got["file"]).endswith(os.path.join("site-packages", "lightning_fabric", "__init__.py"))


def test_the_handover_package_refuses_another_name() -> None:
    with pytest.raises(ImportError, match="handover package"):
        import fabric_core._lightning.handover.lightning  # noqa: F401


# -- the runner, the run command and explain -----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_script_runs_unchanged_as_python_would_run_it(tmp_path: Path, lightning: str) -> None:
    done = python(["-m", "fabric_core.lightning_imports", str(JOB), str(tmp_path), "single"], tmp_path, lightning)
    succeeded(done, lightning)
    (got,) = reports(tmp_path)
    assert got["fabric_class"] == "fabric_core.fabric.Fabric" and got["is_fabric_core"] is True
    assert got["same_modules"] is True and got["strategy_is_lightning_strategy"] is True
    assert got["argv"] == [str(JOB), str(tmp_path), "single"]
    assert (got["name"], got["path0"], got["total"]) == ("__main__", str(JOB.parent), 1.0)


@pytest.mark.timeout(120)
def test_module_form_runs_like_python_dash_m(tmp_path: Path) -> None:
    done = python(
        ["-m", "fabric_core.lightning_imports", "-m", JOB.stem, str(tmp_path), "single"],
        tmp_path,
        "stand-in",
        cwd=JOB.parent,
    )
    succeeded(done, "stand-in")
    (got,) = reports(tmp_path)
    assert got["argv"] == [str(JOB), str(tmp_path), "single"]  # argv[0] is the module's file, as with -m
    assert got["name"] == "__main__" and got["is_fabric_core"] is True and got["same_modules"] is True


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize("launch", ["ddp", "ddp_spawn", "ddp_fork"])
def test_every_process_of_a_launched_job_is_in_the_mode(tmp_path: Path, launch: str) -> None:
    """``ddp`` runs the command again, ``ddp_spawn`` imports the script in fresh interpreters, ``ddp_fork`` forks."""
    done = python(
        ["-m", "fabric_core.lightning_imports", str(JOB), str(tmp_path), launch], tmp_path, "stand-in", timeout=170
    )
    succeeded(done, "stand-in")
    got = reports(tmp_path)
    assert [r["rank"] for r in got] == [0, 1]
    for r in got:
        assert r["fabric_class"] == "fabric_core.fabric.Fabric" and r["is_fabric_core"] is True
        assert r["same_modules"] is True and r["strategy_is_lightning_strategy"] is True
        assert (r["world_size"], r["total"], r["mode_env"]) == (2, 3.0, "1")
    assert [r["name"] for r in got] == ["__mp_main__"] * 2 if launch == "ddp_spawn" else ["__main__"] * 2


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_fabric_core_run_lightning_imports(tmp_path: Path) -> None:
    options = ["--lightning-imports", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp"]
    done = python(
        ["-m", "fabric_core", "run", *options, "--main-port", str(free_port()), str(JOB), str(tmp_path), "cli"],
        tmp_path,
        "stand-in",
        timeout=170,
    )
    succeeded(done, "stand-in")
    got = reports(tmp_path)
    assert [r["rank"] for r in got] == [0, 1]
    for r in got:
        assert r["is_fabric_core"] is True and r["same_modules"] is True and r["total"] == 3.0
        assert r["strategy"] == "fabric_core_ddp.ddp.DDPStrategy"


@pytest.mark.timeout(60)
def test_run_lightning_imports_refuses_a_runner_whose_workers_do_not_inherit(tmp_path: Path) -> None:
    done = python(
        ["-m", "fabric_core", "run", "--lightning-imports", "--launcher", "ray", str(JOB), str(tmp_path), "cli"],
        tmp_path,
    )
    assert done.returncode == 2
    assert "--lightning-imports" in done.stderr and "'ray'" in done.stderr and "torchrun" in done.stderr


@pytest.mark.timeout(90)
def test_explain_says_whether_the_mode_is_on(tmp_path: Path) -> None:
    explain = ["-m", "fabric_core", "explain", "--accelerator", "cpu", "--devices", "1"]
    off = python(explain, tmp_path)
    on = python(["-m", "fabric_core.lightning_imports", *explain], tmp_path, "stand-in")
    assert off.returncode == on.returncode == 0, off.stderr + on.stderr
    assert "zero-edit mode: off" in off.stdout
    assert "zero-edit mode: on" in on.stdout and "stand-in" in on.stdout


@pytest.mark.timeout(60)
def test_runner_usage_errors(tmp_path: Path) -> None:
    bare = python(["-m", "fabric_core.lightning_imports"], tmp_path)
    missing = python(["-m", "fabric_core.lightning_imports", "no_such_script.py"], tmp_path)
    no_module = python(["-m", "fabric_core.lightning_imports", "-m"], tmp_path)
    assert bare.returncode == missing.returncode == no_module.returncode == 2
    assert "usage: python -m fabric_core.lightning_imports SCRIPT" in bare.stderr
    assert "'no_such_script.py'" in missing.stderr and "-m needs a module name" in no_module.stderr


def test_ddp_children_keep_the_runner_prefix_with_the_script_made_absolute() -> None:
    from fabric_core.launchers.subprocess_script import script_command

    script = ["python", "-u", "-m", "fabric_core.lightning_imports", "train.py", "--x"]
    module = ["python", "-m", "fabric_core.lightning_imports", "-m", "litgpt", "pretrain", "--devices", "2"]
    assert script_command(script) == [
        sys.executable,
        "-u",
        "-m",
        "fabric_core.lightning_imports",
        os.path.abspath("train.py"),
        "--x",
    ]
    assert script_command(module) == [sys.executable, *module[1:]]
