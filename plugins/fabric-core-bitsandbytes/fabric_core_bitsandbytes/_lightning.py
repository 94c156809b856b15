"""Lightning's private helpers of its ``plugins.precision.bitsandbytes`` module, in Lightning's signatures.

Code written for Lightning imports them from ``fabric_core.plugins.precision.bitsandbytes`` (which
:mod:`fabric_core_bitsandbytes.precision` backs). Importing this module imports no bitsandbytes; the helpers
that need it import it when called. The layer swap is this plugin's
:func:`~fabric_core_bitsandbytes._layers.replace_linear_layers`; the load-time re-quantization helpers
(torch state-dict hooks that Lightning's own layers register) have no other home here, since this plugin's
layers are quantized by bitsandbytes when the model moves to its device.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, MutableMapping
from types import ModuleType
from typing import Any, Final

import torch

from fabric_core.utilities.imports import RequirementCache

__all__ = [
    "_BITSANDBYTES_AVAILABLE",
    "_convert_layers",
    "_ignore_missing_weights_hook",
    "_import_bitsandbytes",
    "_quantize_on_load_hook",
    "_replace_param",
]

#: Truthy when bitsandbytes is installed (checked on first use; nothing is imported).
_BITSANDBYTES_AVAILABLE: Final = RequirementCache("bitsandbytes")


def _import_bitsandbytes() -> ModuleType:
    """Import bitsandbytes without its notices for a CPU-only build, and return it.

    Raises:
        ModuleNotFoundError: bitsandbytes is not installed (the message says how to install it).
    """
    if not _BITSANDBYTES_AVAILABLE:
        raise ModuleNotFoundError(str(_BITSANDBYTES_AVAILABLE))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*bitsandbytes was compiled without GPU support.*")
        return importlib.import_module("bitsandbytes")


def _quantize_on_load_hook(
    quantize_fn: Callable[[torch.Tensor], None], state_dict: MutableMapping[str, Any], *_: Any
) -> None:
    """A torch load-state-dict pre-hook for one quantized layer: hand its weight to ``quantize_fn`` instead of
    loading it (the weight leaves ``state_dict``; the bias, if any, loads as usual)."""
    key = next((name for name in state_dict if name.endswith("weight")), None)
    if key is not None:
        quantize_fn(state_dict.pop(key))


def _ignore_missing_weights_hook(module: torch.nn.Module, incompatible_keys: Any) -> None:
    """A torch load-state-dict post-hook: the weights taken by :func:`_quantize_on_load_hook` are not missing."""
    incompatible_keys.missing_keys[:] = [k for k in incompatible_keys.missing_keys if not k.endswith("weight")]


def _replace_param(param: torch.nn.Parameter, data: torch.Tensor, quant_state: Any = None) -> torch.nn.Parameter:
    """``param`` holding ``data`` (and, for a 4-bit parameter, ``quant_state``).

    A parameter on the meta device cannot take data in place, so a new one of the same kind is returned
    (a 4-bit one keeps its quantization settings); any other is changed in place and returned.
    """
    bnb = _import_bitsandbytes()
    four_bit = isinstance(param, bnb.nn.Params4bit)
    if param.device.type == "meta":
        if not four_bit:
            return torch.nn.Parameter(data, requires_grad=data.requires_grad)
        settings = ("blocksize", "compress_statistics", "quant_type", "quant_storage", "module", "bnb_quantized")
        rebuilt: torch.nn.Parameter = bnb.nn.Params4bit(
            data=data,
            requires_grad=data.requires_grad,
            quant_state=quant_state,
            **{name: getattr(param, name) for name in settings},
        )
        return rebuilt
    param.data = data
    if four_bit:
        param.quant_state = quant_state  # type: ignore[attr-defined]
    return param


def _convert_layers(module: torch.nn.Module, linear_cls: type, ignore_modules: set[str], prefix: str = "") -> None:
    """Replace the ``nn.Linear`` layers below ``module`` (qualified names not starting with any of
    ``ignore_modules``) with ``linear_cls`` layers holding their weights, in place; biases keep their dtype."""
    layers = importlib.import_module("fabric_core_bitsandbytes._layers")
    layers.replace_linear_layers(module, linear_cls, None, ignore_modules, prefix)
