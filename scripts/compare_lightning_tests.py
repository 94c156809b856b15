"""Run Lightning's own Fabric test suite against Lightning and against fabric-core, and report where they differ.

Each test file of a ``tests_fabric`` folder (a copy of ``tests/tests_fabric`` of the Lightning repository) is run
by pytest in a process of its own, once per side:

- ``lightning``: ``python -m pytest FILE`` (the installed ``lightning.fabric`` / ``lightning_fabric``);
- ``fabric-core``: ``python -m fabric_core.lightning_imports -m pytest FILE`` (zero-edit mode: ``lightning.fabric``
  and ``lightning_fabric`` are served by fabric_core's modules).

The working directory is the parent of the ``tests_fabric`` folder (Lightning's tests import
``tests_fabric.helpers...``); a ``pytest.ini`` there keeps other projects' pytest settings out. Every run has a
per-test timeout (pytest-timeout) and a whole-file wall timeout, after which the process group is killed and the
file is recorded as timed out (tests that had already reported in the verbose log keep their outcome).

Outputs, written after every file so that a partial run is useful:

- ``OUT/results.json``: ``{file: {side: {test_id: {"outcome": ..., "message": ...}}}}``, outcomes ``passed``,
  ``failed``, ``error``, ``skipped`` (``xfailed`` counts as skipped) and, for a file-level pseudo test
  ``<file>``, ``timeout`` / ``crashed``;
- ``OUT/runs.json``: per file and side, the command, exit code, duration and whether the wall timeout hit;
- ``OUT/summary.md``: a table per file (passing on Lightning, also on fabric-core, only on Lightning, only on
  fabric-core), totals, and the fabric-core failure of every test that passes only on Lightning;
- ``OUT/junit/SIDE/*.xml`` and ``OUT/logs/SIDE/*.log``: the raw pytest reports and output.

Examples::

    python scripts/compare_lightning_tests.py --tests SCRATCH/tests/tests_fabric --out SCRATCH/results
    python scripts/compare_lightning_tests.py --tests T --out O --skip-done -k strategies/test_ddp
    python scripts/compare_lightning_tests.py --tests T --out O --side fabric-core accelerators/test_cuda.py
    python scripts/compare_lightning_tests.py --tests T --out O --summary-only
    python scripts/compare_lightning_tests.py --table master=M:lightning 2.6.6=O:lightning fabric-core=O:fabric-core

``--table LABEL=OUT:SIDE ...`` prints one markdown table over several runs' results (the tests of one suite run
on several codes: Lightning master, a Lightning release, fabric-core): per file, the tests passing under each
label, and how many pass under each earlier label but not under the last one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypedDict

SIDES: Final = ("lightning", "fabric-core")
OUTCOMES: Final = ("passed", "failed", "error", "skipped", "timeout", "crashed")
MESSAGE_LINES: Final = 15
FILE_ENTRY: Final = "<file>"
_VERBOSE_LINE: Final = re.compile(r"^(?P<nodeid>\S+::\S.*?) (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_VERBOSE_WORDS: Final = {
    "PASSED": "passed",
    "XPASS": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "skipped",
}


class TestResult(TypedDict):
    """One test's outcome on one side."""

    outcome: str
    message: str


class RunInfo(TypedDict):
    """How one file ran on one side."""

    command: list[str]
    returncode: int | None
    duration_s: float
    timed_out: bool


Results = dict[str, dict[str, dict[str, TestResult]]]
Runs = dict[str, dict[str, RunInfo]]


@dataclass(frozen=True)
class Config:
    """Settings of one harness invocation."""

    tests_dir: Path
    out_dir: Path
    sides: tuple[str, ...]
    file_timeout: float
    test_timeout: float
    python: str
    skip_done: bool
    extra_pytest_args: tuple[str, ...]


def discover(tests_dir: Path, filters: Sequence[str], explicit: Sequence[str]) -> list[str]:
    """Return the test files to run, as paths relative to ``tests_dir`` (``accelerators/test_cpu.py``).

    Args:
        tests_dir: The ``tests_fabric`` folder.
        filters: Substrings; a file is kept if its relative path contains any of them (all files when empty).
        explicit: Files named on the command line (relative to ``tests_dir``, or absolute); override discovery.
    """
    if explicit:
        files = []
        for name in explicit:
            path = Path(name)
            path = path if path.is_absolute() else tests_dir / path
            if not path.is_file():
                raise SystemExit(f"no such test file: {path}")
            files.append(path.resolve().relative_to(tests_dir.resolve()).as_posix())
    else:
        files = sorted(p.relative_to(tests_dir).as_posix() for p in tests_dir.rglob("test_*.py"))
    if filters:
        files = [f for f in files if any(s in f for s in filters)]
    return files


