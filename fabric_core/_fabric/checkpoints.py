"""``Fabric.save``, ``load`` and ``load_raw``: checkpoints, checked first and written through the strategy."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from torch.nn import Module
from torch.optim import Optimizer

from fabric_core._fabric import checks as checks
from fabric_core._fabric.collectives import Collectives
from fabric_core.errors import CheckpointError
from fabric_core.io._remote import is_remote_url
from fabric_core.io.safe_pickle import forwarded_weights_only
from fabric_core.io.weights.layout import DEFAULT_SHARD_SIZE, parse_shard_size, target_kind
from fabric_core.io.weights.load import LoadResult, is_weights_path, load_weights
from fabric_core.io.weights.save import save_weights
from fabric_core.wrappers import is_wrapped, unwrap_for_checkpoint, unwrap_objects

__all__ = ["Checkpoints"]


class Checkpoints(Collectives):
    """The checkpoint methods of :class:`~fabric_core.fabric.Fabric` (its base class; not used on its own).

    Every process calls them; the strategy decides which processes write, and a barrier ends each call.
    """

    def save(
        self,
        path: str | os.PathLike[str],
        state: dict[str, Any],
        filter: dict[str, Callable[[str, Any], bool]] | None = None,
    ) -> None:
        """Save a checkpoint; call it on every process (the strategy decides which ones write).

        Args:
            path: Where to write.
            state: Modules, optimizers and objects with ``state_dict()`` are saved as their state dicts;
                other values as they are.
            filter: Per key of ``state``, ``fn(name, value) -> bool`` deciding which entries of that state
                dict are kept (a key whose entries are all dropped is left out).

        Raises:
            TypeError: ``state`` is not a dict, or ``filter`` not a dict of callables.
            ValueError: ``filter`` names keys that ``state`` lacks, or ``path`` is empty.
            OSError: ``path`` is under a file, or a folder where one file is written (checked first).
        """
        self._record("save")
        checks.check_save(self._strategy, path, state, filter)
        self._strategy.save_checkpoint(path=path, state=unwrap_for_checkpoint(state), filter=filter)
        # Named: a rank at another barrier fails at once, naming this save (see _distributed.collective_check).
        self._launched_strategy().barrier(name="fabric.save")

    def load(
        self,
        path: str | os.PathLike[str],
        state: dict[str, Any] | None = None,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Load a checkpoint and restore ``state`` from it, in place; call it on every process.

        Modules, optimizers and stateful objects are restored; plain values are written into ``state``.

        Args:
            path: The checkpoint.
            state: What to restore; ``None`` returns the whole checkpoint.
            strict: Require every key of ``state`` in the checkpoint and exact module keys.
            weights_only: Passed to ``torch.load`` (``None``: torch's default, refusing arbitrary objects).

        Returns:
            The checkpoint entries that ``state`` did not ask for.

        Raises:
            KeyError: With ``strict``, ``state`` asks for a key the checkpoint lacks.
            TypeError: ``state`` is neither a dict nor ``None``.
        """
        self._record("load")
        checks.check_load_state(state)
        self._check_seen_by_every_rank(path)
        unwrapped = unwrap_for_checkpoint(state)
        weights_only = forwarded_weights_only(weights_only)
        remainder = self._strategy.load_checkpoint(path=path, state=unwrapped, strict=strict, weights_only=weights_only)
        self._launched_strategy().barrier(name="fabric.load")
        if state is not None:
            # Plain values were restored into the unwrapped copy; wrappers stay as the user holds them.
            for key, value in unwrapped.items():
                if not is_wrapped(state[key]):
                    state[key] = value
        return remainder

    def _check_seen_by_every_rank(self, path: str | os.PathLike[str]) -> None:
        """Raise the same error on every rank when some ranks see the checkpoint and others do not.

        That is a run directory on disks of each node's own: with ddp rank 0 alone writes, so the other nodes
        would fail one by one (and their peers in the next collective, without the cause). Nobody seeing it
        is left to the strategy's own error.

        Raises:
            CheckpointError: ``reason="not_shared"``, naming the ranks and nodes that cannot see ``path``.
        """
        if self._strategy.world_size == 1:
            return
        seen = [bool(flag) for flag in self.all_gather(int(os.path.exists(path))).reshape(-1).tolist()]
        if all(seen) or not any(seen):
            return
        per_node = max(1, int(getattr(self._strategy, "num_processes", 1)))

        def where(ranks: list[int]) -> str:
            nodes = sorted({rank // per_node for rank in ranks})
            rank_list, node_list = ", ".join(map(str, ranks)), ", ".join(map(str, nodes))
            return f"{_plural('rank', ranks)} {rank_list} ({_plural('node', nodes)} {node_list})"

        blind = [rank for rank, ok in enumerate(seen) if not ok]
        sighted = [rank for rank, ok in enumerate(seen) if ok]
        raise CheckpointError(
            f"`fabric.load({os.fspath(path)!r})`: {where(blind)} cannot see this checkpoint, which {where(sighted)} "
            "can. Every process reads the checkpoint, so it must be on a filesystem that every node mounts at "
            "the same path; a disk of each node's own holds only what that node's ranks wrote (rank 0 alone "
            "writes a single-file checkpoint). Save to a shared path, or copy the checkpoint to every node.",
            path=os.fspath(path),
            reason="not_shared",
        )

    def load_raw(
        self,
        path: str | os.PathLike[str],
        obj: Module | Optimizer,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> LoadResult | None:
        """Load a module's or optimizer's plain state into it (wrapped or not); call it on every process.

        ``path`` is a ``torch.save(x.state_dict())`` file, or a module's weights as ``fabric.save_raw`` and
        ``save_pretrained`` write them: a ``*.safetensors`` file or a Hugging Face folder. Safetensors are read
        block by block: each rank reads only the bytes of what it holds (its FSDP2 or tensor-parallel shards)
        straight into its tensors, names match whatever wrapper prefixes either side has (``module.``,
        ``_orig_mod.``, ...), and dtypes are cast to the module's. Everything is checked first: a name or
        shape that does not fit, or a damaged file, raises and leaves the module as it was.

        Args:
            path: The file or folder.
            obj: The module or optimizer to restore.
            strict: Require exact keys (modules only).
            weights_only: Passed to ``torch.load`` (torch files only: safetensors never run code).

        Returns:
            For safetensors, the missing and unexpected names (empty unless ``strict=False``); else ``None``.

        Raises:
            WeightsMismatchError: (safetensors) names missing or unexpected with ``strict``, or shapes that differ.
            CheckpointError: (safetensors) a truncated file, a header that lies, an index that names a missing
                shard or a tensor twice.
        """
        self._record("load_raw")
        target = unwrap_objects(obj)
        if is_weights_path(os.fspath(path)):
            if not isinstance(target, Module):
                raise TypeError(
                    f"`fabric.load_raw({os.fspath(path)!r}, ...)`: a safetensors file holds a module's weights, so it "
                    f"loads into a module, not into {type(obj).__name__}."
                )
            with self._strategy.weights_to_load(target) as targets:
                result = load_weights(os.fspath(path), targets, strict=strict)
            self._launched_strategy().barrier(name="fabric.load_raw")
            return result
        weights_only = forwarded_weights_only(weights_only)
        self._strategy.load_checkpoint(path=path, state=target, strict=strict, weights_only=weights_only)
        return None

    def save_raw(
        self,
        path: str | os.PathLike[str],
        module: Module,
        *,
        max_shard_size: int | str = DEFAULT_SHARD_SIZE,
    ) -> None:
        """Save ``module``'s weights under its own names, for ``transformers``, vLLM and ``fabric.load_raw``.

        Call it on every process. Each rank writes only what it holds (FSDP2 and tensor-parallel shards go
        straight to their place in the files, in parallel); nothing is gathered on one rank, except for object
        storage, where tensors are gathered one at a time and rank 0 uploads the files.

        Args:
            path: ``*.safetensors``: one safetensors file. No suffix (or a trailing ``/``): a Hugging Face folder,
                ``model.safetensors`` or shards beside ``model.safetensors.index.json``, next to whatever else the
                folder holds (``config.json``). ``*.pt``, ``*.pth``, ``*.ckpt``, ``*.bin``: a torch file of the
                state dict, written by rank 0. A local path or a URL (``s3://``).
            module: The module (as returned by ``fabric.setup``, or not).
            max_shard_size: A folder's largest file: bytes, or ``"5GB"``, ``"500MB"``, ``"2GiB"``.

        Raises:
            InvalidConfigError: ``path`` has another suffix, or ``max_shard_size`` is not a size.
            TypeError: ``module`` is not a module, or holds a dtype safetensors cannot.
        """
        self._record("save_raw")
        text = os.fspath(path)
        kind = target_kind(text)
        limit = parse_shard_size(max_shard_size)
        target = unwrap_objects(module)
        if not isinstance(target, Module):
            raise TypeError(f"`fabric.save_raw(path, module)` takes a module, got {type(module).__name__}.")
        strategy = self._strategy
        if kind == "torch":
            pieces = strategy.weights_to_save(target, whole=True)
            state = {piece.name: piece.fetch() for piece in pieces}
            if strategy.is_global_zero:
                strategy.checkpoint_io.save_checkpoint(checkpoint=state, path=text)
        else:
            pieces = strategy.weights_to_save(target, whole=is_remote_url(text))
            save_weights(strategy, text, pieces, kind, limit)
        self._launched_strategy().barrier(name="fabric.save_raw")


def _plural(word: str, items: list[int]) -> str:
    return word + "s" if len(items) > 1 else word
