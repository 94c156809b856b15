"""Throughput, FLOPs and peak FLOPs: the torch-level helpers behind :mod:`fabric_core.utilities.throughput`.

Kept apart from that module (which also holds the Fabric-bound ``ThroughputMonitor``) so that components,
such as the ``throughput`` callback, can use them without importing the API layer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypeVar

import torch

from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.rank_zero import rank_zero_warn

__all__ = ["Throughput", "compute_dtype", "get_available_flops", "measure_flops"]

_Metrics = dict[str, int | float]
_N = TypeVar("_N", bound=float)


class _IncreasingWindow(list[_N]):
    """The last ``maxlen`` values of a running total; a value that does not grow is refused.

    A ``deque(maxlen=...)`` would accept a counter that was reset or a timer that went backwards, and the
    rates computed from it would be silently wrong (or divide by zero).
    """

    def __init__(self, maxlen: int, what: str) -> None:
        super().__init__()
        self.maxlen = maxlen
        self.what = what

    def append(self, value: _N) -> None:
        if self and value <= self[-1]:
            raise ValueError(
                f"Throughput.update({self.what}={value!r}): Expected the value to increase, last: {self[-1]!r}, "
                f"current: {value!r}. Pass running totals (elapsed seconds, batches and samples seen so far)."
            )
        super().append(value)
        if len(self) > self.maxlen:
            del self[0]


class Throughput:
    """Rates of a training loop over its ``window_size`` most recent updates.

    Feed it running totals with :meth:`update` and read :meth:`compute`. The keys of the result:

    - ``time``, ``batches``, ``samples`` (and ``lengths`` once given): the latest totals.
    - ``device/batches_per_sec``, ``device/samples_per_sec`` (and ``device/items_per_sec`` from
      ``lengths``): rates of this device, once the window is full.
    - ``batches_per_sec``, ``samples_per_sec``, ``items_per_sec``: the same for all ``world_size`` devices
      together, only when ``world_size > 1``.
    - ``device/flops_per_sec`` (and ``flops_per_sec`` when ``world_size > 1``) once ``window_size`` FLOP
      counts were given; ``device/mfu`` (model FLOPs utilization) when ``available_flops`` is known.

    The ``/`` in the per-device keys is ``separator``. All devices are assumed alike: the per-device FLOPs
    are the world's divided by ``world_size``.

    Example::

        throughput = Throughput(window_size=10)
        start = time.perf_counter()
        for i, batch in enumerate(loader, 1):
            train_step(batch)
            throughput.update(time=time.perf_counter() - start, batches=i, samples=i * batch_size)
        print(throughput.compute())

    Args:
        available_flops: Peak FLOPs per second of one device (see :func:`get_available_flops`).
        world_size: Number of devices across all nodes.
        window_size: Number of updates the rates are averaged over; at least 2.
        separator: Separator between ``device`` and the metric name.
    """

    def __init__(
        self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100, separator: str = "/"
    ) -> None:
        for argument, value, low in (("world_size", world_size, 1), ("window_size", window_size, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidConfigError(
                    f"`Throughput({argument}={value!r})`: expected an integer >= {low}"
                    + (" (a rate needs the first and last value of the window)." if low == 2 else "."),
                    argument=argument,
                    value=value,
                )
        self.available_flops = available_flops
        self.world_size = world_size
        self.separator = separator
        self._time: _IncreasingWindow[float] = _IncreasingWindow(window_size, "time")
        self._batches: _IncreasingWindow[int] = _IncreasingWindow(window_size, "batches")
        self._samples: _IncreasingWindow[int] = _IncreasingWindow(window_size, "samples")
        self._lengths: _IncreasingWindow[int] = _IncreasingWindow(window_size, "lengths")
        # FLOPs are per-update amounts, not totals, so they may repeat or shrink.
        self._flops: deque[int] = deque(maxlen=window_size)

    def update(
        self, *, time: float, batches: int, samples: int, lengths: int | None = None, flops: int | None = None
    ) -> None:
        """Record the running totals after one more step.

        Args:
            time: Seconds elapsed since the start; must increase with every call.
            batches: Batches this device has processed so far; must increase.
            samples: Samples this device has processed so far; at least ``batches``.
            lengths: Items (e.g. tokens) in those samples so far; at least ``samples``.
            flops: FLOPs this device did since the previous call (e.g. :func:`measure_flops` times the
                batches since then).
        """
        self._time.append(time)
        if samples < batches:
            raise ValueError(f"Expected samples ({samples}) to be greater or equal than batches ({batches})")
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(f"Expected lengths ({lengths}) to be greater or equal than samples ({samples})")
            self._lengths.append(lengths)
            if len(self._lengths) != len(self._samples):
                raise RuntimeError(
                    f"If lengths are passed ({len(self._lengths)}), there needs to be the same number of samples"
                    f" ({len(self._samples)}): pass `lengths` in every update or in none."
                )
        if flops is not None:
            self._flops.append(flops * self.world_size)

    def compute(self) -> _Metrics:
        """The latest totals and, once the window is full, the rates (see the class docstring for keys)."""
        if not self._time:
            raise RuntimeError("Throughput.compute() was called before any update(): call update() first.")
        device = f"device{self.separator}"
        metrics: _Metrics = {"time": self._time[-1], "batches": self._batches[-1], "samples": self._samples[-1]}
        if self._lengths:
            metrics["lengths"] = self._lengths[-1]
        several = self.world_size > 1
        elapsed = self._time[-1] - self._time[0]
        if len(self._time) == self._time.maxlen:
            batches_rate = (self._batches[-1] - self._batches[0]) / elapsed
            samples_rate = (self._samples[-1] - self._samples[0]) / elapsed
            metrics[f"{device}batches_per_sec"] = batches_rate
            metrics[f"{device}samples_per_sec"] = samples_rate
            if several:
                metrics["batches_per_sec"] = batches_rate * self.world_size
                metrics["samples_per_sec"] = samples_rate * self.world_size
            if len(self._lengths) == self._lengths.maxlen:
                items_rate = (self._lengths[-1] - self._lengths[0]) / elapsed
                metrics[f"{device}items_per_sec"] = items_rate
                if several:
                    metrics["items_per_sec"] = items_rate * self.world_size
        if len(self._flops) == self._flops.maxlen:
            # The first entry is the work done before the window's first timestamp: not part of the interval.
            flops_rate = (sum(self._flops) - self._flops[0]) / elapsed
            if several:
                metrics["flops_per_sec"] = flops_rate
            metrics[f"{device}flops_per_sec"] = flops_rate / self.world_size
            if self.available_flops:
                metrics[f"{device}mfu"] = flops_rate / self.world_size / self.available_flops
        return metrics

    def reset(self) -> None:
        """Forget every update."""
        for window in (self._time, self._batches, self._samples, self._lengths, self._flops):
            window.clear()


def measure_flops(
    model: torch.nn.Module,
    forward_fn: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """Count the FLOPs of one forward (and, with ``loss_fn``, the loss and backward) of ``model``.

    Build the model and inputs on the meta device to count without computing or allocating::

        with torch.device("meta"):
            model = MyModel()
            x = torch.randn(2, 32)
        forward_only = measure_flops(model, lambda: model(x))
        training_step = measure_flops(model, lambda: model(x), lambda y: y.sum())

    Args:
        model: The model being measured (kept for Lightning's signature; ``forward_fn`` runs it).
        forward_fn: Runs the forward and returns its output.
        loss_fn: Turns that output into a scalar loss; given, the backward is counted too.

    Returns:
        The total FLOPs PyTorch's ``FlopCounterMode`` counted.
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        output = forward_fn()
        if loss_fn is not None:
            loss_fn(output).backward()  # type: ignore[no-untyped-call]
    return int(counter.get_total_flops())


# Peak dense FLOPs per second from the vendors' datasheets, per chip (one device as torch sees it), as
# (float64, float32, tfloat32, bfloat16, float16, int8, int4); None where the chip has no such mode.
# Datasheets list tensor-core figures "with sparsity" (2:4 structured sparsity, twice the dense rate); a dense
# model's MFU needs the dense figure, so those are halved here: an H100 SXM's "1,979 TFLOPS BF16*" is 989.4.
_PEAK_COLUMNS: Final = (torch.float64, torch.float32, "tfloat32", torch.bfloat16, torch.float16, torch.int8, "int4")
_T = 1e12
_PEAK: Final[dict[str, tuple[float | None, ...]]] = {
    # H200 SXM: 989* / 1,979* / 3,958* TFLOPS (TF32 / BF16 / INT8, *with sparsity); NVL: 835* / 1,671* / 3,341*.
    "h200 sxm": (34 * _T, 67 * _T, 494.7 * _T, 989.4 * _T, 989.4 * _T, 1978.9 * _T, None),
    "h200 nvl": (30 * _T, 60 * _T, 417.5 * _T, 835.5 * _T, 835.5 * _T, 1670.5 * _T, None),
    # One H100 NVL card (94 GB): 835* / 1,671* / 3,341* (the first datasheet gave a two-card pair's figures).
    "h100 nvl": (30 * _T, 60 * _T, 417.5 * _T, 835.5 * _T, 835.5 * _T, 1670.5 * _T, None),
    "h100 sxm": (33.5 * _T, 66.9 * _T, 494.7 * _T, 989.4 * _T, 989.4 * _T, 1978.9 * _T, None),
    "h100 pcie": (25.6 * _T, 51.2 * _T, 378 * _T, 756 * _T, 756 * _T, 1513 * _T, None),
    "rtx 4090": (None, 82.6 * _T, 82.6 * _T, 82.6 * _T, 82.6 * _T, 660.6 * _T, 1321.2 * _T),
    "rtx 4080": (None, 48.7 * _T, 48.7 * _T, 48.7 * _T, 48.7 * _T, 389.9 * _T, 779.8 * _T),
    "rtx 4080 super": (None, 52.2 * _T, 52.2 * _T, 52.2 * _T, 52.2 * _T, 417.6 * _T, 835.2 * _T),
    "l4": (None, 30.3 * _T, 60 * _T, 121 * _T, 121 * _T, 242 * _T, 484 * _T),
    "l40": (None, 90.5 * _T, 90.5 * _T, 181 * _T, 181 * _T, 362 * _T, 724 * _T),
    "a100": (9.7 * _T, 19.5 * _T, 156 * _T, 312 * _T, 312 * _T, 624 * _T, None),
    # RTX A6000 / A40: their tensor cores' dense BF16/FP16 (154.8 / 149.7), not the CUDA cores' FP32 rate.
    "a6000": (None, 38.7 * _T, 77.4 * _T, 154.8 * _T, 154.8 * _T, 309.7 * _T, 619.3 * _T),
    "a40": (None, 37.4 * _T, 74.8 * _T, 149.7 * _T, 149.7 * _T, 299.3 * _T, 598.7 * _T),
    "a10g": (None, 31.2 * _T, 62.5 * _T, 125 * _T, 125 * _T, 250 * _T, 500 * _T),
    "rtx 3090 ti": (None, 40 * _T, 40 * _T, 40 * _T, 40 * _T, 320 * _T, 640 * _T),
    "rtx 3090": (None, 35.6 * _T, 35.6 * _T, 35.6 * _T, 35.6 * _T, 284 * _T, 568 * _T),
    "rtx 3080 ti": (None, 34.1 * _T, 34.1 * _T, 34.1 * _T, 34.1 * _T, 272.8 * _T, 546.6 * _T),
    "rtx 3080": (None, 29.8 * _T, 29.8 * _T, 29.8 * _T, 29.8 * _T, 238 * _T, 476 * _T),
    "rtx 3070": (None, 20.3 * _T, 20.3 * _T, 20.3 * _T, 20.3 * _T, 162.6 * _T, 325.2 * _T),
    "t4": (None, 8.1 * _T, None, None, 65 * _T, 130 * _T, 260 * _T),
    "quadro rtx 5000": (None, 11.2 * _T, None, None, 89.2 * _T, None, None),
    "rtx 2080 super": (None, 11.2 * _T, None, None, 22.3 * _T, 178.4 * _T, 356.8 * _T),
    "rtx 2080 ti": (None, 14.2 * _T, None, None, 28.5 * _T, 227.7 * _T, 455.4 * _T),
    "rtx 2080": (None, 10.6 * _T, None, None, 21.2 * _T, 169.6 * _T, 339.1 * _T),
    "rtx 2070 super": (None, 9.1 * _T, None, None, 18.1 * _T, 145 * _T, 290 * _T),
    "titan rtx": (None, 16.3 * _T, None, None, 32.6 * _T, 261 * _T, 522 * _T),
    "v100 sxm": (7.8 * _T, 15.7 * _T, None, None, 125 * _T, None, None),
    "v100 pcie": (7 * _T, 14 * _T, None, None, 112 * _T, None, None),
    "v100s pcie": (8.2 * _T, 16.4 * _T, None, None, 130 * _T, None, None),
}
# TPUs do their matrix work in bfloat16 whatever the requested precision: one figure per generation.
_TPU_PEAK: Final[dict[str, float]] = {"v2": 45 * _T, "v3": 123 * _T, "v4": 275 * _T, "v5litepod": 197 * _T}

# Substrings of a CUDA device name, tried in order, and the table row they select.
_CHIP_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    ("a6000", "a6000"),
    ("a100", "a100"),
    ("a40", "a40"),
    ("a10g", "a10g"),
    ("t4", "t4"),
    ("quadro rtx 5000", "quadro rtx 5000"),
    ("titan rtx", "titan rtx"),
    ("v100-sxm", "v100 sxm"),
    ("v100-pcie", "v100 pcie"),
    ("v100s-pcie", "v100s pcie"),
)


