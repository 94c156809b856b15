"""The differential suite: the same small scripts against ``lightning_fabric`` and ``fabric_core``.

In-process cases (``compat_cases.CASES``) run one after the other in this process; the 2-process job
(``compat_job.py``, gloo on 127.0.0.1) runs once per package, both at the same time. A case listed in
``known_differences.BEHAVIOUR`` must still differ; any other must not.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning_fabric")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compat_cases as cases  # noqa: E402
import known_differences as known  # noqa: E402

from fabric_core.testing import run_in_own_session  # noqa: E402

JOB = HERE / "compat_job.py"
JOB_PARTS = [
    "ranks",
    "all_gather",
    "all_gather_int",
    "all_gather_dict",
    "all_reduce",
    "broadcast",
    "no_backward_sync_training",
    "setup_dataloaders",
    "custom_batch_sampler",
    "save_load_shared_path",
    "all_reduce_dict",
    "broadcast_tensor",
    "rank_zero_first",
]


@pytest.fixture
def clean_environ() -> Iterator[None]:
    """Cases set seeds and rank variables; each one starts and ends with this process's environment."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _check(key: str, why: str | None) -> None:
    if key in known.BEHAVIOUR:
        assert why is not None, f"{key} now behaves as Lightning's: delete it from known_differences.BEHAVIOUR"
    else:
        assert why is None, f"{key}: {why}\n(fix it, or list it in known_differences.BEHAVIOUR with the reason)"


@pytest.mark.parametrize("case", cases.CASES, ids=lambda case: case.id)
def test_same_behaviour(case: cases.Case, tmp_path: Path, clean_environ: None) -> None:
    outcomes = []
    for package in cases.PACKAGES:
        folder = tmp_path / package
        folder.mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecations of either package are not what is compared
            outcomes.append(cases.run(case, package, folder))
    _check(case.id, cases.difference(case, *outcomes))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_job(package: str, out: Path) -> dict[int, dict[str, Any]]:
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "PL_"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), PYTHONWARNINGS="ignore")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK"):
        env.pop(name, None)
    done = run_in_own_session([sys.executable, str(JOB), package, str(out)], timeout=150, env=env)
    assert done.returncode == 0, f"{package} job failed ({done.returncode}):\n{done.stdout[-3000:]}"
    return {rank: json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)}


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("compat-job")
    with ThreadPoolExecutor(2) as pool:
        futures = {package: pool.submit(_run_job, package, root / package) for package in cases.PACKAGES}
        return {package: future.result() for package, future in futures.items()}


@pytest.mark.multiprocess
@pytest.mark.parametrize("part", JOB_PARTS)
@pytest.mark.parity
def test_same_behaviour_on_two_ranks(part: str, two_rank_results: dict[str, dict[int, dict[str, Any]]]) -> None:
    theirs, ours = (two_rank_results[package] for package in cases.PACKAGES)
    why = None
    for rank in (0, 1):
        a, b = theirs[rank][part], ours[rank][part]
        if "error" in a:
            raise AssertionError(f"{part}: Lightning's rank {rank} raised {a['error']}: the part is broken")
        if a != b:
            why = f"rank {rank}: Lightning {a}; ours {b}"
            break
    _check(f"2-ranks:{part}", why)


def test_job_parts_are_all_compared() -> None:
    import compat_job

    assert list(compat_job.PARTS) == JOB_PARTS


def test_behaviour_allow_list_names_real_cases() -> None:
    ids = {case.id for case in cases.CASES} | {f"2-ranks:{part}" for part in JOB_PARTS}
    assert len(ids) == len(cases.CASES) + len(JOB_PARTS), "case ids must be unique"
    unknown = sorted(set(known.BEHAVIOUR) - ids)
    assert not unknown, f"known_differences.BEHAVIOUR lists cases that do not exist: {unknown}"
    for key, (kind, reason) in known.BEHAVIOUR.items():
        assert kind in (known.GAP, known.DELIBERATE) and reason.strip(), key


def test_the_comparison_catches_what_it_claims() -> None:
    """A harness that called everything equal would pass every case: check it tells each difference apart."""
    case = cases.Case("x", lambda lib, tmp: None, phrase=r"must be positive")
    theirs = cases.Outcome(error=TypeError, message="devices must be positive")

    class OurTypeError(ValueError, TypeError):
        pass

    assert cases.difference(case, theirs, cases.Outcome(error=OurTypeError, message="devices must be positive")) is None
    assert "except TypeError" in str(cases.difference(case, theirs, cases.Outcome(error=ValueError, message="x")))
    assert "key phrase" in str(cases.difference(case, theirs, cases.Outcome(error=TypeError, message="bad devices")))
    assert "returned 1" in str(cases.difference(case, theirs, cases.Outcome(value=1)))
    plain = cases.Case("y", lambda lib, tmp: None)
    assert cases.difference(plain, cases.Outcome(value=[1, 2]), cases.Outcome(value=[1, 2])) is None
    assert cases.difference(plain, cases.Outcome(value=[1, 2]), cases.Outcome(value=[2, 1])) is not None
    with pytest.raises(AssertionError, match="Lightning raised where the case expects a value"):
        cases.difference(plain, theirs, theirs)
