"""Ray Train's torch backend, minus the process group: fabric-core creates its own.

Ray Train's ``TorchConfig`` backend calls ``torch.distributed.init_process_group`` in every worker before
the training function runs. fabric-core's strategies create the process group themselves (their backend
choice, timeout, collective device, stuck-rank watchdog and exit handling depend on it, and DeepSpeed and
FSDP set it up their own way), so this backend only tells every worker where rank 0 listens:
``MASTER_ADDR`` and ``MASTER_PORT``, as a free port on rank 0's node. ``Fabric(...)`` then joins the job
through :class:`~fabric_core_ray.environment.RayEnvironment`.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ray.train.backend import Backend
from ray.train.torch import TorchConfig

__all__ = ["FabricTorchConfig"]


def _address_and_port() -> tuple[str, int]:
    import ray.util

    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port = int(sock.getsockname()[1])
    return address, port


def _set_main(address: str, port: int) -> None:
    os.environ["MASTER_ADDR"] = address
    os.environ["MASTER_PORT"] = str(port)


class _FabricBackend(Backend):
    # Every worker of a node sees all of the node's GPUs, so LOCAL_RANK picks its device as under torchrun.
    share_cuda_visible_devices: bool = True

    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        address, port = worker_group.execute_single(0, _address_and_port)
        worker_group.execute(_set_main, address=address, port=port)


class FabricTorchConfig(TorchConfig):
    """``TorchConfig`` whose backend leaves the process group to fabric-core."""

    @property
    def backend_cls(self) -> type[Backend]:
        return _FabricBackend
