"""Lightning Fabric 2.6's private module-level names in the core modules, differentially against Lightning.

Each helper runs the same call in ``lightning_fabric`` and ``fabric_core`` and compares results, or the
exception's type name and a key phrase of its message.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

pytest.importorskip("lightning_fabric")

NAMES: dict[str, tuple[str, ...] | list[str]] = {
    "utilities.data": [
        "_WrapAttrTag",
        "_update_dataloader",
        "_get_dataloader_init_args_and_kwargs",
        "_dataloader_init_kwargs_resolve_sampler",
        "_auto_add_worker_init_fn",
        "_reinstantiate_wrapped_cls",
        "_wrap_init_method",
        "_wrap_attr_method",
        "_replace_dunder_methods",
        "_replace_value_in_saved_args",
        "_set_sampler_epoch",
        "_num_cpus_available",
    ],
    "utilities.device_parser": [
        "_determine_root_gpu_device",
        "_parse_gpu_ids",
        "_normalize_parse_gpu_string_input",
        "_sanitize_gpu_ids",
        "_normalize_parse_gpu_input_to_list",
        "_get_all_available_gpus",
        "_check_unique",
        "_check_data_type",
        "_select_auto_accelerator",
    ],
    "utilities.device_dtype_mixin": ("_DeviceDtypeModuleMixin", "_update_properties"),
    "utilities.logger": [
        "_convert_params",
        "_sanitize_callable_params",
        "_flatten_dict",
        "_sanitize_params",
        "_convert_json_serializable",
        "_is_json_serializable",
        "_add_prefix",
    ],
    "utilities.apply_func": ("_from_numpy",),
    "utilities.throughput": (
        "_THROUGHPUT_METRICS",
        "_CUDA_FLOPS",
        "_TPU_FLOPS",
        "_plugin_to_compute_dtype",
        "T",
        "_MonotonicWindow",
    ),
    "utilities.types": ("_DictKey",),
    "utilities.warnings": ("_custom_format_warning", "_is_path_in_lightning"),
    "utilities.registry": ("_load_external_callbacks", "_register_classes"),
    "utilities.consolidate_checkpoint": ("_parse_cli_args", "_process_cli_args"),
    "utilities.imports": [
        "_TORCHMETRICS_GREATER_EQUAL_1_0_0",
        "_IS_WINDOWS",
        "_IS_INTERACTIVE",
        "_PYTHON_GREATER_EQUAL_3_10_0",
        "_TORCH_GREATER_EQUAL_2_2",
        "_TORCH_GREATER_EQUAL_2_3",
        "_TORCH_EQUAL_2_4_0",
        "_TORCH_GREATER_EQUAL_2_4",
        "_TORCH_GREATER_EQUAL_2_4_1",
        "_TORCH_GREATER_EQUAL_2_5",
        "_TORCH_GREATER_EQUAL_2_6",
        "_TORCH_LESS_EQUAL_2_6",
    ],
    "connector": ("_PLUGIN_INPUT", "_Connector", "_convert_precision_to_unified_args", "_is_using_cli"),
    "plugins.precision.precision": [
        "_PRECISION_INPUT_INT",
        "_PRECISION_INPUT_STR_ALIAS_CONVERSION",
        "_PRECISION_INPUT_STR_ALIAS",
        "_PRECISION_INPUT_STR",
        "_PRECISION_INPUT",
    ],
    "plugins.precision.utils": ("_convert_fp_tensor", "_DtypeContextManager", "_ClassReplacementContextManager"),
    "plugins.precision.amp": ("_optimizer_handles_unscaling",),
    "plugins.environments.mpi": ("_MPI4PY_AVAILABLE",),
    "plugins.environments.slurm": ("_is_srun_used", "_is_slurm_interactive_mode"),
}


def both(path: str) -> tuple[Any, Any]:
    return importlib.import_module(f"lightning_fabric.{path}"), importlib.import_module(f"fabric_core.{path}")


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as error:  # compared by type name and message below
        return type(error).__name__, error


def kinds(result: tuple[str, Any]) -> set[str]:
    """``{"ok"}``, or the names of the error's classes (ours may be a subclass of the type Lightning raises)."""
    return {"ok"} if result[0] == "ok" else {cls.__name__ for cls in type(result[1]).__mro__}


