"""Small scripts run unchanged against ``lightning_fabric`` and ``fabric_core``: the differential suite's cases.

Each case is ``fn(L, tmp)`` where ``L`` is the imported package and ``tmp`` a fresh directory; it returns plain
data (numbers, strings, lists, dicts) that must be equal for both packages, or raises. Where Lightning raises,
ours must raise an exception that an ``except`` for Lightning's builtin exception type catches, and both
messages must contain the case's key phrase.
"""

from __future__ import annotations

import importlib
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

PACKAGES = ("lightning_fabric", "fabric_core")


@dataclass(frozen=True)
class Case:
    """One script; ``phrase``: a regex both error messages must contain when Lightning raises."""

    id: str
    fn: Callable[[Any, Path], Any]
    phrase: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What one package did: a returned value, or an exception's type and message."""

    value: Any = None
    error: type[BaseException] | None = None
    message: str = ""

    def describe(self) -> str:
        if self.error is None:
            return f"returned {self.value!r}"
        return f"raised {self.error.__module__}.{self.error.__qualname__}: {self.message[:300]}"


def run(case: Case, package: str, tmp: Path) -> Outcome:
    """Run ``case`` against ``package`` in this process."""
    lib = importlib.import_module(package)
    try:
        return Outcome(value=case.fn(lib, tmp))
    except Exception as exc:
        return Outcome(error=type(exc), message=str(exc))


def builtin_base(error: type[BaseException]) -> type[BaseException]:
    """The first builtin exception class in ``error``'s MRO: what user code written for Lightning catches."""
    return next(cls for cls in error.__mro__ if cls.__module__ == "builtins")


def difference(case: Case, theirs: Outcome, ours: Outcome) -> str | None:
    """Why ``ours`` does not behave as ``theirs``, or None when it does."""
    if theirs.error is None:
        if ours.error is not None:
            return f"Lightning {theirs.describe()}; ours {ours.describe()}"
        if theirs.value != ours.value:
            return f"Lightning {theirs.describe()}; ours {ours.describe()}"
        return None
    assert case.phrase is not None, (
        f"case {case.id}: Lightning raised where the case expects a value: {theirs.describe()}"
    )
    if ours.error is None:
        return f"Lightning {theirs.describe()}; ours {ours.describe()}"
    base = builtin_base(theirs.error)
    if not issubclass(ours.error, base):
        return f"`except {base.__name__}` does not catch ours: Lightning {theirs.describe()}; ours {ours.describe()}"
    if case.phrase is not None:
        assert re.search(case.phrase, theirs.message, re.IGNORECASE), (
            f"case {case.id}: the key phrase {case.phrase!r} is not in Lightning's message {theirs.message!r}"
        )
        if not re.search(case.phrase, ours.message, re.IGNORECASE):
            return f"our message lacks Lightning's key phrase {case.phrase!r}: {ours.message[:300]!r}"
    return None


# ---------------------------------------------------------------------------------------------- helpers


def _sub(lib: Any, name: str) -> Any:
    """A subpackage of ``lib`` (``loggers``, ``utilities.data``), imported as user code would."""
    return importlib.import_module(f"{lib.__name__}.{name}")


