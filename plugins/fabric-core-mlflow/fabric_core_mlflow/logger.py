"""A logger that records a run in an MLflow tracking store."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabric_core.errors import InvalidConfigError
from fabric_core.loggers.logger import Logger, rank_zero_experiment, warn_not_reattached
from fabric_core.utilities.logger import flatten_params, metric_as_float, params_as_dict
from fabric_core.utilities.rank_zero import rank_zero_only

__all__ = ["MLFlowLogger"]

#: MLflow's limits: a parameter value's length, and entries per ``log_batch`` call.
_MAX_PARAM_LENGTH = 6000
_BATCH = 100
#: ``finalize(status)`` as MLflow's run status.
_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}


def _expand(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expandvars(os.path.expanduser(os.fspath(path))))


class MLFlowLogger(Logger):
    """Record metrics, hyperparameters, tags and artifacts as one MLflow run.

    Only global rank 0 talks to MLflow: on other ranks every method returns without doing anything and
    :attr:`experiment` is a do-nothing object, so an N-process job creates exactly one run. The run is
    created on first use (the first metric, parameter, tag or artifact).

    A job resumed from a run checkpoint (:class:`fabric_core.RunCheckpoints`) continues the same run: its
    status goes back to ``RUNNING`` and new metrics are appended to the history. Metrics the interrupted job
    logged after its last checkpoint stay in the history, next to the ones the resumed job logs again at
    the same steps (MLflow keeps every value).

    The tracking store is ``tracking_uri`` if given, else ``MLFLOW_TRACKING_URI``, else a local SQLite store
    ``root_dir/mlflow.db`` with artifacts in ``root_dir/mlartifacts`` (works offline; ``mlflow ui
    --backend-store-uri sqlite:///<root_dir>/mlflow.db`` shows it).

    Args:
        experiment_name: The MLflow experiment; created when it does not exist.
        run_name: The run's name (MLflow picks one when ``None``).
        tracking_uri: Where to record (``"http://host:5000"``, ``"sqlite:///path.db"``, ``"databricks"``).
        tags: Tags set on the run when it is created.
        root_dir: Folder of the default local store.
        log_checkpoints: A checkpoint file or folder uploaded under the artifact folder ``checkpoints`` when
            the run finishes successfully (``finalize("success")``); ``None`` uploads nothing.
        prefix: Prepended to every metric name, joined with ``-``.
        artifact_location: Artifact root of a newly created experiment (default: the store's own choice,
            ``root_dir/mlartifacts`` for the default store).
        run_id: Attach to this existing run instead of creating one.

    Raises:
        InvalidConfigError: An option has the wrong type (also a ``ValueError``).
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        root_dir: str | os.PathLike[str] = ".",
        log_checkpoints: str | os.PathLike[str] | None = None,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
    ) -> None:
        for arg, value in (("experiment_name", experiment_name), ("prefix", prefix)):
            if not isinstance(value, str) or (arg == "experiment_name" and not value):
                raise InvalidConfigError(
                    f"`MLFlowLogger({arg}={value!r})`: expected a {'non-empty ' if arg != 'prefix' else ''}string.",
                    argument=arg,
                    value=value,
                )
        if tags is not None and not isinstance(tags, Mapping):
            raise InvalidConfigError(
                f"`MLFlowLogger(tags={tags!r})`: expected a mapping of tag names to values.",
                argument="tags",
                value=tags,
            )
        self._experiment_name = experiment_name
        self._run_name = run_name
        self._root_dir = os.fspath(root_dir)
        self._default_store = not (tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"))
        self._tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or self._local_store_uri()
        self._tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self._log_checkpoints = None if log_checkpoints is None else os.fspath(log_checkpoints)
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._run_id = run_id
        self._experiment_id: str | None = None
        self._client: Any = None

    # -- identity ----------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The experiment name."""
        return self._experiment_name

    @property
    def version(self) -> str | None:
        """The run id (the run is created on rank 0 by this access; ``None`` on other ranks)."""
        return self.run_id

    @property
    def root_dir(self) -> str:
        """The folder of the default local store, as given."""
        return self._root_dir

    @property
    def log_dir(self) -> str:
        """The folder of the default local store, expanded: local files of this logger go there."""
        return _expand(self._root_dir)

    @property
    def tracking_uri(self) -> str:
        """Where the run is recorded."""
        return self._tracking_uri

    @property
    def run_id(self) -> str | None:
        """The MLflow run id on rank 0 (the run is created if needed); ``None`` on other ranks."""
        if rank_zero_only.rank > 0:
            return None
        self._ensure_run()
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment id on rank 0; ``None`` on other ranks."""
        if rank_zero_only.rank > 0:
            return None
        self._ensure_run()
        return self._experiment_id

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``mlflow.tracking.MlflowClient`` on rank 0 (with the run created); a do-nothing object elsewhere.

        Use it with :attr:`run_id` for what this logger does not wrap: ``logger.experiment.log_text(
        logger.run_id, "notes", "notes.txt")``.
        """
        self._ensure_run()
        return self._client

    # -- logging -----------------------------------------------------------------------------------------
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record each metric at ``step`` (0 when ``None``).

        Raises:
            InvalidConfigError: A value is not a number (also a ``ValueError``); nothing is recorded then.
        """
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        join = f"{self._prefix}{self.LOGGER_JOIN_CHAR}" if self._prefix else ""
        batch = [
            Metric(f"{join}{k}", metric_as_float("MLFlowLogger", k, v), timestamp, step or 0)
            for k, v in metrics.items()
        ]
        self._ensure_run()
        for start in range(0, len(batch), _BATCH):
            self._client.log_batch(self._run_id, metrics=batch[start : start + _BATCH])

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace | None, *args: Any, **kwargs: Any) -> None:
        """Record hyperparameters as MLflow params.

        Nested mappings become ``"outer/inner"`` keys; every value is recorded as its ``str()`` (MLflow keeps
        params as strings), cut to MLflow's 6000 characters.

        Raises:
            InvalidConfigError: ``params`` is neither a mapping nor a namespace (also a ``ValueError``).
        """
        from mlflow.entities import Param

        batch = [
            Param(k, str(v)[:_MAX_PARAM_LENGTH])
            for k, v in flatten_params(params_as_dict(params, "MLFlowLogger")).items()
        ]
        self._ensure_run()
        for start in range(0, len(batch), _BATCH):
            self._client.log_batch(self._run_id, params=batch[start : start + _BATCH])

    @rank_zero_only
    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags on the run (values are recorded as strings)."""
        from mlflow.entities import RunTag

        self._ensure_run()
        self._client.log_batch(self._run_id, tags=[RunTag(str(k), str(v)) for k, v in tags.items()])

    @rank_zero_only
    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Upload a file, or a folder with its contents (a ``fabric.save`` checkpoint of either kind).

        Args:
            path: The local file or folder.
            artifact_path: The folder inside the run's artifacts (default: the top level for a file, the
                folder's own name for a folder).

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        local = Path(_expand(path))
        if not local.exists():
            raise FileNotFoundError(f"MLFlowLogger.log_artifact: {os.fspath(path)!r} does not exist.")
        self._ensure_run()
        if local.is_dir():
            target = local.name if artifact_path is None else f"{artifact_path}/{local.name}"
            self._client.log_artifacts(self._run_id, str(local), artifact_path=target)
        else:
            self._client.log_artifact(self._run_id, str(local), artifact_path=artifact_path)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Upload ``log_checkpoints`` after a successful run, then mark the run ended with ``status``."""
        if self._client is None:  # nothing was logged: no run to end
            return
        checkpoints = self._log_checkpoints
        if checkpoints is not None and status in ("success", "finished") and os.path.exists(_expand(checkpoints)):
            self.log_artifact(checkpoints, artifact_path="checkpoints")
        self._client.set_terminated(self._run_id, _STATUS.get(status, "FINISHED"))

    def __getstate__(self) -> dict[str, Any]:
        # The client holds connections; a copy in another process opens its own and reattaches by run id.
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    def run_identity(self) -> dict[str, Any] | None:
        """The run id on rank 0 (the run is created if it was not yet); ``None`` on other ranks."""
        run_id = self.run_id
        return None if run_id is None else {"run_id": run_id}

    def reattach(self, identity: Mapping[str, Any]) -> None:
        """Log into the run of ``identity`` (its status back to ``RUNNING``) instead of creating one."""
        run_id = identity.get("run_id")
        if not isinstance(run_id, str):
            return
        if self._client is not None:
            warn_not_reattached(self, self._run_id, run_id)
            return
        self._run_id = run_id

    # -- the run -----------------------------------------------------------------------------------------
    def _local_store_uri(self) -> str:
        return f"sqlite:///{os.path.join(_expand(self._root_dir), 'mlflow.db')}"

    def _ensure_run(self) -> None:
        if self._client is not None:
            return
        from mlflow.tracking import MlflowClient

        if self._default_store:
            os.makedirs(_expand(self._root_dir), exist_ok=True)
        client = MlflowClient(tracking_uri=self._tracking_uri)
        if self._run_id is not None:
            run = client.get_run(self._run_id)
            self._experiment_id = run.info.experiment_id
            if run.info.status != "RUNNING":  # a finished (or killed) run that is continued
                client.update_run(self._run_id, status="RUNNING")
        else:
            self._experiment_id = self._experiment(client)
            tags = dict(self._tags)
            if self._run_name is not None:
                tags["mlflow.runName"] = self._run_name
            self._run_id = client.create_run(self._experiment_id, run_name=self._run_name, tags=tags).info.run_id
        self._client = client

    def _experiment(self, client: Any) -> str:
        from mlflow.exceptions import MlflowException

        found = client.get_experiment_by_name(self._experiment_name)
        if found is not None:
            return str(found.experiment_id)
        location = self._artifact_location
        if location is None and self._default_store:
            location = Path(_expand(self._root_dir), "mlartifacts").as_uri()
        try:
            return str(client.create_experiment(self._experiment_name, artifact_location=location))
        except MlflowException:
            # Another job created it between the lookup and the creation.
            found = client.get_experiment_by_name(self._experiment_name)
            if found is None:
                raise
            return str(found.experiment_id)
