"""ACCELERATOR_REGISTRY / STRATEGY_REGISTRY views, find_usable_cuda_devices, Accelerator.name(),
CSVLogger.experiment, wrappers._unwrap_objects and SLURMEnvironment.resolve_root_node_address, each compared
with Lightning Fabric's where it has one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fabric_core import Fabric
from fabric_core.errors import InvalidConfigError

lightning_accelerators = pytest.importorskip("lightning_fabric.accelerators")


def test_registries_do_not_import_torch_at_import_fabric_core() -> None:
    code = (
        "import sys, fabric_core, fabric_core.accelerators, fabric_core.strategies\n"
        "from fabric_core.accelerators import ACCELERATOR_REGISTRY\n"
        "from fabric_core.strategies import STRATEGY_REGISTRY\n"
        "names = ACCELERATOR_REGISTRY.available_accelerators(), STRATEGY_REGISTRY.available_strategies()\n"
        "assert 'cpu' in names[0] and 'ddp' in names[1], names\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_accelerator_registry_matches_lightnings_shape() -> None:
    from lightning_fabric.accelerators import ACCELERATOR_REGISTRY as theirs

    from fabric_core.accelerators import ACCELERATOR_REGISTRY, CPUAccelerator

    ours = ACCELERATOR_REGISTRY
    assert theirs.available_accelerators() <= ours.available_accelerators()  # ours adds the "xla" alias
    assert set(ours["cpu"]) == set(theirs["cpu"])
    assert ours["cpu"]["accelerator"] is CPUAccelerator and ours["cpu"]["accelerator_name"] == "cpu"
    assert isinstance(ours.get("cpu"), CPUAccelerator)
    assert ours.get("nope", "fallback") == theirs.get("nope", "fallback") == "fallback"
    for registry in (ours, theirs):
        with pytest.raises(KeyError, match=r"'nope' not found in registry\. Available names"):
            registry.get("nope")
    assert "cpu" in ours and "nope" not in ours and len(ours) == len(list(ours))
    assert str(ours).startswith("Registered Accelerators: ")


def test_strategy_registry_matches_lightnings_names_and_arguments() -> None:
    from lightning_fabric.strategies import STRATEGY_REGISTRY as theirs

    from fabric_core.strategies import STRATEGY_REGISTRY as ours

    missing = set(theirs.available_strategies()) - set(ours.available_strategies())
    assert missing <= {"single_tpu"}, missing  # the only Lightning name we do not register
    assert isinstance(ours.available_strategies(), list)
    for name in ("ddp", "ddp_spawn", "ddp_find_unused_parameters_true", "deepspeed_stage_2", "fsdp_cpu_offload"):
        # Ours may add arguments (fsdp_cpu_offload also names its start method); Lightning's are all there.
        assert theirs[name]["init_params"].items() <= ours[name]["init_params"].items(), name
        assert ours[name]["strategy"].__name__ == theirs[name]["strategy"].__name__, name


@pytest.mark.slow
def test_registering_in_code_adds_to_the_catalog_for_this_process() -> None:
    import subprocess
    import sys
    import textwrap

    # A fresh process: the registration lasts as long as the process, and must not leak into other tests.
    code = textwrap.dedent(
        """
        import torch
        from fabric_core import Fabric
        from fabric_core.accelerators import ACCELERATOR_REGISTRY, CPUAccelerator
        from fabric_core.cli import main
        from fabric_core.strategies import STRATEGY_REGISTRY, SingleDeviceStrategy
        from fabric_core.utilities.exceptions import MisconfigurationException

        class CountingCPU(CPUAccelerator):
            built = 0

            def __init__(self, step):
                super().__init__()
                self.step = step
                CountingCPU.built += step

        ACCELERATOR_REGISTRY.register("counting_cpu", CountingCPU, description="A CPU that counts", step=2)
        entry = ACCELERATOR_REGISTRY["counting_cpu"]
        print(entry["description"], entry["init_params"], entry["accelerator"] is CountingCPU)

        @STRATEGY_REGISTRY.register("one_cpu", description="one device", device=torch.device("cpu"))
        class OneCPU(SingleDeviceStrategy):
            pass

        fabric = Fabric(accelerator="counting_cpu", strategy="one_cpu", devices=1)
        print(type(fabric.accelerator).__name__, type(fabric.strategy).__name__, CountingCPU.built)
        print(Fabric(accelerator="auto").accelerator.__class__.__name__)  # "auto" never picks a registered one
        main(["explain", "--accelerator", "counting_cpu"])
        for registry, name in ((ACCELERATOR_REGISTRY, "cpu"), (STRATEGY_REGISTRY, "ddp")):
            try:
                registry.register(name, CountingCPU)
            except Exception as exc:
                print(type(exc).__name__, isinstance(exc, MisconfigurationException), exc)
        try:
            STRATEGY_REGISTRY.remove("ddp")
        except TypeError as exc:
            print("remove ddp:", exc)
        ACCELERATOR_REGISTRY.register("cpu", CountingCPU, override=True, step=5)
        print(type(Fabric(accelerator="cpu").accelerator).__name__, CountingCPU.built)
        ACCELERATOR_REGISTRY.remove("cpu")
        ACCELERATOR_REGISTRY.remove("counting_cpu")
        print(type(Fabric(accelerator="cpu").accelerator).__name__, "counting_cpu" in ACCELERATOR_REGISTRY)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "A CPU that counts {'step': 2} True"
    assert lines[1] == "CountingCPU OneCPU 2"
    assert lines[2] == "CPUAccelerator"
    explained = "\n".join(lines[3:])
    assert "counting_cpu" in explained and "in-code" in explained and "CountingCPU" in explained
    taken = "is already present in the registry. HINT: Use `override=True`."
    assert f"MisconfigurationException True 'cpu' {taken}" in lines
    assert f"ValueError False 'ddp' {taken}" in lines
    assert any(line.startswith("remove ddp:") and "comes from the plugin 'ddp'" in line for line in lines)
    assert lines[-2] == "CountingCPU 7"
    assert lines[-1] == "CPUAccelerator False"


