"""Every public module path of Lightning Fabric exists under ``fabric_core``, the plugins' ones included.

Lightning's list is read from the installed ``lightning-fabric`` distribution's file list; each path is
imported under ``fabric_core`` in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata, util
from pathlib import Path

import pytest

from fabric_core._kernel.manager import plugin_module
from fabric_core._lightning.paths.plugin_modules import resolve
from fabric_core.errors import FIRST_PARTY_MODULES, InvalidConfigError
from fabric_core.testing import make_manager


def lightning_module_paths() -> list[str]:
    """Every public module of the installed lightning-fabric, as a path under the package (``strategies.ddp``).

    Public: no path component starts with ``_`` (``__init__`` stands for its package and the top package
    itself is left out; ``__main__`` is not a module one imports).
    """
    try:
        files = metadata.files("lightning-fabric") or []
    except metadata.PackageNotFoundError:
        pytest.skip("lightning-fabric is not installed (the compat extra)")
    paths = set()
    for file in files:
        parts = file.parts
        if parts[0] != "lightning_fabric" or file.suffix != ".py":
            continue
        names = [*parts[1:-1], file.stem]
        if names[-1] == "__init__":
            names.pop()
        if names and not any(n.startswith("_") for n in names):
            paths.add(".".join(names))
    return sorted(paths)


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_every_lightning_module_path_imports_under_fabric_core() -> None:
    paths = lightning_module_paths()
    assert len(paths) > 80  # the walk found Lightning's tree (86 modules in 2.6)
    code = f"""
        import importlib, json, sys
        out = {{}}
        for path in {paths!r}:
            try:
                module = importlib.import_module("fabric_core." + path)
                out[path] = module.__name__
            except ImportError as exc:
                out[path] = "ERROR " + repr(exc)
        print(json.dumps(out))
    """
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    failed = {p: r for p, r in result.items() if r.startswith("ERROR")}
    assert not failed, f"{len(failed)} Lightning module paths do not import under fabric_core: {failed}"
    # A plugin's path is its module itself, not a copy: the classes are the same objects. (The deprecated TPU
    # paths are no files in Lightning, which makes them in sys.modules: the compat case tpu-deprecated-paths.)
    for path in FIRST_PARTY_MODULES.keys() & result.keys():
        assert result[path].startswith("fabric_core_"), (path, result[path])
    assert result["strategies.ddp"] == "fabric_core_ddp.ddp"
    assert result["plugins.precision.fsdp"] == "fabric_core_fsdp.precision"
    # A core component's path is its implementing module (the built-in plugin declares it), so a name patched
    # at Lightning's path is the one the code reads.
    assert result["plugins.precision.double"] == "fabric_core.precision.double"
    assert result["plugins.environments.mpi"] == "fabric_core.environments.mpi"
    assert result["plugins.precision.precision"] == "fabric_core.plugins.precision.precision"  # a module of its own


@pytest.mark.slow
def test_plugin_path_is_the_plugin_module_and_attribute_access_works() -> None:
    code = """
        import sys
        import fabric_core
        assert "torch" not in sys.modules and "fabric_core._kernel.manager" not in sys.modules
        from importlib.machinery import PathFinder
        assert type(sys.meta_path[-1]).__name__ == "_AliasFinder" and PathFinder in sys.meta_path[:-1]
        cls = fabric_core.strategies.fsdp.FSDPStrategy
        import fabric_core_fsdp.fsdp
        assert cls is fabric_core_fsdp.fsdp.FSDPStrategy
        from fabric_core.strategies.ddp import DDPStrategy
        import fabric_core_ddp.ddp
        assert sys.modules["fabric_core.strategies.ddp"] is fabric_core_ddp.ddp
        assert fabric_core_ddp.ddp.__spec__.name == "fabric_core_ddp.ddp"  # its own spec is kept
        assert fabric_core.plugins.environments.slurm.SLURMEnvironment.__name__ == "SLURMEnvironment"
        assert not hasattr(fabric_core.strategies, "no_such_module")
        assert fabric_core.utilities.optimizer._optimizers_to_device.__name__ == "_optimizers_to_device"
        assert fabric_core.plugins.precision.double.DoublePrecision.__name__ == "DoublePrecision"
        assert fabric_core.strategies.launchers.xla.XLALauncher.__module__ == "fabric_core_xla.launcher"
        print("ok")
    """
    done = run_python(code)
    assert done.stdout.strip() == "ok", done.stderr


def test_blocked_plugin_path_imports_and_says_blocked_when_used() -> None:
    code = """
        import fabric_core
        import fabric_core.strategies.deepspeed as ds
        print(bool(ds._DEEPSPEED_AVAILABLE), ds.fabric_core_absent_plugin)
        try:
            ds.DeepSpeedStrategy(stage=3)
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc.name)
            print(exc)
        print(hasattr(fabric_core.strategies, "deepspeed"))
    """
    done = run_python(code, {"FABRIC_CORE_BLOCK_PLUGINS": "deepspeed"})
    flag, error, message, has = done.stdout.strip().splitlines()
    assert flag == "False fabric-core-deepspeed"
    assert error == "MissingPackageError fabric_core_deepspeed"
    assert "`DeepSpeedStrategy` comes with the fabric-core plugin fabric-core-deepspeed" in message
    assert "blocked by FABRIC_CORE_BLOCK_PLUGINS" in message and "pip install" not in message
    assert has == "True"


def test_absent_plugin_paths_import_with_lightnings_names_and_fail_only_when_used() -> None:
    from fabric_core.accelerators.accelerator import Accelerator
    from fabric_core.errors import MissingPackageError
    from fabric_core.precision.precision import Precision

    catalog = make_manager().catalog  # sees no installed plugin, as on a bare `pip install fabric-core`
    spec = resolve("fabric_core.accelerators.cuda", catalog)
    assert spec is not None and spec.loader is not None
    cuda = spec.loader.create_module(spec)
    assert cuda.num_cuda_devices() == 0 and cuda.is_cuda_available() is False
    assert cuda._get_all_visible_cuda_devices() == []
    assert issubclass(cuda.CUDAAccelerator, Accelerator)
    assert cuda.CUDAAccelerator.is_available() is False and cuda.CUDAAccelerator.auto_device_count() == 0
    with pytest.raises(MissingPackageError, match=r"`CUDAAccelerator` comes with .* `pip install fabric-core-cuda`"):
        cuda.CUDAAccelerator()
    with pytest.raises(ModuleNotFoundError, match=r"`find_usable_cuda_devices` .*pip install fabric-core-cuda"):
        cuda.find_usable_cuda_devices(1)

    spec = resolve("fabric_core.plugins.precision.bitsandbytes", catalog)
    assert spec is not None and spec.loader is not None
    bnb = spec.loader.create_module(spec)
    flag = bnb._BITSANDBYTES_AVAILABLE
    assert not flag and "pip install fabric-core-bitsandbytes" in str(flag)

    class TrainerPrecision(Precision):
        pass

    class Mine(TrainerPrecision, bnb.BitsandbytesPrecision):  # as lightning.pytorch subclasses it
        pass

    with pytest.raises(MissingPackageError, match=r"`Mine` comes with the fabric-core plugin fabric-core-bitsandbytes"):
        Mine()
    assert resolve("fabric_core.strategies.unknown_path", catalog) is None  # the ordinary "No module named"


def _declaring(*pairs: tuple[str, str]) -> object:
    def fabric_core_register_modules(registry: object) -> None:
        for path, module in pairs:
            registry.add(path, module)  # type: ignore[attr-defined]

    return plugin_module("declares", {"fabric_core_register_modules": fabric_core_register_modules})


def test_declarations_reach_the_catalog_and_conflicts_are_named() -> None:
    one = _declaring(("strategies.mine", "json.decoder"))
    two = _declaring(("strategies.mine", "json.encoder"))
    spec = resolve("fabric_core.strategies.mine", make_manager(("one", one)).catalog)
    assert spec is not None and spec.origin == "json.decoder"
    with pytest.raises(ImportError, match=r"more than one fabric-core plugin: 'one' \(json.decoder\), 'two'"):
        resolve("fabric_core.strategies.mine", make_manager(("one", one), ("two", two)).catalog)


@pytest.mark.parametrize(
    ("path", "module"),
    [("Strategies.Mine", "x.y"), ("fabric_core.strategies.x", "x.y"), ("strategies..x", "x"), ("a.b", "x:y")],
)
def test_a_malformed_declaration_fails_only_its_plugin(path: str, module: str) -> None:
    bad = _declaring((path, module))
    manager = make_manager(("bad", bad))
    with pytest.warns(match="fabric_core_register_modules raised InvalidConfigError"):
        records = {r.name: r for r in manager.records}
    assert records["bad"].status == "failed"
    assert records["builtin"].status == "loaded"
    with pytest.raises(InvalidConfigError, match="declared"):
        from fabric_core._kernel.registry import ModuleRegistry

        ModuleRegistry("p").add(path, module)


ACME_PLUGIN = """
from fabric_core.hookspecs import hookimpl

