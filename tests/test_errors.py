"""fabric_core.errors: every error crosses a process boundary as it was raised."""

from __future__ import annotations

import errno
import pickle
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import pytest

from fabric_core import errors


def _examples() -> list[errors.FabricCoreError]:
    return [
        errors.UnknownNameError("strategy", "fsdpp", ["ddp", "fsdp"], unavailable={"xla": "torch_xla missing"}),
        errors.UnknownPrecisionError(17, "17-true", ["32-true", "bf16-mixed"]),
        errors.AmbiguousNameError("strategy", "ddp", ["a", "b"]),
        errors.PluginImportError("fsdp", "import failed", distribution="fabric-core-fsdp"),
        errors.MissingPackageError("install it", package="deepspeed", argument="strategy", value="deepspeed"),
        errors.UnknownOptionError("Fabric(...)", "devcies", ["devices"], owner="Fabric"),
        errors.CollectiveMismatchError("ranks differ", calls={0: "barrier 'a'", 1: "barrier 'b'"}),
        errors.CheckpointSpaceError("no room", path="/ckpt", needed=10, free=2),
        errors.UnsafeCheckpointError("refused", path="/ckpt/meta.pt"),
        errors.InvalidConfigError("bad", argument="devices", value=-1),
    ]


@pytest.mark.parametrize("error", _examples(), ids=lambda e: type(e).__name__)
def test_an_error_pickles_with_its_class_message_and_attributes(error: errors.FabricCoreError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error) and copy.args == error.args
    assert vars(copy) == vars(error)
    if isinstance(error, OSError):
        assert isinstance(copy, OSError) and (copy.errno, copy.strerror) == (error.errno, error.strerror)


def test_the_space_error_keeps_its_errno_across_a_pickle() -> None:
    copy = pickle.loads(pickle.dumps(errors.CheckpointSpaceError("no room", path="/c", needed=1, free=0)))
    assert copy.errno == errno.ENOSPC and (copy.needed, copy.free, copy.path) == (1, 0, "/c")


def _select_a_missing_strategy() -> Any:
    from fabric_core import Fabric

    return Fabric(accelerator="cpu", strategy="no-such-strategy")


def test_an_error_raised_in_a_worker_process_reaches_the_parent_as_raised() -> None:
    # What Ray and the spawn launcher do: the worker's exception is pickled back to the waiting process.
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        future = pool.submit(_select_a_missing_strategy)
        with pytest.raises(errors.UnknownNameError) as info:
            future.result(timeout=120)
    assert info.value.name == "no-such-strategy" and info.value.kind == "strategy"
    assert "ddp" in info.value.choices and "no installed plugin provides the strategy" in str(info.value)
