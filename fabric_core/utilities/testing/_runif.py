"""``_runif_reasons``: why a test that needs some hardware or version should be skipped here.

Lightning's test suites (and LitGPT's) build their ``RunIf`` pytest marker on it; it answers from torch and the
installed packages, without importing an accelerator plugin or creating a CUDA context where no GPU is asked for.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from packaging.version import Version

from fabric_core._deferred import lightning_reexports

__all__ = ["_runif_reasons"]


def _base_version(version: str) -> Version:
    return Version(Version(version).base_version)  # a nightly 2.6.0.dev2024 counts as 2.6.0


def _runif_reasons(
    *,
    min_cuda_gpus: int = 0,
    min_torch: str | None = None,
    max_torch: str | None = None,
    min_python: str | None = None,
    bf16_cuda: bool = False,
    tpu: bool = False,
    mps: bool | None = None,
    skip_windows: bool = False,
    standalone: bool = False,
    deepspeed: bool = False,
    dynamo: bool = False,
    linux_only: bool = False,
) -> tuple[list[str], dict[str, bool]]:
    """The reasons to skip a test with these requirements here (empty: run it), and the markers it implies.

    Args:
        min_cuda_gpus: At least this many CUDA devices.
        min_torch: torch at least this version (nightlies count as their base version).
        max_torch: torch below this version.
        min_python: Python at least this version.
        bf16_cuda: A CUDA device that supports bfloat16.
        tpu: An XLA device (torch_xla installed and a device present).
        mps: ``True``: Apple's MPS is available; ``False``: it is not.
        skip_windows: Not on Windows.
        standalone: Only when ``PL_RUN_STANDALONE_TESTS=1`` (a test run in a process of its own).
        deepspeed: DeepSpeed installed (with torch >= 2.4).
        dynamo: ``torch._dynamo`` supported on this platform.
        linux_only: Only on Linux.

    Returns:
        ``(reasons, kwargs)``: the unmet requirements in words, and which of ``min_cuda_gpus``, ``tpu`` and
        ``standalone`` were asked for (a test runner's collection hook reads them).
    """
    import torch

    reasons: list[str] = []
    kwargs: dict[str, bool] = {}
    torch_version = _base_version(torch.__version__)
    if min_cuda_gpus:
        if torch.cuda.device_count() < min_cuda_gpus:
            reasons.append(f"GPUs>={min_cuda_gpus}")
        kwargs["min_cuda_gpus"] = True
    if min_torch and torch_version < Version(min_torch):
        reasons.append(f"torch>={min_torch}, {torch.__version__} installed")
    if max_torch and torch_version >= Version(max_torch):
        reasons.append(f"torch<{max_torch}, {torch.__version__} installed")
    if min_python and Version(".".join(map(str, sys.version_info[:3]))) < Version(min_python):
        reasons.append(f"python>={min_python}")
    if bf16_cuda and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
        reasons.append("CUDA device bf16")
    if skip_windows and sys.platform == "win32":
        reasons.append("unimplemented on Windows")
    if tpu:
        if not _xla_device_available():
            reasons.append("TPU")
        kwargs["tpu"] = True
    if mps is not None:
        available = torch.backends.mps.is_available()
        if mps and not available:
            reasons.append("MPS")
        elif not mps and available:
            reasons.append("not MPS")
    if standalone:
        if os.getenv("PL_RUN_STANDALONE_TESTS", "0") != "1":
            reasons.append("Standalone execution")
        kwargs["standalone"] = True
    if deepspeed and not (importlib.util.find_spec("deepspeed") and torch_version >= Version("2.4")):
        reasons.append("Deepspeed")
    if dynamo:
        from torch._dynamo.eval_frame import is_dynamo_supported

        if not is_dynamo_supported():
            reasons.append("torch.dynamo")
    if linux_only and sys.platform != "linux":
        reasons.append("only linux")
    return reasons, kwargs


def _xla_device_available() -> bool:
    if importlib.util.find_spec("torch_xla") is None:
        return False
    try:
        import torch_xla.core.xla_model as xm

        return bool(xm.get_xla_supported_devices())
    except Exception:  # torch_xla installed without a usable runtime
        return False


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