@hookimpl
def fabric_core_register_modules(registry):
    registry.add("loggers.acme", "acme_logs.logger")
    registry.add("strategies.strategy", "acme_logs.logger")  # the core has this module: the core's wins
"""


def test_third_party_plugin_declares_a_path_and_core_modules_win() -> None:
    modules = {
        "acme_logs/__init__.py": "",
        "acme_logs/_plugin.py": ACME_PLUGIN,
        "acme_logs/logger.py": "class AcmeLogger: ...",
    }
    code = f"""
        from fabric_core.testing import fake_distribution
        with fake_distribution("acme-logs", entry_points={{"acme": "acme_logs._plugin"}}, modules={modules!r}):
            from fabric_core.loggers.acme import AcmeLogger
            import acme_logs.logger, fabric_core.strategies.strategy as core
            assert AcmeLogger is acme_logs.logger.AcmeLogger
            assert core.__name__ == "fabric_core.strategies.strategy" and hasattr(core, "Strategy")
            print("ok")
    """
    done = run_python(code)
    assert done.stdout.strip() == "ok", done.stderr


def test_install_hint_table_matches_what_first_party_plugins_declare() -> None:
    from fabric_core._kernel.manager import PluginManager, dist_key

    manager = PluginManager(environ={})  # every installed plugin, none of the caller's switches
    dists = {r.name: dist_key(r.distribution) for r in manager.records if r.distribution}
    declared = {
        path: dists[d.plugin]
        for path, ds in manager.catalog.modules.items()
        for d in ds
        if dists.get(d.plugin, "").startswith("fabric-core-")
    }
    # Each path of the static table is declared by the distribution the table names, and nothing more.
    assert declared == FIRST_PARTY_MODULES


def test_a_failing_declared_module_names_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_on_import.py").write_text("raise RuntimeError('needs a GPU driver')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog = make_manager(("acme", _declaring(("strategies.acme", "broken_on_import")))).catalog
    spec = resolve("fabric_core.strategies.acme", catalog)
    assert spec is not None
    with pytest.raises(ImportError, match=r"plugin 'acme' as 'broken_on_import', which failed.*needs a GPU driver"):
        util.module_from_spec(spec)


@pytest.mark.slow
def test_xla_classes_at_lightnings_package_paths_are_lazy_and_name_the_plugin_when_used_without_it() -> None:
    code = """
        import sys
        import fabric_core.plugins, fabric_core.plugins.environments, fabric_core.plugins.io
        import fabric_core.accelerators, fabric_core.strategies
        from fabric_core_xla.environment import XLAEnvironment
        from fabric_core_xla.checkpoint_io import XLACheckpointIO
        assert fabric_core.plugins.environments.XLAEnvironment is XLAEnvironment
        assert fabric_core.plugins.XLACheckpointIO is fabric_core.plugins.io.XLACheckpointIO is XLACheckpointIO
        print("torch_xla" in sys.modules)
    """
    done = run_python(code)
    assert done.stdout.strip() == "False", done.stderr
    code = """
        import fabric_core.plugins.environments, fabric_core.accelerators, fabric_core.strategies
        wanted = ((fabric_core.plugins.environments, "XLAEnvironment"), (fabric_core.accelerators, "TPUAccelerator"),
                  (fabric_core.strategies, "SingleTPUStrategy"))
        for package, name in wanted:
            try:
                getattr(package, name)()  # the class exists, as in Lightning without torch_xla; using it fails
            except ModuleNotFoundError as exc:
                print(exc)
    """
    done = run_python(code, {"FABRIC_CORE_BLOCK_PLUGINS": "xla"})
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3, done.stderr
    for line, name in zip(lines, ("XLAEnvironment", "TPUAccelerator", "SingleTPUStrategy")):
        assert f"`{name}` comes with the fabric-core plugin fabric-core-xla" in line
        assert "blocked by FABRIC_CORE_BLOCK_PLUGINS" in line


def test_a_name_patched_at_a_core_components_lightning_path_is_the_one_the_code_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fabric_core.plugins.environments.mpi as lightning_path
    from fabric_core.environments import mpi
    from fabric_core.plugins.environments import MPIEnvironment

    assert lightning_path is mpi
    monkeypatch.setattr(lightning_path, "_MPI4PY_AVAILABLE", False)  # how Lightning's tests pretend it is absent
    with pytest.raises(ModuleNotFoundError, match="needs mpi4py"):
        MPIEnvironment()
