"""Zero-edit mode: ``lightning_fabric`` and ``lightning.fabric`` import as fabric_core's own modules.

:func:`install` puts :class:`LightningImportsFinder` first on ``sys.meta_path``. For ``lightning_fabric.X`` and
``lightning.fabric.X`` it answers with a spec whose loader returns the module ``fabric_core.X`` itself (as
:mod:`fabric_core._lightning.paths.plugin_modules` does for plugin paths), so there is one module object under three
names and ``isinstance`` and ``mock.patch`` agree across them. ``lightning`` itself is the installed distribution
when there is one (its ``__init__`` then imports ``lightning.fabric.fabric``, which is ours, and the real
``lightning.pytorch``), otherwise a small stand-in package with ``fabric``, ``Fabric`` and ``seed_everything``.

Child processes inherit the mode through two things :func:`install` sets: ``FABRIC_CORE_LIGHTNING_IMPORTS=1``
(read by ``fabric-core run`` workers) and the folder :data:`HANDOVER_PATH` at the front of the import path
(``sys.path``, which spawned processes copy, and ``PYTHONPATH``, which every child inherits). That folder holds
``lightning/`` and ``lightning_fabric/`` packages whose only code installs the mode and hands the import over,
so a child that imports either name gets the mode before the import completes, whoever started it.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, cast

from fabric_core._lightning.loggers import serve_lightning_names

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader

__all__ = ["ENV", "HANDOVER_PATH", "LightningImportsFinder", "describe", "hand_over", "install", "is_installed"]

#: Set to ``1`` in a process (and so in its children) that runs in zero-edit mode.
ENV: Final = "FABRIC_CORE_LIGHTNING_IMPORTS"
#: The folder whose ``lightning`` and ``lightning_fabric`` packages hand the import over to this mode.
HANDOVER_PATH: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "handover")
#: Lightning's names for fabric_core's package.
SERVED: Final = ("lightning_fabric", "lightning.fabric")
#: Attributes of the real ``lightning`` package that belong to ``lightning.pytorch``.
_PYTORCH_NAMES: Final = frozenset(
    {"pytorch", "Trainer", "LightningModule", "LightningDataModule", "Callback", "store", "app", "data"}
)


#: The Lightning names served in this process so far (a name imported again was removed from ``sys.modules``).
_served_names: Final[set[str]] = set()


class _SameModuleLoader:
    """Loads ``lightning_fabric.X`` as the module object ``fabric_core.X`` (no second copy).

    Importing a Lightning name again after it was removed from ``sys.modules`` runs Lightning's module anew,
    which recomputes its import-time state; the one module object here cannot run again, so it is told
    through its ``_lightning_import_again()``, where it has one (``rank_zero`` forgets an assigned rank).
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self._own_spec: Any = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        try:
            module = importlib.import_module(self.target)
        except ModuleNotFoundError as exc:
            if exc.name is None or not self.target.startswith(exc.name) or exc.name == "fabric_core":
                raise  # a dependency of the module is missing, not the module: the original error says which
            raise ModuleNotFoundError(
                f"No module named {spec.name!r}: in zero-edit mode (python -m fabric_core.lightning_imports) it "
                f"is served as {self.target!r}, which fabric-core does not have ({exc})",
                name=spec.name,
            ) from exc
        # The import system sets __spec__ on the module it is given; keep the module's own (restored below).
        self._own_spec = module.__spec__
        _record_compile_arguments()
        if spec.name in _served_names:
            again = getattr(module, "_lightning_import_again", None)
            if callable(again):
                again()
        _served_names.add(spec.name)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._own_spec  # the module was executed by its own import already


def _record_compile_arguments() -> None:
    """Do what importing Lightning Fabric does to ``torch.compile`` (once): a compiled module records the
    arguments it was compiled with (``_compile_kwargs``), which ``fabric.setup`` then compiles again with.

    Only here, when a program imports Lightning's names: fabric-core's own import leaves ``torch.compile`` alone.
    """
    torch: Any = sys.modules.get("torch")
    compile_fn = getattr(torch, "compile", None)
    if compile_fn is None or getattr(compile_fn, "fabric_core_records_arguments", False):
        return
    from fabric_core.wrappers import _capture_compile_kwargs

    recording = _capture_compile_kwargs(compile_fn)
    recording.fabric_core_records_arguments = True  # type: ignore[attr-defined]
    torch.compile = recording


class _StandInLoader:
    """Builds the ``lightning`` stand-in package when the ``lightning`` distribution is not installed."""

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return ModuleType(spec.name, "Lightning's package as zero-edit mode provides it: Lightning Fabric only.")

    def exec_module(self, module: ModuleType) -> None:
        # A package, so that ``lightning.fabric`` is looked up (the finder serves it); PEP 562 for the rest.
        module.__dict__.update(
            __path__=[], __all__=["Fabric", "fabric", "seed_everything"], __getattr__=_stand_in_attribute
        )


def _stand_in_attribute(name: str) -> Any:
    if name in ("Fabric", "seed_everything"):
        return getattr(importlib.import_module("fabric_core"), name)
    if name == "fabric":
        return importlib.import_module("lightning.fabric")
    if name in _PYTORCH_NAMES:
        raise AttributeError(f"lightning.{name}: {_pytorch_missing()}")
    raise AttributeError(
        f"module 'lightning' has no attribute {name!r} (zero-edit mode provides Lightning Fabric only)"
    )


def _pytorch_missing() -> str:
    return (
        "zero-edit mode (python -m fabric_core.lightning_imports) provides Lightning Fabric only, and the `lightning` "
        "distribution is not installed; lightning.pytorch (Trainer, LightningModule, ...) needs "
        "`pip install lightning`."
    )


