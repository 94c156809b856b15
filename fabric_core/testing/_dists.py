"""Fake installed distributions: real ``*.dist-info`` metadata on ``sys.path``, without pip."""

from __future__ import annotations

import contextlib
import importlib
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

__all__ = ["fake_distribution"]


@contextlib.contextmanager
def fake_distribution(
    name: str,
    *,
    version: str = "0.1.0",
    entry_points: Mapping[str, str] | None = None,
    requires: Sequence[str] = (),
    modules: Mapping[str, str] | None = None,
    group: str = "fabric_core.plugins",
    root: str | Path | None = None,
) -> Iterator[Path]:
    """Install a distribution for the duration of a ``with`` block, the way pip would lay it out.

    Args:
        name: Distribution name (``"fabric-core-example"``).
        version: Its version.
        entry_points: ``{entry-point name: "module"}`` in ``group``.
        requires: ``Requires-Dist`` lines (``"fabric-core>=0.1,<0.2"``).
        modules: ``{"package/module.py": source}`` files to write next to the metadata.
        group: The entry-point group.
        root: Folder to write into (a new temporary folder if ``None``).

    Yields:
        The folder that was put at the front of ``sys.path``.
    """
    with contextlib.ExitStack() as stack:
        folder = Path(root) if root is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        folder.mkdir(parents=True, exist_ok=True)
        dist_info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
        dist_info.mkdir()
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Requires-Dist: {r}" for r in requires]
        (dist_info / "METADATA").write_text("\n".join(lines) + "\n")
        if entry_points:
            body = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
            (dist_info / "entry_points.txt").write_text(f"[{group}]\n{body}")
        for relative, source in (modules or {}).items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
        before = set(sys.modules)
        sys.path.insert(0, str(folder))
        importlib.invalidate_caches()
        try:
            yield folder
        finally:
            sys.path.remove(str(folder))
            for mod in set(sys.modules) - before:
                file = getattr(sys.modules[mod], "__file__", None) or ""
                if file.startswith(str(folder)):
                    del sys.modules[mod]
            importlib.invalidate_caches()
