"""Small behaviours compared with Lightning Fabric in one process: the same call on both, the same result.

Skipped where ``lightning_fabric`` is not installed (the ``compat`` test extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

lightning_fabric = pytest.importorskip("lightning_fabric")

import fabric_core  # noqa: E402
from fabric_core.utilities.apply_func import convert_to_tensors  # noqa: E402


def _described(data: Any) -> Any:
    """Types, dtypes and values of a converted collection, comparable with ``==``."""
    if isinstance(data, torch.Tensor):
        return ("tensor", data.dtype, data.tolist())
    if isinstance(data, dict):
        return {k: _described(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)([_described(v) for v in data])
    return (type(data).__name__, data)


_NUMBERS: list[Any] = [
    3,
    -7,
    2.5,
    True,
    np.array([1.0, 2.0]),
    np.float64(0.25),
    {"a": 3, "b": [1.5, False, "text"], "c": (4, np.array([3], dtype=np.int16))},
]


@pytest.mark.parametrize("data", _NUMBERS, ids=repr)
def test_numbers_become_the_tensors_lightning_makes(data: Any) -> None:
    from lightning_fabric.utilities.apply_func import convert_to_tensors as lightning_convert

    assert _described(convert_to_tensors(data, "cpu")) == _described(lightning_convert(data, "cpu"))


@pytest.mark.parametrize("method", ["all_gather", "all_reduce"])
def test_a_python_int_is_collected_as_int32(method: str) -> None:
    ours = getattr(fabric_core.Fabric(accelerator="cpu", devices=1), method)(3)
    theirs = getattr(lightning_fabric.Fabric(accelerator="cpu", devices=1), method)(3)
    assert (ours.dtype, ours.item()) == (theirs.dtype, theirs.item()) == (torch.int32, 3)


def test_a_python_int_beyond_int32_is_a_clear_error_and_a_runtime_error() -> None:
    from fabric_core.errors import NumberOverflowError

    with pytest.raises(RuntimeError):
        lightning_fabric.Fabric(accelerator="cpu", devices=1).all_gather(2**40)
    with pytest.raises(NumberOverflowError, match=r"The Python int 1099511627776 does not fit .* int32") as error:
        fabric_core.Fabric(accelerator="cpu", devices=1).all_gather({"step": 2**40})
    assert isinstance(error.value, RuntimeError)


@pytest.mark.parametrize("library", [lightning_fabric, fabric_core], ids=["lightning", "fabric-core"])
def test_a_program_started_by_lightnings_cli_may_neither_launch_nor_override_run(
    library: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lightning's `fabric run` sets LT_CLI_USED=1: a program run in zero-edit mode that way meets its rules.
    monkeypatch.setenv("LT_CLI_USED", "1")
    with pytest.raises(RuntimeError, match=r"Calling\s+`.launch\(\)` again is not allowed"):
        library.Fabric(accelerator="cpu", devices=1).launch()

    class Overridden(library.Fabric):  # type: ignore[misc,name-defined]
        def run(self) -> None:
            pass

    with pytest.raises(TypeError, match=r"Overriding `Fabric.run\(\)` and launching from the CLI is not allowed"):
        Overridden(accelerator="cpu", devices=1)


@pytest.mark.parametrize("library", [lightning_fabric, fabric_core], ids=["lightning", "fabric-core"])
def test_errors_users_catch_by_their_builtin_type(library: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by running Lightning's own tests_fabric in zero-edit mode: each is caught as Lightning raises it.
    import importlib

    from torch.utils.data import DataLoader, Sampler

    environments = importlib.import_module(f"{library.__name__}.plugins.environments")
    for name in ("WORLD_SIZE", "SLURM_NTASKS", "SLURM_JOB_NAME", "SLURM_NODEID", "SLURM_LOCALID", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(KeyError):
        environments.TorchElasticEnvironment().world_size()
    with pytest.raises(KeyError):
        environments.SLURMEnvironment().world_size()

    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(ValueError, match=r"the product \(2 \* 2\) does not match the world size \(8\)"):
        environments.TorchElasticEnvironment().validate_settings(num_devices=2, num_nodes=2)
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "4")
    monkeypatch.setenv("SLURM_NNODES", "3")
    with pytest.raises(ValueError, match=r"the number of tasks per node configured .* does not match"):
        environments.SLURMEnvironment().validate_settings(num_devices=2, num_nodes=3)
    with pytest.raises(ValueError, match=r"the number of nodes configured in SLURM .* does not match"):
        environments.SLURMEnvironment().validate_settings(num_devices=4, num_nodes=2)

    data = importlib.import_module(f"{library.__name__}.utilities.data")
    wrapper = importlib.import_module(f"{library.__name__}.utilities.distributed").DistributedSamplerWrapper

    class Unsized(Sampler[int]):
        def __iter__(self) -> Any:
            return iter(range(4))

    with pytest.raises(TypeError):
        wrapper(Unsized(), num_replicas=2, rank=0)

    class Custom(DataLoader[Any]):
        def __init__(self, new_arg: int, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    exceptions = importlib.import_module(f"{library.__name__}.utilities.exceptions")
    with pytest.raises(exceptions.MisconfigurationException, match="The missing attributes are \\['new_arg'\\]"):
        data._update_dataloader(Custom(1, range(4)), wrapper(range(4), num_replicas=1, rank=0))


@pytest.mark.parametrize("library", ["lightning_fabric", "fabric_core"])
@pytest.mark.slow
def test_possible_user_warnings_off_in_the_environment_silences_them(library: str) -> None:
    import os
    import subprocess
    import sys

    # Lightning's package applies the switch when it is imported; so does fabric-core's.
    script = (
        f"import warnings, {library}\n"
        f"from {library}.utilities.warnings import PossibleUserWarning\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.warn('hint', PossibleUserWarning)\n"
        "print(len(caught))\n"
    )
    env = {**os.environ, "POSSIBLE_USER_WARNINGS": "off"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "0", done.stderr[-2000:]


@pytest.mark.parametrize("library", [lightning_fabric, fabric_core], ids=["lightning", "fabric-core"])
def test_lsf_names_what_is_missing_in_lightnings_words(
    library: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import importlib

    lsf = importlib.import_module(f"{library.__name__}.plugins.environments").LSFEnvironment
    for name in ("LSB_DJOB_RANKFILE", "LSB_JOBID", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LSB_JOBID", "1234")
    with pytest.raises(ValueError, match="Did not find the environment variable `LSB_DJOB_RANKFILE`"):
        lsf()
    monkeypatch.setenv("LSB_DJOB_RANKFILE", "")
    with pytest.raises(ValueError, match="The environment variable `LSB_DJOB_RANKFILE` is empty"):
        lsf()
    rankfile = tmp_path / "ranks"
    rankfile.write_text("launch\nnode1\nnode1\n")
    monkeypatch.setenv("LSB_DJOB_RANKFILE", str(rankfile))
    monkeypatch.delenv("LSB_JOBID")
    with pytest.raises(ValueError, match="Could not find job id in environment variable LSB_JOBID"):
        lsf()


def test_the_wrappers_have_lightnings_class_names() -> None:
    # Libraries unwrap by name (lightly-train: `type(model).__name__ == "_FabricModule"`), and reprs show it.
    names = []
    for library in (lightning_fabric, fabric_core):
        fabric = library.Fabric(accelerator="cpu", devices=1)
        model, optimizer = fabric.setup(torch.nn.Linear(2, 2), torch.optim.SGD([torch.nn.Parameter(torch.ones(1))]))
        loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(range(4)))
        names.append((type(model).__name__, type(optimizer).__name__, type(loader).__name__, repr(model)[:14]))
    assert names[0] == names[1] == ("_FabricModule", "FabricSGD", "_FabricDataLoader", "_FabricModule(")


def test_64_true_keeps_complex_buffers_complex_as_lightning_does() -> None:
    class WithSpectrum(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)
            self.register_buffer("spectrum", torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64))
            self.register_buffer("steps", torch.tensor([3]))

    converted = []
    for library in (lightning_fabric, fabric_core):
        fabric = library.Fabric(accelerator="cpu", devices=1, precision="64-true")
        model = fabric.setup(WithSpectrum())
        converted.append((model.linear.weight.dtype, model.spectrum.dtype, model.spectrum.tolist(), model.steps.dtype))
    assert converted[0] == converted[1] == (torch.float64, torch.complex64, [1 + 2j, 3 - 4j], torch.int64)


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_a_raw_backward_is_refused_as_lightning_refuses_it_on_every_step(precision: str) -> None:
    from torch import nn

    def outcomes(library: Any) -> list[str]:
        fabric = library.Fabric(accelerator="cpu", devices=1, precision=precision)
        model = fabric.setup(nn.Linear(2, 2))
        seen = []
        for _ in range(2):  # the second time after fabric.backward has run
            try:
                model(torch.rand(2, 2)).sum().backward()
                seen.append("ran")
            except RuntimeError as error:
                seen.append(str(error))
            fabric.backward(model(torch.rand(2, 2)).sum())
        return seen

    expected = outcomes(lightning_fabric)
    assert outcomes(fabric_core) == expected
    assert ("fabric.backward(loss)" in expected[-1]) is (precision == "bf16-mixed")


def test_the_wrapper_reports_the_device_and_dtype_a_recording_module_was_moved_to() -> None:
    # Lightning's test_fabric_module_device_dtype_propagation and test_fabric_module_wraps, on both libraries.
    from unittest.mock import Mock

    for library in (lightning_fabric, fabric_core):
        mixin = __import__(f"{library.__name__}.utilities.device_dtype_mixin", fromlist=["_"])
        wrappers = __import__(f"{library.__name__}.wrappers", fromlist=["_"])

        class Recording(mixin._DeviceDtypeModuleMixin):
            pass

        inner = Recording()
        wrapped = wrappers._FabricModule(inner, Mock())
        wrapped.to(torch.float16)
        assert inner.dtype == wrapped.dtype == torch.float16, library.__name__
        assert inner.device == wrapped.device == torch.device("cpu"), library.__name__
        stand_in = Mock()
        assert wrappers._FabricModule(Mock(), Mock(), original_module=stand_in).module is stand_in


def test_a_callback_whose_signature_cannot_be_read_gets_every_argument_as_in_lightning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Lightning's test_callback_kwargs_filtering_signature_inspection_failure reaches `inspect` through
    # `lightning.fabric.fabric`.
    from unittest.mock import Mock

    import fabric_core.fabric

    def unreadable(obj: Any) -> Any:
        raise ValueError("no signature")

    monkeypatch.setattr(fabric_core.fabric.inspect, "signature", unreadable)
    callback = Mock()
    fabric_core.Fabric(accelerator="cpu", callbacks=[callback]).call("on_hook", a=1, b=2)
    callback.on_hook.assert_called_with(a=1, b=2)


def test_a_users_strategy_receives_weights_only_as_passed_as_in_lightning(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lightning's test_fabric_load[_raw]_forwards_weights_only_to_strategy and test_load_raw: `None` reaches the
    # strategy as `None` (torch's default, read as True by every reader), an explicit value as it is.
    from torch import nn

    def received(library: Any) -> list[Any]:
        strategies = __import__(f"{library.__name__}.strategies", fromlist=["_"])
        seen: list[Any] = []

        class Recording(strategies.SingleDeviceStrategy):
            def load_checkpoint(self, path: Any, state: Any = None, strict: bool = True, **kwargs: Any) -> Any:
                seen.append(kwargs.get("weights_only", "absent"))
                return super().load_checkpoint(path, state, strict=strict, **kwargs)

        fabric = library.Fabric(accelerator="cpu", strategy=Recording(device=torch.device("cpu")))
        model = fabric.setup(nn.Linear(2, 2))
        fabric.save(tmp_path / f"{library.__name__}.pt", {"model": model})
        torch.save(model.state_dict(), tmp_path / f"{library.__name__}-raw.pt")
        for weights_only in (None, True, False):
            fabric.load(tmp_path / f"{library.__name__}.pt", {"model": model}, weights_only=weights_only)
            fabric.load_raw(tmp_path / f"{library.__name__}-raw.pt", model, weights_only=weights_only)
        return seen

    expected = received(lightning_fabric)
    assert received(fabric_core) == expected == [None, None, True, True, False, False]
    # One of torch's switches decides a `None` once, before the strategy sees it.
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    assert received(fabric_core)[:2] == [True, True]
