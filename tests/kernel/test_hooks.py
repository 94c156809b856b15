"""Every hook is documented and exercised: one ``test_hook_<name>`` per hook, each through a real manager.

In the manner of datasette's ``test_plugin_hooks_have_tests``: adding a hook spec without a docstring, a line
in the hook reference of ``docs/writing-a-plugin.md`` and a test here fails the first tests of this module.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import fabric_core
from fabric_core import hookspecs
from fabric_core._fabric.assembly import build
from fabric_core._kernel.manager import plugin_module
from fabric_core._kernel.selection import select
from fabric_core.plugin_api import HOOKS, InvalidConfigError, ModuleRegistry, Registry, SelectionContext, spec
from fabric_core.testing import make_manager

DOCS = Path(fabric_core.__file__).resolve().parent.parent / "docs" / "writing-a-plugin.md"
SINGLE = "fabric_core.strategies.single_device:SingleDeviceStrategy"


def _hook_reference() -> str:
    text = DOCS.read_text()
    start = text.index("## Hook reference")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented(hook: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert len(doc.splitlines()) >= 3 and "Called" in doc, f"{hook} needs a docstring saying when it is called"
    assert re.search(rf"`{hook}\(", _hook_reference()), f"{hook} is missing from the hook reference in {DOCS.name}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_test(hook: str) -> None:
    assert callable(globals().get(f"test_hook_{hook}")), f"write test_hook_{hook} in {Path(__file__).name}"


def test_the_documented_hooks_are_the_declared_hooks() -> None:
    documented = set(re.findall(r"`(fabric_core_\w+)\(", _hook_reference()))
    assert documented == set(HOOKS)


def _register(hook: str, kind: str, name: str, target: str) -> Any:
    def register(registry: Registry) -> None:
        assert registry.kind == kind
        registry.add(name, target, description=f"a {kind} from a test")

    return make_manager(plugin_module("mine", {hook: register})).catalog.get(kind, name)


def test_hook_fabric_core_register_accelerators() -> None:
    entry = _register(
        "fabric_core_register_accelerators", "accelerator", "mycpu", "fabric_core.accelerators.cpu:CPUAccelerator"
    )
    assert (entry.plugin, type(entry.build()).__name__) == ("mine", "CPUAccelerator")


def test_hook_fabric_core_register_strategies() -> None:
    entry = _register("fabric_core_register_strategies", "strategy", "mine", SINGLE)
    assert (entry.qualified_name, entry.load().__name__) == ("mine:mine", "SingleDeviceStrategy")


def test_hook_fabric_core_register_precisions() -> None:
    entry = _register(
        "fabric_core_register_precisions", "precision", "my-double", "fabric_core.precision.double:DoublePrecision"
    )
    assert type(entry.build()).__name__ == "DoublePrecision"


def test_hook_fabric_core_register_environments() -> None:
    target = "fabric_core.environments.lightning:LightningEnvironment"
    entry = _register("fabric_core_register_environments", "environment", "myenv", target)
    assert type(entry.build()).__name__ == "LightningEnvironment"


def test_hook_fabric_core_register_loggers(tmp_path: Path) -> None:
    entry = _register("fabric_core_register_loggers", "logger", "mycsv", "fabric_core.loggers.csv_logs:CSVLogger")
    assert entry.build({"root_dir": str(tmp_path)}).root_dir == str(tmp_path)


def test_hook_fabric_core_register_callbacks() -> None:
    entry = _register("fabric_core_register_callbacks", "callback", "mycb", "collections:OrderedDict")
    assert entry.build() == {}


def test_hook_fabric_core_register_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fc_hook_mod.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def declare(registry: ModuleRegistry) -> None:
        registry.add("loggers.fc_hook_test", "fc_hook_mod")

    catalog = make_manager(plugin_module("mine", {"fabric_core_register_modules": declare})).catalog
    (declaration,) = catalog.modules["loggers.fc_hook_test"]
    assert (declaration.module, declaration.plugin) == ("fc_hook_mod", "mine")
    assert "fc_hook_mod" not in sys.modules  # a declaration imports nothing


def _answering(hook: str, answer: Any, seen: list[SelectionContext]) -> Any:
    def select_hook(requested: str, context: SelectionContext) -> Any:
        seen.append(context)
        return answer(requested)

    return make_manager(plugin_module("mine", {hook: select_hook}))


def test_hook_fabric_core_select_accelerator() -> None:
    seen: list[SelectionContext] = []
    manager = _answering("fabric_core_select_accelerator", lambda r: "cpu" if r == "abacus" else None, seen)
    selection = select(manager, accelerator="abacus")
    assert selection.context.accelerator == "cpu" and seen[0].accelerator is None
    decision = next(d for d in selection.decisions if d.step == "accelerator")
    assert decision.hook == "mine.fabric_core_select_accelerator"


def test_hook_fabric_core_select_strategy() -> None:
    seen: list[SelectionContext] = []
    manager = _answering("fabric_core_select_strategy", lambda r: spec("single_device") if r == "mine" else None, seen)
    selection = select(manager, accelerator="cpu", strategy="mine")
    assert seen[0].device_type == "cpu" and seen[0].environment == "lightning"  # decided before the strategy
    assert type(build(selection).strategy).__name__ == "SingleDeviceStrategy"
    assert next(d for d in selection.decisions if d.step == "strategy").hook == "mine.fabric_core_select_strategy"


def test_hook_fabric_core_select_precision() -> None:
    seen: list[SelectionContext] = []
    manager = _answering("fabric_core_select_precision", lambda r: "64-true" if r == "32-true" else None, seen)
    selection = select(manager, accelerator="cpu", precision="32-true")
    assert seen[0].strategy == "single_device" and seen[0].precision == "32-true"
    assert type(build(selection).precision).__name__ == "DoublePrecision"
    decision = next(d for d in selection.decisions if d.step == "precision")
    assert (decision.value, decision.hook) == ("64-true", "mine.fabric_core_select_precision")


def test_hook_fabric_core_validate_selection() -> None:
    seen: list[SelectionContext] = []

    def validate(context: SelectionContext) -> None:
        seen.append(context)
        if context.precision == "64-true":
            raise InvalidConfigError("no doubles here", argument="precision")

    manager = make_manager(plugin_module("mine", {"fabric_core_validate_selection": validate}))
    assert select(manager, accelerator="cpu").context.precision == "32-true"
    with pytest.raises(InvalidConfigError, match="no doubles here"):
        select(manager, accelerator="cpu", precision="64-true")
    assert [c.strategy for c in seen] == ["single_device", "single_device"]  # it sees the complete selection


def test_hook_fabric_core_register_runners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fabric_core._run.command import run_command, runners_with_options
    from fabric_core.cli import build_parser

    (tmp_path / "fc_hook_runner.py").write_text(
        "def runner(args, manager):\n"
        "    with open(args.script + '.ran', 'w') as f:\n"
        "        f.write(f'{args.greeting} {args.script_args}')\n"
        "    return 7\n"
        "runner.add_arguments = lambda group: group.add_argument('--greeting', default='hi')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    script = tmp_path / "train.py"
    script.write_text("")

    def register(registry: Registry) -> None:
        registry.add("echo", "fc_hook_runner:runner", description="a runner from a test")

    manager = make_manager(plugin_module("mine", {"fabric_core_register_runners": register}))
    assert manager.catalog.get("runner", "torchrun").plugin == "builtin"  # the default stays
    parser = build_parser(runners_with_options(manager))
    args = parser.parse_args(["run", "--launcher", "echo", "--greeting", "hello", str(script), "--lr", "1"])
    assert run_command(args, manager) == 7
    assert (tmp_path / "train.py.ran").read_text() == "hello ['--lr', '1']"
    # Its option under another launcher would be ignored silently: refused before anything starts.
    args = parser.parse_args(["run", "--greeting", "hello", str(script)])
    with pytest.raises(InvalidConfigError, match=r"--greeting .*--launcher echo"):
        run_command(args, manager)
