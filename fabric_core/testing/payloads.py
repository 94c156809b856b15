"""Real code-execution payloads planted in checkpoint files, for tests of ``weights_only`` loading.

A payload is an object whose pickle calls ``os.system("touch MARKER.<pid>")``: each time a load unpickles it
without restrictions, one marker file appears (named after the shell that ran, so runs on several ranks or
repeated loads are counted apart). Tests plant one, load, and assert that :func:`executions` stays 0.
"""

from __future__ import annotations

import os
import pickle
import shlex
from pathlib import Path
from typing import Any

__all__ = ["Payload", "executions", "plant_in_metadata", "plant_in_shard", "plant_in_torch_file"]


class Payload:
    """Pickles as ``os.system("touch <marker>.$$")`` (the refused global is ``posix.system`` on Linux)."""

    def __init__(self, marker: str | os.PathLike[str]) -> None:
        self.marker = os.fspath(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {shlex.quote(self.marker)}.$$",)


def executions(marker: str | os.PathLike[str]) -> int:
    """How many times a payload with this marker ran (the marker files it left)."""
    path = Path(marker)
    return sum(1 for _ in path.parent.glob(f"{path.name}.*"))


def _read_metadata(folder: Path) -> Any:
    with open(folder / ".metadata", "rb") as file:
        return pickle.load(file)  # our own folder, written by the test


def _write_metadata(folder: Path, metadata: Any) -> None:
    with open(folder / ".metadata", "wb") as file:
        pickle.dump(metadata, file)


def plant_in_metadata(folder: str | os.PathLike[str], marker: str | os.PathLike[str]) -> None:
    """Put a payload into the ``.metadata`` of the DCP folder ``folder`` (the folder stays loadable otherwise)."""
    metadata = _read_metadata(Path(folder))
    metadata.planner_data["payload"] = Payload(marker)
    _write_metadata(Path(folder), metadata)


def plant_in_shard(folder: str | os.PathLike[str], fqn: str, marker: str | os.PathLike[str]) -> str:
    """Make the non-tensor item ``fqn`` (e.g. ``"optimizer.param_groups.0.lr"``) of a DCP folder a payload.

    The payload, saved by ``torch.save`` as DCP saves non-tensor values, is appended to the shard file that
    held the item, and the metadata is pointed at it.

    Returns:
        The name of the shard file that now holds the payload.
    """
    import io

    import torch

    root = Path(folder)
    metadata = _read_metadata(root)
    index = next(i for i in metadata.storage_data if i.fqn == fqn)
    info = metadata.storage_data[index]
    blob = io.BytesIO()
    torch.save(Payload(marker), blob)
    shard = root / info.relative_path
    offset = shard.stat().st_size
    with open(shard, "ab") as file:
        file.write(blob.getvalue())
    info.offset, info.length = offset, len(blob.getvalue())
    _write_metadata(root, metadata)
    return str(info.relative_path)


def plant_in_torch_file(path: str | os.PathLike[str], key: str, marker: str | os.PathLike[str]) -> None:
    """Add ``key: payload`` to the dict saved in the ``torch.save`` file ``path`` (written by the test)."""
    import torch

    content = torch.load(path, map_location="cpu", weights_only=False)  # our own file
    content[key] = Payload(marker)
    torch.save(content, path)