def same(path: str, name: str, *args: Any, phrase: str | None = None, **kwargs: Any) -> Any:
    """Call ``name`` of both modules; equal results, or errors of one type name (and ``phrase`` in both)."""
    theirs, ours = both(path)
    expected, got = outcome(getattr(theirs, name), *args, **kwargs), outcome(getattr(ours, name), *args, **kwargs)
    assert expected[0] in kinds(got), (expected, got)
    if expected[0] == "ok":
        assert got[1] == expected[1]
    elif phrase is not None:
        assert phrase in str(expected[1]) and phrase in str(got[1]), (expected, got)
    return got[1]


@pytest.mark.parametrize("path", sorted(NAMES))
def test_every_name_is_at_its_lightning_path(path: str) -> None:
    module = importlib.import_module(f"fabric_core.{path}")
    missing = [name for name in NAMES[path] if not hasattr(module, name)]
    assert not missing
    reference = importlib.import_module(f"lightning_fabric.{path}")
    assert all(hasattr(reference, name) for name in NAMES[path])


# -- utilities.logger ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Config:
    lr: float = 0.1
    layers: int = 2


def _fn() -> int:
    return 3


def _fn_returning_fn() -> Any:
    return _fn


def _needs_arg(x: int) -> int:
    return x


@pytest.mark.parametrize(
    "params", [None, argparse.Namespace(a=1, b="x"), {"a": 1}, {}], ids=["none", "namespace", "dict", "empty"]
)
def test_convert_params(params: Any) -> None:
    same("utilities.logger", "_convert_params", params)


def test_sanitize_callable_params() -> None:
    params = {"cls": torch.nn.Linear, "fn": _fn, "fn2": _fn_returning_fn, "bad": _needs_arg, "n": 1}
    assert same("utilities.logger", "_sanitize_callable_params", params) == {
        "cls": "Linear",
        "fn": 3,
        "fn2": "_fn_returning_fn",
        "bad": "_needs_arg",
        "n": 1,
    }


@pytest.mark.parametrize(
    ("params", "delimiter"),
    [
        ({"a": {"b": {"c": 1}}, "d": 2}, "/"),
        ({"a": {"b": 1}}, "."),
        ({5: {"a": 1}}, "/"),
        ({"dl": [{"a": 1}, {"b": 2}], "l": [1, 2]}, "/"),
        ({"cfg": _Config(), "ns": argparse.Namespace(x=1), "empty": {}}, "/"),
    ],
)
def test_flatten_dict(params: dict[Any, Any], delimiter: str) -> None:
    result = same("utilities.logger", "_flatten_dict", params, delimiter=delimiter)
    assert all(isinstance(key, str) for key in result)


def test_sanitize_params_and_json() -> None:
    import numpy as np

    def params() -> dict[str, Any]:
        return {
            "f": 0.3,
            "i": 1,
            "s": "abc",
            "b": True,
            "l": [1, 2],
            "ns": argparse.Namespace(a=1),
            "np": np.float64(2.5),
            "t": torch.tensor(1.0),
            "big": 10**400,
            "none": None,
        }

    theirs, ours = both("utilities.logger")
    expected, got = theirs._sanitize_params(params()), ours._sanitize_params(params())
    assert {k: v for k, v in got.items() if k != "t"} == {k: v for k, v in expected.items() if k != "t"}
    assert got["l"] == "[1, 2]" and got["np"] == 2.5 and isinstance(got["t"], torch.Tensor)
    json_expected = theirs._convert_json_serializable(params())
    json_got = ours._convert_json_serializable(params())
    assert json_got.keys() == json_expected.keys()
    assert json_got["ns"] == json_expected["ns"] == "Namespace(a=1)" and json_got["l"] == [1, 2]
    for value in (None, 1, float("inf"), object(), {1, 2}, 10**400, (1, 2)):
        same("utilities.logger", "_is_json_serializable", value)