def module_name(tests_dir: Path, rel_file: str) -> str:
    """Dotted module name pytest gives ``rel_file`` (``tests_fabric.accelerators.test_cpu``)."""
    return ".".join((tests_dir.name, *Path(rel_file).with_suffix("").parts))


def _message(element: ET.Element) -> str:
    """The first lines of a junit failure/error/skipped element: its ``message`` plus the report's ``E`` lines."""
    text = element.text or ""
    head = [line.strip() for line in (element.get("message") or "").splitlines() if line.strip()]
    e_lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = list(head)
    lines += [line for line in e_lines if line and line not in lines]
    if not lines:
        lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) <= MESSAGE_LINES:
        return "\n".join(lines)
    # a traceback from a child process ends with the exception that matters: keep the last lines too
    return "\n".join([*lines[: MESSAGE_LINES - 4], "...", *lines[-3:]])


def parse_junit(xml_path: Path, module: str) -> dict[str, TestResult]:
    """Per-test outcomes from a pytest junit-xml report.

    Test ids are the pytest node id without the file: ``test_name[param]`` or ``TestClass::test_name``.
    A collection error of the file becomes the pseudo test ``<file>`` with outcome ``error``.
    """
    results: dict[str, TestResult] = {}
    root = ET.parse(xml_path).getroot()
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "")
        if not classname:  # collection error: pytest reports the module as the name
            test_id = FILE_ENTRY
        elif classname == module:
            test_id = name
        elif classname.startswith(module + "."):
            test_id = "::".join((*classname[len(module) + 1 :].split("."), name))
        else:
            test_id = f"{classname}::{name}"
        outcome, message = "passed", ""
        # a failing teardown after a passing call is reported as an error on the same test case
        for tag, word in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                outcome, message = word, _message(found)
                break
        previous = results.get(test_id)
        if previous is not None and OUTCOMES.index(previous["outcome"]) >= OUTCOMES.index(outcome):
            continue  # keep the worse of duplicate reports (call + teardown)
        results[test_id] = {"outcome": outcome, "message": message}
    return results


def parse_verbose_log(log_text: str, rel_file: str) -> dict[str, TestResult]:
    """Per-test outcomes from ``pytest -v`` output, for a run killed before it wrote its junit report."""
    results: dict[str, TestResult] = {}
    for line in log_text.splitlines():
        match = _VERBOSE_LINE.match(line.strip())
        if match is None:
            continue
        nodeid = match.group("nodeid")
        _, _, test_id = nodeid.partition("::")
        if not nodeid.split("::", 1)[0].endswith(rel_file):
            continue
        results[test_id] = {"outcome": _VERBOSE_WORDS[match.group("word")], "message": "(from the verbose log)"}
    return results


def _tail(text: str, lines: int = MESSAGE_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _safe_name(rel_file: str) -> str:
    return rel_file.replace("/", "__").removesuffix(".py")


def command_for(config: Config, side: str, rel_file: str, xml_path: Path) -> list[str]:
    """The command line that runs one file on one side."""
    pytest_args = [
        f"{config.tests_dir.name}/{rel_file}",
        "-v",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml_path}",
        f"--timeout={config.test_timeout:g}",
        *config.extra_pytest_args,
    ]
    if side == "lightning":
        return [config.python, "-m", "pytest", *pytest_args]
    return [config.python, "-m", "fabric_core.lightning_imports", "-m", "pytest", *pytest_args]


