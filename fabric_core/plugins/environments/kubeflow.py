"""Lightning's ``plugins.environments.kubeflow`` path."""

from __future__ import annotations

from fabric_core.environments.kubeflow import KubeflowEnvironment

__all__ = ["KubeflowEnvironment"]
