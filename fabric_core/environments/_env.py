"""Reading the process environment for the built-in cluster environments."""

from __future__ import annotations

import os
import socket

from fabric_core.errors import InvalidConfigError

__all__ = ["check_world_size", "find_free_network_port", "read_int", "read_str"]


def read_str(name: str) -> str:
    """Return the environment variable ``name``.

    Raises:
        InvalidConfigError: The variable is unset.
    """
    value = os.environ.get(name)
    if value is None:
        raise InvalidConfigError(
            f"The environment variable {name} is not set, but the cluster environment needs it. "
            "Was this process started by the scheduler it was detected for?",
            argument=name,
        )
    return value


def read_int(name: str, default: int | None = None) -> int:
    """Return the environment variable ``name`` as an int.

    Args:
        name: The variable, e.g. ``"LOCAL_RANK"``.
        default: Returned when the variable is unset; ``None`` makes it required.

    Raises:
        InvalidConfigError: The variable is required and unset, or is not an integer.
    """
    if default is not None and name not in os.environ:
        return default
    raw = read_str(name)
    try:
        return int(raw.strip())
    except ValueError:
        raise InvalidConfigError(
            f"The environment variable {name}={raw!r} is not an integer.", argument=name, value=raw
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
            f"processes, but {scheduler} started {world_size}. Make devices * num_nodes equal the number "
            f"of processes {scheduler} starts.",
            argument="devices",
            value=num_devices,
        )
