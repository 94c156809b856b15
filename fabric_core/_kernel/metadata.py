"""Installed-distribution facts, read from metadata without importing anything they describe."""

from __future__ import annotations

import functools
import operator
import os
import pathlib
import re
import sys
from collections.abc import Iterable
from importlib import machinery, metadata
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

__all__ = [
    "Facts",
    "core_requirement_problem",
    "core_version",
    "dist_key",
    "entry_points",
    "read_facts",
    "unmet_requirements",
]

#: A requirement's leading name: the distribution it is about (PEP 508 puts it first).
_LEADING_NAME: Final = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
#: The form build backends write to ``Requires-Dist`` when there is no marker, extra or URL: version
#: specifiers, comma-separated, no spaces (``<0.2,>=0.1``). Only that form is read without packaging's parser.
_PLAIN_SPECIFIERS: Final = re.compile(r"(?:[<>=!~]=?=?[^,;\s@()\[\]]+(?:,[<>=!~]=?=?[^,;\s@()\[\]]+)*)?")
#: A final release with nothing but numbers (``0.1``, ``2.13.0``): the versions compared without packaging.
_RELEASE: Final = re.compile(r"[0-9]+(?:\.[0-9]+)*")
#: One clause of a plain specifier on such a release (``~=`` and ``==0.1.*`` go to packaging).
_RELEASE_CLAUSE: Final = re.compile(r"(<=|>=|==|!=|<|>)([0-9]+(?:\.[0-9]+)*)")
#: The folders that hold one distribution's metadata.
_INFO_SUFFIXES: Final = (".dist-info", ".egg-info")
_COMPARE: Final = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


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


def entry_points(group: str) -> list[metadata.EntryPoint]:
    """``importlib.metadata.entry_points(group=group)``: the same entry points, in the same order.

    importlib builds a distribution object for every installed distribution and parses each one's
    ``entry_points.txt``: about 13 ms of a fresh process's first ``Fabric()`` in an environment of 180
    distributions. This reads each of those files once and builds only the distributions whose file has a
    ``[group]`` section. It walks ``sys.path`` as importlib does: path entries in order, each folder's
    ``*.dist-info``/``*.egg-info`` in listing order, the first distribution of each name hiding later ones,
    even one without entry points. Where that layout is not all there is (a zip archive, an ``.egg`` or an
    entry that is not a string on ``sys.path``, or an import hook that finds distributions of its own),
    importlib's own scan answers.
    """
    found = _scan_entry_points(group)
    return list(metadata.entry_points(group=group)) if found is None else found


def _scan_entry_points(group: str) -> list[metadata.EntryPoint] | None:
    """The scan of :func:`entry_points`; ``None`` where importlib's must answer."""
    if any(f is not machinery.PathFinder and hasattr(f, "find_distributions") for f in sys.meta_path):
        return None
    header = f"[{group}]"  # `[group]` or `[[group]]`: importlib strips the brackets of a section line
    seen: set[str] = set()
    found: list[metadata.EntryPoint] = []
    for root in sys.path:
        if not isinstance(root, str):
            return None  # a path object or bytes put there by hand: importlib decides what it means
        try:
            children = os.listdir(root or ".")
        except OSError:
            if os.path.isfile(root):
                return None  # a zip archive on sys.path
            continue  # a folder that does not exist: importlib finds nothing there either
        if os.path.basename(root).lower().endswith(".egg"):
            return None
        for child in children:
            low = child.lower()
            if not low.endswith(_INFO_SUFFIXES):
                continue
            key = dist_key(low.rpartition(".")[0].partition("-")[0])  # importlib's name for it, as a key
            if key in seen:
                continue
            seen.add(key)
            try:
                with open(os.path.join(root, child, "entry_points.txt"), encoding="utf-8") as file:
                    text = file.read()
            except OSError:
                continue
            if header in text:
                dist = metadata.PathDistribution(pathlib.Path(root, child))
                found.extend(dist.entry_points.select(group=group))
    return found


def read_facts(dist: metadata.Distribution | None) -> Facts:
    """The name, version and requirements of ``dist`` (all ``None``/empty for ``None``)."""
    if dist is None:
        return Facts(None, None, ())
    facts = _read_plain_headers(dist)
    if facts is not None:
        return facts
    meta = dist.metadata
    requires = meta.get_all("Requires-Dist")
    if requires is None:  # none, or an egg-info layout that keeps them in requires.txt
        requires = dist.requires or []
    return Facts(meta["Name"], meta["Version"], tuple(requires))


def _read_plain_headers(dist: metadata.Distribution) -> Facts | None:
    """The facts from ``METADATA`` read as plain ``Key: value`` lines; ``None`` where the email parser must.

    The headers pip and every build backend write are one line each; a folded header (a line that starts
    with a space), an egg's ``PKG-INFO`` or a missing ``Name`` goes through :attr:`Distribution.metadata`.
    """
    text = dist.read_text("METADATA")
    if text is None:
        return None
    name = version = None
    requires: list[str] = []
    for line in text.splitlines():
        if not line:
            break  # the headers end at the first empty line; the description follows
        key, colon, value = line.partition(":")
        if not colon or line[:1] in (" ", "\t"):
            return None
        key = key.lower()
        if key == "name" and name is None:
            name = value.strip()
        elif key == "version" and version is None:
            version = value.strip()
        elif key == "requires-dist":
            requires.append(value.strip())
    return None if name is None else Facts(name, version, tuple(requires))


@functools.cache
def core_version() -> str:
    """The version of the fabric-core that runs: the one imported, whatever is installed later."""
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
        version = core_version()
        rest = text[name.end() :]
        allowed = _release_allows(rest, version)
        if allowed is None:
            specifier = _core_specifier(text, rest)
            allowed = specifier is None or specifier.contains(version, prereleases=True)
        if not allowed:
            return f"it requires {text!s} but fabric-core {version} is installed"
    return None


def _release_allows(specifiers: str, version: str) -> bool | None:
    """Whether ``version`` meets ``specifiers`` (``"<0.2,>=0.1"``), where both use final releases only.

    That is the form of every plugin's requirement and of the core's version, and for it PEP 440's order is
    the order of the numbers, zeros appended to the shorter (``0.1 == 0.1.0``); this reads it without
    importing packaging. ``None`` for anything else (pre-releases, ``~=``, wildcards, spaces), which
    packaging decides.
    """
    if not _RELEASE.fullmatch(version):
        return None
    clauses = [] if specifiers == "" else [_RELEASE_CLAUSE.fullmatch(c) for c in specifiers.split(",")]
    if not all(clauses):
        return None
    mine = [int(part) for part in version.split(".")]
    for clause in clauses:
        assert clause is not None  # checked above; for the type checker
        compare, other = clause.groups()
        theirs = [int(part) for part in other.split(".")]
        width = max(len(mine), len(theirs))
        if not _COMPARE[compare](mine + [0] * (width - len(mine)), theirs + [0] * (width - len(theirs))):
            return False
    return True


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
