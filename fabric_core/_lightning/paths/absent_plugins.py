"""Lightning's paths whose plugin is absent: modules that hold Lightning's names and behave as missing hardware.

``lightning.pytorch`` (and much user code) imports ``lightning.fabric.accelerators.cuda``,
``...strategies.deepspeed`` or ``...loggers.tensorboard`` whether or not it uses them. Lightning's own modules
import without the hardware or the package, report it absent (``CUDAAccelerator.is_available()`` is false,
``_DEEPSPEED_AVAILABLE`` is false) and fail only when used. Here those paths come from plugins; when the plugin is
not installed (or did not load), :func:`absent_module` builds the path's module from the table in
:mod:`fabric_core._lightning.paths.absent_names`, with the same behaviour:

- a flag (``_BITSANDBYTES_AVAILABLE``) is false, and its text says which plugin to install;
- a probe answers as on a machine without the hardware (``num_cuda_devices()`` is 0), see :data:`ANSWERS`;
- a class can be imported and subclassed (``lightning.pytorch`` subclasses several); an accelerator class says it
  is not available; creating an instance, or calling any other function, raises :class:`MissingPackageError`
  naming the plugin;
- constants keep Lightning's values.

Nothing is imported at ``import fabric_core``: the alias finder (:mod:`.plugin_modules`) asks for such
a module only when the path is imported and no plugin declares it.
"""

from __future__ import annotations

import importlib
import typing
from types import ModuleType
from typing import Any, Final, NoReturn

from fabric_core._lightning.paths.absent_names import ABSENT_NAMES
from fabric_core.errors import MissingPackageError

__all__ = ["ANSWERS", "AbsentFlag", "absent_module"]

#: What a probe answers where the plugin (like Lightning's where the hardware) is absent: ``{path: {name: value}}``.
ANSWERS: Final[dict[str, dict[str, Any]]] = {
    "accelerators.cuda": {
        "num_cuda_devices": 0,
        "is_cuda_available": False,
        "_get_all_visible_cuda_devices": [],
        "_is_ampere_or_later": False,
        "_check_cuda_matmul_precision": None,
        "_clear_cuda_memory": None,
    },
    "accelerators.mps": {"_get_all_available_mps_gpus": []},
    "accelerators.xla": {"_using_pjrt": False},
}
#: Class methods that answer instead of failing: an absent accelerator is simply not available.
_CLASS_ANSWERS: Final[dict[str, Any]] = {"is_available": False, "auto_device_count": 0}
#: Lightning's class-level registration methods (``_register_classes`` calls them): nothing to register.
_REGISTRATIONS: Final = ("register_accelerators", "register_strategies")


class AbsentFlag:
    """An availability flag of an absent plugin: false, and its text says what to install (as Lightning's
    ``RequirementCache`` says which requirement is not met)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"<absent: {self.message}>"


def _missing(what: str, dist: str, why: str | None) -> str:
    if why:
        return f"{what} comes with the fabric-core plugin {dist}, which is not loaded here: {why}"
    return f"{what} comes with the fabric-core plugin {dist}, which is not installed. Install it: `pip install {dist}`."


def _package(dist: str) -> str:
    return dist.replace("-", "_")


def _raiser(qualname: str, module: str, dist: str, why: str | None) -> Any:
    def absent(*args: Any, **kwargs: Any) -> NoReturn:
        raise MissingPackageError(_missing(f"`{qualname}`", dist, why), package=_package(dist))

    absent.__name__ = qualname.rsplit(".", 1)[-1]
    absent.__qualname__ = qualname
    absent.__module__ = module
    return absent


def _answer(name: str, value: Any, module: str) -> Any:
    def probe(*args: Any, **kwargs: Any) -> Any:
        return value.copy() if isinstance(value, list) else value

    probe.__name__ = probe.__qualname__ = name
    probe.__module__ = module
    probe.__doc__ = f"Answers {value!r}: the plugin that provides this is not installed here."
    return probe


def _base(reference: str) -> type:
    module, _, name = reference.partition(":")
    path = module if module in ("contextlib",) else f"fabric_core.{module}"
    found: type = getattr(importlib.import_module(path), name)
    return found


def _absent_class(name: str, bases: list[str], module: str, dist: str, why: str | None) -> type:
    message = _missing(f"`{name}`", dist, why)

    def __new__(cls: type, *args: Any, **kwargs: Any) -> NoReturn:
        raise MissingPackageError(message.replace(f"`{name}`", f"`{cls.__name__}`", 1), package=_package(dist))

    namespace: dict[str, Any] = {
        "__new__": __new__,
        "__module__": module,
        "__doc__": f"Lightning's ``{name}``; here a placeholder: {message}",
        "fabric_core_absent_plugin": dist,
    }
    resolved = tuple(_base(b) for b in bases) or (object,)
    for method, value in _CLASS_ANSWERS.items():
        if any(hasattr(base, method) for base in resolved):
            namespace[method] = staticmethod(_answer(method, value, module))
    for method in _REGISTRATIONS:
        namespace[method] = classmethod(lambda cls, registry: None)
    return type(name, resolved, namespace)


def _literal(values: list[str]) -> Any:
    return typing.Literal.__getitem__(tuple(values))


def absent_module(fullname: str, dist: str, why: str | None) -> ModuleType:
    """Build the module at ``fullname`` (``fabric_core.<path>``) for the absent plugin ``dist``.

    Args:
        fullname: The module's name.
        dist: The distribution that would provide it (``"fabric-core-cuda"``).
        why: Why an installed ``dist`` did not load (blocked, failed), or ``None`` when it is not installed.
    """
    import ast

    from fabric_core._deferred import lightning_reexports

    path = fullname.removeprefix("fabric_core.")
    module = ModuleType(fullname, f"Lightning's ``{path}``: {_missing('this module', dist, why)}")
    answers = ANSWERS.get(path, {})
    names = vars(module)
    for name, description in ABSENT_NAMES.get(path, {}).items():
        kind, _, rest = description.partition(" ")
        if name in answers:
            names[name] = _answer(name, answers[name], fullname)
        elif kind == "class":
            names[name] = _absent_class(name, rest.split(), fullname, dist, why)
        elif kind == "function":
            names[name] = _raiser(name, fullname, dist, why)
        elif kind == "absent":
            names[name] = AbsentFlag(_missing(f"`{name}`", dist, why))
        elif kind == "literal":
            names[name] = _literal(rest.split())
        elif kind == "value":
            names[name] = ast.literal_eval(rest)
    names["fabric_core_absent_plugin"] = dist
    names["__getattr__"] = lightning_reexports(fullname)  # what Lightning's module imports from its others
    return module