def test_find_usable_cuda_devices_without_cuda_behaves_as_lightnings() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from fabric_core.accelerators import find_usable_cuda_devices

    assert find_usable_cuda_devices(0) == lightning_accelerators.find_usable_cuda_devices(0) == []
    with pytest.raises(ValueError, match="no visible CUDA devices on this machine"):
        lightning_accelerators.find_usable_cuda_devices(2)
    with pytest.raises(ValueError, match="no visible CUDA devices on this machine"):
        find_usable_cuda_devices(2)


def test_unknown_accelerator_attribute_is_still_an_attribute_error() -> None:
    import fabric_core.accelerators as accelerators

    with pytest.raises(AttributeError, match="no attribute 'find_usable_tpus'"):
        _ = accelerators.find_usable_tpus


def test_accelerator_name_is_the_registered_name() -> None:
    from lightning_fabric.accelerators import CPUAccelerator as TheirCPU

    from fabric_core.accelerators import Accelerator, CPUAccelerator

    assert CPUAccelerator.name() == CPUAccelerator().name() == TheirCPU.name() == "cpu"
    cuda = ACCELERATOR_CLASS("cuda")
    assert cuda.name() == "cuda"

    class Unregistered(CPUAccelerator):
        device_type = "cpu"

    assert Unregistered.name() == "cpu" and issubclass(Unregistered, Accelerator)


def ACCELERATOR_CLASS(name: str) -> type:
    from fabric_core.accelerators import ACCELERATOR_REGISTRY

    cls: type = ACCELERATOR_REGISTRY[name]["accelerator"]
    return cls


def test_csv_logger_experiment_writes_like_lightnings(tmp_path: Path) -> None:
    from lightning_fabric.loggers import CSVLogger as TheirCSV

    from fabric_core.loggers.csv_logs import CSVLogger

    for cls, root in ((CSVLogger, tmp_path / "ours"), (TheirCSV, tmp_path / "theirs")):
        logger = cls(root)
        logger.experiment.log_metrics({"loss": 0.5}, step=3)
        logger.experiment.save()
        assert Path(logger.experiment.metrics_file_path).read_text().splitlines() == ["loss,step", "0.5,3"]


def test_unwrap_objects_under_lightnings_name() -> None:
    from lightning_fabric.wrappers import _unwrap_objects as theirs

    from fabric_core.wrappers import _unwrap_objects

    fabric = Fabric(accelerator="cpu", devices=1)
    module = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    wrapped, wrapped_optimizer = fabric.setup(module, optimizer)
    unwrapped = _unwrap_objects({"m": wrapped, "o": [wrapped_optimizer], "n": 1})
    assert unwrapped["m"] is module and unwrapped["o"][0] is optimizer and unwrapped["n"] == 1
    assert theirs({"n": 1, "m": module}) == _unwrap_objects({"n": 1, "m": module})


@pytest.mark.parametrize(
    "nodes", ["host0", "host0 host1", "host0,host1", "host[5-9]", "host[5,7],gpu[01-02]", "alpha[003-005]", "h[1]"]
)
def test_resolve_root_node_address_matches_lightning(nodes: str) -> None:
    from lightning_fabric.plugins.environments.slurm import SLURMEnvironment as Theirs

    from fabric_core.environments.slurm import SLURMEnvironment

    assert SLURMEnvironment.resolve_root_node_address(nodes) == Theirs.resolve_root_node_address(nodes)


def test_resolve_root_node_address_rejects_an_empty_list() -> None:
    from fabric_core.environments.slurm import SLURMEnvironment

    with pytest.raises(InvalidConfigError, match="names no host"):
        SLURMEnvironment.resolve_root_node_address("")
