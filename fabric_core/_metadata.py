"""Installed-distribution facts, read from metadata without importing anything they describe."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata

__all__ = ["core_version", "unmet_requirements"]


def core_version() -> str:
    """The installed version of fabric-core (the package's own when it runs from a source tree)."""
    try:
        return metadata.version("fabric-core")
    except metadata.PackageNotFoundError:
        from fabric_core._version import __version__

        return __version__


def unmet_requirements(requirements: Iterable[str]) -> list[str]:
    """Return the requirement strings that the installed distributions do not satisfy."""
    from packaging.requirements import InvalidRequirement, Requirement

    unmet = []
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            unmet.append(text)
            continue
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            unmet.append(text)
            continue
        if req.specifier and not req.specifier.contains(installed, prereleases=True):
            unmet.append(f"{text} (installed: {installed})")
    return unmet


def core_requirement_problem(dist: metadata.Distribution | None) -> str | None:
    """Check a plugin distribution's ``fabric-core`` requirement against the installed core.

    Returns:
        ``None`` when compatible (or when the plugin states no requirement), else a sentence saying why not.
    """
    if dist is None:
        return None
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    version = core_version()
    for text in dist.requires or ():
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != "fabric-core":
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            return f"it requires {text!s} but fabric-core {version} is installed"
    return None
