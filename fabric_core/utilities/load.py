"""Lightning's ``utilities.load`` path: lazy loading and the sharded-checkpoint reader, under Lightning's names.

Each name is an address of the helper that implements it: lazy loading lives in :mod:`fabric_core.io.lazy_load`,
sharded checkpoints in :mod:`fabric_core.io.distributed`. Importing this path imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fabric_core._deferred import lightning_reexports, reexports
from fabric_core.utilities.types import _Stateful

if TYPE_CHECKING:
    pass

__all__: list[str] = []

#: The file of a sharded checkpoint folder that holds everything but the sharded tensors.
_METADATA_FILENAME = "meta.pt"


def _move_state_into(
    source: dict[str, Any], destination: dict[str, Any], keys: set[str] | None = None
) -> None:
    """Move ``source``'s entries (those in ``keys``, default all) into ``destination``.

    An entry whose destination object is stateful (``load_state_dict``) is loaded into that object; any other
    replaces the destination's value. The moved entries leave ``source``.
    """
    chosen = set(source) if keys is None else keys & set(source)
    for key in chosen:
        value = source.pop(key)
        target = destination.get(key)
        if key in destination and isinstance(target, _Stateful):
            target.load_state_dict(value)
        else:
            destination[key] = value


_WHERE: Mapping[str, str] = {
    "_NotYetLoadedTensor": "fabric_core.io.lazy_load:NotYetLoadedTensor",
    "_LazyLoadingUnpickler": "fabric_core.io.lazy_load:LazyLoadingUnpickler",
    "_lazy_load": "fabric_core.io.lazy_load:lazy_load",
    "_materialize_tensors": "fabric_core.io.lazy_load:materialize_tensors",
    "_load_distributed_checkpoint": "fabric_core.io.distributed:load_distributed_checkpoint",
}

# Lightning's names here that live elsewhere (loaded on first access: torch), then those it re-exports.
__getattr__ = reexports(__name__, _WHERE, fallback=lightning_reexports(__name__))
