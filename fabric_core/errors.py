"""The one exception hierarchy of fabric-core.

Every error a user can see carries its subject as attributes and a message that shows what was passed,
what is close, and the next command to run.
"""

from __future__ import annotations

import difflib
import errno
import pickle
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = [
    "AcceleratorUnavailableError",
    "AmbiguousNameError",
    "ArgumentTypeError",
    "CheckpointError",
    "CheckpointSpaceError",
    "CollectiveMismatchError",
    "EnvironmentSetupError",
    "FabricCoreError",
    "FabricCoreWarning",
    "IncompatiblePluginError",
    "InteractiveSessionError",
    "InvalidConfigError",
    "InvalidPathError",
    "NoLoggerError",
    "NumberOverflowError",
    "ParentNotADirectoryError",
    "PathIsADirectoryError",
    "PluginImportError",
    "PluginLoadError",
    "PluginWarning",
    "PossibleUserWarning",
    "RendezvousError",
    "UnknownNameError",
    "UnknownOptionError",
    "UnknownPrecisionError",
    "UnsafeCheckpointError",
    "describe_failure",
    "install_hint",
]

# The one place the core names first-party plugins: the names each distribution provides, by kind, so that an
# error for a name that is not installed can say what to install. Kept static so that an error message never has
# to import anything.
_FIRST_PARTY_NAMES: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "fabric-core-cuda": {
        "accelerator": ("cuda", "gpu"),
        # Helper functions Lightning exports next to the classes, which live in a plugin here.
        "function": ("find_usable_cuda_devices",),
    },
    "fabric-core-mps": {"accelerator": ("mps",)},
    "fabric-core-xla": {
        "accelerator": ("tpu", "xla"),
        "strategy": ("xla", "single_xla", "xla_fsdp"),
        # Classes Lightning's packages re-export from modules that a plugin provides here.
        "class": (
            "xlaenvironment",
            "xlacheckpointio",
            "tpuaccelerator",
            "singletpustrategy",
            "tpuprecision",
            "tpubf16precision",
            "xlabf16precision",
        ),
    },
    "fabric-core-ddp": {
        "strategy": (
            "ddp",
            "ddp_spawn",
            "ddp_fork",
            "ddp_notebook",
            "ddp_find_unused_parameters_true",
            "ddp_find_unused_parameters_false",
            "dp",
        )
    },
    "fabric-core-fsdp": {"strategy": ("fsdp", "fsdp_cpu_offload", "model_parallel")},
    "fabric-core-deepspeed": {
        "strategy": (
            "deepspeed",
            "deepspeed_stage_1",
            "deepspeed_stage_2",
            "deepspeed_stage_3",
            "deepspeed_stage_1_offload",
            "deepspeed_stage_2_offload",
            "deepspeed_stage_3_offload",
            "deepspeed_stage_3_offload_nvme",
        )
    },
    "fabric-core-bitsandbytes": {"precision": ("nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training")},
    "fabric-core-tensorboard": {"logger": ("tensorboard",)},
}
#: ``(kind, name)`` -> the first-party distribution that provides it.
FIRST_PARTY_HINTS: Final[dict[tuple[str, str], str]] = {
    (kind, name): dist for dist, kinds in _FIRST_PARTY_NAMES.items() for kind, names in kinds.items() for name in names
}


# The same, for Lightning's module paths whose classes live in a first-party plugin (``fabric_core.<path>``).
FIRST_PARTY_MODULES: Final[dict[str, str]] = {
    "accelerators.cuda": "fabric-core-cuda",
    "accelerators.mps": "fabric-core-mps",
    **dict.fromkeys(("strategies.ddp", "strategies.dp"), "fabric-core-ddp"),
    **dict.fromkeys(("strategies.fsdp", "strategies.model_parallel", "plugins.precision.fsdp"), "fabric-core-fsdp"),
    **dict.fromkeys(("strategies.deepspeed", "plugins.precision.deepspeed"), "fabric-core-deepspeed"),
    "plugins.precision.bitsandbytes": "fabric-core-bitsandbytes",
    "loggers.tensorboard": "fabric-core-tensorboard",
    **dict.fromkeys(
        (
            "accelerators.xla",
            "strategies.xla",
            "strategies.single_xla",
            "strategies.xla_fsdp",
            "strategies.launchers.xla",
            "plugins.environments.xla",
            "plugins.io.xla",
            "plugins.precision.xla",
            # Lightning's deprecated TPU paths
            "accelerators.tpu",
            "plugins.precision.tpu",
            "plugins.precision.tpu_bf16",
            "plugins.precision.xlabf16",
            "strategies.single_tpu",
        ),
        "fabric-core-xla",
    ),
}