@pytest.mark.parametrize(("prefix", "separator"), [("", "-"), ("train", "-"), ("val", "/")])
def test_add_prefix(prefix: str, separator: str) -> None:
    metrics = {"loss": 1.0, "acc": 0.5}
    result = same("utilities.logger", "_add_prefix", metrics, prefix, separator)
    assert (result is metrics) == (prefix == "")


# -- utilities.device_parser -----------------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", [None, [], [2, 0], (1,), "x"])
def test_determine_root_gpu_device(gpus: Any) -> None:
    same("utilities.device_parser", "_determine_root_gpu_device", gpus)


@pytest.mark.parametrize("gpus", [None, 0, "0", "[]", 1, -1, "-1", "0,1", [0], [0, 0], 2.5, [True], ["0"], "abc", True])
@pytest.mark.parametrize("include", [(True, False), (False, True), (True, True)])
def test_parse_gpu_ids(gpus: Any, include: tuple[bool, bool]) -> None:
    # This machine has no GPU: everything that asks for one fails, as in Lightning.
    same("utilities.device_parser", "_parse_gpu_ids", gpus, include_cuda=include[0], include_mps=include[1])


@pytest.mark.parametrize("value", ["-1", "0,1", "1, 2", "3", " 4 ", 5, [1]])
def test_normalize_parse_gpu_string_input(value: Any) -> None:
    same("utilities.device_parser", "_normalize_parse_gpu_string_input", value)


def test_device_parser_helpers() -> None:
    path = "utilities.device_parser"
    for value in ([0, 1], (2,), 0, 3, -1):
        same(path, "_normalize_parse_gpu_input_to_list", value, include_cuda=True, include_mps=False)
    same(path, "_sanitize_gpu_ids", [0], phrase="At least one gpu type")
    same(path, "_sanitize_gpu_ids", [0], include_cuda=True, phrase="But your machine only has")
    same(path, "_get_all_available_gpus", include_cuda=True, include_mps=True)
    same(path, "_check_unique", [0, 1])
    same(path, "_check_unique", [0, 0], phrase="must be unique")
    for value in (None, 1, "1", [1, 2], (1,), [1.0], [True], 1.5, {1}):
        same(path, "_check_data_type", value)
    assert same(path, "_select_auto_accelerator") == "cpu"


# -- utilities.device_dtype_mixin ------------------------------------------------------------------------------


def test_device_dtype_mixin_follows_conversions() -> None:
    records = []
    for path in ("lightning_fabric", "fabric_core"):
        mixin_module = importlib.import_module(f"{path}.utilities.device_dtype_mixin")

        class Inner(mixin_module._DeviceDtypeModuleMixin):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(2, 2)

        class Outer(mixin_module._DeviceDtypeModuleMixin):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                super().__init__()
                self.inner = Inner()

        model = Outer()
        seen = [(model.dtype, model.device)]
        model.double()
        seen.append((model.dtype, model.inner.dtype, model.inner.layer.weight.dtype))
        model.to(torch.float16)
        seen.append((model.dtype, model.inner.dtype))
        model.half().float()
        seen.append((model.dtype,))
        model.type(torch.bfloat16)
        seen.append((model.dtype, model.cpu().device))
        mixin_module._update_properties(model, dtype=torch.float64)
        seen.append((model.inner.dtype, model.inner.layer.weight.dtype))
        with pytest.raises(RuntimeError, match="Cannot set the dtype explicitly"):
            model.dtype = torch.float32
        records.append(seen)
    assert records[0] == records[1]
    assert records[1][-1] == (torch.float64, torch.bfloat16)  # recorded only, nothing moved


# -- small helpers ---------------------------------------------------------------------------------------------


def test_from_numpy_keeps_dtype_on_device() -> None:
    import numpy as np

    array = np.arange(4, dtype=np.int16)
    theirs, ours = both("utilities.apply_func")
    expected, got = theirs._from_numpy(array, "cpu"), ours._from_numpy(array, torch.device("cpu"))
    assert got.dtype == expected.dtype == torch.int16 and torch.equal(got, expected)