def _cuda_chip(name: str) -> str | None:
    """The row of the peak table for a CUDA device name (lower-case), or None if unrecognised."""
    if "h200" in name:  # "NVIDIA H200" is the SXM module; the PCIe card says "NVL"
        return "h200 nvl" if "nvl" in name else "h200 sxm"
    if "h100" in name:
        for marker, chip in (("hbm3", "h100 sxm"), ("nvl", "h100 nvl"), ("pcie", "h100 pcie"), ("hbm2e", "h100 pcie")):
            if marker in name:
                return chip
        return name
    if "l4" in name:
        return "l40" if "tesla" in name else "l4"
    if "geforce rtx" in name:
        words = name.split(" ")
        number = words[3] if len(words) > 3 else ""
        suffix = " super" if "super" in name else " ti" if "ti" in name else ""
        return f"rtx {number}{suffix}"
    return next((chip for marker, chip in _CHIP_PATTERNS if marker in name), None)


def _is_ampere_or_later(device: torch.device) -> bool:
    """Whether the GPU has TF32 tensor cores, asked where Lightning asks it: ``accelerators.cuda._is_ampere_or_later``
    at call time (the CUDA plugin's module, or its stand-in), so that a patched answer is the one read here."""
    import importlib

    cuda = importlib.import_module("fabric_core.accelerators.cuda")
    return bool(cuda._is_ampere_or_later(device))


