"""Start a fabric-core script on Ray Train workers: ``fabric_core_ray.run(...)`` and ``--launcher ray``.

A Ray Train ``TorchTrainer`` starts ``num_workers`` processes; each runs the script as ``__main__`` (with its
own ``sys.argv``, as ``python SCRIPT ARGS`` would) or calls the function. The Fabric settings travel as the
``FABRIC_CORE_*`` variables ``fabric-core run`` sets, so ``Fabric()`` with no arguments runs with what the
command line chose, and :class:`~fabric_core_ray.environment.RayEnvironment` gives it Ray's ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fabric_core.errors import ArgumentTypeError, FabricCoreError, InvalidConfigError

__all__ = ["RayRunner", "run", "runner"]

#: The variables ``Fabric(...)`` reads its command-line settings from (as ``fabric-core run`` sets them).
_SETTINGS = {
    "accelerator": "FABRIC_CORE_ACCELERATOR",
    "strategy": "FABRIC_CORE_STRATEGY",
    "precision": "FABRIC_CORE_PRECISION",
}
_GPU_NAMES = ("cuda", "gpu")


def run(
    script_or_fn: str | os.PathLike[str] | Callable[..., Any],
    num_workers: int = 1,
    *,
    args: Sequence[str] = (),
    address: str | None = None,
    resources_per_worker: Mapping[str, float] | None = None,
    use_gpu: bool | None = None,
    max_failures: int = 0,
    storage_path: str | None = None,
    name: str | None = None,
    accelerator: str | None = None,
    strategy: str | None = None,
    precision: str | None = None,
) -> Any:
    """Run a script or a function on ``num_workers`` Ray Train workers, as one fabric-core job.

    Args:
        script_or_fn: A script path (run as ``__main__`` in each worker with ``sys.argv = [script, *args]``),
            or a picklable function (called as ``fn(*args)``).
        num_workers: The number of processes; each is one rank.
        args: The script's command-line arguments, or the function's positional arguments.
        address: The Ray cluster to connect to when Ray is not initialised yet (``None``: ``RAY_ADDRESS``, else
            a new local cluster).
        resources_per_worker: Ray resources each worker needs (``{"CPU": 4, "GPU": 1}``).
        use_gpu: Give each worker a GPU. ``None``: when ``accelerator`` is ``"cuda"``/``"gpu"``, or is not
            given and the cluster has GPUs.
        max_failures: How many times Ray Train restarts the workers after a failure (``-1``: no limit).
        storage_path: Where Ray Train keeps the run and reported checkpoints (default: ``./ray_results``,
            a local folder; give shared storage such as ``s3://...`` or NFS on several nodes).
        name: The run's name under ``storage_path`` (default: Ray's).
        accelerator: ``Fabric(accelerator=...)`` in every worker (as ``fabric-core run --accelerator``).
        strategy: ``Fabric(strategy=...)`` in every worker.
        precision: ``Fabric(precision=...)`` in every worker.

    Returns:
        Ray Train's ``Result`` of the run.

    Raises:
        InvalidConfigError: A bad ``num_workers``, ``max_failures``, ``resources_per_worker`` or script path,
            before Ray starts anything.
    """
    target = _check_target(script_or_fn)
    _check_count("num_workers", num_workers, 1)
    _check_count("max_failures", max_failures, -1)
    resources = _check_resources(resources_per_worker)

    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from fabric_core_ray._backend import FabricTorchConfig

    if not ray.is_initialized():
        local = address is None and not os.environ.get("RAY_ADDRESS")
        if local:  # a cluster for this run alone: no dashboard to start
            ray.init(include_dashboard=False)
        else:
            ray.init(address=address)
    if use_gpu is None:
        wants = (accelerator or "auto").lower()
        use_gpu = wants in _GPU_NAMES or (wants == "auto" and _cluster_gpus(ray) > 0)
    settings = {"accelerator": accelerator, "strategy": strategy, "precision": precision}
    config = {
        "target": target,
        "args": list(args),
        "env": {_SETTINGS[k]: str(v) for k, v in settings.items() if v is not None},
        "cwd": os.getcwd(),
    }
    trainer = TorchTrainer(
        _train_fn,
        train_loop_config=config,
        torch_config=FabricTorchConfig(),
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path or os.path.abspath("ray_results"),
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    )
    return trainer.fit()


def _cluster_gpus(ray: Any) -> float:
    return float(ray.cluster_resources().get("GPU", 0))


def _train_fn(config: dict[str, Any]) -> None:
    """What every Ray Train worker runs: the job's place in the environment, then the script or function."""
    import ray.train

    context = ray.train.get_context()
    per_node, world = context.get_local_world_size(), context.get_world_size()
    os.environ.update(config["env"])
    # The variables torchrun would set, for libraries that read them (DeepSpeed, torch.distributed).
    os.environ.update(
        RANK=str(context.get_world_rank()),
        LOCAL_RANK=str(context.get_local_rank()),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(per_node),
        NODE_RANK=str(context.get_node_rank()),
    )
    # `Fabric()` joins processes that a launcher started when these say so, as under `fabric-core run`: Ray
    # Train started this one, and the process that did is its parent (the variables guard against a leak
    # into a shell, which the parent check detects).
    os.environ.update(FABRIC_CORE_CLI_USED="1", FABRIC_CORE_LAUNCHER_PID=str(os.getppid()))
    if world % per_node == 0:
        # As `fabric-core run --devices N --num-nodes M` would: also right when the script names a strategy.
        os.environ.update(FABRIC_CORE_DEVICES=str(per_node), FABRIC_CORE_NUM_NODES=str(world // per_node))
    if os.path.isdir(config["cwd"]):  # the driver's folder, where it exists on this node
        os.chdir(config["cwd"])
    target = config["target"]
    if not isinstance(target, tuple):
        target(*config["args"])
        return
    path, source = target
    _run_script(path, source, config["args"])


def _run_script(path: str, source: str, argv: Sequence[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="fabric-core-ray-") as folder:
        if not os.path.isfile(path):  # a node without the driver's files: run the source the driver read
            path = os.path.join(folder, os.path.basename(path))
            Path(path).write_text(source)
        saved = sys.argv, list(sys.path)
        sys.argv = [path, *argv]
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:  # `sys.exit(0)` at the end of a script is a success
            if exc.code not in (None, 0):
                raise RuntimeError(f"{os.path.basename(path)} exited with status {exc.code!r}") from None
        finally:
            sys.argv, sys.path[:] = saved


def _check_target(script_or_fn: Any) -> Any:
    if callable(script_or_fn):
        return script_or_fn
    if not isinstance(script_or_fn, (str, os.PathLike)):
        raise ArgumentTypeError(
            f"`fabric_core_ray.run(script_or_fn=...)` takes a script path or a function, got {script_or_fn!r}.",
            argument="script_or_fn",
            value=script_or_fn,
        )
    path = os.path.abspath(os.fspath(script_or_fn))
    if not os.path.isfile(path):
        raise InvalidConfigError(f"`fabric_core_ray.run({os.fspath(script_or_fn)!r})`: no such file.", value=path)
    return (path, Path(path).read_text())


def _check_count(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidConfigError(f"`{name}={value!r}`: expected an integer >= {least}.", argument=name, value=value)


def _check_resources(resources: Mapping[str, Any] | None) -> dict[str, float] | None:
    if resources is None:
        return None
    if not isinstance(resources, Mapping) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
        for k, v in resources.items()
    ):
        raise InvalidConfigError(
            f"`resources_per_worker={resources!r}`: expected a mapping of Ray resource names to amounts >= 0, "
            'e.g. {"CPU": 2, "GPU": 1}.',
            argument="resources_per_worker",
            value=resources,
        )
    return {k: float(v) for k, v in resources.items()}


class RayRunner:
    """``fabric-core run --launcher ray``: the runner this plugin registers (see ``fabric_core_register_runners``)."""

    def add_arguments(self, group: Any) -> None:
        """Declare the options of ``--launcher ray``."""
        group.add_argument("--num-workers", type=int, default=1, help="Ray Train workers (processes) to start.")
        group.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else local).")
        group.add_argument(
            "--resources-per-worker", default=None, metavar="JSON", help="Ray resources per worker: '{\"CPU\": 2}'."
        )
        group.add_argument(
            "--max-failures", type=int, default=0, help="Restarts Ray Train may make after a failure (-1: no limit)."
        )
        group.add_argument(
            "--storage-path", default=None, help="Where Ray Train keeps the run (default ./ray_results)."
        )

    def __call__(self, args: argparse.Namespace, manager: Any) -> int:
        """Start ``args.script`` on Ray; return 0 when every worker finished, else 1."""
        for option, value, default in (
            ("--devices", args.devices, "1"),
            ("--num-nodes", args.num_nodes, 1),
            ("--node-rank", args.node_rank, 0),
            ("--main-address", args.main_address, None),
            ("--main-port", args.main_port, None),
        ):
            if value != default:
                raise InvalidConfigError(
                    f"`fabric-core run --launcher ray {option} {value}`: Ray places the processes; give their "
                    "number with --num-workers (and their resources with --resources-per-worker) instead.",
                    argument=option.lstrip("-").replace("-", "_"),
                    value=value,
                )
        resources = None
        if args.resources_per_worker is not None:
            try:
                resources = json.loads(args.resources_per_worker)
            except json.JSONDecodeError as exc:
                raise InvalidConfigError(
                    f"`--resources-per-worker {args.resources_per_worker}` is not JSON ({exc}); "
                    'write it as \'{"CPU": 2, "GPU": 1}\'.',
                    argument="resources_per_worker",
                    value=args.resources_per_worker,
                ) from None
        options = dict(
            num_workers=args.num_workers,
            args=args.script_args,
            address=args.address,
            resources_per_worker=resources,
            max_failures=args.max_failures,
            storage_path=args.storage_path,
            accelerator=args.accelerator,
            strategy=args.strategy,
            precision=args.precision,
        )
        try:
            run(args.script, **options)
        except FabricCoreError:  # a bad option: the command line prints it, before Ray started anything
            raise
        except Exception as exc:  # the failing worker's traceback is on stderr already
            print(f"fabric-core run --launcher ray: the run failed: {exc}", file=sys.stderr)
            return 1
        return 0


#: The target of the ``"ray"`` runner entry.
runner = RayRunner()