def test_throughput_names() -> None:
    theirs, ours = both("utilities.throughput")
    assert ours._TPU_FLOPS == theirs._TPU_FLOPS
    for chip in ("a100", "h100 sxm", "v100 sxm", "rtx 4090"):
        assert ours._CUDA_FLOPS[chip][torch.bfloat16 if chip != "v100 sxm" else torch.float16] == pytest.approx(
            theirs._CUDA_FLOPS[chip][torch.bfloat16 if chip != "v100 sxm" else torch.float16]
        )
    from lightning_fabric.plugins import DoublePrecision as LDouble
    from lightning_fabric.plugins import HalfPrecision as LHalf
    from lightning_fabric.plugins import MixedPrecision as LMixed
    from lightning_fabric.plugins import Precision as LPrecision

    from fabric_core.precision.double import DoublePrecision
    from fabric_core.precision.half import HalfPrecision
    from fabric_core.precision.mixed import MixedPrecision
    from fabric_core.precision.precision import Precision

    pairs = [
        (LPrecision(), Precision()),
        (LDouble(), DoublePrecision()),
        (LHalf("bf16-true"), HalfPrecision("bf16-true")),
        (LHalf("16-true"), HalfPrecision("16-true")),
        (LMixed("bf16-mixed", "cpu"), MixedPrecision("bf16-mixed", "cpu")),
    ]
    for lightning_precision, precision in pairs:
        assert ours._plugin_to_compute_dtype(precision) == theirs._plugin_to_compute_dtype(lightning_precision)
    for module in (theirs, ours):
        with pytest.raises(RuntimeError, match="Expected a precision plugin"):
            module._plugin_to_compute_dtype(object())
        window = module._MonotonicWindow(maxlen=2)
        assert window.last is None
        for value in (1.0, 2.0, 3.0):
            window.append(value)
        assert list(window) == [2.0, 3.0] and window.last == 3.0
        with pytest.raises(ValueError, match="Expected the value to increase"):
            window.append(3.0)
        with pytest.raises(NotImplementedError):
            window[0] = 5.0


def test_warning_format_helpers(tmp_path: Path) -> None:
    theirs, ours = both("utilities.warnings")
    for path in (Path(theirs.__file__), tmp_path / "script.py"):
        assert ours._is_path_in_lightning(path) == theirs._is_path_in_lightning(path)
    message = UserWarning("careful")
    lightning_file = str(Path(theirs.__file__))
    assert ours._custom_format_warning(message, UserWarning, lightning_file, 3) == f"{lightning_file}:3: careful\n"
    user_file = str(tmp_path / "script.py")
    expected = theirs._custom_format_warning(message, UserWarning, user_file, 7, "x = 1")
    assert ours._custom_format_warning(message, UserWarning, user_file, 7, "x = 1") == expected
    assert "UserWarning: careful" in expected


def test_register_classes_and_external_callbacks() -> None:
    import types

    class Base:
        @classmethod
        def register(cls, registry: list[str]) -> None:
            pass

    class Overrides(Base):
        @classmethod
        def register(cls, registry: list[str]) -> None:
            registry.append(cls.__name__)

    class Inherits(Base):
        pass

    module = types.ModuleType("components")
    module.Base, module.Overrides, module.Inherits, module.Other = Base, Overrides, Inherits, int  # type: ignore[attr-defined]
    theirs, ours = both("utilities.registry")
    results = []
    for implementation in (theirs, ours):
        registry: list[str] = []
        implementation._register_classes(registry, "register", module, Base)
        results.append(registry)
        assert implementation._load_external_callbacks("fabric_core.test.no_such_group") == []
    assert results[0] == results[1] == ["Overrides"]


