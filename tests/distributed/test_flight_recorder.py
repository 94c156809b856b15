"""The flight recorder keeps each Fabric call with the user's line, and reads the ranks' records as one story.

The multi-process behaviour (the exchange through the store, the tables, the abort) is in
tests/distributed/test_hang_reports.py; here the recording and :func:`explain` on histories written out by hand.
"""

from __future__ import annotations

import torch

from fabric_core import Fabric
from fabric_core._distributed import flight_recorder
from fabric_core._distributed.flight_recorder import Record, explain, first_difference
from fabric_core._distributed.watchdog import table


def test_each_fabric_collective_is_recorded_with_what_it_got_and_the_users_line() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    start = flight_recorder.next_sequence()
    fabric.all_reduce(torch.ones(2, 3))  # line A
    line_a = test_each_fabric_collective_is_recorded_with_what_it_got_and_the_users_line.__code__.co_firstlineno + 3
    fabric.barrier("eval")
    fabric.broadcast(1, src=0)
    fabric.all_gather({"x": torch.ones(1)})
    records = [r for r in flight_recorder.recorded() if r.seq >= start]
    assert [(r.seq - start, r.call, flight_recorder.describe(r.what)) for r in records] == [
        (0, "all_reduce", "float32[2, 3]"),
        (1, "barrier", "'eval'"),
        (2, "broadcast", "src=0"),
        (3, "all_gather", "dict"),
    ]
    assert records[0].file == __file__ and records[0].line == line_a
    assert flight_recorder.next_sequence() == start + 4


def test_the_ring_keeps_the_last_calls_only() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    for _ in range(flight_recorder.SIZE + 5):
        fabric.barrier()
    kept = flight_recorder.recorded()
    assert len(kept) == flight_recorder.SIZE
    assert [r.seq for r in kept] == list(
        range(flight_recorder.next_sequence() - flight_recorder.SIZE, flight_recorder.next_sequence())
    )


def rec(seq: int, call: str, line: int, what: str = "") -> Record:
    return Record(seq, call, what, "train.py", line)


def test_a_save_on_rank_0_only_is_named_with_its_line_and_the_rule() -> None:
    histories = {0: [rec(0, "setup", 5), rec(1, "save", 9)], 1: [rec(0, "setup", 5)]}
    where = {0: "waiting 60 s in `save`", 1: "waiting 60 s in fabric-core's exit handler: the script has returned"}
    cause = explain(histories, {0: 2, 1: 1}, where, {0: True, 1: True}, [])
    assert cause.startswith(
        "rank 0 reached call #1, `fabric.save` (train.py:9), which rank 1 has not made: it is waiting 60 s in "
        "fabric-core's exit handler"
    )
    assert "`fabric.save` must be called on every rank" in cause


def test_different_calls_and_different_shapes_are_told_apart() -> None:
    calls = {0: [rec(3, "all_reduce", 12, "float32[1]")], 1: [rec(3, "all_gather", 14, "float32[1]")]}
    cause = explain(calls, {0: 4, 1: 4}, {0: "w", 1: "w"}, {0: True, 1: True}, [])
    assert cause.startswith(
        "The ranks differ from call #3 on: rank 0 called `fabric.all_reduce` (float32[1]) (train.py:12); "
        "rank 1 called `fabric.all_gather` (float32[1]) (train.py:14)."
    )
    shapes = {0: [rec(3, "all_reduce", 12, "float32[2]")], 1: [rec(3, "all_reduce", 12, "float32[3]")]}
    assert first_difference(shapes, {0: 4, 1: 4}) == 3
    # The same call from two lines (two branches of an `if`) is the same collective.
    branches = {0: [rec(3, "all_reduce", 12, "float32[2]")], 1: [rec(3, "all_reduce", 20, "float32[2]")]}
    assert first_difference(branches, {0: 4, 1: 4}) is None


def test_the_comparison_starts_where_every_rank_still_has_records() -> None:
    # Rank 0 is 100 calls ahead: its ring no longer holds the calls rank 1 is at.
    ahead = {0: [rec(seq, "all_reduce", 7, "float32[1]") for seq in range(100, 164)], 1: [rec(30, "all_reduce", 7)]}
    assert first_difference(ahead, {0: 164, 1: 31}) == 100


def test_without_a_difference_the_cause_is_the_rank_outside_or_the_silent_one() -> None:
    same = {0: [rec(0, "barrier", 3)], 1: [rec(0, "barrier", 3)]}
    outside = explain(same, {0: 1, 1: 1}, {0: "w", 1: "not in a collective: running train.py:8"}, {0: True}, [])
    assert "rank 1 is not in a collective (not in a collective: running train.py:8)" in outside
    silent = explain({0: same[0]}, {0: 1}, {0: "w"}, {0: True}, [1])
    assert silent.startswith("rank 1 did not answer")
    stuck = explain(same, {0: 1, 1: 1}, {0: "w", 1: "w"}, {0: True, 1: True}, [])
    assert stuck.startswith("Every rank waits in a collective and they agree")


def test_the_table_has_a_row_per_rank_and_names_the_silent_ones() -> None:
    states = {
        0: {
            "where": "waiting 3 s in `barrier`",
            "collective": True,
            "count": 1,
            "records": [[0, "barrier", "", "t.py", 3]],
        },
    }
    text = table("[fabric-core rank 0] where every rank is:", states, 3)
    lines = text.splitlines()
    assert lines[1] == "  rank 0: waiting 3 s in `barrier`"
    assert lines[2] == "      last calls: #0 barrier t.py:3"
    assert lines[3] == "  rank 1: did not answer (dead, or stuck where Python cannot run)"
    assert lines[4] == "  rank 2: did not answer (dead, or stuck where Python cannot run)"
    assert lines[5].startswith("  cause: ranks 1, 2 did not answer")
