"""Check a DeepSpeed checkpoint folder for code before DeepSpeed unpickles it with ``weights_only=False``.

DeepSpeed reads its model-states and optimizer-states files with ``torch.load(weights_only=False)``, so a
crafted folder can run anything. Before DeepSpeed sees a folder, every pickle in it is scanned (no object is
built, no tensor read) against the globals the files written by this strategy consist of.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from fabric_core.io.safe_pickle import RefusedGlobal, check_torch_file, refused_error, scan

__all__ = ["DEEPSPEED_GLOBALS", "check_pickles"]

# Every global found (pickletools) in the files of folders written by `fabric.save` with stages 1, 2 and 3,
# in fp32 and bf16-mixed, on two gloo ranks; plus the storage type of every other dtype and DeepSpeed's fp16
# loss scaler, the counterparts of the ones found, which fp16 training (not possible on CPU) writes instead.
_DTYPE_STORAGES: Final = (
    "BFloat16Storage", "BoolStorage", "ByteStorage", "CharStorage", "ComplexDoubleStorage", "ComplexFloatStorage",
    "DoubleStorage", "FloatStorage", "HalfStorage", "IntStorage", "LongStorage", "ShortStorage",
)  # fmt: skip
DEEPSPEED_GLOBALS: Final = frozenset(
    {
        ("collections", "OrderedDict"),
        ("torch", "Size"),
        ("torch", "Tensor"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
        ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
        ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
        ("deepspeed.utils.tensor_fragment", "fragment_address"),
        *(("torch", name) for name in _DTYPE_STORAGES),
    }
)

# What DeepSpeed (and torch.load) may unpickle: torch zip archives, or a plain pickle (starts with PROTO).
_ZIP: Final = b"PK\x03\x04"
_PROTO: Final = b"\x80"


def check_pickles(folder: str | os.PathLike[str], tag: str) -> None:
    """Scan every pickle under ``folder``: every file of the ``tag`` sub-folder, and any pickle beside it.

    Files of the tag folder are what DeepSpeed loads; each must be a torch zip archive. Elsewhere in the
    folder, DeepSpeed keeps text (``latest``) and its scripts; a torch archive or pickle there is checked too.

    Raises:
        CheckpointError: A file names a global outside :data:`DEEPSPEED_GLOBALS`, or is not a torch archive
            (``reason="unsafe"``); or it is damaged (``"corrupt"``). Nothing of it has been unpickled.
    """
    root = Path(folder)
    tagged = root / tag
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.is_relative_to(tagged):
            check_torch_file(path, DEEPSPEED_GLOBALS)
            continue
        with open(path, "rb") as file:
            head = file.read(len(_ZIP))
        if head.startswith(_ZIP):
            check_torch_file(path, DEEPSPEED_GLOBALS)
        elif head.startswith(_PROTO):
            _check_plain_pickle(path)


def _check_plain_pickle(path: Path) -> None:
    try:
        with open(path, "rb") as file:
            scan(file, DEEPSPEED_GLOBALS)
    except RefusedGlobal as refused:
        raise refused_error(path, refused) from None
    except Exception:  # not a pickle after all (binary data that starts with 0x80): nothing runs it
        pass