def test_consolidate_cli_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs, ours = both("utilities.consolidate_checkpoint")
    folder = tmp_path / "ckpt"
    monkeypatch.setattr("sys.argv", ["consolidate", str(folder), "--output_file", str(tmp_path / "out.pt")])
    assert vars(ours._parse_cli_args()) == vars(theirs._parse_cli_args())
    monkeypatch.setattr("sys.argv", ["consolidate", str(folder)])
    assert (
        vars(ours._parse_cli_args())
        == vars(theirs._parse_cli_args())
        == {
            "checkpoint_folder": str(folder),
            "output_file": None,
        }
    )
    # Missing folder, a file instead of a folder, a folder of another format: exit code 1 in both.
    (tmp_path / "file").write_text("x")
    (tmp_path / "other").mkdir()
    for target in (folder, tmp_path / "file", tmp_path / "other"):
        for module in (theirs, ours):
            with pytest.raises(SystemExit) as exited:
                module._process_cli_args(argparse.Namespace(checkpoint_folder=str(target), output_file=None))
            assert exited.value.code == 1
    folder.mkdir()
    (folder / ".metadata").write_bytes(b"")
    (folder / "meta.pt").write_bytes(b"")
    for output in (None, str(tmp_path / "out.pt")):
        args = argparse.Namespace(checkpoint_folder=str(folder), output_file=output)
        assert vars(ours._process_cli_args(args)) == vars(theirs._process_cli_args(args))
    (tmp_path / "ckpt.consolidated").write_bytes(b"")
    for module in (theirs, ours):
        with pytest.raises(SystemExit):
            module._process_cli_args(argparse.Namespace(checkpoint_folder=str(folder), output_file=None))


def test_import_flags_match() -> None:
    theirs, ours = both("utilities.imports")
    for name in NAMES["utilities.imports"]:
        assert bool(getattr(ours, name)) == bool(getattr(theirs, name)), name


# -- precision names and the connector -------------------------------------------------------------------------


def test_precision_input_types() -> None:
    from typing import get_args

    theirs, ours = both("plugins.precision.precision")
    assert ours._PRECISION_INPUT_STR_ALIAS_CONVERSION == theirs._PRECISION_INPUT_STR_ALIAS_CONVERSION
    for name in ("_PRECISION_INPUT_INT", "_PRECISION_INPUT_STR_ALIAS", "_PRECISION_INPUT_STR"):
        assert get_args(getattr(ours, name)) == get_args(getattr(theirs, name))
    assert {get_args(t) for t in get_args(ours._PRECISION_INPUT)} == {
        get_args(t) for t in get_args(theirs._PRECISION_INPUT)
    }


@pytest.mark.parametrize("precision", [None, 16, "16", 32, "32", 64, "bf16", "bf16-true", "16-mixed", "foo", 8])
def test_convert_precision_to_unified_args(precision: Any) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        same("connector", "_convert_precision_to_unified_args", precision, phrase="Allowed precision values")
    warned = [w for w in caught if "historical reasons" in str(w.message)]
    assert len(warned) == (2 if str(precision) in ("16", "bf16") else 0)  # once per package


def test_is_using_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    theirs, ours = both("connector")
    assert ours._is_using_cli() is theirs._is_using_cli() is False
    monkeypatch.setenv("LT_CLI_USED", "1")  # Lightning's own `fabric run` counts for both
    assert ours._is_using_cli() is theirs._is_using_cli() is True
    monkeypatch.setenv("FABRIC_CORE_CLI_USED", "1")
    assert ours._is_using_cli() is theirs._is_using_cli() is True


def test_connector_builds_what_fabric_would() -> None:
    from lightning_fabric.connector import _Connector as LConnector

    from fabric_core.connector import _Connector

    for kwargs in ({}, {"devices": 2}, {"precision": "bf16-mixed"}, {"precision": 64, "strategy": "ddp", "devices": 2}):
        expected, got = LConnector(**kwargs), _Connector(**kwargs)
        assert type(got.strategy).__name__ == type(expected.strategy).__name__
        assert type(got.precision).__name__ == type(expected.precision).__name__
        assert type(got.accelerator).__name__ == type(expected.accelerator).__name__
        assert got.strategy.precision is got.precision and got.strategy.accelerator is got.accelerator
    for module_connector in (LConnector, _Connector):
        with pytest.raises(ValueError, match=r"(?i)precision 'x'"):
            module_connector(precision="x")


