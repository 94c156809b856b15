"""Normalising the raw ``Fabric(...)`` arguments before selection: environment overrides and bad values.

Everything here checks or rewrites what the user passed; nothing consults a plugin.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Final

from fabric_core._kernel.registry import Spec, instance_kind
from fabric_core.errors import ArgumentTypeError, FabricCoreWarning, InvalidConfigError

__all__ = [
    "ENV_OVERRIDES",
    "LIGHTNING_CLI_ENV",
    "LIGHTNING_ENV_OVERRIDES",
    "PRECISION_ALIASES",
    "accelerator_label",
    "check_logger",
    "check_one_precision",
    "check_type",
    "from_environment",
    "merge",
    "name_and_options",
    "normalize_devices",
    "normalize_precision",
    "validate_num_nodes",
]

#: Historical precision spellings and what they mean; the ones that warn are discouraged.
PRECISION_ALIASES: Final[dict[str, tuple[str, bool]]] = {
    "64": ("64-true", False),
    "32": ("32-true", False),
    "16": ("16-mixed", True),
    "bf16": ("bf16-mixed", True),
}
#: The environment variables ``fabric-core run`` sets, by argument.
ENV_OVERRIDES: Final = {
    "accelerator": "FABRIC_CORE_ACCELERATOR",
    "strategy": "FABRIC_CORE_STRATEGY",
    "devices": "FABRIC_CORE_DEVICES",
    "num_nodes": "FABRIC_CORE_NUM_NODES",
    "precision": "FABRIC_CORE_PRECISION",
}
#: The variables Lightning's own ``fabric run`` sets, by argument (zero-edit mode runs that command).
LIGHTNING_ENV_OVERRIDES: Final = {arg: "LT_" + arg.upper() for arg in ENV_OVERRIDES}
#: Set by Lightning's ``fabric run``: the processes exist, and the code's arguments may not contradict it.
LIGHTNING_CLI_ENV: Final = "LT_CLI_USED"
DEFAULTS: Final[dict[str, Any]] = {
    "accelerator": "auto",
    "strategy": "auto",
    "devices": "auto",
    "num_nodes": 1,
    "precision": None,
}


def from_environment(args: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Let the variables a command line set replace the code's arguments.

    ``FABRIC_CORE_*`` (``fabric-core run``) come first; an argument the code gives that differs is an error.
    Lightning's ``LT_*`` (its ``fabric run``, which zero-edit mode runs) are read as Lightning's connector
    reads them: a differing argument is an error only while ``LT_CLI_USED=1``, else the variable wins.

    Raises:
        InvalidConfigError: The code's argument contradicts the command line's.
    """
    merged = dict(args)
    lightning_cli = environ.get(LIGHTNING_CLI_ENV) == "1"
    for arg, var in ENV_OVERRIDES.items():
        code = args[arg]
        if var in environ:
            value: Any = environ[var]
            clash = code != DEFAULTS[arg] and str(code).lower() != str(value).lower()
            option = arg.replace("_", "-")
        elif LIGHTNING_ENV_OVERRIDES[arg] in environ:
            value = environ[LIGHTNING_ENV_OVERRIDES[arg]]
            clash = lightning_cli and str(code) != str(DEFAULTS[arg]) and str(code) != value
            option = arg  # Lightning's message spells the option as the argument
        else:
            continue
        if clash:
            raise InvalidConfigError(
                f"Your code has `Fabric({arg}={code!r}, ...)` but it conflicts with the value `--{option}={value}` "
                "set through the CLI. Remove it either from the CLI or from the Fabric object.",
                argument=arg,
                value=code,
            )
        merged[arg] = value
    return merged


def name_and_options(value: str | Spec) -> tuple[str, dict[str, Any]]:
    if isinstance(value, Spec):
        return value.name.strip().lower(), dict(value.options)
    return value.strip().lower(), {}


