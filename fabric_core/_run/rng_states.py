"""Every random number generator's state of one process as a dict of tensors, and back.

Tensors only (no numpy arrays, no pickled objects), so a run checkpoint that holds them still loads with
``weights_only=True``. Python's and numpy's Mersenne Twister states are integers; the one float each keeps
(a cached Gaussian) travels as its 64 bits.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import torch

__all__ = ["capture", "restore"]


def _bits(value: float | None) -> list[int]:
    """``[has_value, bits]``: a float (or ``None``) as two integers."""
    if value is None:
        return [0, 0]
    return [1, struct.unpack("<q", struct.pack("<d", float(value)))[0]]


def _float(has_value: int, bits: int) -> float | None:
    return struct.unpack("<d", struct.pack("<q", bits))[0] if has_value else None


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # numpy is optional: nothing of it to save or restore
        return None
    return numpy


def capture(device: torch.device) -> dict[str, torch.Tensor]:
    """The RNG states of this process: torch's CPU generator, Python's, numpy's, and the device's (CUDA).

    Args:
        device: The process's device; its generator is included where it has its own (CUDA).
    """
    version, internal, gauss = random.getstate()
    states = {
        "torch": torch.get_rng_state(),
        "python": torch.tensor([version, *internal, *_bits(gauss)], dtype=torch.int64),
    }
    numpy = _numpy()
    if numpy is not None:
        _, keys, position, has_gauss, cached = numpy.random.get_state()
        numbers = [*keys.tolist(), position, *_bits(cached if has_gauss else None)]
        states["numpy"] = torch.tensor(numbers, dtype=torch.int64)
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def restore(states: dict[str, torch.Tensor], device: torch.device) -> None:
    """Set the generators from what :func:`capture` returned (one process's row)."""
    # A copy: torch.set_rng_state refuses or crashes on a view into a larger storage (a row of a stack).
    torch.set_rng_state(states["torch"].cpu().clone())
    python = states["python"].tolist()
    random.setstate((python[0], tuple(python[1:-2]), _float(python[-2], python[-1])))
    numpy = _numpy()
    if numpy is not None and "numpy" in states:
        values = states["numpy"].tolist()
        keys = numpy.array(values[:-3], dtype=numpy.uint32)
        cached = _float(values[-2], values[-1])
        numpy.random.set_state(("MT19937", keys, values[-3], int(cached is not None), cached or 0.0))
    if "cuda" in states and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"].cpu().clone(), device)
