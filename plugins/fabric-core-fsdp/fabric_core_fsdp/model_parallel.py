"""Tensor parallelism and FSDP2 over a 2-D device mesh, applied by the user's ``parallelize_fn``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.strategies.wiring import ParallelWiring, wired
from fabric_core.utilities.imports import _TORCH_GREATER_EQUAL_2_4
from fabric_core_fsdp._sharded import ShardedStrategy

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MESH_DIMS", "FSDP1ModuleError", "MeshShapeError", "ModelParallelStrategy", "build_device_mesh"]

#: Names of the mesh dimensions; ``fabric.strategy.device_mesh["tensor_parallel"]`` is the TP sub-mesh.
MESH_DIMS: Final = ("data_parallel", "tensor_parallel")


class MeshShapeError(InvalidConfigError, RuntimeError):
    """Mesh sizes that do not multiply to the world size (a ``RuntimeError`` too, as in Lightning)."""


class FSDP1ModuleError(InvalidConfigError, TypeError):
    """A module wrapped with FSDP1's ``FullyShardedDataParallel`` (a ``TypeError`` too, as in Lightning)."""


def build_device_mesh(
    data_parallel_size: int, tensor_parallel_size: int, world_size: int, device: torch.device
) -> DeviceMesh:
    """The ``(data_parallel, tensor_parallel)`` mesh over the default process group, on ``device``'s type.

    Raises:
        MeshShapeError: The sizes do not multiply to ``world_size``.
    """
    if data_parallel_size * tensor_parallel_size != world_size:
        raise MeshShapeError(
            f"The sizes `data_parallel_size={data_parallel_size}` and `tensor_parallel_size={tensor_parallel_size}` "
            f"multiplied should equal the world size ({world_size}).",
            argument="tensor_parallel_size",
            value=tensor_parallel_size,
        )
    return init_device_mesh(device.type, (data_parallel_size, tensor_parallel_size), mesh_dim_names=MESH_DIMS)


def _size(value: int | str, argument: str) -> int | None:
    if value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfigError(
            f"`ModelParallelStrategy({argument}={value!r})` must be a positive int or 'auto'.",
            argument=argument,
            value=value,
        )
    return value


