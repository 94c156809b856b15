"""``fabric_core.plugins.environments``: cluster environments, the core's and installed plugins'.

Lightning's submodules: ``cluster_environment``, ``kubeflow``, ``lightning``, ``lsf``, ``mpi``, ``slurm``,
``torchelastic`` from the core; ``xla`` from the plugin that declares it.
"""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr
from fabric_core.plugins._paths import ENVIRONMENTS

__getattr__, __dir__ = class_getattr(__name__, ("environment",), ENVIRONMENTS)
