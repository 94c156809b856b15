"""Lightning's ``plugins.environments.slurm`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.environments.slurm import _INTERACTIVE_JOB_NAMES, SLURMEnvironment

__all__ = ["SLURMEnvironment"]


def _is_srun_used() -> bool:
    """Whether ``srun`` started this process: ``SLURM_NTASKS`` is set and the job is not interactive."""
    return SLURMEnvironment.detect()


def _is_slurm_interactive_mode() -> bool:
    """Whether the SLURM job is interactive (``salloc``, ``srun --pty bash``), judged by its job name."""
    return SLURMEnvironment.job_name() in _INTERACTIVE_JOB_NAMES


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