def test_precision_utils() -> None:
    theirs, ours = both("plugins.precision.utils")
    for tensor in (torch.ones(2), torch.ones(2, dtype=torch.int64)):
        for dtype in (torch.float16, torch.float64):
            expected, got = theirs._convert_fp_tensor(tensor, dtype), ours._convert_fp_tensor(tensor, dtype)
            assert got.dtype == expected.dtype
    default = torch.get_default_dtype()
    for module in (theirs, ours):
        manager = module._DtypeContextManager(torch.float64)
        with manager:
            assert torch.tensor(1.0).dtype == torch.float64
        assert torch.get_default_dtype() == default

        class Replacement(torch.nn.Linear):
            pass

        with module._ClassReplacementContextManager({"torch.nn.Linear": Replacement}):
            assert torch.nn.Linear is Replacement
        assert torch.nn.Linear is not Replacement and torch.nn.Linear.__name__ == "Linear"


def test_optimizer_handles_unscaling() -> None:
    parameter = torch.nn.Parameter(torch.zeros(1))
    for optimizer in (torch.optim.SGD([parameter], lr=0.1), torch.optim.Adam([parameter], fused=True)):
        same("plugins.precision.amp", "_optimizer_handles_unscaling", optimizer)
    assert same("plugins.precision.amp", "_optimizer_handles_unscaling", torch.optim.Adam([parameter], fused=True))


def test_environment_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    theirs, ours = both("plugins.environments.mpi")
    assert bool(ours._MPI4PY_AVAILABLE) == bool(theirs._MPI4PY_AVAILABLE)
    for ntasks, job_name in ((None, None), ("2", "train"), ("2", "bash"), ("2", "interactive"), (None, "bash")):
        for var, value in (("SLURM_NTASKS", ntasks), ("SLURM_JOB_NAME", job_name)):
            if value is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, value)
        same("plugins.environments.slurm", "_is_srun_used")
        same("plugins.environments.slurm", "_is_slurm_interactive_mode")


# -- utilities.data --------------------------------------------------------------------------------------------


class _LoaderWithArgs(DataLoader):  # type: ignore[type-arg]
    def __init__(self, data: Any, scale: int, **kwargs: Any) -> None:
        self.scale = scale
        super().__init__(data, **kwargs)


class _LoaderHidingArg(DataLoader):  # type: ignore[type-arg]
    def __init__(self, data: Any, secret: int) -> None:
        super().__init__(data, batch_size=2)


class _MyBatchSampler(BatchSampler):
    pass


class _NotABatchSampler:
    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Any:
        return iter([[0, 1]])

    def __len__(self) -> int:
        return 1


def _dataset() -> TensorDataset:
    return TensorDataset(torch.arange(8.0))


def _describe(loader: Any) -> tuple[Any, ...]:
    batch_sampler = loader.batch_sampler
    return (
        type(loader).__name__,
        type(loader.sampler).__name__,
        type(batch_sampler).__name__,
        getattr(batch_sampler, "batch_size", None),
        loader.batch_size,
        [b[0].tolist() for b in loader],
    )


@pytest.mark.parametrize("wrapped", [False, True])
@pytest.mark.parametrize(
    "make",
    [
        lambda: DataLoader(_dataset(), batch_size=3, shuffle=True, num_workers=0),
        lambda: DataLoader(_dataset(), batch_sampler=_MyBatchSampler(SequentialSampler(range(8)), 3, False)),
        lambda: _LoaderWithArgs(_dataset(), 2, batch_size=4),
        lambda: _LoaderHidingArg(_dataset(), 1),
        lambda: DataLoader(_dataset(), batch_sampler=_NotABatchSampler(None)),  # type: ignore[arg-type]
    ],
    ids=["plain", "custom-batch-sampler", "subclass-kwargs", "hidden-arg", "not-a-batch-sampler"],
)
def test_update_dataloader(make: Any, wrapped: bool) -> None:
    results = []
    for path in ("lightning_fabric", "fabric_core"):
        data = importlib.import_module(f"{path}.utilities.data")
        if wrapped:
            with data._replace_dunder_methods(DataLoader, "dataset"), data._replace_dunder_methods(BatchSampler):
                loader = make()
        else:
            loader = make()
        sampler = SequentialSampler(range(6))
        kind, value = outcome(data._update_dataloader, loader, sampler)
        results.append((kind, _describe(value) if kind == "ok" else None))
        if kind != "ok":
            assert any(p in str(value) for p in ("Trying to inject", "can't inject")), value
    assert results[0] == results[1]
    # The patched methods are gone again.
    assert "__old__init__" not in DataLoader.__dict__ and "__old__setattr__" not in BatchSampler.__dict__