def _fabric(lib: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("accelerator", "cpu")
    kwargs.setdefault("devices", 1)
    return lib.Fabric(**kwargs)


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _params(model: Any) -> list[float]:
    return [round(float(p.detach().double().sum()), 6) for p in model.parameters()]


def _train(lib: Any, steps: int = 3, clip: dict[str, float] | None = None, **fabric_kwargs: Any) -> dict[str, Any]:
    import torch

    fabric = _fabric(lib, **fabric_kwargs)
    fabric.seed_everything(7)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    norms = []
    for step in range(steps):
        x = torch.randn(8, 4, device=fabric.device)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        fabric.backward(loss)
        if clip is not None:
            norm = fabric.clip_gradients(model, optimizer, **clip)
            norms.append(None if norm is None else round(float(norm), 5))
        optimizer.step()
        del step
    return {"params": _params(model), "norms": norms}


# ------------------------------------------------------------------------------------ construction errors


def _construct(**kwargs: Any) -> Callable[[Any, Path], Any]:
    def fn(lib: Any, tmp: Path) -> Any:
        lib.Fabric(**kwargs)
        return "constructed"

    return fn


CONSTRUCTION = [
    Case(
        "bad-accelerator",
        _construct(accelerator="nope"),
        phrase=r"You selected an invalid accelerator name: `accelerator='nope'`",
    ),
    Case(
        "bad-strategy",
        _construct(accelerator="cpu", strategy="nope"),
        phrase=r"You selected an invalid strategy name: `strategy='nope'`",
    ),
    Case(
        "bad-strategy-type",
        _construct(accelerator="cpu", strategy=object()),
        phrase=r"You selected an invalid strategy name: `strategy=<object object",
    ),
    Case("bad-accelerator-type", _construct(accelerator=1.5), phrase=r"You selected an invalid accelerator name"),
    Case("bad-precision", _construct(accelerator="cpu", precision="nope"), phrase=r"precision"),
    Case("bad-precision-int", _construct(accelerator="cpu", precision=15), phrase=r"precision"),
    Case("bad-devices-string", _construct(accelerator="cpu", devices="two"), phrase=r"devices"),
    Case("bad-devices-zero", _construct(accelerator="cpu", devices=0), phrase=r"devices"),
    Case("bad-devices-negative", _construct(accelerator="cpu", devices=-2), phrase=r"devices"),
    Case("bad-num-nodes", _construct(accelerator="cpu", num_nodes=0), phrase=r"num_nodes"),
    Case("bad-devices-list-on-cpu", _construct(accelerator="cpu", devices=[0, 1]), phrase=r"devices"),
    Case("mps-not-available", _construct(accelerator="mps", devices=1), phrase=r"not available"),
    Case(
        "strategy-conflicts-with-devices",
        _construct(accelerator="cpu", strategy="single_device", devices=2),
        phrase=r"devices|single",
    ),
    Case("bad-plugin-type", _construct(accelerator="cpu", plugins=[object()]), phrase=r"plugin"),
    Case(
        "mixed-precision-bad-name",
        lambda lib, tmp: _sub(lib, "plugins").MixedPrecision("16", "cpu"),
        phrase=r"Passed `MixedPrecision\(precision='16'\)`. Precision must be '16-mixed' or 'bf16-mixed'",
    ),
    Case(
        "mixed-precision-bf16-with-a-scaler",
        lambda lib, tmp: _sub(lib, "plugins").MixedPrecision("bf16-mixed", "cpu", scaler=object()),
        phrase=r"`precision='bf16-mixed'` does not use a scaler, found",
    ),
]


# -------------------------------------------------------------------------------------------- utilities


def _seed(lib: Any, tmp: Path) -> Any:
    import numpy as np
    import torch

    seed = lib.seed_everything(42)
    return {
        "seed": seed,
        "env": os.environ.get("PL_GLOBAL_SEED"),
        "torch": torch.rand(3).tolist(),
        "random": [random.random() for _ in range(2)],
        "numpy": np.random.rand(2).tolist(),
    }


def _seed_out_of_range(lib: Any, tmp: Path) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lib.seed_everything(2**40)


def _seed_from_env(lib: Any, tmp: Path) -> Any:
    first = lib.seed_everything(42)
    os.environ["PL_GLOBAL_SEED"] = "123"  # a launcher or the user sets the seed for the next run
    return [first, lib.seed_everything()]


def _reset_seed(lib: Any, tmp: Path) -> Any:
    import torch

    lib.seed_everything(5)
    first = torch.rand(2).tolist()
    torch.rand(10)
    _sub(lib, "utilities.seed").reset_seed()
    return first == torch.rand(2).tolist()


class _Pair(NamedTuple):
    a: Any
    b: Any


def _apply(lib: Any, tmp: Path) -> Any:
    from dataclasses import dataclass as dc

    import torch

    @dc
    class Box:
        x: Any
        label: str

    data = {
        "t": torch.ones(2),
        "l": [torch.zeros(1), 3, "s"],
        "p": _Pair(torch.ones(1), 2),
        "box": Box(torch.ones(1), "k"),
    }
    out = _sub(lib, "utilities.apply_func").apply_to_collection(data, torch.Tensor, lambda t: t * 2)
    return {
        "t": out["t"].tolist(),
        "l": [out["l"][0].tolist(), out["l"][1], out["l"][2]],
        "p": (type(out["p"]).__name__, out["p"].a.tolist(), out["p"].b),
        "box": (type(out["box"]).__name__, out["box"].x.tolist(), out["box"].label),
    }


def _move(lib: Any, tmp: Path) -> Any:
    import torch

    data = {"a": torch.ones(2, dtype=torch.float64), "b": [torch.zeros(1)], "c": 5}
    out = _sub(lib, "utilities").move_data_to_device(data, torch.device("cpu"))
    return {"a": (str(out["a"].device), str(out["a"].dtype)), "b": str(out["b"][0].device), "c": out["c"]}


def _rank_zero_only(lib: Any, tmp: Path) -> Any:
    from_utilities = _sub(lib, "utilities.rank_zero").rank_zero_only

    @from_utilities
    def hello() -> str:
        return "hi"

    return {"rank": from_utilities.rank, "call": hello()}


def _rank_zero_only_default(lib: Any, tmp: Path) -> Any:
    decorator = _sub(lib, "utilities.rank_zero").rank_zero_only
    old = decorator.rank
    decorator.rank = 1
    try:

        @decorator
        def f() -> str:
            return "x"

        return [f(), decorator(lambda: "y", default="d")() if _accepts_default(decorator) else "no-default"]
    finally:
        decorator.rank = old


def _accepts_default(decorator: Any) -> bool:
    import inspect

    return "default" in inspect.signature(decorator).parameters


def _attribute_dict(lib: Any, tmp: Path) -> Any:
    d = _sub(lib, "utilities.data").AttributeDict(a=1)
    d.b = 2
    return {"items": dict(d), "attr": d.a}


def _seed_logged(lib: Any, tmp: Path) -> Any:
    import logging

    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Collect(logging.INFO)
    root = logging.getLogger(lib.__name__)  # Lightning's package logger does not propagate to the root
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        lib.seed_everything(11)
        lib.seed_everything(12, verbose=False)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    return [message for message in records if "seed" in message.lower()]


UTILITIES = [
    Case("seed-logged", _seed_logged),
    Case("seed-everything", _seed),
    Case("seed-out-of-range", _seed_out_of_range, phrase=r"bounds"),
    Case("seed-from-env", _seed_from_env),
    Case("reset-seed", _reset_seed),
    Case("apply-to-collection", _apply),
    Case("move-data-to-device", _move),
    Case("rank-zero-only", _rank_zero_only),
    Case("rank-zero-only-other-rank", _rank_zero_only_default),
    Case("attribute-dict", _attribute_dict),
]


# ----------------------------------------------------------------------------------------------- fabric


def _properties(lib: Any, tmp: Path) -> Any:
    fabric = _fabric(lib)
    return {
        "device": str(fabric.device),
        "global_rank": fabric.global_rank,
        "local_rank": fabric.local_rank,
        "node_rank": fabric.node_rank,
        "world_size": fabric.world_size,
        "is_global_zero": fabric.is_global_zero,
        "strategy": type(fabric.strategy).__name__,
        "accelerator": type(fabric.accelerator).__name__,
        "loggers": fabric.loggers,
    }


def _logger_without_loggers(lib: Any, tmp: Path) -> Any:
    return _fabric(lib).logger


def _ddp_before_setup(lib: Any, tmp: Path) -> Any:
    strategy = _sub(lib, "strategies").DDPStrategy()
    return [strategy.process_group_backend, strategy.global_rank, strategy.world_size]


def _launch_function(lib: Any, tmp: Path) -> Any:
    fabric = _fabric(lib)
    return fabric.launch(lambda f, x: (f.world_size, x), 5)


def _launch_with(function: Any) -> Callable[[Any, Path], Any]:
    def fn(lib: Any, tmp: Path) -> Any:
        return _fabric(lib).launch(function)

    return fn


def _launch_twice(lib: Any, tmp: Path) -> Any:
    fabric = _fabric(lib)
    return [fabric.launch(), fabric.launch(), fabric.launch(lambda f, y=1: (f.global_rank, y), y=2)]


def _launch_spawn_without_function(lib: Any, tmp: Path) -> Any:
    # Refused before any process starts: the spawned processes would have nothing to run.
    return _fabric(lib, strategy="ddp_spawn", devices=2).launch()


def _setup_train(lib: Any, tmp: Path) -> Any:
    return _train(lib)


def _setup_clip_norm(lib: Any, tmp: Path) -> Any:
    return _train(lib, clip={"max_norm": 0.5})


def _setup_clip_value(lib: Any, tmp: Path) -> Any:
    return _train(lib, clip={"clip_val": 0.01})


def _clip_both(lib: Any, tmp: Path) -> Any:
    return _train(lib, steps=1, clip={"clip_val": 0.01, "max_norm": 1.0})


def _train_double(lib: Any, tmp: Path) -> Any:
    return _train(lib, precision="64-true")


def _train_bf16_mixed(lib: Any, tmp: Path) -> Any:
    return _train(lib, precision="bf16-mixed")


def _setup_twice(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    model = fabric.setup(torch.nn.Linear(2, 2))
    fabric.setup(model)
    return "no error"


def _setup_module_then_optimizers(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    model = fabric.setup_module(torch.nn.Linear(2, 2))
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    return [_sub(lib, "wrappers").is_wrapped(model), _sub(lib, "wrappers").is_wrapped(optimizer)]


def _unwrapped_backward(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    model = torch.nn.Linear(2, 1)
    loss = model(torch.ones(1, 2)).sum()
    fabric.backward(loss)
    return [round(float(g), 5) for g in model.weight.grad.flatten()]


def _no_backward_sync(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    model = fabric.setup(torch.nn.Linear(2, 1))
    with fabric.no_backward_sync(model):
        fabric.backward(model(torch.ones(1, 2)).sum())
    return model.weight.grad.tolist()


def _no_backward_sync_unwrapped(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    with fabric.no_backward_sync(torch.nn.Linear(2, 1)):
        pass
    return "entered"


def _init_module(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib, precision="bf16-true")
    with fabric.init_module():
        model = torch.nn.Linear(2, 2)
    with fabric.init_module(empty_init=True):
        empty = torch.nn.Linear(2, 2)
    return [str(model.weight.dtype), str(model.weight.device), str(empty.weight.dtype)]


def _init_tensor(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib, precision="64-true")
    with fabric.init_tensor():
        t = torch.zeros(1)
    return str(t.dtype)


def _autocast(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib, precision="bf16-mixed")
    model = torch.nn.Linear(2, 2)
    with fabric.autocast():
        out = model(torch.ones(1, 2))
    return str(out.dtype)


def _forward_precision(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib, precision="bf16-true")
    model = fabric.setup(torch.nn.Linear(2, 2))
    out = model(torch.ones(1, 2))
    return [str(out.dtype), str(next(model.parameters()).dtype)]


def _collectives_single(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    gathered = fabric.all_gather(torch.tensor([1.0, 2.0]))
    reduced = fabric.all_reduce(torch.tensor(3.0), reduce_op="sum")
    mean = fabric.all_reduce(torch.tensor(3.0))
    fabric.barrier()
    return {
        "gather": (list(gathered.shape), gathered.tolist()),
        "reduce": float(reduced),
        "mean": float(mean),
        "broadcast": fabric.broadcast({"a": 1}),
        "gather_dict": sorted(fabric.all_gather({"x": torch.tensor(1.0)})),
    }


def _to_device(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    out = fabric.to_device({"a": torch.ones(1), "b": [torch.zeros(1)]})
    return [str(out["a"].device), type(out["b"]).__name__]


def _call(lib: Any, tmp: Path) -> Any:
    calls: list[Any] = []

    class Callback:
        def on_train_start(self, x: int, y: int = 0) -> None:
            calls.append(("first", x, y))

    class Other:
        def on_train_start(self, x: int, y: int = 0) -> None:
            calls.append(("second", x, y))

    fabric = _fabric(lib, callbacks=[Callback(), Other()])
    fabric.call("on_train_start", 1, y=2)
    fabric.call("on_not_implemented", 3)
    return calls


def _call_single_callback(lib: Any, tmp: Path) -> Any:
    calls: list[int] = []

    class Callback:
        def hook(self) -> None:
            calls.append(1)

    fabric = _fabric(lib, callbacks=Callback())
    fabric.call("hook")
    return calls


def _call_non_callable(lib: Any, tmp: Path) -> Any:
    class Callback:
        hook = 3

    fabric = _fabric(lib, callbacks=[Callback()])
    fabric.call("hook")
    return "no error"


def _dataloaders(lib: Any, tmp: Path) -> Any:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    fabric = _fabric(lib)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4, shuffle=False))
    return {"len": len(loader), "batches": [b[0].tolist() for b in loader], "device": str(next(iter(loader))[0].device)}


def _dataloaders_bad(lib: Any, tmp: Path) -> Any:
    fabric = _fabric(lib)
    fabric.setup_dataloaders([1, 2, 3])
    return "accepted"


# --------------------------------------------------------------------------------------------- checkpoints


def _save_load(lib: Any, tmp: Path, **load_kwargs: Any) -> dict[str, Any]:
    import torch

    fabric = _fabric(lib)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = fabric.setup(model, optimizer)
    fabric.backward(model(torch.ones(2, 4)).sum())
    optimizer.step()
    path = tmp / "ckpt.pt"
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": 3, "meta": {"a": 1}})
    saved = _params(model)
    fresh = _model()
    fresh_opt = torch.optim.Adam(fresh.parameters())
    fresh, fresh_opt = fabric.setup(fresh, fresh_opt)
    state = {"model": fresh, "optimizer": fresh_opt, "step": 0}
    remainder = fabric.load(path, state, **load_kwargs)
    return {
        "same_params": _params(fresh) == saved,
        "step": state["step"],
        "remainder": sorted(remainder),
        "opt_state": len(fresh_opt.state_dict()["state"]),
    }


def _load_plain(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    path = tmp / "plain.pt"
    fabric.save(path, {"a": torch.ones(2), "n": 1})
    loaded = fabric.load(path)
    return {key: (value.tolist() if hasattr(value, "tolist") else value) for key, value in sorted(loaded.items())}


def _save_filter(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    model = torch.nn.Linear(2, 2)
    path = tmp / "filtered.pt"
    fabric.save(path, {"model": model, "step": 1}, filter={"model": lambda k, v: "weight" in k})
    raw = torch.load(path, weights_only=False)
    return {key: sorted(value) if isinstance(value, dict) else value for key, value in sorted(raw.items())}


def _save_filter_drops_all(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    path = tmp / "all-filtered.pt"
    fabric.save(path, {"model": torch.nn.Linear(2, 2), "step": 1}, filter={"model": lambda k, v: False})
    return sorted(torch.load(path, weights_only=False))


def _save_filter_bad_key(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    fabric.save(tmp / "x.pt", {"model": torch.nn.Linear(2, 2)}, filter={"nope": lambda k, v: True})
    return "saved"


def _load_strict_missing(lib: Any, tmp: Path) -> Any:

    fabric = _fabric(lib)
    path = tmp / "partial.pt"
    fabric.save(path, {"a": 1})
    state = {"a": 0, "b": 0}
    fabric.load(path, state, strict=True)
    return state


def _load_not_strict_missing(lib: Any, tmp: Path) -> Any:
    fabric = _fabric(lib)
    path = tmp / "partial.pt"
    fabric.save(path, {"a": 1})
    state = {"a": 0, "b": 0}
    remainder = fabric.load(path, state, strict=False)
    return [state, remainder]


def _load_strict_model_keys(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    path = tmp / "model.pt"
    fabric.save(path, {"model": torch.nn.Linear(2, 2)})
    fabric.load(path, {"model": fabric.setup(torch.nn.Linear(2, 3))}, strict=True)
    return "loaded"


def _load_missing_file(lib: Any, tmp: Path) -> Any:
    fabric = _fabric(lib)
    fabric.load(tmp / "does-not-exist.pt", {})
    return "loaded"


def _load_raw_module(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    source = torch.nn.Linear(2, 2)
    path = tmp / "raw.pt"
    torch.save(source.state_dict(), path)
    target = torch.nn.Linear(2, 2)
    fabric.load_raw(path, target)
    return all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))


def _load_planted_payload(lib: Any, tmp: Path) -> Any:
    import pickle

    from fabric_core.testing.payloads import executions, plant_in_torch_file

    fabric = _fabric(lib)
    path = tmp / "planted.pt"
    fabric.save(path, {"step": 1})
    marker = tmp / "EXECUTED"
    plant_in_torch_file(path, "evil", marker)
    try:
        fabric.load(path)
        caught = "loaded"
    except pickle.UnpicklingError:
        caught = "except pickle.UnpicklingError"
    except Exception as exc:
        caught = f"other: {type(exc).__name__}"
    return {"caught": caught, "payload_executions": executions(marker)}


CHECKPOINTS = [
    Case("load-planted-payload", _load_planted_payload),
    Case("save-load-round-trip", _save_load),
    Case("load-without-state", _load_plain),
    Case("save-filter", _save_filter),
    Case("save-filter-drops-every-entry", _save_filter_drops_all),
    Case("save-filter-unknown-key", _save_filter_bad_key, phrase=r"nope"),
    Case("load-strict-missing-key", _load_strict_missing, phrase=r"\bb\b"),
    Case("load-not-strict-missing-key", _load_not_strict_missing),
    Case("load-strict-model-shape", _load_strict_model_keys, phrase=r"size mismatch"),
    Case("load-missing-file", _load_missing_file, phrase=r"does-not-exist"),
    Case("load-raw-module", _load_raw_module),
]


# -------------------------------------------------------------------------------------------------- loggers


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _csv_logger(lib: Any, tmp: Path) -> Any:
    logger = _sub(lib, "loggers").CSVLogger(root_dir=tmp, name="exp", flush_logs_every_n_steps=1)
    logger.log_metrics({"loss": 1.5, "acc": 0.5}, step=0)
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.finalize("success")
    files = _tree(tmp)
    contents = {name: (tmp / name).read_text() for name in files}
    return {
        "files": files,
        "contents": contents,
        "name": logger.name,
        "version": logger.version,
        "root_dir": os.path.relpath(logger.root_dir, tmp),
        "log_dir": os.path.relpath(logger.log_dir, tmp),
    }


def _csv_hyperparams(lib: Any, tmp: Path) -> Any:
    _sub(lib, "loggers").CSVLogger(root_dir=tmp).log_hyperparams({"lr": 0.1})
    return _tree(tmp)


def _csv_logger_versions(lib: Any, tmp: Path) -> Any:
    versions = []
    for _ in range(2):
        logger = _sub(lib, "loggers").CSVLogger(root_dir=tmp)
        logger.log_metrics({"x": 1.0})
        logger.finalize("success")
        versions.append(logger.version)
    return {"versions": versions, "files": _tree(tmp)}


def _fabric_log(lib: Any, tmp: Path) -> Any:
    import torch

    logger = _sub(lib, "loggers").CSVLogger(root_dir=tmp, name="run", version=0)
    fabric = _fabric(lib, loggers=logger)
    fabric.log("loss", torch.tensor(2.0), step=0)
    fabric.log_dict({"a": 1, "b": torch.tensor(0.5)}, step=1)
    logger.finalize("success")
    return {"files": _tree(tmp), "metrics": (tmp / "run" / "version_0" / "metrics.csv").read_text()}


LOGGERS = [
    Case("csv-logger-layout", _csv_logger),
    Case("csv-logger-hyperparams", _csv_hyperparams, phrase=r"hyperparameters"),
    Case("csv-logger-versions", _csv_logger_versions),
    Case("fabric-log", _fabric_log),
]


FABRIC = [
    Case("properties", _properties),
    Case("logger-without-loggers", _logger_without_loggers, phrase=r""),
    Case("launch-function", _launch_function),
    Case("launch-none", _launch_with(None), phrase=r"needs to be a callable, but got None"),
    Case("launch-called-result", _launch_with("result of fn()"), phrase=r"needs to be a callable.*HINT"),
    Case("launch-no-parameter", _launch_with(lambda: 1), phrase=r"needs to take at least one argument"),
    Case("launch-twice", _launch_twice),
    Case(
        "launch-spawn-without-function",
        _launch_spawn_without_function,
        phrase=r"`DDPStrategy` strategy, `\.launch\(\)` needs to be called with a function",
    ),
    Case("ddp-strategy-before-setup", _ddp_before_setup),
    Case("setup-train", _setup_train),
    Case("clip-gradients-norm", _setup_clip_norm),
    Case("clip-gradients-value", _setup_clip_value),
    Case("clip-gradients-both", _clip_both, phrase=r"clip_val.*max_norm|max_norm.*clip_val|only one"),
    Case("train-64-true", _train_double),
    Case("train-bf16-mixed", _train_bf16_mixed),
    Case("setup-twice", _setup_twice, phrase=r"only once"),
    Case("setup-module-then-optimizers", _setup_module_then_optimizers),
    Case("backward-unwrapped-model", _unwrapped_backward),
    Case("no-backward-sync", _no_backward_sync),
    Case("no-backward-sync-unwrapped", _no_backward_sync_unwrapped, phrase=r"set up|setup"),
    Case("init-module", _init_module),
    Case("init-tensor", _init_tensor),
    Case("autocast", _autocast),
    Case("forward-precision", _forward_precision),
    Case("collectives-one-process", _collectives_single),
    Case("to-device", _to_device),
    Case("call", _call),
    Case("call-single-callback", _call_single_callback),
    Case("call-non-callable", _call_non_callable, phrase=r"hook"),
    Case("setup-dataloaders", _dataloaders),
    Case("setup-dataloaders-not-a-loader", _dataloaders_bad, phrase=r"DataLoader"),
]


# ------------------------------------------------------------------------------ more of the public surface


def _env_case(
    class_name: str, env: dict[str, str], attrs: tuple[str, ...], detect: bool = True
) -> Callable[[Any, Path], Any]:
    def fn(lib: Any, tmp: Path) -> Any:
        for name in [n for n in os.environ if n.startswith(("SLURM_", "LSB_", "KUBERNETES", "TORCHELASTIC", "PMI_"))]:
            del os.environ[name]
        for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
            os.environ.pop(name, None)
        os.environ.update(env)
        cls = getattr(_sub(lib, "plugins.environments"), class_name)
        result: dict[str, Any] = {"detect": cls.detect()} if detect else {}
        environment = cls()
        for attr in attrs:
            value = getattr(environment, attr)
            result[attr] = value() if callable(value) else value
        return result

    return fn


_RANK_ATTRS = (
    "creates_processes_externally",
    "main_address",
    "main_port",
    "world_size",
    "global_rank",
    "local_rank",
    "node_rank",
)
_SLURM = {
    "SLURM_NTASKS": "4",
    "SLURM_JOB_ID": "1234567",
    "SLURM_NODELIST": "node[7-8]",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NAME": "train.py",
    "SLURM_NTASKS_PER_NODE": "2",
}
_ELASTIC = {
    "TORCHELASTIC_RUN_ID": "r",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29999",
    "WORLD_SIZE": "4",
    "RANK": "2",
    "LOCAL_RANK": "0",
    "GROUP_RANK": "1",
}
_KUBEFLOW = {
    "KUBERNETES_PORT": "tcp://10.0.0.1:443",
    "MASTER_ADDR": "10.0.0.2",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "2",
    "RANK": "1",
}
_LIGHTNING = {"MASTER_ADDR": "10.0.0.3", "MASTER_PORT": "30000", "NODE_RANK": "1", "LOCAL_RANK": "1"}


def _lsf_case(with_job_id: bool) -> Callable[[Any, Path], Any]:
    def fn(lib: Any, tmp: Path) -> Any:
        import socket

        rankfile = tmp / "rankfile"
        rankfile.write_text(f"launch-node\n{socket.gethostname()}\n{socket.gethostname()}\nother-node\n")
        env = {
            "LSB_DJOB_RANKFILE": str(rankfile),
            "JSM_NAMESPACE_LOCAL_RANK": "1",
            "JSM_NAMESPACE_SIZE": "3",
            "JSM_NAMESPACE_RANK": "1",
        }
        if with_job_id:
            env["LSB_JOBID"] = "123456"
        return _env_case("LSFEnvironment", env, _RANK_ATTRS)(lib, tmp)

    return fn


ENVIRONMENTS = [
    Case("lsf-environment", _lsf_case(with_job_id=True)),
    Case("lsf-environment-without-job-id", _lsf_case(with_job_id=False), phrase=r"LSB_JOBID"),
    Case("slurm-environment", _env_case("SLURMEnvironment", _SLURM, _RANK_ATTRS)),
    Case("torchelastic-environment", _env_case("TorchElasticEnvironment", _ELASTIC, _RANK_ATTRS)),
    Case("kubeflow-environment", _env_case("KubeflowEnvironment", _KUBEFLOW, _RANK_ATTRS[:5], detect=False)),
    Case("kubeflow-detect", _env_case("KubeflowEnvironment", _KUBEFLOW, ()), phrase=r"detected automatically"),
    Case("lightning-environment", _env_case("LightningEnvironment", _LIGHTNING, _RANK_ATTRS)),
    Case("mpi-environment-detect", _env_case("MPIEnvironment", {}, ())),
]


def _precision_plugins(lib: Any, tmp: Path) -> Any:
    import torch

    plugins = _sub(lib, "plugins")
    mixed = plugins.MixedPrecision(precision="bf16-mixed", device="cpu")
    half = plugins.HalfPrecision("bf16-true")
    double = plugins.DoublePrecision()
    x = torch.ones(1, dtype=torch.float64)
    return {
        "mixed": [mixed.precision, str(mixed.convert_input(x).dtype), str(mixed.convert_output(x).dtype)],
        "half": [
            half.precision,
            str(half.convert_input(x).dtype),
            str(half.convert_module(torch.nn.Linear(1, 1)).weight.dtype),
        ],
        "double": [double.precision, str(double.convert_input(torch.ones(1)).dtype)],
    }


def _module_dtype(precision: Any) -> str:
    import torch

    return str(precision.convert_module(torch.nn.Linear(1, 1)).weight.dtype)


def _precision_aliases(lib: Any, tmp: Path) -> Any:
    import warnings

    out = []
    for value in (32, "32", 64, "64", "bf16", "16-mixed"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fabric = _fabric(lib, precision=value)
        out.append(
            [
                str(value),
                type(fabric.strategy.precision).__name__,
                str(getattr(fabric.strategy.precision, "precision", "")),
            ]
        )
    return out


def _cpu_accelerator(lib: Any, tmp: Path) -> Any:
    cpu = _sub(lib, "accelerators").CPUAccelerator
    return {
        "parse_devices": cpu.parse_devices(3),
        "parallel": [str(d) for d in cpu.get_parallel_devices(2)],
        "available": cpu.is_available(),
        "auto_count": cpu.auto_device_count(),
    }


def _data_utilities(lib: Any, tmp: Path) -> Any:
    import torch
    from torch.utils.data import DataLoader, IterableDataset, TensorDataset

    class Stream(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            return iter(range(3))

    data = _sub(lib, "utilities.data")
    sized = DataLoader(TensorDataset(torch.arange(4.0)))
    return {
        "has_len": [data.has_len(sized), data.has_len(DataLoader(Stream()))],
        "iterable": [data.has_iterable_dataset(sized), data.has_iterable_dataset(DataLoader(Stream()))],
        "workers": data.suggested_max_num_workers(1),
    }


def _rank_zero_warn(lib: Any, tmp: Path) -> Any:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _sub(lib, "utilities.rank_zero").rank_zero_warn("careful")
    # `filterwarnings(category=UserWarning)` must keep working: compare the family, not the class name.
    return [(issubclass(w.category, UserWarning), str(w.message), Path(w.filename).name) for w in caught]


def _seed_workers_env(lib: Any, tmp: Path) -> Any:
    lib.seed_everything(3, workers=True)
    return [os.environ.get("PL_GLOBAL_SEED"), os.environ.get("PL_SEED_WORKERS")]


def _wrapped_module_surface(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    model = torch.nn.Linear(2, 2)
    model.custom = 5  # type: ignore[assignment]
    wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return {
        "state_dict": sorted(wrapped.state_dict()),
        "attr": wrapped.custom,
        "weight_is_same": wrapped.weight is model.weight,
        "module_is_same": wrapped.module is model,
        "param_groups": len(optimizer.param_groups),
        "optimizer_state_keys": sorted(optimizer.state_dict()),
        "training": wrapped.training,
    }


def _unwrap_objects(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib)
    model = torch.nn.Linear(2, 2)
    wrapped = fabric.setup(model)
    out = _sub(lib, "wrappers")._unwrap_objects({"m": wrapped, "n": 1})
    return [out["m"] is model, out["n"]]


def _ddp_needs_launch(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = lib.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.setup(torch.nn.Linear(2, 2))
    return "set up"


def _print(lib: Any, tmp: Path) -> Any:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        _fabric(lib).print("hello", 1, sep="-")
    return buffer.getvalue()


def _rank_zero_first(lib: Any, tmp: Path) -> Any:
    fabric = _fabric(lib)
    order = []
    with fabric.rank_zero_first():
        order.append(fabric.global_rank)
    with fabric.rank_zero_first(local=True):
        order.append(fabric.local_rank)
    return order


def _autocast_16_mixed_cpu(lib: Any, tmp: Path) -> Any:
    import torch

    fabric = _fabric(lib, precision="16-mixed")
    with fabric.autocast():
        out = torch.nn.Linear(2, 2)(torch.ones(1, 2))
    return [type(fabric.strategy.precision).__name__, str(out.dtype)]


def _tensorboard_root(lib: Any, tmp: Path) -> Any:
    import importlib.util

    import pytest

    if not any(importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX")):
        pytest.skip("neither tensorboard nor tensorboardX is installed")
    logger = _sub(lib, "loggers").TensorBoardLogger(root_dir=str(tmp / "tb"), name="exp", version=1)
    return [os.path.relpath(logger.root_dir, tmp), os.path.relpath(logger.log_dir, tmp), logger.name, logger.version]


def _resolved(**kwargs: Any) -> Callable[[Any, Path], Any]:
    """What ``Fabric(**kwargs)`` resolves to, read before any process is launched."""

    def fn(lib: Any, tmp: Path) -> Any:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fabric = lib.Fabric(**kwargs)
        return {
            "strategy": type(fabric.strategy).__name__,
            "accelerator": type(fabric.accelerator).__name__,
            "precision": type(fabric.strategy.precision).__name__,
            "world_size": fabric.world_size,
            "global_rank": fabric.global_rank,
            "device": str(fabric.device),
        }

    return fn


RESOLUTION = [
    Case("resolve-defaults", _resolved()),
    Case("resolve-cpu-auto-devices", _resolved(accelerator="cpu", devices="auto")),
    Case("resolve-ddp-2", _resolved(accelerator="cpu", devices=2, strategy="ddp")),
    Case("resolve-ddp-2x2-nodes", _resolved(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp")),
    Case("resolve-ddp-spawn", _resolved(accelerator="cpu", devices=2, strategy="ddp_spawn")),
    Case(
        "resolve-ddp-unused-true", _resolved(accelerator="cpu", devices=2, strategy="ddp_find_unused_parameters_true")
    ),
    Case("resolve-cpu-2-auto-strategy", _resolved(accelerator="cpu", devices=2)),
    Case("resolve-fsdp-cpu", _resolved(accelerator="cpu", devices=2, strategy="fsdp"), phrase=r""),
    Case("resolve-64-true", _resolved(accelerator="cpu", precision="64-true")),
    Case("resolve-bf16-true", _resolved(accelerator="cpu", precision="bf16-true")),
]


def _lightning_module(lib: Any, tmp: Path) -> Any:
    import torch

    class Module(torch.nn.Linear):
        """LightningModule-shaped: a ``_fabric`` attribute and hooks, without the lightning package."""

        def __init__(self) -> None:
            super().__init__(2, 2)
            self._fabric: Any = None
            self.calls: list[str] = []

        def on_train_start(self) -> None:
            self.calls.append("on_train_start")

    fabric = _fabric(lib)
    module = Module()
    _, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
    fabric.call("on_train_start")
    other = Module()
    fabric.setup_module(other)
    return {
        "fabric_set": module._fabric is fabric,
        "optimizers": [o is optimizer for o in getattr(module, "_fabric_optimizers", [])],
        "hook_calls": module.calls,
        "setup_module_fabric_set": other._fabric is fabric,
    }


def _torchrun_resolution(lib: Any, tmp: Path) -> Any:
    os.environ.update(
        TORCHELASTIC_RUN_ID="r",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29999",
        WORLD_SIZE="2",
        RANK="1",
        LOCAL_RANK="1",
        GROUP_RANK="0",
        LOCAL_WORLD_SIZE="2",
        # fabric-core joins the 2-process job these variables describe; no peer comes, so fail within a second.
        FABRIC_CORE_RENDEZVOUS_TIMEOUT="1",
    )
    return _resolved(accelerator="cpu")(lib, tmp)


_TPU_PATHS = (
    "accelerators.tpu",
    "plugins.precision.tpu",
    "plugins.precision.tpu_bf16",
    "plugins.precision.xlabf16",
    "strategies.single_tpu",
)
_TPU_DEPRECATED = re.compile(r"`\w+` class is deprecated|'single_tpu' strategy is deprecated\. Use 'single_xla'")


def _tpu_deprecated_paths(lib: Any, tmp: Path) -> Any:
    """Lightning's deprecated TPU paths: one module, its classes, what building each warns and raises."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        modules = [_sub(lib, path) for path in _TPU_PATHS]
    result: dict[str, Any] = {
        "import_warnings": [str(w.message) for w in caught if _TPU_DEPRECATED.search(str(w.message))],
        "one_module": all(module is modules[0] for module in modules),
    }
    at_packages = {
        "accelerators": ("TPUAccelerator",),
        "strategies": ("SingleTPUStrategy",),
        "plugins": ("TPUPrecision", "TPUBf16Precision", "XLABf16Precision"),
        "plugins.precision": ("TPUPrecision", "TPUBf16Precision", "XLABf16Precision"),
    }
    result["at_packages"] = {
        f"{package}.{name}": getattr(_sub(lib, package), name) is getattr(modules[0], name)
        for package, names in at_packages.items()
        for name in names
    }
    for name, kwargs in (
        ("TPUAccelerator", {}),
        ("TPUPrecision", {}),
        ("XLABf16Precision", {}),
        ("TPUBf16Precision", {}),
        ("SingleTPUStrategy", {"device": 0}),
    ):
        cls = getattr(modules[0], name)
        error = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cls(**kwargs)  # no torch_xla here: both refuse after warning
            except Exception as exc:
                error = builtin_base(type(exc)).__name__
        deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        result[name] = {
            "bases": [base.__name__ for base in cls.__mro__[1:3]],
            "error": error,
            "warnings": [
                (w.category.__name__, match.group() if (match := _TPU_DEPRECATED.search(str(w.message))) else None)
                for w in deprecations
            ],
        }
    return result


def _fsdp_lightning_arguments(lib: Any, tmp: Path) -> Any:
    strategy = _sub(lib, "strategies").FSDPStrategy(sharding_strategy="SHARD_GRAD_OP")
    return {
        "sharding_strategy": str(getattr(strategy, "sharding_strategy", None)),
        "cpu_offload": type(getattr(strategy, "cpu_offload", None)).__name__,
    }


MORE = [
    Case("lightning-module-setup", _lightning_module),
    Case("torchrun-auto-resolution", _torchrun_resolution),
    Case("fsdp-lightning-arguments", _fsdp_lightning_arguments),
    Case("precision-plugins", _precision_plugins),
    Case("precision-aliases", _precision_aliases),
    Case("cpu-accelerator", _cpu_accelerator),
    Case("data-utilities", _data_utilities),
    Case("rank-zero-warn", _rank_zero_warn),
    Case("seed-workers-env", _seed_workers_env),
    Case("wrapped-module-surface", _wrapped_module_surface),
    Case("unwrap-objects", _unwrap_objects),
    Case("ddp-setup-before-launch", _ddp_needs_launch, phrase=r"launch\(\)"),
    Case("print", _print),
    Case("rank-zero-first", _rank_zero_first),
    Case("autocast-16-mixed-cpu", _autocast_16_mixed_cpu),
    Case("tensorboard-root-dir", _tensorboard_root),
    Case("tpu-deprecated-paths", _tpu_deprecated_paths),
]

CASES = CONSTRUCTION + RESOLUTION + UTILITIES + FABRIC + CHECKPOINTS + LOGGERS + ENVIRONMENTS + MORE
