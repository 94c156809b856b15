"""The accelerator interface: what a kind of device must tell the rest of fabric-core."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import InvalidConfigError

__all__ = ["Accelerator"]


class Accelerator(ABC):
    """A kind of device (cpu, cuda, mps, tpu, ...).

    Subclasses are registered by name through ``fabric_core_register_accelerators`` and are built with no
    arguments. Device parsing and availability are static so that selection can use them before (or
    without) building an instance.
    """

    #: What the kernel knows this class by (see ``fabric_core.plugin_api.KIND_ATTRIBUTE``).
    __fabric_core_kind__: ClassVar[str] = "accelerator"

    #: The ``torch.device`` type of this accelerator's devices.
    device_type: ClassVar[str]
    #: The process-group backend used on these devices.
    process_group_backend: ClassVar[str] = "gloo"

    @classmethod
    def name(cls) -> str:
        """The name this accelerator is registered under (``"cpu"``, ``"cuda"``, ...), as Lightning's ``name()``.

        The catalog's entry for this class decides; a class no plugin registered answers its ``device_type``.
        """
        from fabric_core._kernel.manager import get_manager

        for entry in get_manager().catalog.entries("accelerator"):
            if entry.class_name == cls.__name__ and entry.load() is cls:
                name: str = entry.name
                return name
        return cls.device_type

    @classmethod  # noqa: B027 - optional hook
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        """Lightning's registration hook, for registries that code keeps for itself (lightning.pytorch does).

        ``Fabric(accelerator=...)`` never calls it: fabric-core's accelerators register through plugins
        (``fabric_core_register_accelerators``). A subclass meant for such a registry overrides it.
        """

    def setup_device(self, device: torch.device) -> None:  # noqa: B027 - optional hook
        """Prepare ``device`` for this process (e.g. ``torch.cuda.set_device``)."""

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`setup_device` acquired."""

    def _check_device_type(self, device: torch.device) -> None:
        """Refuse a ``device`` of another type than :attr:`device_type` (for :meth:`setup_device`).

        Raises:
            InvalidConfigError: ``device`` is not one of this accelerator's devices.
        """
        if device.type != self.device_type:
            raise InvalidConfigError(
                f"`{type(self).__name__}.setup_device({device})`: Device should be {self.device_type.upper()}, got "
                f"{device} instead.",
                argument="device",
                value=device,
            )

    @staticmethod
    @abstractmethod
    def parse_devices(devices: Any) -> Any:
        """Validate ``devices`` as passed to ``Fabric(devices=...)`` (never ``"auto"``).

        Raises:
            InvalidConfigError: With a message naming the value and what this accelerator accepts.
        """

    @staticmethod
    @abstractmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """Turn parsed devices into the list of ``torch.device`` one process each will use."""

    @staticmethod
    @abstractmethod
    def auto_device_count() -> int:
        """The number of devices ``devices="auto"`` means."""

    @staticmethod
    @abstractmethod
    def is_available() -> bool:
        """Whether this accelerator can run here. Never raises, never creates a CUDA context."""

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