def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """Peak FLOPs per second of ``device`` computing in ``dtype``: the denominator of MFU.

    An optimistic upper bound that only large matrix multiplications approach. ``None`` (with a warning)
    for a chip or dtype the table lacks; ``None`` silently for devices without a table (CPU, MPS).

    Args:
        device: A CUDA or XLA device.
        dtype: The compute dtype, or ``"tfloat32"``/``"int4"``. ``torch.float32`` on an Ampere or newer GPU
            counts as ``"tfloat32"`` unless ``torch.get_float32_matmul_precision()`` is ``"highest"``.
    """
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
        chip = _cuda_chip(device_name.lower())
        if chip is None:
            rank_zero_warn(f"FLOPs not found for {device_name!r}")
            return None
        if chip not in _PEAK:
            rank_zero_warn(f"FLOPs not found for {device_name!r}, chip is {chip!r}")
            return None
        if (
            dtype is torch.float32
            and _is_ampere_or_later(device)
            and torch.get_float32_matmul_precision() != "highest"
        ):
            dtype = "tfloat32"
        peaks = dict(zip(_PEAK_COLUMNS, _PEAK[chip], strict=True))
        peak = peaks.get(dtype)
        if peak is None:
            rank_zero_warn(f"{device_name!r} does not support {dtype}")
            return None
        return int(peak)
    if device.type == "xla":
        try:
            from torch_xla._internal import tpu
        except ImportError:  # torch_xla older than 2.1 kept it here
            from torch_xla.experimental import tpu
        env = tpu.get_tpu_env()
        device_name = env.get("TYPE") or env["ACCELERATOR_TYPE"].split("-")[0]
        if device_name.lower() not in _TPU_PEAK:
            rank_zero_warn(f"FLOPs not found for TPU {device_name!r} with {dtype}")
            return None
        return int(_TPU_PEAK[device_name.lower()])
    return None


_PRECISION_DTYPES: Final = {
    "64": torch.float64,
    "32": torch.float32,
    "16": torch.float16,
    "bf16": torch.bfloat16,
    "transformer-engine": torch.int8,
}


def compute_dtype(precision: Any) -> torch.dtype:
    """The dtype the matrix multiplications of a precision plugin run in, to pick the peak FLOPs."""
    dtype = getattr(precision, "dtype", None)
    if isinstance(dtype, torch.dtype):  # half, mixed, bitsandbytes: the compute dtype
        return dtype
    name = str(getattr(precision, "precision", "32-true"))
    for prefix, value in _PRECISION_DTYPES.items():
        if name.startswith(prefix):
            return value
    return torch.float32