def test_update_dataloader_refuses_a_non_loader() -> None:
    same("utilities.data", "_update_dataloader", [1, 2], SequentialSampler(range(2)), phrase="needs to subclass")


def test_recorded_arguments_and_attribute_changes_are_replayed() -> None:
    results = []
    for path in ("lightning_fabric", "fabric_core"):
        data = importlib.import_module(f"{path}.utilities.data")
        with data._replace_dunder_methods(DataLoader, "dataset"):
            loader = _LoaderWithArgs(_dataset(), 3, batch_size=2)
            loader.extra = "set later"
        saved = (
            getattr(loader, "__pl_saved_args")[1:],
            sorted(getattr(loader, "__pl_saved_kwargs")),
            getattr(loader, "__pl_saved_arg_names"),
            sorted(getattr(loader, "__pl_saved_default_kwargs")),
        )
        args, kwargs = data._get_dataloader_init_args_and_kwargs(loader, SequentialSampler(range(8)))
        rebuilt = data._reinstantiate_wrapped_cls(loader, *args, **kwargs)
        results.append((saved, sorted(kwargs), rebuilt.extra, rebuilt.scale, type(rebuilt).__name__))
        assert data._WrapAttrTag.SET == "set" and data._WrapAttrTag("del") is data._WrapAttrTag.DEL
    assert results[0] == results[1]


@pytest.mark.parametrize(
    ("key", "arg_names", "kwargs", "defaults"),
    [
        ("sampler", ("sampler",), {}, {}),
        ("sampler", (), {"sampler": 1}, {}),
        ("sampler", (), {}, {"sampler": 2}),
        ("sampler", ("other",), {}, {}),
    ],
)
def test_replace_value_in_saved_args(key: str, arg_names: tuple[str, ...], kwargs: Any, defaults: Any) -> None:
    args = tuple(range(len(arg_names)))
    same("utilities.data", "_replace_value_in_saved_args", key, "new", args, dict(kwargs), defaults, arg_names)


def test_resolve_sampler_kwargs() -> None:
    sampler = RandomSampler(range(8))
    theirs, ours = both("utilities.data")
    plain = DataLoader(_dataset(), batch_size=2)
    assert ours._dataloader_init_kwargs_resolve_sampler(
        plain, sampler
    ) == theirs._dataloader_init_kwargs_resolve_sampler(plain, sampler)
    custom = DataLoader(_dataset(), batch_sampler=_MyBatchSampler(SequentialSampler(range(8)), 3, True))
    expected = theirs._dataloader_init_kwargs_resolve_sampler(custom, sampler)
    got = ours._dataloader_init_kwargs_resolve_sampler(custom, sampler)
    assert {k: v for k, v in got.items() if k != "batch_sampler"} == {
        k: v for k, v in expected.items() if k != "batch_sampler"
    }
    assert got["batch_sampler"].sampler is sampler and got["batch_sampler"].drop_last is True


def test_worker_init_and_epoch_and_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    theirs, ours = both("utilities.data")
    for seed_workers in ("0", "1"):
        monkeypatch.setenv("PL_SEED_WORKERS", seed_workers)
        loaders = [DataLoader(_dataset()), DataLoader(_dataset())]
        theirs._auto_add_worker_init_fn(loaders[0], rank=3)
        ours._auto_add_worker_init_fn(loaders[1], rank=3)
        assert (loaders[0].worker_init_fn is None) == (loaders[1].worker_init_fn is None) == (seed_workers == "0")
        if seed_workers == "1":
            assert loaders[1].worker_init_fn.keywords == {"rank": 3}
    ours._auto_add_worker_init_fn(object(), rank=0)  # nothing to set: no error

    class Recorder:
        def __init__(self) -> None:
            self.epochs: list[int] = []

        def set_epoch(self, epoch: int) -> None:
            self.epochs.append(epoch)

    for module in (theirs, ours):
        shared = Recorder()
        loader = argparse.Namespace(sampler=shared, batch_sampler=argparse.Namespace(sampler=shared))
        module._set_sampler_epoch(loader, 4)
        assert shared.epochs == [4]  # once, although reachable twice
    assert ours._num_cpus_available() == theirs._num_cpus_available()