class LightningImportsFinder:
    """First on ``sys.meta_path`` in zero-edit mode: serves ``lightning_fabric`` and ``lightning.fabric``."""

    fabric_core_lightning_imports: Final = True  # how install() recognises an installed finder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        for prefix in SERVED:
            if fullname == prefix or fullname.startswith(prefix + "."):
                served = "fabric_core" + fullname[len(prefix) :]
                return ModuleSpec(fullname, cast("Loader", _SameModuleLoader(served)), origin=served)
        if fullname == "lightning":
            return _lightning_spec()
        if fullname.startswith("lightning.") and _is_stand_in(sys.modules.get("lightning")):
            raise ModuleNotFoundError(f"No module named {fullname!r}: {_pytorch_missing()}", name=fullname)
        return None


def _lightning_spec() -> ModuleSpec:
    """The installed ``lightning`` distribution's spec, else the stand-in's.

    The other finders are asked as the import system would ask them, except that the path search skips the
    handover folder (whose ``lightning`` would hand the import back here).
    """
    search = [p for p in sys.path if not _is_handover(p)]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if isinstance(finder, LightningImportsFinder) or find is None:
            continue
        real = find("lightning", search if finder is PathFinder else None)
        if real is not None:
            return cast("ModuleSpec", real)
    return ModuleSpec("lightning", cast("Loader", _StandInLoader()), origin="fabric-core zero-edit mode")


def _is_stand_in(module: object) -> bool:
    spec = getattr(module, "__spec__", None)
    return isinstance(getattr(spec, "loader", None), _StandInLoader)


def _is_handover(entry: str) -> bool:
    return os.path.abspath(entry or os.curdir) == HANDOVER_PATH


def is_installed() -> bool:
    """Whether zero-edit mode is on in this process (its finder is on ``sys.meta_path``)."""
    return any(getattr(f, "fabric_core_lightning_imports", False) for f in sys.meta_path)


def install() -> None:
    """Turn zero-edit mode on in this process and the processes it starts; a second call does nothing.

    As Lightning's import does, it sets ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (unless set), and fabric-core's
    log records take Lightning's logger names (:mod:`fabric_core._lightning.loggers`); the first Lightning name
    imported makes ``torch.compile`` record its arguments, as importing Lightning Fabric does.

    Raises:
        InvalidConfigError: Lightning Fabric's own modules are imported already: serving the names now would
            leave two copies of every class in this process.
    """
    if is_installed():
        return
    _refuse_real_copies()
    serve_lightning_names()  # fabric-core's log records under Lightning's logger names
    # As Lightning does at import: torch.cuda.is_available() then asks NVML and creates no CUDA context, so
    # the processes this one forks (ddp_fork, notebooks, DataLoader workers) can still use CUDA.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    sys.meta_path.insert(0, LightningImportsFinder())
    if not any(_is_handover(p) for p in sys.path):
        sys.path.insert(1, HANDOVER_PATH)  # after the script's folder, which sys.path[0] stands for
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and not _is_handover(p)]
    os.environ["PYTHONPATH"] = os.pathsep.join([HANDOVER_PATH, *entries])
    os.environ[ENV] = "1"


def _refuse_real_copies() -> None:
    fabric_core = sys.modules.get("fabric_core")
    loaded = sorted(
        name
        for name, module in list(sys.modules.items())
        if any(name == p or name.startswith(p + ".") for p in SERVED) and module is not None
        if not (fabric_core is not None and getattr(module, "__name__", "").startswith("fabric_core"))
    )
    if not loaded:
        return
    from fabric_core.errors import InvalidConfigError

    where = getattr(sys.modules[loaded[0]], "__file__", None) or "?"
    raise InvalidConfigError(
        f"Zero-edit mode cannot start: Lightning Fabric is imported already in this process ({loaded[0]} from "
        f"{where}{f' and {len(loaded) - 1} more' if len(loaded) > 1 else ''}), and serving its names from fabric_core "
        "now would leave two copies of every class. Turn the mode on before anything imports lightning, "
        "lightning_fabric or a library that does: call fabric_core.compat.provide_lightning_fabric() first, or run "
        "the program with `python -m fabric_core.lightning_imports SCRIPT` (or `-m MODULE`).",
        argument="lightning_fabric",
        value=loaded[0],
    )


def hand_over(name: str) -> None:
    """Run by the handover folder's ``lightning`` and ``lightning_fabric``: install the mode, import ``name`` again.

    The module being imported replaces itself in ``sys.modules``; the import system returns the replacement.

    Args:
        name: The module being imported (``"lightning"`` or ``"lightning_fabric"``).

    Raises:
        ImportError: The handover package was imported under another name.
    """
    if name not in ("lightning", "lightning_fabric"):
        raise ImportError(
            f"{name} is zero-edit mode's handover package; it is imported only as lightning or lightning_fabric"
        )
    del sys.modules[name]
    install()
    sys.modules[name] = importlib.import_module(name)


def describe() -> str:
    """One line for ``fabric-core explain``: whether zero-edit mode is on here."""
    if is_installed():
        real = not isinstance(_lightning_spec().loader, _StandInLoader)
        return (
            "zero-edit mode: on (lightning_fabric and lightning.fabric are fabric_core's modules; lightning is "
            f"{'the installed distribution' if real else 'a stand-in with Fabric and seed_everything only'})"
        )
    if os.environ.get(ENV) == "1" and any(_is_handover(p) for p in sys.path):
        return "zero-edit mode: on (inherited: the first import of lightning or lightning_fabric turns it on)"
    return (
        "zero-edit mode: off (lightning_fabric is Lightning's own; `python -m fabric_core.lightning_imports` "
        "turns it on)"
    )
