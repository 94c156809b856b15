"""Building the DeepSpeed config dict: from the strategy's options, from a file, and from the precision."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.rank_zero import rank_zero_info

__all__ = [
    "CLIPPING_MESSAGE",
    "CONFIG_PATH_VARIABLE",
    "CONFIG_PATH_VARIABLES",
    "LIGHTNING_CONFIG_PATH_VARIABLE",
    "OFFLOAD_DEVICES",
    "STAGES",
    "ConfigFileNotFoundError",
    "add_batch_size",
    "add_precision",
    "check_choice",
    "generated_config",
    "load_config",
    "zero_stage",
]

#: Where a DeepSpeed JSON config is read from when the strategy gets no ``config``.
CONFIG_PATH_VARIABLE: Final = "FABRIC_CORE_DEEPSPEED_CONFIG_PATH"
#: Lightning's name for the same variable, honoured after ours so that Lightning job scripts keep working.
LIGHTNING_CONFIG_PATH_VARIABLE: Final = "PL_DEEPSPEED_CONFIG_PATH"
CONFIG_PATH_VARIABLES: Final = (CONFIG_PATH_VARIABLE, LIGHTNING_CONFIG_PATH_VARIABLE)
STAGES: Final = (0, 1, 2, 3)
OFFLOAD_DEVICES: Final = ("cpu", "nvme")
#: Why the strategy's clipping methods refuse: DeepSpeed clips inside its optimizer step, as its config says.
CLIPPING_MESSAGE: Final = (
    "DeepSpeed handles gradient clipping automatically within the optimizer. Make sure to set the "
    "`gradient_clipping` value in your Config: `DeepSpeedStrategy(config={..., 'gradient_clipping': 1.0})`, or "
    "`fabric.strategy.config['gradient_clipping'] = 1.0` before `fabric.setup(...)`."
)
#: The config sections each precision adds (when the config lacks them).
_FP16: Final = frozenset({"16-mixed", "16-true"})
_BF16: Final = frozenset({"bf16-mixed", "bf16-true"})


class ConfigFileNotFoundError(InvalidConfigError, FileNotFoundError):
    """``DeepSpeedStrategy(config=PATH)`` names no file (a ``FileNotFoundError`` too, as Lightning raises)."""


def load_config(config: Mapping[str, Any] | str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """Return the user's config as a new dict: given as a mapping, a JSON file, or the environment variable.

    Args:
        config: A DeepSpeed config dict, a path to a JSON file, or ``None`` to read the file named by
            ``FABRIC_CORE_DEEPSPEED_CONFIG_PATH``, else ``PL_DEEPSPEED_CONFIG_PATH`` (``None`` when both are
            unset).

    Raises:
        ConfigFileNotFoundError: The file does not exist.
        InvalidConfigError: The file is not a JSON object.
    """
    if config is None:
        variable = next((name for name in CONFIG_PATH_VARIABLES if name in os.environ), None)
        if variable is None:
            return None
        rank_zero_info(f"Loading DeepSpeed config from set {variable} environment variable")
        config = os.environ[variable]
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    path = Path(config)
    if not path.is_file():
        raise ConfigFileNotFoundError(
            f"You passed in a path to a DeepSpeed config but the path does not exist: {os.fspath(config)} (or it is "
            "not a file). Pass `DeepSpeedStrategy(config=...)` an existing JSON file or a dict.",
            argument="config",
            value=config,
        )
    try:
        loaded = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(
            f"`DeepSpeedStrategy(config={os.fspath(config)!r})`: the file is not valid JSON ({exc}).",
            argument="config",
            value=config,
        ) from exc
    if not isinstance(loaded, dict):
        raise InvalidConfigError(
            f"`DeepSpeedStrategy(config={os.fspath(config)!r})`: the file holds a {type(loaded).__name__}, but a "
            "DeepSpeed config is a JSON object.",
            argument="config",
            value=config,
        )
    return loaded


def generated_config(
    *,
    zero_optimization: bool,
    stage: int,
    offload_optimizer: bool,
    offload_parameters: bool,
    offload_params_device: str,
    offload_optimizer_device: str,
    nvme_path: str,
    pin_memory: bool,
    params_buffer_count: int,
    params_buffer_size: int,
    max_in_cpu: int,
    optimizer_buffer_count: int,
    aio: Mapping[str, Any],
    zero: Mapping[str, Any],
    activation_checkpointing: Mapping[str, Any],
    zero_allow_untested_optimizer: bool,
) -> dict[str, Any]:
    """The config ``DeepSpeedStrategy`` builds from its options when it is given none (see its arguments)."""
    config: dict[str, Any] = {
        "activation_checkpointing": dict(activation_checkpointing),
        "aio": dict(aio),
        # DeepSpeed 0.19 clips the gradient norm to 1.0 unless told otherwise; a Fabric loop clips only on request.
        "gradient_clipping": 0.0,
    }
    if not zero_optimization:
        return config
    section: dict[str, Any] = {"stage": stage, **zero}
    if offload_optimizer:
        section["offload_optimizer"] = {
            "device": offload_optimizer_device,
            "nvme_path": nvme_path,
            "buffer_count": optimizer_buffer_count,
            "pin_memory": pin_memory,
        }
    if offload_parameters:
        section["offload_param"] = {
            "device": offload_params_device,
            "nvme_path": nvme_path,
            "buffer_count": params_buffer_count,
            "buffer_size": params_buffer_size,
            "max_in_cpu": max_in_cpu,
            "pin_memory": pin_memory,
        }
    config["zero_optimization"] = section
    config["zero_allow_untested_optimizer"] = zero_allow_untested_optimizer
    return config


def zero_stage(config: Mapping[str, Any]) -> int:
    """The ZeRO stage a config enables (0 without a ``zero_optimization`` section)."""
    section = config.get("zero_optimization")
    if not isinstance(section, Mapping):
        return 0
    return int(section.get("stage", 0))


def add_batch_size(config: dict[str, Any], logging_batch_size_per_gpu: int | None) -> None:
    """Give DeepSpeed a batch size when the config has none; it only uses it for its throughput logs."""
    if "train_micro_batch_size_per_gpu" not in config and "train_batch_size" not in config:
        config["train_micro_batch_size_per_gpu"] = logging_batch_size_per_gpu or 1


def add_precision(config: dict[str, Any], precision: str, loss_scaling: Mapping[str, Any]) -> None:
    """Add the ``fp16`` or ``bf16`` section that ``precision`` needs, unless the config has its own.

    Args:
        config: The config, changed in place.
        precision: ``"32-true"``, ``"16-mixed"``, ``"16-true"``, ``"bf16-mixed"`` or ``"bf16-true"``.
        loss_scaling: The ``fp16`` section's loss-scaling keys (``loss_scale``, ``initial_scale_power``, ...).

    Raises:
        InvalidConfigError: The config enables a half type other than the precision's.
    """
    wanted = "fp16" if precision in _FP16 else "bf16" if precision in _BF16 else None
    for section in ("fp16", "bf16"):
        if section != wanted and _enabled(config.get(section)):
            hint = f"precision='{section}-mixed'" if section == "bf16" else "precision='16-mixed'"
            raise InvalidConfigError(
                f"The DeepSpeed config enables {section!r} but the precision is {precision!r}. Remove the "
                f"{section!r} section from the config, or choose `{hint}`.",
                argument="precision",
                value=precision,
            )
    if wanted == "fp16" and "fp16" not in config:
        rank_zero_info("Enabling DeepSpeed FP16. Model parameters and inputs will be cast to `float16`.")
        config["fp16"] = {"enabled": True, **loss_scaling}
    elif wanted == "bf16" and "bf16" not in config:
        rank_zero_info("Enabling DeepSpeed BF16. Model parameters and inputs will be cast to `bfloat16`.")
        config["bf16"] = {"enabled": True}


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """Reject a ``DeepSpeedStrategy`` option outside its valid ``choices``.

    Raises:
        InvalidConfigError: ``value`` is not one of ``choices``.
    """
    if value not in choices:
        raise InvalidConfigError(
            f"`DeepSpeedStrategy({name}={value!r})` is not supported. Valid choices: "
            f"{', '.join(repr(c) for c in choices)}.",
            argument=name,
            value=value,
        )


def _enabled(section: Any) -> bool:
    return isinstance(section, Mapping) and bool(section.get("enabled", False))