def merge(answer: str | Spec, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name, extra = name_and_options(answer)
    return name, {**extra, **options}


#: Arguments whose wrong type Lightning reports as "You selected an invalid <arg> name".
_NAMED: Final = frozenset({"accelerator", "strategy"})


def check_type(arg: str, value: Any, what: str) -> None:
    """Refuse ``Fabric(arg=value)`` unless ``value`` is a name, a spec or a component of the kind ``arg`` names."""
    if not isinstance(value, (str, Spec)) and instance_kind(value) != arg:
        lightning = f"You selected an invalid {arg} name: `{arg}={value!r}`. " if arg in _NAMED else ""
        raise InvalidConfigError(
            f"{lightning}`Fabric({arg}={value!r})` must be a name (str), a `fabric_core.spec(...)` or {what} instance, "
            f"not {type(value).__name__}. Run `fabric-core list-plugins` to see the names.",
            argument=arg,
            value=value,
        )


def validate_num_nodes(num_nodes: Any) -> int:
    if isinstance(num_nodes, str) and num_nodes.strip().isdigit():
        num_nodes = int(num_nodes)
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise InvalidConfigError(
            f"`Fabric(num_nodes={num_nodes!r})`: `num_nodes` must be a positive integer.",
            argument="num_nodes",
            value=num_nodes,
        )
    return num_nodes


def accelerator_label(accelerator: Any) -> str:
    """How Lightning's messages name the ``accelerator`` argument: the name given, or an instance's class."""
    if isinstance(accelerator, str):
        return accelerator
    if isinstance(accelerator, Spec):
        return accelerator.name
    return type(accelerator).__qualname__


def normalize_devices(devices: Any, accelerator: Any) -> Any:
    """``devices`` with a number in a string made an int (``"2"`` is ``2``) and ``"auto"`` in one spelling.

    Checked before anything is selected, as Lightning does: ``0``, ``"0"`` and ``[]`` ask for no device
    whichever accelerator would run them.

    Args:
        devices: As ``Fabric(devices=...)``.
        accelerator: The ``accelerator`` argument as given, for the message.

    Raises:
        InvalidConfigError: No device (``0``, ``"0"``, an empty list), or a bool.
    """
    given = devices
    if isinstance(devices, str):
        devices = devices.strip()
        if devices.lower() == "auto":
            return "auto"
        if devices.lstrip("-").isdigit():
            devices = int(devices)
    if devices in (0, []) or (isinstance(devices, (list, tuple)) and not devices) or isinstance(devices, bool):
        raise InvalidConfigError(
            f"`Fabric(devices={given!r})` value is not a valid input using {accelerator_label(accelerator)} "
            "accelerator. Pass a positive number of devices, -1 for all of them, 'auto', or device indices "
            "('0,1' or [0, 1]).",
            argument="devices",
            value=given,
        )
    return devices


def normalize_precision(precision: Any) -> str:
    if precision is None:
        return "32-true"
    if isinstance(precision, int) and not isinstance(precision, bool):
        precision = str(precision)
    if not isinstance(precision, str):
        raise InvalidConfigError(
            f"Precision {precision!r} is invalid: pass a string such as 'bf16-mixed', an int (16, 32, 64), a "
            "`fabric_core.spec(...)` or a Precision instance.",
            argument="precision",
            value=precision,
        )
    name = precision.strip().lower()
    if name in PRECISION_ALIASES:
        canonical, discouraged = PRECISION_ALIASES[name]
        if discouraged:
            warnings.warn(
                f"`precision={precision}` is supported for historical reasons but its usage is discouraged. "
                f"Please set your precision to {canonical} instead!",
                FabricCoreWarning,
                stacklevel=4,
            )
        return canonical
    return name


def check_one_precision(precision: Any, in_plugins: Any) -> None:
    """Refuse a precision given both as ``precision=`` and in ``plugins=`` (Lightning's message).

    Raises:
        InvalidConfigError: Both were given.
    """
    if precision is None or in_plugins is None:
        return
    shown = repr(in_plugins) if isinstance(in_plugins, (str, Spec)) else f"{type(in_plugins).__name__}(...)"
    name = str(precision).strip().lower()
    canonical = PRECISION_ALIASES[name][0] if name in PRECISION_ALIASES else precision
    raise InvalidConfigError(
        f"Received both `precision={canonical}` and `plugins={shown}`. Choose one: give the precision either "
        "as `precision=` or inside `plugins`.",
        argument="precision",
        value=precision,
    )


def check_logger(item: Any, loggers: Any, names: list[str]) -> None:
    """Refuse an object in ``loggers=`` that cannot log: not a name, a spec, nor something with ``log_metrics``.

    Loggers written for Lightning (not our ``Logger`` subclasses) are accepted for their methods.

    Raises:
        ArgumentTypeError: ``item`` has no callable ``log_metrics``.
    """
    if callable(getattr(item, "log_metrics", None)):
        return
    raise ArgumentTypeError(
        f"`Fabric(loggers={loggers!r})`: {item!r} ({type(item).__name__}) is not a logger. Pass a name "
        f"({', '.join(repr(n) for n in names)}), a `fabric_core.spec(...)` or a Logger instance (an object with "
        "`log_metrics` and `log_hyperparams`), or a list of them.",
        argument="loggers",
        value=item,
    )