def install_hint(kind: str, name: str) -> str | None:
    """Return the ``pip install`` command for a first-party plugin that provides ``name``, if any."""
    dist = FIRST_PARTY_HINTS.get((kind, name.lower()))
    return f"pip install {dist}" if dist else None


def close_matches(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Return up to ``n`` choices that look like ``name`` (difflib), best first."""
    return difflib.get_close_matches(name.lower(), sorted(set(choices)), n=n, cutoff=0.6)


def describe_failure(exc: BaseException, where: str) -> str:
    """Say what plugin code did: ``called sys.exit(3) at import``, ``fabric_core_select_strategy raised ...``.

    Plugin code runs isolated from every ``BaseException`` but ``KeyboardInterrupt``: ``SystemExit`` from a
    plugin is a bug in the plugin, not the user's program asking to stop.

    Args:
        exc: What escaped the plugin's code.
        where: ``"at import"`` for an import, else what was called (a hook's name, ``"the probe ..."``).
    """
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else repr(exc.code)
        return f"called sys.exit({code}) at import" if where == "at import" else f"{where} called sys.exit({code})"
    return f"import failed: {exc!r}" if where == "at import" else f"{where} raised {exc!r}"


class FabricCoreError(Exception):
    """Base class of every error raised by fabric-core.

    Every one pickles as it is (its class, message and attributes), so that an error raised in a worker
    reaches the process that waits for it: Ray, ``multiprocessing`` and the spawn launcher send errors
    pickled, and pickle would otherwise call ``__init__`` again with the message alone.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        state = dict(vars(self))
        if isinstance(self, OSError):  # OSError keeps these outside the instance dict
            state.update(errno=self.errno, strerror=self.strerror, filename=self.filename)
        return _rebuilt_error, (type(self), self.args, state)


def _rebuilt_error(cls: type[FabricCoreError], args: tuple[Any, ...], state: dict[str, Any]) -> FabricCoreError:
    """The error ``cls`` with ``args`` and ``state``, made without calling its ``__init__``."""
    error = cls.__new__(cls, *args)
    error.args = args
    for name, value in state.items():
        setattr(error, name, value)
    return error


class FabricCoreWarning(UserWarning):
    """Base class of every warning issued by fabric-core."""


class PossibleUserWarning(FabricCoreWarning):
    """Something in the user's code that is likely, but not certainly, a mistake (Lightning's name)."""


class PluginWarning(FabricCoreWarning):
    """A plugin could not be used; everything else keeps working."""


class UnknownNameError(FabricCoreError, ValueError):
    """A component name that no loaded plugin provides.

    Attributes:
        kind: The kind of component (``"accelerator"``, ``"strategy"``, ...).
        name: The name that was passed.
        argument: How the user passed it, e.g. ``"Fabric(strategy=...)"``.
        choices: Every valid name of this kind.
        suggestions: The choices closest to ``name``.
        hint: The next command to run, if there is one.
    """

    def __init__(
        self,
        kind: str,
        name: str,
        choices: Iterable[str],
        *,
        argument: str | None = None,
        unavailable: Mapping[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.argument = argument or f"Fabric({kind}=...)"
        self.choices = sorted(set(choices))
        self.suggestions = close_matches(name, self.choices)
        self.hint = install_hint(kind, name)
        call = self.argument.replace("...", repr(name))
        lines = [f"`{call}`: no installed plugin provides the {kind} {name!r}."]
        if kind in ("accelerator", "strategy") and self.argument == f"Fabric({kind}=...)":
            # Lightning's wording, which its users (and its own tests) look for, then ours.
            lines.insert(0, f"You selected an invalid {kind} name: `{kind}={name!r}`.")
        if not self.suggestions and self.hint is None:
            # A typo of a name whose plugin is not installed: suggest it together with its install command.
            known = [n for k, n in FIRST_PARTY_HINTS if k == kind and n not in self.choices]
            self.suggestions = close_matches(name, known)
            if self.suggestions:
                self.hint = install_hint(kind, self.suggestions[0])
        if self.suggestions:
            lines.append(f"Did you mean {' or '.join(repr(s) for s in self.suggestions)}?")
        lines.append(f"Valid choices: {', '.join(self.choices) or '(none)'}.")
        # The plugin that would provide it may be installed but blocked or broken: say that, not "install".
        why = unavailable or {}
        installed = why.get(self.hint.removeprefix("pip install ")) if self.hint else why.get(name.strip().lower())
        if installed:
            self.hint = None
            lines.append(installed)
        elif self.hint:
            lines.append(f"To get it: `{self.hint}`.")
        else:
            lines.append("Run `fabric-core list-plugins` to see every installed plugin.")
        super().__init__(" ".join(lines))


class UnknownPrecisionError(UnknownNameError):
    """A precision that no loaded plugin provides; the message starts with Lightning's sentence.

    Attributes:
        value: What was passed (``16`` or ``"bf17-mixed"``), before normalisation.
    """

    def __init__(
        self, value: object, name: str, choices: Iterable[str], *, unavailable: Mapping[str, str] | None = None
    ) -> None:
        super().__init__("precision", name, choices, argument="Fabric(precision=...)", unavailable=unavailable)
        self.value = value
        self.args = (f"Precision {value!r} is invalid. {self.args[0]}",)


class AmbiguousNameError(FabricCoreError, ValueError):
    """Two plugins provide one component name; the user must qualify it as ``"plugin:name"``.

    Attributes:
        kind: The kind of component.
        name: The ambiguous name.
        providers: The plugins that provide it.
    """

    def __init__(self, kind: str, name: str, providers: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.providers = sorted(providers)
        options = " or ".join(f"{p}:{name}".__repr__() for p in self.providers)
        super().__init__(
            f"The {kind} name {name!r} is provided by more than one plugin: {', '.join(self.providers)}. "
            f"Select one with a qualified name: {options}."
        )


class PluginLoadError(FabricCoreError):
    """A plugin could not be loaded or registered (raised only in strict mode).

    Attributes:
        plugin: The plugin's entry-point name.
        distribution: The distribution that declares it, if known.
    """

    def __init__(self, plugin: str, message: str, *, distribution: str | None = None) -> None:
        self.plugin = plugin
        self.distribution = distribution
        where = f" (from distribution {distribution!r})" if distribution else ""
        super().__init__(f"Plugin {plugin!r}{where}: {message}")


class PluginImportError(PluginLoadError, ImportError):
    """A component's target, or a plugin's module, failed to import."""


class IncompatiblePluginError(PluginLoadError):
    """A plugin requires a version of fabric-core other than the one installed."""


class InvalidConfigError(FabricCoreError, ValueError):
    """A value or a combination of values that fabric-core cannot run.

    Attributes:
        argument: The argument at fault (``"devices"``, ``"precision"``, ...), if one is.
        value: The value that was passed.
    """

    def __init__(self, message: str, *, argument: str | None = None, value: object = None) -> None:
        self.argument = argument
        self.value = value
        super().__init__(message)


class MissingVariableError(InvalidConfigError, KeyError):
    """A required environment variable is unset; a ``KeyError`` too, as ``os.environ[name]`` raises in Lightning."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # the message as it is, not quoted as a key


class MissingPackageError(InvalidConfigError, ModuleNotFoundError):
    """A choice that needs a package which is not installed; a ``ModuleNotFoundError`` too, as in Lightning.

    Attributes:
        name: The missing package's import name (``ModuleNotFoundError.name``).
    """

    def __init__(self, message: str, *, package: str, argument: str | None = None, value: object = None) -> None:
        super().__init__(message, argument=argument, value=value)
        self.name = package


class ArgumentTypeError(InvalidConfigError, TypeError):
    """An argument of the wrong type; a ``TypeError`` too, as Python and Lightning Fabric raise there."""


class UnknownOptionError(ArgumentTypeError):
    """A keyword option that the component's constructor does not take (Python raises ``TypeError``).

    Attributes:
        option: The option that was passed.
        accepted: Every option the component takes.
        suggestions: The accepted options closest to ``option``.
    """

    def __init__(self, call: str, option: str, accepted: Iterable[str], *, owner: str, value: object = None) -> None:
        self.option = option
        self.accepted = sorted(set(accepted))
        self.suggestions = close_matches(option, self.accepted)
        lines = [f"`{call}`: {owner} has no option {option!r}."]
        if self.suggestions:
            lines.append(f"Did you mean {' or '.join(repr(s) for s in self.suggestions)}?")
        lines.append(f"Accepted options: {', '.join(self.accepted) or '(none)'}.")
        super().__init__(" ".join(lines), argument=option, value=value)


class AcceleratorUnavailableError(InvalidConfigError, RuntimeError):
    """An installed accelerator that cannot run on this machine (a ``RuntimeError`` too, as Lightning raises)."""


class InteractiveSessionError(InvalidConfigError, RuntimeError):
    """A strategy that cannot start its processes from a notebook or REPL (a ``RuntimeError`` too, as Lightning)."""


class EnvironmentSetupError(InvalidConfigError, RuntimeError):
    """A scheduler's job settings this process cannot run under (a ``RuntimeError`` too, as Lightning raises)."""


class NumberOverflowError(InvalidConfigError, RuntimeError):
    """A number too large for the tensor it is converted to (a ``RuntimeError`` too, as torch raises there)."""


class InvalidPathError(InvalidConfigError, OSError):
    """A path that cannot be written as asked; an ``OSError`` too, as the failed write would raise."""


class ParentNotADirectoryError(InvalidPathError, NotADirectoryError, FileExistsError):
    """A path under an existing file (``NotADirectoryError``; ``FileExistsError`` as Lightning raises there)."""


class PathIsADirectoryError(InvalidPathError, IsADirectoryError):
    """A file to write whose path is an existing folder."""


class FolderInTheWayError(InvalidPathError, FileExistsError):
    """A checkpoint to save where a folder of other files is: replacing it would delete them."""


class NoLoggerError(FabricCoreError, IndexError):
    """``fabric.logger`` with no logger (an ``IndexError``, as in Lightning Fabric)."""


class RendezvousError(FabricCoreError, RuntimeError):
    """The processes of a job could not meet to create their process group (within the rendezvous timeout)."""


class CollectiveMismatchError(FabricCoreError, RuntimeError):
    """The ranks reached different collectives: barriers of different names, or (with
    ``FABRIC_CORE_CHECK_COLLECTIVES=1``) different calls or shapes. Raised on every rank alike.

    Attributes:
        calls: Per rank, what it called and from where (``"barrier 'eval' (train.py:12)"``).
    """

    def __init__(self, message: str, *, calls: Mapping[int, str]) -> None:
        self.calls = dict(calls)
        super().__init__(message)


class CheckpointError(FabricCoreError):
    """A checkpoint file could not be read.

    Attributes:
        path: The checkpoint's path.
        reason: ``"corrupt"`` (truncated, or not a checkpoint at all) or ``"unsafe"`` (it holds Python
            objects that loading with ``weights_only=True`` refused), ``"no_space"``
            (:class:`CheckpointSpaceError`), or ``"not_shared"`` (some processes of a job see the checkpoint
            and others do not: a disk of each node's own where a shared one is needed).
    """

    def __init__(self, message: str, *, path: str | None = None, reason: str | None = None) -> None:
        self.path = path
        self.reason = reason
        super().__init__(message)


class CheckpointSpaceError(CheckpointError, OSError, RuntimeError):
    """The device ran out of space while a checkpoint was written; the previous checkpoint is unchanged.

    Also an ``OSError`` with ``errno`` ``ENOSPC`` (what the failed write raised), and a ``RuntimeError``
    (what ``torch.save`` raises for it), so that either ``except`` keeps catching it.

    Attributes:
        needed: About how many bytes the checkpoint takes (its tensors' bytes).
        free: The bytes free for this user on the device after the partial file was removed.
    """

    def __init__(self, message: str, *, path: str, needed: int, free: int | None) -> None:
        super().__init__(message, path=path, reason="no_space")
        self.errno = errno.ENOSPC
        self.strerror = message
        self.needed = needed
        self.free = free

    def __str__(self) -> str:
        # OSError's own form would be "[Errno 28] <message>"; the message already says it.
        return str(self.args[0])


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint that holds Python objects which loading with ``weights_only=True`` refused.

    Its ``reason`` is ``"unsafe"``. Also a ``pickle.UnpicklingError``, as ``torch.load`` raises there, so that
    code which catches that keeps working. Nothing in the file was run.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message, path=path, reason="unsafe")
