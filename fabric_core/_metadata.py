"""Installed-distribution facts, read from metadata without importing anything they describe."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from importlib import metadata
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

__all__ = ["Facts", "core_requirement_problem", "core_version", "dist_key", "read_facts", "unmet_requirements"]

#: A requirement's leading name: the distribution it is about (PEP 508 puts it first).
_LEADING_NAME: Final = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
#: The form build backends write to ``Requires-Dist`` when there is no marker, extra or URL: version
#: specifiers, comma-separated, no spaces (``<0.2,>=0.1``). Only that form is read without packaging's parser.
_PLAIN_SPECIFIERS: Final = re.compile(r"(?:[<>=!~]=?=?[^,;\s@()\[\]]+(?:,[<>=!~]=?=?[^,;\s@()\[\]]+)*)?")


def dist_key(name: str) -> str:
    """A distribution name in its normalized form (PEP 503): ``Fabric_Core.DDP`` -> ``fabric-core-ddp``."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Facts(NamedTuple):
    """What discovery needs to know of one distribution, from one read of its metadata.

    Each property of :class:`importlib.metadata.Distribution` (``name``, ``version``, ``requires``) reads
    and parses the metadata file again; a plugin's record needs all three. (A named tuple, not a dataclass:
    this module is imported by every first ``Fabric(...)``, and a dataclass costs a millisecond to define.)
    """

    name: str | None
    version: str | None
    requires: tuple[str, ...]


def read_facts(dist: metadata.Distribution | None) -> Facts:
    """The name, version and requirements of ``dist`` (all ``None``/empty for ``None``)."""
    if dist is None:
        return Facts(None, None, ())
    meta = dist.metadata
    requires = meta.get_all("Requires-Dist")
    if requires is None:  # none, or an egg-info layout that keeps them in requires.txt
        requires = dist.requires or []
    return Facts(meta["Name"], meta["Version"], tuple(requires))


@functools.cache
def core_version() -> str:
    """The installed version of fabric-core (the package's own when it runs from a source tree).

    Read once per process: the code running is the code that was imported, whatever is installed later.
    """
    try:
        return metadata.version("fabric-core")
    except metadata.PackageNotFoundError:
        from fabric_core._version import __version__

        return __version__


def unmet_requirements(requirements: Iterable[str]) -> list[str]:
    """Return the requirement strings that the installed distributions do not satisfy."""
    requirements = tuple(requirements)
    if not requirements:
        return []  # most entries have none: no parser to import
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


def core_requirement_problem(requires: Iterable[str]) -> str | None:
    """Check a plugin distribution's ``fabric-core`` requirement against the installed core.

    Args:
        requires: The distribution's ``Requires-Dist`` strings (:attr:`Facts.requires`).

    Returns:
        ``None`` when compatible (or when the plugin states no requirement), else a sentence saying why not.
    """
    for text in requires:
        name = _LEADING_NAME.match(text)
        if name is None or dist_key(name[1]) != "fabric-core":
            continue  # about another distribution (or not a requirement at all): nothing to check
        specifier = _core_specifier(text, text[name.end() :])
        if specifier is None:
            continue
        version = core_version()
        if not specifier.contains(version, prereleases=True):
            return f"it requires {text!s} but fabric-core {version} is installed"
    return None


def _core_specifier(text: str, rest: str) -> SpecifierSet | None:
    """The version specifier of ``text``, a requirement on fabric-core; ``None`` when it does not apply.

    The plain form every plugin's metadata has (``fabric-core<0.2,>=0.1``) is read with
    :mod:`packaging.specifiers` alone. Anything else (a marker, extras, spaces) goes through packaging's full
    PEP 508 parser, whose import costs a fresh process more than the rest of discovery's checks together:
    an invalid requirement, or one whose marker is false with no extra selected, does not apply.
    """
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if _PLAIN_SPECIFIERS.fullmatch(rest):
        try:
            return SpecifierSet(rest)
        except InvalidSpecifier:
            pass  # the full parser decides (and refuses it)
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        return None
    return req.specifier
