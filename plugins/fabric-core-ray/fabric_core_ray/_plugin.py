"""Registration only: names and string targets. Neither Ray nor torch is imported here."""

from __future__ import annotations

from fabric_core.plugin_api import component, registers

fabric_core_register_environments = registers(
    component(
        "ray",
        "fabric_core_ray.environment:RayEnvironment",
        description="A Ray Train worker: ranks and world size from ray.train.get_context().",
        # Above every scheduler: a Ray cluster often runs inside a SLURM allocation, whose variables the
        # workers inherit, but the ranks are Ray Train's.
        priority=50,
        probe="fabric_core_ray.environment:RayEnvironment.detect",
    )
)
fabric_core_register_runners = registers(
    component(
        "ray",
        "fabric_core_ray.launch:runner",
        description="Ray Train starts --num-workers processes on a Ray cluster (--address; a local one by default).",
    )
)
