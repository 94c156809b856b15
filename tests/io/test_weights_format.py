"""Safetensors files and Hugging Face folders in one process: the format, the checks, names, dtypes, bad input.

The files are read back with the ``safetensors`` package and written by it, so both directions meet the
reference implementation; every damaged file is refused naming itself (and the tensor), before the module
is touched.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from fabric_core import Fabric
from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io.weights.header import byte_runs
from fabric_core.io.weights.layout import parse_shard_size
from fabric_core.io.weights.load import WeightsMismatchError


class Net(nn.Module):
    def __init__(self, seed: int = 0, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(11, 6)
        self.body = nn.Sequential(nn.Linear(6, 9), nn.GELU(), nn.Linear(9, 6))
        self.head = nn.Linear(6, 11, bias=False)
        self.register_buffer("scale", torch.arange(6.0) + seed)
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.to(dtype)


def same(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k].to(sa[k].dtype)) for k in sa)


@pytest.fixture
def fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1)


def test_one_file_reads_back_with_the_safetensors_package_under_the_modules_own_names(fabric, tmp_path):
    model = Net()
    wrapped = fabric.setup(model)
    fabric.save_raw(tmp_path / "net.safetensors", wrapped)
    loaded = load_file(tmp_path / "net.safetensors")
    assert sorted(loaded) == sorted(model.state_dict())  # no `_forward_module.`, no non-persistent buffer
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded[name], tensor)


def test_a_folder_is_sharded_by_size_with_an_index_that_from_pretrained_reads(fabric, tmp_path):
    model = Net()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.json").write_text("{}")  # what a user keeps beside the weights
    fabric.save_raw(tmp_path / "out", model, max_shard_size="300B")
    names = sorted(os.listdir(tmp_path / "out"))
    shards = [n for n in names if n.startswith("model-")]
    assert len(shards) >= 3 and all(n.endswith(f"-of-{len(shards):05d}.safetensors") for n in shards)
    assert "config.json" in names
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == sorted(model.state_dict())
    total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert index["metadata"]["total_size"] == total
    for name, tensor in model.state_dict().items():
        assert torch.equal(load_file(tmp_path / "out" / index["weight_map"][name])[name], tensor)

    # A later save in one file: the old shards and index go, model.safetensors alone stays (and config.json).
    fabric.save_raw(tmp_path / "out", model)
    assert sorted(os.listdir(tmp_path / "out")) == ["config.json", "model.safetensors"]


def test_a_torch_file_holds_the_plain_state_dict(fabric, tmp_path):
    model = Net()
    fabric.save_raw(tmp_path / "net.pt", fabric.setup(model))
    loaded = torch.load(tmp_path / "net.pt", weights_only=True)
    assert sorted(loaded) == sorted(model.state_dict())


def test_files_written_by_the_safetensors_package_load_with_prefixes_set_aside_and_dtypes_cast(fabric, tmp_path):
    source = Net(seed=1)
    save_file({f"module.{k}": v.contiguous() for k, v in source.state_dict().items()}, tmp_path / "ddp.safetensors")
    target = Net(seed=2, dtype=torch.bfloat16)
    result = fabric.load_raw(tmp_path / "ddp.safetensors", fabric.setup(target))
    assert result == ([], [])
    assert target.head.weight.dtype == torch.bfloat16
    assert torch.equal(target.head.weight, source.head.weight.to(torch.bfloat16))
    assert torch.equal(target.scale, source.scale.to(torch.bfloat16))


def test_a_compiled_module_saves_and_loads_under_the_plain_names(fabric, tmp_path):
    source = Net(seed=3)
    compiled = fabric.setup(torch.compile(source))
    fabric.save_raw(tmp_path / "c.safetensors", compiled)
    assert sorted(load_file(tmp_path / "c.safetensors")) == sorted(source.state_dict())
    target = Net(seed=4)
    fabric.load_raw(tmp_path / "c.safetensors", fabric.setup(torch.compile(target)))
    assert same(source, target)


def test_tied_weights_are_written_once_and_load_into_both_names(fabric, tmp_path):
    source = Net(seed=5)
    source.head.weight = source.embed.weight
    fabric.save_raw(tmp_path / "tied.safetensors", source)
    assert "head.weight" not in load_file(tmp_path / "tied.safetensors")
    target = Net(seed=6)
    target.head.weight = target.embed.weight
    assert fabric.load_raw(tmp_path / "tied.safetensors", target) == ([], [])
    assert torch.equal(target.head.weight, source.embed.weight)


def test_strict_refuses_missing_and_unexpected_names_and_loads_nothing(fabric, tmp_path):
    state = Net(seed=7).state_dict()
    partial = {k: v for k, v in state.items() if k != "head.weight"} | {"extra.weight": torch.ones(2)}
    save_file(partial, tmp_path / "p.safetensors")
    target = Net(seed=8)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(
        WeightsMismatchError, match=r"Missing in the file: 'head.weight'.*Not in the module: 'extra.weight'"
    ) as info:
        fabric.load_raw(tmp_path / "p.safetensors", target)
    assert isinstance(info.value, RuntimeError)  # as Module.load_state_dict's
    assert info.value.missing == ["head.weight"] and info.value.unexpected == ["extra.weight"]
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())

    result = fabric.load_raw(tmp_path / "p.safetensors", target, strict=False)
    assert result.missing_keys == ["head.weight"] and result.unexpected_keys == ["extra.weight"]
    assert torch.equal(target.body[0].weight, state["body.0.weight"])
    assert torch.equal(target.head.weight, before["head.weight"])


def test_a_shape_that_does_not_fit_names_the_tensor_and_loads_nothing_even_when_not_strict(fabric, tmp_path):
    state = Net(seed=9).state_dict()
    state["body.2.weight"] = torch.ones(6, 8)
    save_file(state, tmp_path / "s.safetensors")
    target = Net(seed=10)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(
        WeightsMismatchError, match=r"'body.2.weight': the file's shape is \[6, 8\], the module's \[6, 9\]"
    ):
        fabric.load_raw(tmp_path / "s.safetensors", target, strict=False)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def _damaged(tmp_path: Path, edit) -> Path:
    save_file(Net(seed=11).state_dict(), tmp_path / "good.safetensors")
    data = bytearray((tmp_path / "good.safetensors").read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    data, header = edit(data, header, length)
    if header is not None:
        text = json.dumps(header).encode()
        text += b" " * (length - len(text)) if len(text) <= length else b""
        data = struct.pack("<Q", len(text)) + text + data[8 + length :]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(bytes(data))
    return path


def _shift(header: dict, name: str, by: int) -> dict:
    header[name]["data_offsets"] = [o + by for o in header[name]["data_offsets"]]
    return header


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            lambda d, h, n: (d[:-10], None), r"need \d+ bytes but the file has \d+: it is truncated", id="truncated"
        ),
        pytest.param(lambda d, h, n: (d[:5], None), r"fewer than the 8", id="no-length"),
        pytest.param(lambda d, h, n: (struct.pack("<Q", 10**12) + d[8:], None), r"header claims", id="huge-length"),
        pytest.param(lambda d, h, n: (d[:8] + b"{" * n + d[8 + n :], None), r"not JSON", id="not-json"),
        pytest.param(lambda d, h, n: (d, _shift(h, "head.weight", 4)), r"'head.weight'", id="lying-offsets"),
        pytest.param(
            lambda d, h, n: (d, {**h, "embed.weight": {**h["embed.weight"], "shape": [11, 7]}}),
            r"tensor 'embed.weight' of shape \[11, 7\]",
            id="shape-against-offsets",
        ),
        pytest.param(
            lambda d, h, n: (d, {**h, "scale": {**h["scale"], "dtype": "F33"}}), r"'scale' has dtype 'F33'", id="dtype"
        ),
        pytest.param(lambda d, h, n: (d + b"junk", None), r"bytes after its last tensor", id="trailing"),
    ],
)
def test_a_damaged_file_is_refused_naming_it_and_nothing_is_loaded(fabric, tmp_path, edit, message):
    path = _damaged(tmp_path, edit)
    target = Net(seed=12)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(CheckpointError, match=message) as info:
        fabric.load_raw(path, target)
    assert info.value.path == str(path) and "bad.safetensors" in str(info.value)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def _folder(fabric: Fabric, tmp_path: Path) -> Path:
    fabric.save_raw(tmp_path / "f", Net(seed=13), max_shard_size="300B")
    return tmp_path / "f"


def test_an_index_naming_a_missing_shard_is_refused_naming_the_shard(fabric, tmp_path):
    folder = _folder(fabric, tmp_path)
    (folder / "model-00002-of-00004.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"names the shard 'model-00002-of-00004.safetensors', which is missing"):
        fabric.load_raw(folder, Net())


def test_a_tensor_in_two_shards_is_refused_naming_both(fabric, tmp_path):
    folder = _folder(fabric, tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first, second = sorted(set(index["weight_map"].values()))[:2]
    name = next(k for k, v in index["weight_map"].items() if v == first)
    both = load_file(folder / second) | {name: load_file(folder / first)[name]}
    save_file(both, folder / second)
    with pytest.raises(CheckpointError, match=rf"Tensor '{name}' is in two files"):
        fabric.load_raw(folder, Net())


def test_an_index_placing_a_tensor_in_a_file_that_lacks_it_is_refused(fabric, tmp_path):
    folder = _folder(fabric, tmp_path)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["ghost.weight"] = "model-00001-of-00004.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"places tensor 'ghost.weight' in 'model-00001-of-00004.safetensors'"):
        fabric.load_raw(folder, Net())


def test_a_folder_of_shards_without_its_index_is_not_taken_for_weights(fabric, tmp_path):
    folder = _folder(fabric, tmp_path)
    (folder / "model.safetensors.index.json").unlink()  # what a save killed before its last step leaves
    with pytest.raises(FileNotFoundError, match=r"neither 'model\.safetensors\.index\.json' nor 'model\.safetensors'"):
        fabric.load_raw(folder, Net())
    with pytest.raises(FileNotFoundError, match="no safetensors file at"):
        fabric.load_raw(tmp_path / "missing.safetensors", Net())


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['PAYLOAD_MARK']}",))


def test_a_pickle_named_safetensors_never_runs_its_code(fabric, tmp_path, monkeypatch):
    mark = tmp_path / "ran"
    monkeypatch.setenv("PAYLOAD_MARK", str(mark))
    (tmp_path / "evil.safetensors").write_bytes(pickle.dumps({"head.weight": Payload()}))
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        fabric.load_raw(tmp_path / "evil.safetensors", Net())
    assert not mark.exists()


def test_save_raw_refuses_an_unknown_suffix_and_a_bad_size_naming_the_choices(fabric, tmp_path):
    with pytest.raises(InvalidConfigError, match=r"suffix '.npz'.*`.safetensors`.*Hugging Face folder.*`.pt`"):
        fabric.save_raw(tmp_path / "w.npz", Net())
    with pytest.raises(InvalidConfigError, match=r"`max_shard_size='lots'` is not a size"):
        fabric.save_raw(tmp_path / "w", Net(), max_shard_size="lots")
    assert not any(tmp_path.iterdir())
    with pytest.raises(TypeError, match="loads into a module"):
        fabric.load_raw(tmp_path / "x.safetensors", torch.optim.SGD(Net().parameters(), lr=0.1))


def test_shard_sizes_read_as_save_pretrained_reads_them():
    assert parse_shard_size("5GB") == 5 * 10**9
    assert parse_shard_size("2GiB") == 2 * 2**30
    assert parse_shard_size("500MB") == 500 * 10**6
    assert parse_shard_size(1234) == 1234


@pytest.mark.parametrize(
    ("shape", "index"),
    [
        ((7, 5), (slice(4, 7), slice(0, 5))),  # Shard(0): one run
        ((7, 5), (slice(0, 7), slice(2, 4))),  # Shard(1): a run per row
        ((3, 4, 5), (slice(1, 3), slice(1, 3), slice(0, 5))),
        ((3, 4, 5), (slice(0, 3), slice(0, 4), slice(1, 2))),
        ((), ()),
    ],
)
def test_byte_runs_cover_exactly_the_block(shape, index):
    whole = torch.arange(max(1, torch.Size(shape).numel()), dtype=torch.int32).reshape(shape)
    block = whole[index].contiguous()
    offsets = [s.start for s in index]
    raw = whole.reshape(-1).view(torch.uint8)
    gathered = bytearray(block.numel() * 4)
    for at, position, length in byte_runs(shape, offsets, tuple(block.shape), 4):
        gathered[position : position + length] = bytes(raw[at : at + length].tolist())
    assert torch.equal(torch.frombuffer(gathered, dtype=torch.int32).reshape(block.shape), block)


def test_a_rank_that_cannot_see_the_files_rank_0_created_says_the_folder_must_be_shared(tmp_path):
    """What a rank on another node sees when the folder is on a disk of rank 0's node only."""
    from fabric_core.io.weights.layout import plan_shards
    from fabric_core.io.weights.pieces import save_sources
    from fabric_core.io.weights.save import _Layout, _write_blocks

    pieces = save_sources(Net().state_dict(), is_global_zero=True)
    shards = plan_shards([(p.name, p.dtype, p.shape) for p in pieces], None)
    temps = {shards[0].file: tmp_path / "on-another-node" / ".model.safetensors.tmp"}
    with pytest.raises(CheckpointError, match="filesystem that every node mounts") as info:
        _write_blocks(pieces, _Layout(shards), temps)
    assert info.value.reason == "not_shared"
