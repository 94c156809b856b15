"""A logger that records one Weights & Biases run."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabric_core.errors import InvalidConfigError
from fabric_core.loggers.logger import Logger, rank_zero_experiment, warn_not_reattached
from fabric_core.utilities.logger import metric_as_float, params_as_dict
from fabric_core.utilities.rank_zero import rank_zero_only

__all__ = ["WandbLogger"]


def _expand(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expandvars(os.path.expanduser(os.fspath(path))))


class WandbLogger(Logger):
    """Record metrics, hyperparameters (as the run's config) and artifacts as one W&B run.

    Only global rank 0 starts the run (``wandb.init``, on first use); on other ranks every method returns
    without doing anything and :attr:`experiment` is a do-nothing object, so a job on N processes makes
    exactly one run. ``offline=True`` (or ``WANDB_MODE=offline``) writes the run under ``<folder>/wandb``
    without network; ``wandb sync`` uploads it later.

    The folder of the local run files is ``save_dir`` when given, else ``WANDB_DIR`` when set, else the working
    directory: an explicit argument wins, as with ``wandb.init(dir=...)`` and Lightning's logger, and a
    ``WANDB_DIR`` that a cluster or a user exports is honoured whenever the code names no folder.

    A job resumed from a run checkpoint (:class:`fabric_core.RunCheckpoints`) continues the same run
    (``id=`` and ``resume="allow"``); offline, W&B writes a new run folder with the same id, and ``wandb
    sync`` of both folders makes one run.

    Args:
        project: The W&B project (``WANDB_PROJECT`` or W&B's default when ``None``).
        run_name: The run's display name (``run_name``, not ``name``: ``spec(name, ...)`` takes the component's).
        save_dir: Folder of the local run files (``save_dir/wandb/...``); ``None``: ``WANDB_DIR`` if set,
            else the working directory.
        id: Resume the run with this id (``resume="allow"``) instead of starting one.
        offline: Record locally only.
        prefix: Prepended to every metric name, joined with ``-``.
        tags: Tags of the run.
        group: Group of the run (runs of one experiment).
        entity: The user or team that owns the project.
        **init_kwargs: Passed to ``wandb.init`` (``notes``, ``job_type``, ``settings``...).

    Raises:
        InvalidConfigError: An option has the wrong type (also a ``ValueError``).
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        project: str | None = None,
        run_name: str | None = None,
        save_dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        offline: bool = False,
        prefix: str = "",
        tags: Sequence[str] | None = None,
        group: str | None = None,
        entity: str | None = None,
        **init_kwargs: Any,
    ) -> None:
        if not isinstance(prefix, str):
            raise InvalidConfigError(f"`WandbLogger(prefix={prefix!r})`: expected a string.", argument="prefix")
        if tags is not None and (isinstance(tags, str) or not all(isinstance(t, str) for t in tags)):
            raise InvalidConfigError(
                f"`WandbLogger(tags={tags!r})`: expected a list of strings.", argument="tags", value=tags
            )
        self._project = project
        self._run_name = run_name
        self._save_dir = None if save_dir is None else os.fspath(save_dir)
        self._id = id
        self._offline = offline
        self._prefix = prefix
        self._init_kwargs: dict[str, Any] = {"tags": list(tags) if tags else None, "group": group, "entity": entity}
        self._init_kwargs.update(init_kwargs)
        self._experiment: Any = None
        self._owns_run = False

    # -- identity ----------------------------------------------------------------------------------------
    @property
    def name(self) -> str | None:
        """The project name (the run's once it started)."""
        if self._experiment is not None:
            return str(self._experiment.project)
        return self._project

    @property
    def version(self) -> str | None:
        """The run id (the run starts on rank 0 by this access; ``None`` on other ranks)."""
        if rank_zero_only.rank > 0:
            return None
        return str(self.experiment.id)

    @property
    def root_dir(self) -> str:
        """``save_dir`` as given, else ``WANDB_DIR``, else ``"."``."""
        if self._save_dir is not None:
            return self._save_dir
        return os.environ.get("WANDB_DIR") or "."

    @property
    def log_dir(self) -> str:
        """:attr:`root_dir`, expanded: W&B writes its run folders under ``log_dir/wandb``."""
        return _expand(self.root_dir)

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``wandb`` run on rank 0 (started on first access); a do-nothing object elsewhere."""
        if self._experiment is None:
            self._experiment = self._start()
        return self._experiment

    # -- logging -----------------------------------------------------------------------------------------
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record the metrics as one history row, at ``step`` when given (W&B steps only increase).

        Raises:
            InvalidConfigError: A value is not a number (also a ``ValueError``); nothing is recorded then.
        """
        join = f"{self._prefix}{self.LOGGER_JOIN_CHAR}" if self._prefix else ""
        row = {f"{join}{k}": metric_as_float("WandbLogger", k, v) for k, v in metrics.items()}
        if step is None:
            self.experiment.log(row)
        else:
            self.experiment.log(row, step=step)

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace | None, *args: Any, **kwargs: Any) -> None:
        """Record hyperparameters in the run's config (nested mappings stay nested; namespaces become dicts).

        Raises:
            InvalidConfigError: ``params`` is neither a mapping nor a namespace (also a ``ValueError``).
        """
        self.experiment.config.update(_as_dict(params), allow_val_change=True)

    @rank_zero_only
    def log_artifact(self, path: str | os.PathLike[str], name: str | None = None, artifact_type: str = "model") -> None:
        """Log a file or a folder (a ``fabric.save`` checkpoint of either kind) as a W&B artifact.

        Args:
            path: The local file or folder.
            name: The artifact's name (default: ``<run id>-<file or folder name>``, made W&B-safe).
            artifact_type: The artifact's type.

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        import wandb

        local = Path(_expand(path))
        if not local.exists():
            raise FileNotFoundError(f"WandbLogger.log_artifact: {os.fspath(path)!r} does not exist.")
        run = self.experiment
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{run.id}-{local.name}")
        artifact = wandb.Artifact(name or safe, type=artifact_type)
        if local.is_dir():
            artifact.add_dir(str(local), name=local.name)
        else:
            artifact.add_file(str(local))
        run.log_artifact(artifact)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """End the run and write everything out (exit code 0 for ``"success"``/``"finished"``, 1 otherwise).

        Nothing happens when no run started, or when the run is one the script started itself (it ends it).
        """
        if self._experiment is None or not self._owns_run:
            return
        import wandb

        self._experiment.finish(exit_code=0 if status in ("success", "finished") else 1)
        self._experiment = None
        # `finish` can return before W&B's service has written the run's last records; shutting the service
        # down (what wandb does at exit) writes them, so the run's files are complete when this returns.
        wandb.teardown()

    def __getstate__(self) -> dict[str, Any]:
        # The run object holds a service connection; a copy in another process attaches by id.
        state = self.__dict__.copy()
        if self._experiment is not None:
            state["_id"] = self._experiment.id
        state["_experiment"] = None
        return state

    def run_identity(self) -> dict[str, Any] | None:
        """The run id on rank 0 (the run starts if it was not yet); ``None`` on other ranks."""
        run_id = self.version
        return None if run_id is None else {"id": run_id}

    def reattach(self, identity: Mapping[str, Any]) -> None:
        """Continue the run of ``identity`` (``id=`` with ``resume="allow"``) instead of starting one."""
        run_id = identity.get("id")
        if not isinstance(run_id, str):
            return
        if self._experiment is not None:
            warn_not_reattached(self, str(self._experiment.id), run_id)
            return
        self._id = run_id

    def _start(self) -> Any:
        import wandb

        if wandb.run is not None:  # a run the script started itself: log into it
            self._owns_run = False
            return wandb.run
        self._owns_run = True
        save_dir = self.log_dir
        os.makedirs(save_dir, exist_ok=True)
        kwargs = {k: v for k, v in self._init_kwargs.items() if v is not None}
        if self._offline:
            kwargs.setdefault("mode", "offline")
        if self._id is not None:
            kwargs.setdefault("id", self._id)
            kwargs.setdefault("resume", "allow")
        return wandb.init(project=self._project, name=self._run_name, dir=save_dir, **kwargs)


def _as_dict(params: Any) -> dict[str, Any]:
    """The hyperparameters as W&B's config: nested mappings stay nested, a nested namespace becomes a dict."""
    return {
        str(k): _as_dict(v) if isinstance(v, argparse.Namespace) else v
        for k, v in params_as_dict(params, "WandbLogger").items()
    }
