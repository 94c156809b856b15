"""A logger that writes TensorBoard event files."""

from __future__ import annotations

import argparse
import importlib.util
import numbers
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Final

import torch

from fabric_core.errors import FabricCoreWarning, InvalidConfigError
from fabric_core.loggers.logger import Logger, VersionFolders, next_version, rank_zero_experiment, warn_not_reattached
from fabric_core.utilities.cloud_io import get_filesystem
from fabric_core.utilities.imports import RequirementCache
from fabric_core.utilities.logger import _add_prefix, flatten_params, metric_as_float, params_as_dict
from fabric_core.utilities.rank_zero import rank_zero_only

__all__ = ["TensorBoardLogger"]

# Lightning's flags at its ``loggers.tensorboard`` path (this module backs it): whether each distribution is
# installed, checked once on first use. The logger itself asks at each start whether the module imports.
_TENSORBOARD_AVAILABLE: Final = RequirementCache("tensorboard")
_TENSORBOARDX_AVAILABLE: Final = RequirementCache("tensorboardX")

_HPARAM_TYPES = (bool, int, float, str)


def _writer_backend() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Return ``(SummaryWriter, hparams)`` from torch's writer, else tensorboardX's.

    Raises:
        ModuleNotFoundError: Neither tensorboard nor tensorboardX is installed.
    """
    if importlib.util.find_spec("tensorboard") is not None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        return SummaryWriter, hparams
    if importlib.util.find_spec("tensorboardX") is not None:
        from tensorboardX import SummaryWriter as XSummaryWriter
        from tensorboardX.summary import hparams as xhparams

        return XSummaryWriter, xhparams
    raise ModuleNotFoundError(
        "TensorBoardLogger needs `tensorboard` or `tensorboardX`, and neither is installed. "
        "Run `pip install tensorboard` (or `pip install fabric-core-tensorboard[tensorboardx]`)."
    )


def _expand(path: str | os.PathLike[str]) -> str:
    return os.path.expandvars(os.path.expanduser(os.fspath(path)))


class TensorBoardLogger(VersionFolders, Logger):
    """Write metrics, hyperparameters and the model graph as TensorBoard event files.

    Files go to ``root_dir/name/version_N[/sub_dir]``. Only global rank 0 writes; on other ranks every
    method returns without doing anything and :attr:`experiment` is a do-nothing object.

    A job resumed from a run checkpoint (:class:`fabric_core.RunCheckpoints`) continues the same version in a
    new event file, written with ``purge_step`` set to the step after the last one logged before the
    checkpoint: TensorBoard hides what the interrupted run logged after it, which the resumed job logs again.

    Args:
        root_dir: Folder holding every experiment; kept as given in :attr:`root_dir`, with ``~`` and environment
            variables expanded where files are written.
        name: Experiment name, a subfolder of ``root_dir``; ``""`` or ``None`` writes versions directly
            into ``root_dir``.
        version: An int gives ``version_<int>``, a string is the folder name itself, ``None`` takes the
            highest existing ``version_N`` plus one (0 when there is none).
        default_hp_metric: Log ``hp_metric=-1`` with the hyperparameters when no metrics are given, so
            that TensorBoard's HParams tab has a column to fill in later.
        prefix: Prepended to every metric name, joined with ``-``.
        sub_dir: A folder inside the version folder (``~`` and environment variables expanded in :attr:`log_dir`).
        **writer_kwargs: Passed to ``SummaryWriter`` (``flush_secs``, ``max_queue``, ``filename_suffix``...).

    Raises:
        ModuleNotFoundError: Neither tensorboard nor tensorboardX is installed.
    """

    #: Joins ``prefix`` and a metric name (Lightning's name; a subclass may change it).
    LOGGER_JOIN_CHAR = "-"
    PREFIX_SEPARATOR = LOGGER_JOIN_CHAR  # the earlier name, kept for code that reads it

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **writer_kwargs: Any,
    ) -> None:
        self._writer_class, self._hparams_summary = _writer_backend()
        # Lightning's attribute names: lightning.pytorch's TensorBoardLogger subclasses this one and reads them.
        self._root_dir = os.fspath(root_dir)
        self._name = name or ""
        self._version = version
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        self._fs = get_filesystem(self._root_dir)
        self._kwargs = writer_kwargs  # for the SummaryWriter
        self._experiment: Any = None
        self._next_step = 0  # one past the highest step logged: where a resumed job's events take over

    @property
    def _experiment_dir(self) -> str:
        """``root_dir/name``, expanded: the folder that holds every version of this experiment."""
        return _expand(os.path.join(self._root_dir, self._name) if self._name else self._root_dir)

    @property
    def log_dir(self) -> str:
        """The folder this logger writes its event files to."""
        version = self.version
        path = os.path.join(self._experiment_dir, version if isinstance(version, str) else f"version_{version}")
        return os.path.join(path, _expand(self._sub_dir)) if self._sub_dir else path

    @property
    def sub_dir(self) -> str | None:
        """The folder inside the version folder, if any (as given, unexpanded)."""
        return self._sub_dir

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``SummaryWriter`` (created on first use, with the version folder) on rank 0; a do-nothing object
        elsewhere."""
        if self._experiment is None:
            if self.root_dir:
                self._fs.makedirs(_expand(self.root_dir), exist_ok=True)
            self._experiment = self._writer_class(log_dir=self.log_dir, **self._kwargs)
        return self._experiment

    def run_identity(self) -> dict[str, Any]:
        """The version, and one past the highest step logged; the buffered events are written first."""
        self.save()
        return {"version": self.version, "purge_step": self._next_step}

    def reattach(self, identity: Mapping[str, Any]) -> None:
        """Continue the version of ``identity``; events it logged at ``purge_step`` or later are hidden."""
        version, purge_step = identity.get("version"), identity.get("purge_step")
        if not isinstance(version, (int, str)) or not isinstance(purge_step, int):
            warnings.warn(
                f"TensorBoardLogger: the run checkpoint's identity {dict(identity)!r} is not one; not reattached.",
                FabricCoreWarning,
                stacklevel=2,
            )
            return
        if self._experiment is not None:
            warn_not_reattached(self, self.version, version)
            return
        self._version, self._next_step = version, purge_step
        self._kwargs["purge_step"] = purge_step

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Write each metric as a scalar at ``step``; a dict value becomes a group of scalars.

        Args:
            metrics: Names to numbers, one-element tensors, or dicts of those.
            step: The global step; ``None`` lets the writer use 0.

        Raises:
            InvalidConfigError: A value is not a number (also a ``ValueError``); nothing is written then.
        """
        scalars: dict[str, float | dict[str, float]] = {}
        for name, value in _add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, Mapping):
                scalars[name] = {str(k): _to_scalar(f"{name}/{k}", v) for k, v in value.items()}
            else:
                scalars[name] = _to_scalar(name, value)
        if step is not None and step >= self._next_step:
            self._next_step = step + 1
        for name, value in scalars.items():
            if isinstance(value, dict):
                self.experiment.add_scalars(name, value, step)
            else:
                self.experiment.add_scalar(name, value, step)

    @rank_zero_only
    def log_hyperparams(
        self,
        params: Mapping[str, Any] | argparse.Namespace | None,
        metrics: Mapping[str, Any] | float | None = None,
        step: int | None = None,
    ) -> None:
        """Write hyperparameters for TensorBoard's HParams tab.

        Nested mappings are flattened to ``"outer/inner"`` keys; values other than bool, int, float and
        str (lists, None, objects) are written as their ``str()``.

        Args:
            params: A mapping or an ``argparse.Namespace``.
            metrics: Metrics to show next to the hyperparameters; a bare number means ``hp_metric``.
                ``None`` logs ``hp_metric=-1`` when ``default_hp_metric`` is set.
            step: The step at which to record them.

        Raises:
            InvalidConfigError: ``params`` is neither a mapping nor a namespace, or a metric is not a number.
        """
        hparams = self._sanitize_params(flatten_params(params_as_dict(params, "TensorBoardLogger")))
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if metrics:
            self.log_metrics(metrics, step)
        metric_names = dict.fromkeys(_add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR), 0.0)
        writer = self.experiment._get_file_writer()
        for summary in self._hparams_summary(hparams, metric_names):
            writer.add_summary(summary, step)

    @rank_zero_only
    def log_graph(self, model: torch.nn.Module, input_array: Any = None) -> None:
        """Trace ``model`` on ``input_array`` (default: ``model.example_input_array``) and write its graph.

        A missing or untraceable input is a warning, never an error: a graph is a nicety that must not end a run.

        Args:
            model: The module to trace (a module ``fabric.setup`` returned is traced as the module inside; a
                ``LightningModule``'s batch transfer hooks are applied to the input first, as in Lightning).
            input_array: An example input, a tensor or a tuple of tensors (the positional arguments).
        """
        from fabric_core.wrappers.unwrap import unwrap_objects

        if input_array is None:
            input_array = getattr(model, "example_input_array", None)
        problem = None
        if input_array is None:
            problem = (
                "The `model.example_input_array` attribute is not set or `input_array` was not given. Pass "
                "`input_array=` or set `model.example_input_array`."
            )
        elif not isinstance(input_array, (torch.Tensor, tuple)):
            problem = (
                f"The `input_array` or `model.example_input_array` has type {type(input_array)} which can't be"
                " traced by TensorBoard. Make it a tensor, or a tuple of the positional arguments of `forward()`."
            )
        if problem is not None:
            # Lightning's words: what its users' filters and tests look for.
            warnings.warn(
                f"Could not log computational graph to TensorBoard: {problem}", FabricCoreWarning, stacklevel=3
            )
            return
        module = unwrap_objects(model)
        transfer = getattr(module, "_apply_batch_transfer_handler", None)
        before_transfer = getattr(module, "_on_before_batch_transfer", None)
        if callable(transfer) and callable(before_transfer):
            # A LightningModule: its batch hooks move the input to its device, as for a training batch.
            input_array = transfer(before_transfer(input_array))
        self.experiment.add_graph(module, input_array)

    @rank_zero_only
    def save(self) -> None:
        """Flush buffered events to disk (creating the writer and its folder first, as Lightning's logger does)."""
        self.experiment.flush()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Flush and close the event files; logging again afterwards opens new ones."""
        if self._experiment is not None:
            self._experiment.flush()
            self._experiment.close()

    def __getstate__(self) -> dict[str, Any]:
        # The writer holds a file and a thread; a copy sent to another process creates its own.
        state = self.__dict__.copy()
        state["_experiment"] = None
        return state

    def _get_next_version(self) -> int:
        return next_version(self._fs, self._experiment_dir)

    @staticmethod
    def _sanitize_params(params: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
        """Flat hyperparameters as TensorBoard's HParams tab takes them: bool, int, float and str values only.

        One-element tensors and numpy scalars become the number they hold; anything else (lists, ``None``,
        classes, larger arrays) its ``str()``.
        """
        return {key: _to_hparam(value) for key, value in params.items()}


def _to_scalar(name: str, value: Any) -> float:
    """``value`` as the float ``add_scalar`` writes: a number, a one-element tensor or array, a numpy scalar.

    Raises:
        InvalidConfigError: Anything else (also a ``ValueError``), in Lightning's words and naming the metric.
    """
    try:
        return metric_as_float("TensorBoardLogger", name, value)
    except (InvalidConfigError, TypeError):
        pass
    shape = getattr(value, "shape", None)
    shown = f"a value of shape {tuple(shape)}" if shape is not None else f"{value!r} of type {type(value).__name__}"
    raise InvalidConfigError(
        # Lightning's sentence: what its users' filters and tests look for.
        f"TensorBoardLogger: you tried to log {value!r} which is currently not supported. Try a dict or a "
        f"scalar/tensor. The metric {name!r} is {shown}; expected a number, a one-element tensor or array, or a "
        "dict of those.",
        argument="metrics",
        value=value,
    )


def _to_hparam(value: Any) -> bool | int | float | str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, _HPARAM_TYPES):
        return value
    # numpy scalars are registered as numbers without subclassing int.
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)
