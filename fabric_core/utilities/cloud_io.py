"""Lightning's ``utilities.cloud_io`` path: checkpoint files on any filesystem fsspec knows.

The filesystem work lives in :mod:`fabric_core.io._remote` (what
:class:`~fabric_core.io.torch_io.TorchCheckpointIO` uses for a URL); this module gives it Lightning's names
and adds Lightning's ``_load`` and ``_atomic_save`` on top of the checkpoint I/O.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any

from fabric_core._deferred import lightning_reexports
from fabric_core.io._remote import _is_dir as _is_dir
from fabric_core.io._remote import _is_local_file_protocol as _is_local_file_protocol
from fabric_core.io._remote import _is_object_storage as _is_object_storage
from fabric_core.io._remote import _protocol, get_filesystem, is_remote_url
from fabric_core.utilities.types import _MAP_LOCATION_TYPE, _PATH

__all__ = ["get_filesystem", "is_remote_url"]


def _load(
    path_or_url: IO[bytes] | _PATH, map_location: _MAP_LOCATION_TYPE = None, weights_only: bool | None = None
) -> Any:
    """Load a checkpoint from an open file, a local path or a URL (``http(s)://``, ``s3://``, ...).

    Unlike Lightning's, an ``http(s)://`` URL is loaded safely (``weights_only=True``) unless
    ``weights_only=False`` is passed: a file fetched from elsewhere is the least trusted kind. It is read
    into memory, not cached on disk as ``torch.hub`` would.

    Args:
        path_or_url: The checkpoint.
        map_location: Where to put the tensors (see ``torch.load``).
        weights_only: ``None`` or ``True``: tensors and plain containers only; ``False``: anything
            (trusted files only).
    """
    import torch

    from fabric_core.io.safe_pickle import resolve_weights_only

    safe = resolve_weights_only(weights_only)
    if not isinstance(path_or_url, str | Path):
        return torch.load(path_or_url, map_location=map_location, weights_only=safe)  # type: ignore[arg-type]
    from fabric_core.io._file import read_open_file
    from fabric_core.io.torch_io import TorchCheckpointIO

    if _protocol(path_or_url) in ("http", "https"):
        # Read into memory and load like any file: the same safety default and the same errors.
        import urllib.error
        import urllib.request

        url = str(path_or_url)
        try:
            with urllib.request.urlopen(url) as response:
                buffer = io.BytesIO(response.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise FileNotFoundError(f"Checkpoint file not found: {url} (HTTP 404)") from err
            raise
        return read_open_file(url, buffer, map_location, weights_only, mmap=False)
    return TorchCheckpointIO().load_checkpoint(path_or_url, map_location=map_location, weights_only=weights_only)


def _atomic_save(checkpoint: dict[str, Any], filepath: _PATH) -> None:
    """Save ``checkpoint`` to a local path or URL, leaving the previous file if the save fails part-way."""
    from fabric_core.io.torch_io import TorchCheckpointIO

    TorchCheckpointIO().save_checkpoint(checkpoint, filepath)

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
