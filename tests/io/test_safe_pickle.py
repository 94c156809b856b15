"""The allow-list unpickler: every way a pickle reaches a global is checked, and nothing refused ever runs."""

from __future__ import annotations

import copyreg
import io
import os
import pickle
from pathlib import Path

import pytest
import torch

from fabric_core.errors import CheckpointError
from fabric_core.io.safe_pickle import RefusedGlobal, check_torch_file, load_restricted, scan
from fabric_core.testing.payloads import Payload, executions

SYSTEM = ("posix", "system") if os.name == "posix" else ("nt", "system")


def hand_written(marker: Path) -> dict[str, bytes]:
    """The same call of os.system spelled with each opcode that names a global."""
    command = f"touch {marker}.$$".encode()
    return {
        "GLOBAL (protocol 0)": b"cposix\nsystem\n(S'" + command + b"'\ntR.",
        "INST": b"(S'" + command + b"'\niposix\nsystem\n.",
        "STACK_GLOBAL": pickle.dumps(Payload(marker), protocol=4),
        "nested in a dict": pickle.dumps({"a": [1, (2, Payload(marker))]}, protocol=2),
        "getattr detour": b"cbuiltins\ngetattr\n(cos\nsystem\nS'x'\ntR.",
    }


@pytest.mark.parametrize(
    "protocol", ["GLOBAL (protocol 0)", "INST", "STACK_GLOBAL", "nested in a dict", "getattr detour"]
)
def test_every_opcode_that_names_a_global_is_checked(tmp_path: Path, protocol: str) -> None:
    data = hand_written(tmp_path / "PWNED")[protocol]
    for read in (lambda: scan(data, set()), lambda: load_restricted(io.BytesIO(data), {("torch", "Size")})):
        with pytest.raises(RefusedGlobal) as info:
            read()
        assert (info.value.module, info.value.name) in {SYSTEM, ("builtins", "getattr"), ("os", "system")}
    assert executions(tmp_path / "PWNED") == 0


def test_the_extension_registry_goes_through_the_allow_list_too(tmp_path: Path) -> None:
    copyreg.add_extension("posix", "system", 0x7FFFF0)
    try:
        command = f"touch {tmp_path}/PWNED.$$".encode()
        # PROTO 2, EXT4 <code>, MARK, BINUNICODE <command>, TUPLE, REDUCE, STOP
        data = b"\x80\x02\x84" + (0x7FFFF0).to_bytes(4, "little") + b"(X" + len(command).to_bytes(4, "little")
        data += command + b"tR."
        with pytest.raises(RefusedGlobal, match=r"posix\.system"):
            scan(data, set())
        assert executions(tmp_path / "PWNED") == 0
        pickle.loads(data)  # plain pickle runs the bytes (and caches the code process-wide) ...
        assert executions(tmp_path / "PWNED") == 1
        with pytest.raises(RefusedGlobal, match=r"posix\.system"):  # ... which must not open a way around the check
            scan(data, set())
    finally:
        copyreg.remove_extension("posix", "system", 0x7FFFF0)
    assert executions(tmp_path / "PWNED") == 1


def test_allowed_globals_are_built_only_when_loading_and_never_when_scanning() -> None:
    data = pickle.dumps({"size": torch.Size([2, 3]), "n": 1})
    assert load_restricted(io.BytesIO(data), {("torch", "Size")}) == {"size": torch.Size([2, 3]), "n": 1}
    scan(data, {("torch", "Size")})  # builds nothing, refuses nothing


def test_a_torch_file_is_scanned_without_reading_its_tensors(tmp_path: Path) -> None:
    path = tmp_path / "ok.pt"
    torch.save({"w": torch.ones(3), "step": 2}, path)
    check_torch_file(
        path, {("torch._utils", "_rebuild_tensor_v2"), ("torch", "FloatStorage"), ("collections", "OrderedDict")}
    )
    with pytest.raises(CheckpointError, match=r"torch\._utils\._rebuild_tensor_v2") as info:
        check_torch_file(path, set())
    assert info.value.reason == "unsafe" and info.value.path == str(path)
    assert isinstance(info.value, pickle.UnpicklingError)


def test_a_torch_file_in_the_legacy_format_is_refused_not_unpickled(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    torch.save({"x": Payload(tmp_path / "PWNED")}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="not a zip archive") as info:
        check_torch_file(path, {SYSTEM})
    assert info.value.reason == "unsafe" and isinstance(info.value, pickle.UnpicklingError)
    assert executions(tmp_path / "PWNED") == 0


def test_a_truncated_torch_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "cut.pt"
    torch.save({"w": torch.ones(1000)}, path)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(CheckpointError) as info:
        check_torch_file(path, set())
    assert info.value.reason == "corrupt"