# -- cli -------------------------------------------------------------------------------------------------------


def test_cli_names(monkeypatch: pytest.MonkeyPatch) -> None:
    theirs, ours = both("cli")
    assert bool(ours._CLICK_AVAILABLE) == bool(theirs._CLICK_AVAILABLE)
    assert bool(ours._LIGHTNING_SDK_AVAILABLE) == bool(theirs._LIGHTNING_SDK_AVAILABLE)
    assert ours._SUPPORTED_ACCELERATORS == theirs._SUPPORTED_ACCELERATORS
    # Lightning's launchable strategies are all launchable here (we register more, e.g. 'fsdp1').
    assert set(theirs._get_supported_strategies()) <= set(ours._get_supported_strategies())
    assert not any("spawn" in name or "xla" in name for name in ours._get_supported_strategies())
    for accelerator, devices in (("cpu", "3"), ("auto", "auto"), ("cpu", "1"), (None, "2")):
        same("cli", "_get_num_processes", accelerator, devices)
    same("cli", "_get_num_processes", "tpu", "1", phrase="TPU through the CLI is not supported")
    import os

    from fabric_core.connector import _is_using_cli

    args = argparse.Namespace(accelerator="cpu", strategy=None, devices="2", num_nodes=1, precision=None)
    seen = []
    for module in (theirs, ours):  # Lightning's variables, set as Lightning's `fabric run` sets them
        monkeypatch.setattr("os.environ", {k: v for k, v in os.environ.items() if not k.startswith("LT_")})
        module._set_env_variables(args)
        seen.append({k: v for k, v in os.environ.items() if k.startswith("LT_")})
    assert seen[0] == seen[1] == {"LT_CLI_USED": "1", "LT_ACCELERATOR": "cpu", "LT_DEVICES": "2", "LT_NUM_NODES": "1"}
    assert _is_using_cli()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_torchrun_launch_runs_the_script(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys\n"
        "open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK']), 'w').write(os.environ['WORLD_SIZE'])\n"
    )
    code = (
        "import argparse, sys\n"
        "from fabric_core.cli import _torchrun_launch\n"
        f"args = argparse.Namespace(script={str(script)!r}, accelerator='cpu', strategy='ddp', devices='2', "
        "num_nodes=1, node_rank=0, main_address='127.0.0.1', main_port=29571, precision=None)\n"
        f"_torchrun_launch(args, [{str(tmp_path)!r}])\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=110, capture_output=True)
    assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0", "rank1"]
    assert (tmp_path / "rank1").read_text() == "2"


# -- loggers.csv_logs ------------------------------------------------------------------------------------------


def test_experiment_writer_writes_what_lightnings_writes(tmp_path: Path) -> None:
    theirs, ours = both("loggers.csv_logs")
    texts = []
    for name, module in (("theirs", theirs), ("ours", ours)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "metrics.csv").write_text("old\n")
        with pytest.warns(UserWarning, match="exists and is not empty"):
            writer = module._ExperimentWriter(str(folder))
        assert not (folder / "metrics.csv").exists()  # the old file is deleted at once
        writer.log_metrics({"loss": torch.tensor(0.5)})
        writer.log_metrics({"loss": 0.25}, step=7)
        writer.save()
        assert writer.metrics == []
        writer.log_metrics({"loss": 0.125, "acc": 1.0}, step=8)  # a new column: the file is rewritten
        writer.save()
        writer.save()  # nothing kept: nothing written
        assert writer.metrics_keys == ["acc", "loss", "step"]
        assert writer.metrics_file_path == str(folder / "metrics.csv")
        texts.append((folder / "metrics.csv").read_text())
    assert texts[0] == texts[1]
    assert texts[1].splitlines() == ["acc,loss,step", ",0.5,0", ",0.25,7", "1.0,0.125,8"]
