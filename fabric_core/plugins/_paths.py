"""Where the core's own precision, environment and checkpoint-I/O classes live."""

from __future__ import annotations

from typing import Final

_P = "fabric_core.precision"
_E = "fabric_core.environments"

PRECISIONS: Final = {
    "Precision": f"{_P}.precision",
    "DoublePrecision": f"{_P}.double",
    "HalfPrecision": f"{_P}.half",
    "MixedPrecision": f"{_P}.mixed",
    "TransformerEnginePrecision": f"{_P}.transformer_engine",
}
ENVIRONMENTS: Final = {
    "ClusterEnvironment": f"{_E}.environment",
    "LightningEnvironment": f"{_E}.lightning",
    "TorchElasticEnvironment": f"{_E}.torchelastic",
    "SLURMEnvironment": f"{_E}.slurm",
    "LSFEnvironment": f"{_E}.lsf",
    "MPIEnvironment": f"{_E}.mpi",
    "KubeflowEnvironment": f"{_E}.kubeflow",
}
IO: Final = {
    "AsyncCheckpointIO": "fabric_core.io.async_io",
    "CheckpointIO": "fabric_core.io.checkpoint_io",
    "TorchCheckpointIO": "fabric_core.io.torch_io",
}
