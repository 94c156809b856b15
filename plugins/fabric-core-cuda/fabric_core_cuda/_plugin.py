"""Registration of the CUDA accelerator: strings only, so discovery never imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from fabric_core.plugin_api import (
    AcceleratorUnavailableError,
    AmbiguousNameError,
    component,
    hookimpl,
    module_paths,
    registers,
)

if TYPE_CHECKING:
    from fabric_core.plugin_api import Catalog, SelectionContext

#: Above the cpu (0), below XLA (30); mps shares the band: no machine has both.
PRIORITY: Final = 20

#: ``"cuda"``, found by ``accelerator="auto"`` when NVML sees a GPU.
fabric_core_register_accelerators = registers(
    component(
        "cuda",
        "fabric_core_cuda.accelerator:CUDAAccelerator",
        description="NVIDIA/ROCm GPUs through CUDA; processes communicate with NCCL.",
        priority=PRIORITY,
        probe="fabric_core_cuda.accelerator:probe",
    )
)
#: The Lightning path of the CUDA accelerator and its device helpers (``fabric_core.accelerators.cuda``).
fabric_core_register_modules = module_paths({"accelerators.cuda": "fabric_core_cuda.accelerator"})


def _state(catalog: Catalog, name: str) -> tuple[bool, bool]:
    """Whether the accelerator ``name`` is registered, and whether it is available here."""
    try:
        entry = catalog.find("accelerator", name)
    except AmbiguousNameError:
        return True, True  # resolving the name reports the ambiguity, with its fix
    return entry is not None, entry is not None and entry.is_available()


@hookimpl
def fabric_core_select_accelerator(requested: str, context: SelectionContext) -> str | None:
    """``"gpu"`` means Apple's mps where it is available, else cuda; neither is an error."""
    if requested != "gpu":
        return None
    mps_registered, mps_available = _state(context.catalog, "mps")
    if mps_available:
        return "mps"
    if _state(context.catalog, "cuda")[1]:
        return "cuda"
    available = [e.name for e in context.catalog.entries("accelerator") if e.is_available()]
    mps = "" if mps_registered else " On Apple silicon, `pip install fabric-core-mps`."
    raise AcceleratorUnavailableError(
        "`Fabric(accelerator='gpu')`: No supported gpu backend found! Neither a CUDA GPU nor Apple's MPS is "
        f"available on this machine. Available accelerators: {', '.join(sorted(available)) or '(none)'}; pass one "
        "of them, e.g. `Fabric(accelerator='cpu')`. For NVIDIA GPUs, install a CUDA build of torch "
        f"(https://pytorch.org/get-started/locally/) and check `nvidia-smi`.{mps}",
        argument="accelerator",
        value=requested,
    )