def run_file(config: Config, side: str, rel_file: str) -> tuple[dict[str, TestResult], RunInfo]:
    """Run one test file on one side in its own process group and collect its per-test outcomes."""
    safe = _safe_name(rel_file)
    xml_path = config.out_dir / "junit" / side / f"{safe}.xml"
    log_path = config.out_dir / "logs" / side / f"{safe}.log"
    xml_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    xml_path.unlink(missing_ok=True)
    command = command_for(config, side, rel_file, xml_path)
    env = dict(os.environ, PYTHONHASHSEED="0")
    start = time.monotonic()
    timed_out = False
    with log_path.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        proc = subprocess.Popen(
            command,
            cwd=config.tests_dir.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode: int | None = proc.wait(timeout=config.file_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            returncode = None
    duration = time.monotonic() - start
    log_text = log_path.read_text(encoding="utf-8", errors="replace")
    module = module_name(config.tests_dir, rel_file)
    results: dict[str, TestResult] = {}
    if not timed_out and xml_path.is_file():
        try:
            results = parse_junit(xml_path, module)
        except ET.ParseError as exc:
            results = {FILE_ENTRY: {"outcome": "crashed", "message": f"unreadable junit xml: {exc}"}}
    else:
        results = parse_verbose_log(log_text, rel_file)
        if timed_out:
            message = f"file exceeded the wall timeout of {config.file_timeout:g}s\n{_tail(log_text)}"
            results[FILE_ENTRY] = {"outcome": "timeout", "message": message}
        else:
            message = f"pytest exited with {returncode} without a junit report\n{_tail(log_text)}"
            results[FILE_ENTRY] = {"outcome": "crashed", "message": message}
    info: RunInfo = {
        "command": command,
        "returncode": returncode,
        "duration_s": round(duration, 1),
        "timed_out": timed_out,
    }
    return results, info


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group that ``proc`` leads (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def load_json(path: Path) -> Any:
    """Read a JSON object written by this script, or an empty one when the file does not exist yet."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise SystemExit(f"{path} does not hold a JSON object")
    return data


def write_json(path: Path, data: object) -> None:
    """Write ``data`` atomically (a partial write never replaces a good file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


@dataclass
class FileCounts:
    """The comparison of one file (or of all files)."""

    tests: int = 0
    pass_lightning: int = 0
    pass_fabric_core: int = 0
    pass_both: int = 0
    only_lightning: int = 0
    only_fabric_core: int = 0

    def add(self, other: FileCounts) -> None:
        """Accumulate another file's counts."""
        for field in self.__dataclass_fields__:
            setattr(self, field, getattr(self, field) + getattr(other, field))


def compare(per_side: dict[str, dict[str, TestResult]]) -> tuple[FileCounts, list[str], list[str]]:
    """Count one file's tests; return the counts and the ids passing only on Lightning / only on fabric-core."""
    lightning = per_side.get("lightning", {})
    fabric_core = per_side.get("fabric-core", {})
    ids = sorted((set(lightning) | set(fabric_core)) - {FILE_ENTRY})
    counts = FileCounts(tests=len(ids))
    only_l: list[str] = []
    only_fc: list[str] = []
    for test_id in ids:
        passed_l = test_id in lightning and lightning[test_id]["outcome"] == "passed"
        passed_fc = test_id in fabric_core and fabric_core[test_id]["outcome"] == "passed"
        counts.pass_lightning += passed_l
        counts.pass_fabric_core += passed_fc
        counts.pass_both += passed_l and passed_fc
        if passed_l and not passed_fc:
            only_l.append(test_id)
        elif passed_fc and not passed_l:
            only_fc.append(test_id)
    counts.only_lightning = len(only_l)
    counts.only_fabric_core = len(only_fc)
    return counts, only_l, only_fc


def _file_note(per_side: dict[str, dict[str, TestResult]]) -> str:
    notes = []
    for side in SIDES:
        entry = per_side.get(side, {}).get(FILE_ENTRY)
        if entry is not None:
            notes.append(f"{side}: {entry['outcome']}")
        elif side not in per_side:
            notes.append(f"{side}: not run")
    return "; ".join(notes)


def _duration(runs: Runs, rel_file: str, side: str) -> str:
    info = runs.get(rel_file, {}).get(side)
    return "-" if info is None else f"{info['duration_s']:g}"


def _meaningful(message: str, lines: int = 4) -> str:
    kept = [line.strip() for line in message.splitlines() if line.strip()]
    return " / ".join(kept[:lines]).replace("|", "\\|")


def write_summary(results: Results, runs: Runs, out_path: Path) -> None:
    """Write the markdown report of everything in ``results``."""
    total = FileCounts()
    rows = []
    only_l_details: list[tuple[str, str, str]] = []
    only_fc_ids: list[tuple[str, str]] = []
    for rel_file in sorted(results):
        per_side = results[rel_file]
        counts, only_l, only_fc = compare(per_side)
        total.add(counts)
        seconds = " / ".join(_duration(runs, rel_file, side) for side in SIDES)
        rows.append(
            f"| {rel_file} | {counts.tests} | {counts.pass_lightning} | {counts.pass_fabric_core} | "
            f"{counts.pass_both} | {counts.only_lightning} | {counts.only_fabric_core} | {seconds} | "
            f"{_file_note(per_side)} |"
        )
        fabric_core = per_side.get("fabric-core", {})
        for test_id in only_l:
            entry = fabric_core.get(test_id) or fabric_core.get(FILE_ENTRY) or {"outcome": "missing", "message": ""}
            only_l_details.append((f"{rel_file}::{test_id}", entry["outcome"], _meaningful(entry["message"])))
        only_fc_ids.extend((rel_file, test_id) for test_id in only_fc)

    lines = [
        "# Lightning's tests_fabric: Lightning vs fabric-core (zero-edit mode)",
        "",
        f"Files: {len(results)}. Tests: {total.tests}. Passing on Lightning: {total.pass_lightning}. "
        f"Passing on fabric-core: {total.pass_fabric_core}. Passing on both: {total.pass_both}. "
        f"Only on Lightning: {total.only_lightning}. Only on fabric-core: {total.only_fabric_core}.",
        "",
        "| file | tests | pass Lightning | pass fabric-core | pass both | only Lightning | only fabric-core "
        "| seconds (L / fc) | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
        *rows,
        f"| **total** | {total.tests} | {total.pass_lightning} | {total.pass_fabric_core} | {total.pass_both} | "
        f"{total.only_lightning} | {total.only_fabric_core} | | |",
        "",
        f"## Passing only on Lightning ({len(only_l_details)})",
        "",
    ]
    if only_l_details:
        lines += ["| test | fabric-core outcome | fabric-core message (first lines) |", "|---|---|---|"]
        lines += [f"| `{test}` | {outcome} | {message} |" for test, outcome, message in only_l_details]
    else:
        lines.append("None.")
    lines += ["", f"## Passing only on fabric-core ({len(only_fc_ids)})", ""]
    lines += [f"- `{rel_file}::{test_id}`" for rel_file, test_id in only_fc_ids] or ["None."]
    out_path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _passing(per_side: dict[str, TestResult]) -> set[str]:
    return {test_id for test_id, entry in per_side.items() if test_id != FILE_ENTRY and entry["outcome"] == "passed"}


def columns_table(columns: Sequence[tuple[str, Results, str]]) -> str:
    """A markdown table of the tests passing under each ``(label, results, side)`` column, per file and in all,
    with, for each column but the last, the tests that pass there and not under the last column."""
    labels = [label for label, _, _ in columns]
    subject = labels[-1]
    files = sorted({rel_file for _, results, _ in columns for rel_file in results})
    header = ["file", *(f"pass {label}" for label in labels), *(f"{label}, not {subject}" for label in labels[:-1])]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    totals = [0] * (len(header) - 1)
    for rel_file in files:
        passing = [_passing(results.get(rel_file, {}).get(side, {})) for _, results, side in columns]
        row = [len(p) for p in passing] + [len(p - passing[-1]) for p in passing[:-1]]
        totals = [t + r for t, r in zip(totals, row)]
        lines.append(f"| {rel_file} | " + " | ".join(map(str, row)) + " |")
    lines.append(f"| **{len(files)} files** | " + " | ".join(f"**{t}**" for t in totals) + " |")
    return "\n".join(lines) + "\n"


def _column(spec: str) -> tuple[str, Results, str]:
    label, sep, rest = spec.partition("=")
    folder, sep2, side = rest.rpartition(":")
    if not (sep and sep2 and label and folder and side):
        raise SystemExit(f"--table takes LABEL=OUT_FOLDER:SIDE, got {spec!r}")
    results: Results = load_json(Path(folder) / "results.json")
    if not results:
        raise SystemExit(f"no results.json with results in {folder}")
    return label, results, side


def reparse(tests_dir: Path, out_dir: Path, results: Results, runs: Runs) -> None:
    """Refresh ``results`` from the junit reports kept under ``out_dir`` (runs that timed out keep their entry)."""
    for rel_file, per_side in results.items():
        for side in per_side:
            info = runs.get(rel_file, {}).get(side)
            xml_path = out_dir / "junit" / side / f"{_safe_name(rel_file)}.xml"
            if info is None or info["timed_out"] or not xml_path.is_file():
                continue
            per_side[side] = parse_junit(xml_path, module_name(tests_dir, rel_file))


def run_all(config: Config, files: Iterable[str]) -> None:
    """Run every file on every configured side, saving results and the summary after each run."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    results_path = config.out_dir / "results.json"
    runs_path = config.out_dir / "runs.json"
    summary_path = config.out_dir / "summary.md"
    results: Results = load_json(results_path)
    runs: Runs = load_json(runs_path)
    for rel_file in files:
        for side in config.sides:
            if config.skip_done and side in results.get(rel_file, {}):
                continue
            print(f"[{time.strftime('%H:%M:%S')}] {side:11s} {rel_file} ...", flush=True)
            file_results, info = run_file(config, side, rel_file)
            results.setdefault(rel_file, {})[side] = file_results
            runs.setdefault(rel_file, {})[side] = info
            outcomes = [r["outcome"] for r in file_results.values()]
            tally = ", ".join(f"{o} {outcomes.count(o)}" for o in OUTCOMES if o in outcomes)
            print(f"    {info['duration_s']}s rc={info['returncode']} {tally}", flush=True)
            write_json(results_path, results)
            write_json(runs_path, runs)
            write_summary(results, runs, summary_path)
    write_summary(results, runs, summary_path)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("files", nargs="*", help="test files (relative to --tests, or absolute); default: all")
    parser.add_argument("--tests", type=Path, help="a tests_fabric folder (required unless --table)")
    parser.add_argument("--out", type=Path, help="output folder (required unless --table)")
    parser.add_argument("--table", nargs="+", metavar="LABEL=OUT:SIDE", help="print a table over several runs")
    parser.add_argument("-k", dest="filters", action="append", default=[], help="keep files whose path has this")
    parser.add_argument("--side", choices=(*SIDES, "both"), default="both")
    parser.add_argument("--timeout", type=float, default=900.0, help="wall timeout of one file, seconds")
    parser.add_argument("--test-timeout", type=float, default=120.0, help="pytest-timeout of one test, seconds")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs pytest")
    parser.add_argument("--skip-done", action="store_true", help="reuse results of files already in results.json")
    parser.add_argument("--summary-only", action="store_true", help="only rewrite summary.md from results.json")
    parser.add_argument(
        "--reparse", action="store_true", help="re-read the saved junit reports into results.json, then rewrite summary"
    )
    parser.add_argument("--pytest-arg", action="append", default=[], help="extra argument for pytest (repeatable)")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    """Entry point."""
    args = parse_args(argv)
    if args.table:
        if len(args.table) < 2:
            raise SystemExit("--table needs at least two columns")
        print(columns_table([_column(spec) for spec in args.table]), end="")
        return 0
    if args.tests is None or args.out is None:
        raise SystemExit("--tests and --out are required")
    tests_dir: Path = args.tests.resolve()
    out_dir: Path = args.out.resolve()
    if args.summary_only or args.reparse:
        results: Results = load_json(out_dir / "results.json")
        runs: Runs = load_json(out_dir / "runs.json")
        if args.reparse:
            reparse(tests_dir, out_dir, results, runs)
            write_json(out_dir / "results.json", results)
        write_summary(results, runs, out_dir / "summary.md")
        return 0
    if not tests_dir.is_dir():
        raise SystemExit(f"not a folder: {tests_dir}")
    config = Config(
        tests_dir=tests_dir,
        out_dir=out_dir,
        sides=SIDES if args.side == "both" else (args.side,),
        file_timeout=args.timeout,
        test_timeout=args.test_timeout,
        python=args.python,
        skip_done=args.skip_done,
        extra_pytest_args=tuple(args.pytest_arg),
    )
    files = discover(tests_dir, args.filters, args.files)
    if not files:
        raise SystemExit("no test files selected")
    run_all(config, files)
    print(f"wrote {out_dir / 'results.json'} and {out_dir / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
