"""What selection knows and what it decided: the types the hooks, the kernel and ``fabric-core explain`` share.

A leaf module: it imports nothing of fabric-core at run time, so that the hook specifications, the built-in
plugin, the plugin manager and selection can all use these types without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    from fabric_core._kernel.registry import Catalog

__all__ = ["Decision", "SelectionContext"]


@final
@dataclass(frozen=True)
class SelectionContext:
    """What selection knows at each step; selection hooks receive it and must not change it.

    Attributes:
        catalog: Every registered component.
        accelerator: The chosen accelerator's name (its class name for an instance).
        accelerator_class: Its class.
        device_type: ``torch.device`` type of its devices (``"cpu"``, ``"cuda"``).
        devices: ``devices`` as passed.
        parallel_devices: One device per local process.
        num_nodes: Number of nodes.
        environment: The cluster environment's name.
        creates_processes_externally: Whether a scheduler or launcher started this job's processes.
        strategy: The chosen strategy's name (its class name for an instance).
        strategy_class: Its class.
        precision: The precision in canonical form (``"bf16-mixed"``).
        interactive: Whether this runs in a notebook or REPL.
        devices_from_environment: Whether ``devices="auto"`` (and ``num_nodes``) came from the processes the
            cluster environment started (its ``topology()``), which then exist already.
    """

    catalog: Catalog
    accelerator: str | None = None
    accelerator_class: type | None = None
    device_type: str | None = None
    devices: Any = "auto"
    parallel_devices: tuple[Any, ...] = ()
    num_nodes: int = 1
    environment: str | None = None
    creates_processes_externally: bool = False
    strategy: str | None = None
    strategy_class: type | None = None
    precision: str | None = None
    interactive: bool = False
    devices_from_environment: bool = False

    @property
    def num_processes(self) -> int:
        """Processes per node (one per device)."""
        return max(len(self.parallel_devices), 1)

    @property
    def world_size(self) -> int:
        return self.num_processes * self.num_nodes


@final
@dataclass(frozen=True)
class Decision:
    """One step of selection: what was chosen, by whom and why (shown by ``fabric-core explain``).

    Attributes:
        step: What was decided (``"accelerator"``, ``"devices"``, ``"precision"``, ...).
        value: The entry's name, or the class name of an instance the user passed.
        reason: Why, in words (``"requested"``, ``"'auto' resolved to 'ddp'"``, ``"passed in plugins="``).
        plugin: The plugin whose catalog entry was chosen.
        hook: ``"<plugin>.<selection hook>"`` that answered, when a selection hook decided.
        target: The chosen entry's ``"module:Class"``.
    """

    step: str
    value: str
    reason: str
    plugin: str | None = None
    hook: str | None = None
    target: str | None = None
