"""Discovery's own reading of installed metadata, against importlib.metadata and packaging.

``fabric_core._kernel.metadata`` reads entry points, distribution facts and the core requirement without
importlib's per-distribution objects or packaging's parsers (a fresh process's first ``Fabric()`` pays for
both). Each reader is compared with the library it stands in for: on layouts built here, and on every
distribution of this environment.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import machinery, metadata
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from fabric_core._kernel.metadata import Facts, _release_allows, _scan_entry_points, entry_points, read_facts

GROUP = "fabric_core_metadata_test.plugins"


def _dist(root: Path, folder: str, entry_points_txt: str | None, name: str | None = None) -> None:
    info = root / folder
    info.mkdir(parents=True)
    dist_name = name or folder.rpartition(".")[0].partition("-")[0]
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 1.0\n")
    if entry_points_txt is not None:
        (info / "entry_points.txt").write_text(entry_points_txt)


@contextmanager
def on_path(*roots: Path | str) -> Iterator[None]:
    saved = list(sys.path)
    sys.path[:0] = [str(r) for r in roots]
    try:
        yield
    finally:
        sys.path[:] = saved


def _described(eps: list[metadata.EntryPoint]) -> list[tuple[str, str, str, str | None]]:
    return [(ep.name, ep.value, ep.group, ep.dist.name if ep.dist else None) for ep in eps]


@pytest.fixture
def standard_finder_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Distributions found as in a fresh process, by the standard path finder alone.

    An earlier test may have imported MLflow, whose importlib_metadata backport adds a finder of its own and
    deletes the standard one's ``find_distributions``. With that in place the scan rightly hands over to
    importlib, and a layout test would compare importlib with itself.
    """
    if not hasattr(machinery.PathFinder, "find_distributions"):
        standard = staticmethod(metadata.MetadataPathFinder.find_distributions)
        monkeypatch.setattr(machinery.PathFinder, "find_distributions", standard, raising=False)
    finders = [f for f in sys.meta_path if f is machinery.PathFinder or not hasattr(f, "find_distributions")]
    monkeypatch.setattr(sys, "meta_path", finders)


@pytest.mark.usefixtures("standard_finder_only")
def test_entry_points_are_importlibs_in_order_shadowing_and_sections(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "alpha_one-1.0.dist-info", f"[{GROUP}]\na = alpha_one.plugin\nb = alpha_one.other:obj\n")
    _dist(first, "Beta.Two-2.0.dist-info", f"[other]\nx = {GROUP}\n")  # the group named in a value only
    # a same-named distribution later on the path is hidden, whether the first declares entry points or not
    _dist(first, "gamma-1.0.dist-info", None)
    _dist(second, "gamma-2.0.dist-info", f"[{GROUP}]\ng = gamma.plugin\n")
    _dist(second, "alpha.one-3.0.dist-info", f"[{GROUP}]\nhidden = alpha_one.newer\n")
    _dist(second, "delta-1.0.egg-info", f"# comment\n[[{GROUP}]]\n d =  delta.plugin \n\n[another]\ny = z\n")
    _dist(second, "epsilon-1.0.dist-info", f"[ {GROUP} ]\ne = not.this.section\n")
    (second / "zeta-1.0.dist-info").write_text("a file, not a folder")
    _dist(second, "eta-1.0.dist-info", f"[{GROUP}]\n", name="eta")
    with on_path(first, tmp_path / "missing", second):
        scanned = _scan_entry_points(GROUP)  # None would mean it handed over to importlib
        ours = entry_points(GROUP)
        theirs = list(metadata.entry_points(group=GROUP))
    assert scanned is not None and _described(scanned) == _described(ours)
    assert _described(ours) == _described(theirs)
    assert {ep.name for ep in ours} == {"a", "b", "d"}  # gamma's is hidden, epsilon's section is another one
    assert all(isinstance(ep, metadata.EntryPoint) for ep in ours)  # importlib's own objects, loadable as such


_COMPARE_IN_A_FRESH_PROCESS = """
import json, sys
from importlib import metadata
{setup}
from fabric_core._kernel.metadata import _scan_entry_points, entry_points

def described(eps):
    return [(ep.name, ep.value, ep.group, ep.dist.name if ep.dist else None) for ep in eps]

report = {{}}
for group in ("fabric_core.plugins", "console_scripts", "pytest11"):
    report[group] = {{
        "scanned": _scan_entry_points(group) is not None,
        "same": described(entry_points(group)) == described(list(metadata.entry_points(group=group))),
        "count": len(entry_points(group)),
    }}
print(json.dumps(report))
"""


