"""The names this plugin registers, shared by the registration module and the implementation."""

from __future__ import annotations

from typing import Final

#: Precision strings the XLA strategies support, each served by the catalog entry ``"xla-<string>"``.
PRECISIONS: Final = ("32-true", "16-true", "bf16-true")
#: Strategy names: multi-process, one device, fully sharded.
STRATEGIES: Final = ("xla", "single_xla", "xla_fsdp")
#: Lightning's deprecated module paths of the TPU classes (``accelerators.tpu``...), under ``fabric_core.``.
TPU_PATHS: Final = (
    "accelerators.tpu",
    "plugins.precision.tpu",
    "plugins.precision.tpu_bf16",
    "plugins.precision.xlabf16",
    "strategies.single_tpu",
)


def precision_entry(precision: str) -> str:
    """The catalog name of the XLA precision entry serving ``precision`` (``"xla-bf16-true"``)."""
    return f"xla-{precision}"
