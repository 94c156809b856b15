"""The benchmark harness: balanced orders of the variants, paired ratios to raw."""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _harness import AA, CORE, RAW, _balanced_orders, fastest_of, interleave, row_result


@pytest.mark.parametrize("count", [2, 3, 4, 5, 6])
def test_each_variant_takes_each_position_and_follows_each_other_equally_often(count: int) -> None:
    design = _balanced_orders(count)
    assert all(sorted(order) == list(range(count)) for order in design)
    positions = Counter((item, index) for order in design for index, item in enumerate(order))
    successions = Counter(pair for order in design for pair in itertools.pairwise(order))
    assert len(positions) == count * count and len(set(positions.values())) == 1
    assert len(successions) == count * (count - 1) and len(set(successions.values())) == 1


def test_interleave_adds_the_a_a_twin_and_records_every_round_after_the_warm_up() -> None:
    calls: list[str] = []

    def measure(name: str, value: float) -> Callable[[], float]:
        def run() -> float:
            calls.append(name)
            return value

        return run

    values = interleave({RAW: measure(RAW, 2.0), CORE: measure(CORE, 3.0)}, rounds=6, seed=1, warmup=2)
    assert set(values) == {RAW, CORE, AA}
    assert values[RAW] == [2.0] * 6 and values[AA] == [2.0] * 6 and values[CORE] == [3.0] * 6
    assert len(calls) == 3 * 8
    firsts = Counter(calls[i] for i in range(6, len(calls), 3))  # the first variant of each counted round
    assert firsts == {RAW: 4, CORE: 2}  # each of the 3 slots first twice; AA's slot runs RAW's measure


def test_rate_rows_invert_the_ratio() -> None:
    result = row_result("r", "t", {RAW: [1.0, 2.0], CORE: [2.0, 4.0]}, metric="rate")
    assert result.ratios[CORE].median == 0.5
    assert row_result("r", "t", {RAW: [1.0, 2.0], CORE: [2.0, 4.0]}).ratios[CORE].median == 2.0


def test_fastest_of_calls_the_measure_repeatedly_and_keeps_the_smallest_value() -> None:
    values = iter([3.0, 1.0, 2.0, 9.0])
    best = fastest_of(lambda: next(values), 3)
    assert best() == 1.0
    assert next(values) == 9.0  # exactly three calls


def test_the_gpu_section_renders_the_kept_run_as_tables_a_markdown_reader_splits_right() -> None:
    from report import HERE, gpu_section

    lines = gpu_section(HERE / "gpu_results.json")
    assert lines[1] == "## On a GPU"
    data = json.loads((HERE / "gpu_results.json").read_text())
    first = lines.index("| check | result | seconds | detail |") + 2
    checks = lines[first : first + len(data["checks"])]
    assert lines[first + len(data["checks"])] == "" and any("\\|" in line for line in checks)  # fp8's "|diff|"
    for line in checks:  # a detail's own bars are escaped: four cells a row
        assert len(re.split(r"(?<!\\)\|", line.strip().strip("|"))) == 4, line
    ratios = [line for line in lines if line.startswith("| bf16")]
    assert len(ratios) == len(data["bench"]["results"]) and all(line.count("%") == 2 for line in ratios)
    assert gpu_section(HERE / "missing.json") == []
