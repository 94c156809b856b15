"""The guarantee pages name the tests that prove each claim: every named test must exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("docs/guarantees.md", "docs/loading-untrusted-checkpoints.md", "docs/fault-tolerant-training.md")
# `path/to/test_x.py` or `path/to/test_x.py::test_name` (a parametrisation suffix `[...]` is ignored).
_REFERENCE = re.compile(r"`((?:tests|plugins)/[\w./-]+\.py)(?:::(\w+))?(?:\[[^\]]*\])?`")


def _references() -> list[tuple[str, str, str | None]]:
    found = []
    for page in PAGES:
        for match in _REFERENCE.finditer((ROOT / page).read_text()):
            found.append((page, match.group(1), match.group(2)))
    return found


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_pages_name_tests() -> None:
    pages_with_references = {page for page, _, _ in _references()}
    assert pages_with_references == set(PAGES)


@pytest.mark.parametrize(("page", "file", "name"), _references(), ids=lambda v: str(v))
def test_each_named_test_exists(page: str, file: str, name: str | None) -> None:
    path = ROOT / file
    assert path.is_file(), f"{page} names {file}, which does not exist"
    if name is not None:
        assert name.startswith("test"), f"{page} names {file}::{name}, which is not a test"
        assert name in _test_names(path), f"{page} names {file}::{name}, which is not defined there"
