"""Processes started by SLURM's ``srun``."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import sys
from typing import Final

from fabric_core.environments._env import read_int
from fabric_core.environments._scheduled import RankVariables, ScheduledEnvironment, Variable
from fabric_core.errors import EnvironmentSetupError, InvalidConfigError, PossibleUserWarning
from fabric_core.utilities.rank_zero import rank_zero_warn

__all__ = ["REQUEUE_SIGNAL_ENV", "SLURMEnvironment", "expand_hostlist", "requeue_signal_from_environment"]

# Under `salloc` or `srun --pty bash` the user starts processes by hand, so SLURM's task variables
# describe the allocation, not this process.
_INTERACTIVE_JOB_NAMES: Final = ("bash", "interactive")
_GROUP: Final = re.compile(r"(\[[^\[\]]*\])")
_PORT_BASE: Final = 15000
#: The requeue signal when ``SLURMEnvironment(requeue_signal=...)`` is not given: a name (``USR2``,
#: ``SIGUSR2``) or a number, as in SLURM's ``--signal=SIG@N``, which lets a cluster send any signal.
REQUEUE_SIGNAL_ENV: Final = "FABRIC_CORE_REQUEUE_SIGNAL"
_DEFAULT_PORT: Final = 12910


class SLURMEnvironment(ScheduledEnvironment):
    """Reads the topology of an ``srun`` job step: one task per device, started by SLURM.

    The rendezvous address is the first host of ``SLURM_NODELIST`` (unless ``MASTER_ADDR`` is set); the
    port is 15000 plus the last four digits of ``SLURM_JOB_ID`` (unless ``MASTER_PORT`` is set), so every
    task of a job computes the same one without talking to the others.

    Args:
        auto_requeue: Whether a trainer built on this should requeue the job when it is signalled.
        requeue_signal: The signal that asks for a requeue. When not given, ``FABRIC_CORE_REQUEUE_SIGNAL``
            (``USR2``, ``SIGUSR2`` or a number, as in ``#SBATCH --signal=USR2@120``), else ``SIGUSR1`` where it
            exists.
    """

    def __init__(self, auto_requeue: bool = True, requeue_signal: signal.Signals | None = None) -> None:
        self.auto_requeue = auto_requeue
        if requeue_signal is None:
            requeue_signal = requeue_signal_from_environment()
        if requeue_signal is None:
            requeue_signal = getattr(signal, "SIGUSR1", None)  # Windows has no SIGUSR1
        self.requeue_signal = requeue_signal
        _warn_if_srun_unused()
        _check_ntasks()

    variables = RankVariables(
        world_size=Variable("SLURM_NTASKS"),
        global_rank=Variable("SLURM_PROCID"),
        local_rank=Variable("SLURM_LOCALID"),
        node_rank=Variable("SLURM_NODEID"),
    )

    def fallback_address(self) -> str:
        """The first host of ``SLURM_NODELIST``, else ``127.0.0.1``."""
        hosts = expand_hostlist(os.environ.get("SLURM_NODELIST", ""))
        return hosts[0] if hosts else "127.0.0.1"

    def fallback_port(self) -> int:
        """15000 + the last four digits of ``SLURM_JOB_ID``, else 12910."""
        job_id = self.job_id()
        if job_id is None:
            return _DEFAULT_PORT
        return _PORT_BASE + job_id % 10000

    @staticmethod
    def resolve_root_node_address(nodes: str) -> str:
        """The first host of a SLURM node list: ``"host[5-9]"``, ``"host0,host1"`` and ``"host0 host1"``
        give ``host5`` and ``host0``.

        Raises:
            InvalidConfigError: The list is malformed or empty.
        """
        hosts = expand_hostlist(nodes)
        if not hosts:
            raise InvalidConfigError(
                f"`SLURMEnvironment.resolve_root_node_address({nodes!r})`: the node list names no host.",
                argument="nodes",
                value=nodes,
            )
        return hosts[0]

    @staticmethod
    def detect() -> bool:
        """Whether this process is an ``srun`` task (``SLURM_NTASKS`` set, and not an interactive job).

        Warns, as Lightning's does, where ``srun`` exists but did not start this process: on a SLURM cluster a
        multi-device job started with plain ``python`` would wait forever for the other tasks.
        """
        _warn_if_srun_unused()
        return _is_srun_used()

    @staticmethod
    def job_name() -> str | None:
        """``SLURM_JOB_NAME``, if set."""
        return os.environ.get("SLURM_JOB_NAME")

    @staticmethod
    def job_id() -> int | None:
        """``SLURM_JOB_ID`` as an int, if set (``None`` in interactive jobs)."""
        if "SLURM_JOB_ID" not in os.environ or SLURMEnvironment.job_name() in _INTERACTIVE_JOB_NAMES:
            return None
        return read_int("SLURM_JOB_ID")

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check ``devices`` and ``num_nodes`` against ``--ntasks-per-node`` and ``--nodes``.

        Raises:
            InvalidConfigError: They differ, or the job used ``--ntasks`` without ``--ntasks-per-node``
                (SLURM may then place the tasks unevenly, which breaks one-task-per-device).
        """
        if self.job_name() in _INTERACTIVE_JOB_NAMES:
            return
        _check_job_option("devices", num_devices, "ntasks-per-node", "SLURM_NTASKS_PER_NODE")
        local_id = read_int("SLURM_LOCALID", 0)
        if local_id >= num_devices:
            raise InvalidConfigError(
                f"SLURM_LOCALID={local_id}, but `Fabric(devices={num_devices})` gives each node local ranks 0 to "
                f"{num_devices - 1}: SLURM started more tasks on this node than there are devices. Set "
                f"`--ntasks-per-node={num_devices}`, or `devices={local_id + 1}` or more.",
                argument="SLURM_LOCALID",
                value=local_id,
            )
        _check_job_option("num_nodes", num_nodes, "nodes", "SLURM_NNODES")

    def topology(self) -> tuple[int, int] | None:
        """``(--ntasks-per-node, --nodes)`` of the job step; ``None`` where the nodes run different task counts.

        Without ``--ntasks-per-node``, only one task per node is an even placement.
        """
        nodes = read_int("SLURM_NNODES", 1, minimum=1)
        per_node = os.environ.get("SLURM_NTASKS_PER_NODE")
        if per_node is None:  # e.g. "--ntasks=4": SLURM may place them unevenly
            return (1, nodes) if read_int("SLURM_NTASKS") == nodes else None
        # "2(x3)" is one count repeated over nodes; "2(x2),1" differs between nodes.
        match = re.fullmatch(r"\s*(\d+)\s*(\(x\d+\))?\s*", per_node)
        return (int(match.group(1)), nodes) if match and int(match.group(1)) > 0 else None


def _check_job_option(argument: str, value: int, option: str, variable: str) -> None:
    """Raise where the job's ``--option`` (exported in ``variable``) differs from ``Fabric(argument=value)``."""
    exported = os.environ.get(variable)
    # SLURM writes e.g. "2(x3)" when it repeats a count over nodes; the count is what matters.
    if exported is not None and _leading_int(exported) != value:
        what = {"nodes": "number of nodes", "ntasks-per-node": "number of tasks per node"}.get(option, option)
        raise InvalidConfigError(
            f"`Fabric({argument}={value})`: the {what} configured in SLURM `--{option}={exported}` does not match."
            f" Set `{argument}={_leading_int(exported)}`, or change the job.",
            argument=argument,
            value=value,
        )


def _check_ntasks() -> None:
    """Refuse ``--ntasks`` without ``--ntasks-per-node``, at construction as Lightning does.

    SLURM may then place the tasks unevenly over the nodes, which breaks one task per device.
    """
    if SLURMEnvironment.job_name() in _INTERACTIVE_JOB_NAMES:
        return
    ntasks = read_int("SLURM_NTASKS", 1)
    if ntasks > 1 and "SLURM_NTASKS_PER_NODE" not in os.environ:
        raise EnvironmentSetupError(
            f"You set `--ntasks={ntasks}` in your SLURM bash script, but this variable is not supported: SLURM may "
            f"place the tasks unevenly over the nodes. HINT: Use `--ntasks-per-node={ntasks}` (on one node), or "
            "`--nodes=N --ntasks-per-node=DEVICES`, instead.",
            argument="SLURM_NTASKS",
            value=ntasks,
        )


def _warn_if_srun_unused() -> None:
    """Warn, as Lightning does, where ``srun`` exists but did not start this process (the job would hang)."""
    if sys.platform == "win32" or shutil.which("srun") is None or _is_srun_used():
        return
    hint = " ".join(["srun", os.path.basename(sys.executable), *sys.argv])[:64]
    rank_zero_warn(
        "The `srun` command is available on your system but is not used. HINT: If your intention is to run "
        f"on SLURM, prepend your python command with `srun` like so: {hint} ...",
        category=PossibleUserWarning,
    )


def _leading_int(text: str) -> int | None:
    match = re.match(r"\s*(\d+)", text)
    return int(match.group(1)) if match else None


def expand_hostlist(nodelist: str) -> list[str]:
    """Expand a SLURM hostlist into host names, in order.

    Items are separated by commas or whitespace outside brackets; a bracket holds comma-separated numbers
    and ranges whose zero padding is kept, and several brackets in one item combine:
    ``"host[5-7,12],gpu[01-02]"`` is ``host5 host6 host7 host12 gpu01 gpu02``.

    Args:
        nodelist: The value of ``SLURM_NODELIST`` (or ``SLURM_JOB_NODELIST``).

    Returns:
        The host names; empty for an empty list.

    Raises:
        InvalidConfigError: The list is malformed (unbalanced brackets, a range that runs backwards).
    """
    return [host for item in _split_items(nodelist) for host in _expand_item(item, nodelist)]


def _split_items(nodelist: str) -> list[str]:
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in nodelist:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise _malformed(nodelist, "brackets do not pair up")
        if depth == 0 and (char == "," or char.isspace()):
            if current:
                items.append("".join(current))
                current = []
        else:
            current.append(char)
    if depth:
        raise _malformed(nodelist, "a bracket is not closed")
    if current:
        items.append("".join(current))
    return items


def _expand_item(item: str, nodelist: str) -> list[str]:
    # re.split with a capturing group alternates literal text (even indices) and bracket groups (odd).
    parts = _GROUP.split(item)
    choices: list[list[str]] = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            choices.append([part])
            continue
        values: list[str] = []
        for token in part[1:-1].split(","):
            start, dash, end = token.strip().partition("-")
            if not start.isdigit() or (dash and not end.isdigit()):
                raise _malformed(nodelist, f"{token!r} in {part} is not a number or a range")
            if not dash:
                values.append(start)
                continue
            if int(end) < int(start):
                raise _malformed(nodelist, f"the range {token!r} runs backwards")
            values.extend(str(number).zfill(len(start)) for number in range(int(start), int(end) + 1))
        choices.append(values)
    return ["".join(combination) for combination in itertools.product(*choices)]


def _malformed(nodelist: str, reason: str) -> InvalidConfigError:
    return InvalidConfigError(
        f"Cannot read the SLURM node list {nodelist!r}: {reason}. Expected names like 'node1,node2' or 'node[1-4,7]'.",
        argument="SLURM_NODELIST",
        value=nodelist,
    )


# Lightning's private helpers at this module's Lightning path (``plugins.environments.slurm``).


def _is_srun_used() -> bool:
    """Whether ``srun`` started this process: ``SLURM_NTASKS`` is set and the job is not interactive."""
    return "SLURM_NTASKS" in os.environ and not _is_slurm_interactive_mode()


def _is_slurm_interactive_mode() -> bool:
    """Whether the SLURM job is interactive (``salloc``, ``srun --pty bash``), judged by its job name."""
    return SLURMEnvironment.job_name() in _INTERACTIVE_JOB_NAMES


def requeue_signal_from_environment() -> signal.Signals | None:
    """The signal ``FABRIC_CORE_REQUEUE_SIGNAL`` names (``USR2``, ``SIGUSR2``, ``12``), or ``None`` when unset.

    Raises:
        InvalidConfigError: the value names no signal of this platform (the message lists the usual ones).
    """
    raw = os.environ.get(REQUEUE_SIGNAL_ENV, "").strip()
    if not raw:
        return None
    try:
        if raw.isdigit():
            return signal.Signals(int(raw))
        name = raw.upper()
        return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except (KeyError, ValueError):
        usual = ", ".join(n for n in ("USR1", "USR2", "TERM", "INT", "HUP", "URG") if hasattr(signal, f"SIG{n}"))
        raise InvalidConfigError(
            f"{REQUEUE_SIGNAL_ENV}={raw!r} names no signal here. Give a signal's name or number as SLURM's "
            f"`--signal=SIG@N` takes it, for example {usual}."
        ) from None