@pytest.mark.parametrize("setup", ["", "import importlib_metadata  # its finder replaces the standard one"])
def test_entry_points_of_this_environment_are_importlibs(setup: str) -> None:
    """In a fresh interpreter: this environment's plain layout is scanned; once a library has imported the
    importlib_metadata backport (MLflow does), whose finder takes over from the standard one, importlib answers.
    """
    if setup:
        pytest.importorskip("importlib_metadata")
    code = _COMPARE_IN_A_FRESH_PROCESS.format(setup=setup)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    for group, found in report.items():
        assert found["same"], group
        assert found["scanned"] == (not setup), group
    assert report["fabric_core.plugins"]["count"] >= 11  # every first-party plugin


@pytest.mark.usefixtures("standard_finder_only")
def test_a_zip_on_the_path_or_a_distribution_finder_leaves_it_to_importlib(tmp_path: Path) -> None:
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 1.0\n")
        z.writestr("zipped-1.0.dist-info/entry_points.txt", f"[{GROUP}]\nz = zipped.plugin\n")
    with on_path(archive):
        assert _scan_entry_points(GROUP) is None
        assert [ep.name for ep in entry_points(GROUP)] == ["z"]
    folder = tmp_path / "folder"
    _dist(folder, "plain-1.0.dist-info", f"[{GROUP}]\np = plain.plugin\n")
    sys.path.insert(0, folder)  # type: ignore[arg-type]  # a Path put on sys.path by hand
    try:
        assert _scan_entry_points(GROUP) is None
        assert _described(entry_points(GROUP)) == _described(list(metadata.entry_points(group=GROUP)))
    finally:
        sys.path.remove(folder)  # type: ignore[arg-type]

    class Finder:
        @staticmethod
        def find_spec(*args: object) -> None:
            return None

        @staticmethod
        def find_distributions(context: metadata.DistributionFinder.Context) -> Iterator[metadata.Distribution]:
            return iter(())

    sys.meta_path.append(Finder)
    try:
        assert _scan_entry_points(GROUP) is None
    finally:
        sys.meta_path.remove(Finder)


def test_facts_of_every_installed_distribution_are_the_email_parsers() -> None:
    count = 0
    for dist in metadata.distributions():
        meta = dist.metadata
        requires = meta.get_all("Requires-Dist")
        if requires is None:
            requires = dist.requires or []
        expected = Facts(meta["Name"], meta["Version"], tuple(requires))
        assert read_facts(dist) == expected, dist
        count += 1
    assert count > 50


def test_facts_with_folded_or_odd_headers_fall_back_to_the_email_parser(tmp_path: Path) -> None:
    info = tmp_path / "odd-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nname: odd\nVersion: 1.0\nRequires-Dist: fabric-core<0.2,\n  >=0.1\n\nName: body\n"
    )
    dist = metadata.PathDistribution(info)
    folded = dist.metadata.get_all("Requires-Dist") or []
    assert read_facts(dist) == Facts(dist.metadata["Name"], "1.0", tuple(folded))
    assert folded and "\n" in folded[0]  # read as the email parser reads it: the folded line kept
    (info / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n")
    assert read_facts(dist).name is None
    # Windows line ends, and a description whose lines look like headers
    (info / "METADATA").write_bytes(
        b"Metadata-Version: 2.1\r\nName: crlf\r\nVersion: 2.0\r\nRequires-Dist: torch>=2\r\n\r\n"
        b"Usage: see below\r\nRequires-Dist: not-a-requirement\r\n"
    )
    assert read_facts(dist) == Facts("crlf", "2.0", ("torch>=2",))
    assert dist.metadata["Name"] == "crlf" and dist.metadata.get_all("Requires-Dist") == ["torch>=2"]


_VERSIONS = ("0.1.0", "0.1", "0.2", "1.0.0", "0.0.9", "2.13.0", "01.2", "0.1.0.0", "0.1.0rc1", "0.1.0.post1", "1!0.1")
_CLAUSES = ("<0.2", ">=0.1", "==0.1", "!=0.1.0", "<=0.1.0", ">0.1", "<0.1.0", ">=1", "==0.1.*", "~=0.1", ">=0.1a1")


@pytest.mark.parametrize("version", _VERSIONS)
def test_release_comparison_is_packagings(version: str) -> None:
    decided = 0
    for n in (0, 1, 2):
        for clauses in itertools.permutations(_CLAUSES, n):
            specifiers = ",".join(clauses)
            ours = _release_allows(specifiers, version)
            if ours is None:
                continue  # left to packaging
            decided += 1
            assert ours == SpecifierSet(specifiers).contains(version, prereleases=True), (specifiers, version)
    plain = all(part.isdigit() for part in version.split("."))
    assert (decided > 0) == plain  # every final release is decided here, nothing else is