class ModelParallelStrategy(ShardedStrategy):
    """Runs a user function that parallelises the model over a ``(data_parallel, tensor_parallel)`` mesh.

    ``parallelize_fn(model, device_mesh)`` applies tensor parallelism (``parallelize_module`` with
    ``ColwiseParallel``/``RowwiseParallel`` over ``device_mesh["tensor_parallel"]``) and FSDP2
    (``fully_shard(..., mesh=device_mesh["data_parallel"])``), and returns the model. Processes of one
    tensor-parallel group read the same batches: the distributed sampler splits the data over the
    data-parallel dimension only. Checkpoints work as for FSDP.

    Args:
        parallelize_fn: ``(model, device_mesh) -> model``.
        data_parallel_size: Size of the data-parallel dimension; ``"auto"``: the number of nodes (or what is
            left after ``tensor_parallel_size``).
        tensor_parallel_size: Size of the tensor-parallel dimension; ``"auto"``: the devices per node (or what
            is left after ``data_parallel_size``).
        save_distributed_checkpoint: ``True`` saves a sharded folder; ``False`` one full file from rank 0.
        **wiring: As for :class:`~fabric_core.strategies.parallel.ParallelStrategy`; ``start_method`` is ``"popen"``
            (the script runs again per device) unless it is ``"spawn"``, ``"fork"`` or ``"forkserver"``.

    Raises:
        InvalidConfigError: No ``parallelize_fn``, or sizes that are not positive ints or ``"auto"``.
    """

    @wired(
        ParallelWiring,
        positional=(
            "parallelize_fn",
            "data_parallel_size",
            "tensor_parallel_size",
            "save_distributed_checkpoint",
            "process_group_backend",
            "timeout",
        ),
        start_method="popen",
    )
    def __init__(
        self,
        parallelize_fn: Callable[[Module, DeviceMesh], Module] | None = None,
        data_parallel_size: int | str = "auto",
        tensor_parallel_size: int | str = "auto",
        save_distributed_checkpoint: bool = True,
        **wiring: Unpack[ParallelWiring],
    ) -> None:
        if not _TORCH_GREATER_EQUAL_2_4:  # Lightning's guard, by its name (its tests patch it)
            raise ImportError(f"ModelParallelStrategy requires PyTorch 2.4 or higher; this is {torch.__version__}.")
        if not callable(parallelize_fn):
            raise InvalidConfigError(
                f"`ModelParallelStrategy(parallelize_fn={parallelize_fn!r})` needs a function `(model, device_mesh) -> "
                "model` that applies tensor parallelism and/or `fully_shard`, e.g. "
                "`Fabric(strategy=fabric_core.spec('model_parallel', parallelize_fn=parallelize))`.",
                argument="parallelize_fn",
                value=parallelize_fn,
            )
        super().__init__(state_dict_type="sharded" if save_distributed_checkpoint else "full", **wiring)
        self._parallelize_fn = parallelize_fn
        self._data_parallel_size = _size(data_parallel_size, "data_parallel_size")
        self._tensor_parallel_size = _size(tensor_parallel_size, "tensor_parallel_size")

    @property
    def mesh_shape(self) -> tuple[int, int]:
        """``(data_parallel_size, tensor_parallel_size)`` with ``"auto"`` resolved.

        Raises:
            MeshShapeError: The sizes do not multiply to the world size (a ``RuntimeError`` too, as in Lightning).
        """
        dp, tp = self._data_parallel_size, self._tensor_parallel_size
        world = self.world_size
        if dp is None and tp is None:
            dp, tp = self.num_nodes, self.num_processes
        elif dp is None:
            assert tp is not None
            dp = max(world // tp, 1)
        elif tp is None:
            tp = max(world // dp, 1)
        if dp * tp != world:
            raise MeshShapeError(
                f"The sizes `ModelParallelStrategy(data_parallel_size={dp}, tensor_parallel_size={tp})` multiplied "
                f"should equal the world size: {dp} x {tp} = {dp * tp} ranks but the job has {world} "
                f"({self.num_nodes} node(s) x {self.num_processes} device(s)).",
                argument="tensor_parallel_size",
                value=tp,
            )
        return dp, tp

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """Split the data over the data-parallel dimension: a tensor-parallel group reads the same samples."""
        dp, tp = self.mesh_shape
        return {"num_replicas": dp, "rank": self.global_rank // tp}

    def setup_environment(self) -> None:
        """Check the mesh sizes, join the process group, then build the 2-D device mesh.

        Raises:
            MeshShapeError: The sizes do not multiply to the world size (before any process group exists).
        """
        shape = self.mesh_shape
        super().setup_environment()
        # Through Lightning's name for it, which tests that simulate the mesh patch.
        self._device_mesh = _setup_device_mesh(*shape, self.world_size, self.root_device)

    def setup_module(self, module: Module) -> Module:
        """Parallelize ``module`` with ``parallelize_fn`` (see :meth:`shard_module`).

        Raises:
            FSDP1ModuleError: ``module`` holds ``FullyShardedDataParallel`` (FSDP1) units: ``parallelize_fn``
                applies FSDP2's ``fully_shard`` instead, as in Lightning.
        """
        # Asked of anything with `modules()`, as Lightning asks (a test's stand-in module too).
        modules = getattr(module, "modules", None)
        if callable(modules) and any(isinstance(m, FullyShardedDataParallel) for m in modules()):
            raise FSDP1ModuleError(
                "Found modules that are wrapped with `torch.distributed.fsdp.FullyShardedDataParallel`. The "
                f"`{type(self).__name__}` only supports the new FSDP2 APIs in PyTorch >= 2.4: apply "
                "`torch.distributed.fsdp.fully_shard` in `parallelize_fn`, or use `Fabric(strategy='fsdp1')` for "
                "FSDP1 modules.",
                argument="module",
                value=type(module).__name__,
            )
        return super().setup_module(module)

    def shard_module(self, module: Module) -> Module:
        """Call ``parallelize_fn(module, device_mesh)``.

        Raises:
            TypeError: ``parallelize_fn`` returned something other than a module.
        """
        result = self._parallelize_fn(module, self.device_mesh)
        if not isinstance(result, Module):
            raise TypeError(
                f"The `parallelize_fn` must return a `nn.Module` instance, but got: {type(result).__name__}. Return "
                "the parallelized model from it."
            )
        return result


# Lightning's private names at its ``strategies.model_parallel`` path, which this module backs.
_setup_device_mesh = build_device_mesh
from fabric_core_fsdp._lightning_model_parallel import *  # noqa: E402, F403
