"""Reading the process environment for the built-in cluster environments."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from typing import Final

from fabric_core.errors import InvalidConfigError, MissingVariableError

__all__ = [
    "check_address",
    "check_port",
    "check_process_variables",
    "check_world_size",
    "find_free_network_port",
    "read_int",
    "read_seconds",
    "read_str",
    "resolve_address",
    "topology_of_hosts",
]

#: The variables that place a process in a job, with the least value each may take.
_RANK_VARIABLES: Final = (("WORLD_SIZE", 1), ("RANK", 0), ("LOCAL_RANK", 0), ("NODE_RANK", 0), ("GROUP_RANK", 0))
_HOSTNAME: Final = re.compile(
    r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?"
)


def read_str(name: str) -> str:
    """Return the environment variable ``name``.

    Raises:
        MissingVariableError: The variable is unset (an ``InvalidConfigError`` and a ``KeyError``).
    """
    value = os.environ.get(name)
    if value is None:
        raise MissingVariableError(
            f"The environment variable {name} is not set, but the cluster environment needs it. "
            "Was this process started by the scheduler it was detected for?",
            argument=name,
        )
    return value


def read_int(name: str, default: int | None = None, *, minimum: int | None = None) -> int:
    """Return the environment variable ``name`` as an int.

    Args:
        name: The variable, e.g. ``"LOCAL_RANK"``.
        default: Returned when the variable is unset; ``None`` makes it required.
        minimum: The least value accepted, if any.

    Raises:
        InvalidConfigError: The variable is required and unset, is not an integer, or is below ``minimum``.
    """
    if default is not None and name not in os.environ:
        return default
    raw = read_str(name)
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidConfigError(
            f"The environment variable {name}={raw!r} is not an integer.", argument=name, value=raw
        ) from None
    if minimum is not None and value < minimum:
        raise InvalidConfigError(
            f"The environment variable {name}={raw!r} must be an integer >= {minimum}.", argument=name, value=raw
        )
    return value


def read_seconds(name: str, default: float, meaning: str, *, zero_allowed: bool = False) -> float:
    """Return the environment variable ``name`` as a finite number of seconds, or ``default`` when unset or blank.

    Args:
        name: The variable, e.g. ``"FABRIC_CORE_EXIT_TIMEOUT"``.
        default: The seconds when the variable is unset.
        meaning: What the delay bounds, for the error message (e.g. "how long the ranks wait at exit").
        zero_allowed: Accept ``0`` (a delay that ``0`` turns off).

    Raises:
        InvalidConfigError: The variable is not a number, is negative or infinite, or is ``0`` where not allowed.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    valid = (seconds >= 0 if zero_allowed else seconds > 0) and seconds != float("inf")
    if not valid:
        wanted = "a number of seconds >= 0" if zero_allowed else "a positive number of seconds"
        raise InvalidConfigError(
            f"The environment variable {name}={raw!r} is not {wanted} ({meaning}).", argument=name, value=raw
        )
    return seconds


def check_process_variables() -> None:
    """Reject malformed values of the variables that place this process in a job, where they are set.

    ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK``, ``GROUP_RANK``, ``MASTER_PORT`` and
    ``MASTER_ADDR`` are checked at construction, so that a typo fails at once instead of as a rendezvous
    that never completes.

    Raises:
        InvalidConfigError: Naming the variable and its value.
    """
    for name, minimum in _RANK_VARIABLES:
        if name in os.environ:
            read_int(name, minimum=minimum)
    if "MASTER_PORT" in os.environ:
        check_port(read_int("MASTER_PORT"))
    if "MASTER_ADDR" in os.environ:
        check_address(os.environ["MASTER_ADDR"])


def check_port(port: int, variable: str = "MASTER_PORT") -> None:
    """Raise unless ``port`` is a TCP port the processes can meet at (1 to 65535).

    Raises:
        InvalidConfigError: Naming ``variable``.
    """
    if not 1 <= port <= 65535:
        raise InvalidConfigError(
            f"{variable}={port} is not a port the processes can meet at: valid ports are 1 to 65535. Unset "
            f"{variable} on a single machine to let fabric-core choose a free one.",
            argument=variable,
            value=port,
        )


def check_address(address: str, variable: str = "MASTER_ADDR") -> None:
    """Raise unless ``address`` is an IP address or a well-formed host name (it is not resolved here).

    Raises:
        InvalidConfigError: Naming ``variable``.
    """
    text = address.strip()
    numeric = bool(text) and all(c.isdigit() or c == "." for c in text)
    if ":" in text or numeric:
        try:
            ipaddress.ip_address(text.strip("[]"))
        except ValueError:
            pass
        else:
            return
    elif _HOSTNAME.fullmatch(text) and len(text) <= 253:
        return
    raise InvalidConfigError(
        f"{variable}={address!r} is neither an IP address nor a host name. Set it to the address of the machine "
        "that runs rank 0 (127.0.0.1 on a single machine).",
        argument=variable,
        value=address,
    )


def resolve_address(address: str, port: int, variable: str = "MASTER_ADDR") -> None:
    """Raise unless ``address`` resolves (a host name that no name server knows would never be reached).

    Raises:
        InvalidConfigError: Naming ``variable``.
    """
    try:
        socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise InvalidConfigError(
            f"{variable}={address!r} does not resolve to an address ({error}). Set it to the address of the "
            "machine that runs rank 0 (127.0.0.1 on a single machine).",
            argument=variable,
            value=address,
        ) from None


def find_free_network_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now.

    ``STANDALONE_PORT``, when set, is returned instead (for test runners that hand out ports).
    The operating system picks the port, so two calls rarely collide; it is not reserved, so callers
    should choose it once and share it (through ``MASTER_PORT``).
    """
    if "STANDALONE_PORT" in os.environ:
        return read_int("STANDALONE_PORT")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def check_world_size(scheduler: str, world_size: int, num_devices: int, num_nodes: int) -> None:
    """Raise unless ``devices * num_nodes`` equals the number of processes the scheduler started.

    Args:
        scheduler: How the user knows the scheduler, for the message (``"torchrun"``, ``"jsrun"``).
        world_size: The number of processes it started.
        num_devices: ``Fabric(devices=...)``.
        num_nodes: ``Fabric(num_nodes=...)``.

    Raises:
        InvalidConfigError: The two differ.
    """
    if num_devices * num_nodes != world_size:
        raise InvalidConfigError(
            f"`Fabric(devices={num_devices}, num_nodes={num_nodes})` asks for {num_devices * num_nodes} "
            f"processes, but {scheduler} started {world_size}: the product ({num_devices} * {num_nodes}) does not "
            f"match the world size ({world_size}). Make devices * num_nodes equal the number of processes "
            f"{scheduler} starts.",
            argument="devices",
            value=num_devices,
        )


def topology_of_hosts(hosts: list[str]) -> tuple[int, int] | None:
    """``(processes per node, nodes)`` of a job whose process ``i`` runs on ``hosts[i]``.

    Returns:
        ``None`` for no hosts, or when the nodes run different numbers of processes.
    """
    counts = {host: hosts.count(host) for host in hosts}
    per_node = set(counts.values())
    return (per_node.pop(), len(counts)) if len(per_node) == 1 else None
