"""DataLoader helpers: distributed samplers, and re-creating a loader around a new sampler.

A loader is re-created from its public attributes (``dataset``, ``batch_size``, ``num_workers``, ...);
``DataLoader.__init__`` is never patched. A subclass whose constructor takes arguments that are not
attributes of the same name cannot be re-created, and says so.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Sized
from typing import Any

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import ArgumentTypeError, FabricCoreWarning, InvalidConfigError

# Lightning's names for recording a loader's constructor arguments, at its path (the explicit `as` re-exports).
from fabric_core.utilities._saved_args import _reinstantiate_wrapped_cls as _reinstantiate_wrapped_cls
from fabric_core.utilities._saved_args import _replace_dunder_methods as _replace_dunder_methods
from fabric_core.utilities._saved_args import _replace_value_in_saved_args as _replace_value_in_saved_args
from fabric_core.utilities._saved_args import _wrap_attr_method as _wrap_attr_method
from fabric_core.utilities._saved_args import _wrap_init_method as _wrap_init_method
from fabric_core.utilities._saved_args import _WrapAttrTag as _WrapAttrTag
from fabric_core.utilities.attribute_dict import AttributeDict
from fabric_core.utilities.exceptions import MisconfigurationException
from fabric_core.utilities.seed import recorded_seed, seed_workers_enabled, worker_init_function

__all__ = [
    "AttributeDict",
    "DistributedSamplerWrapper",
    "distributed_sampler_for",
    "has_iterable_dataset",
    "has_len",
    "replace_sampler",
    "requires_distributed_sampler",
    "sized_len",
    "suggested_max_num_workers",
]

# Arguments that describe how batches are drawn; ``replace_sampler`` decides them, never the old loader.
_SAMPLING_ARGUMENTS = frozenset({"sampler", "batch_sampler", "shuffle", "batch_size", "drop_last"})


class _LoaderNotRecreatable(InvalidConfigError, MisconfigurationException):
    """A ``DataLoader`` subclass that cannot be built again with a new sampler (Lightning raises the latter)."""


class _SamplerIndices(Dataset[Any]):
    """The indices one pass of a sampler yields, as a dataset a ``DistributedSampler`` can split."""

    def __init__(self, sampler: Sampler[Any]) -> None:
        self.sampler = sampler
        self._indices: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    def __getitem__(self, position: int) -> Any:
        if self._indices is None:
            self._indices = list(self.sampler)
        return self._indices[position]

    def redraw(self) -> None:
        """Forget the drawn indices: the next pass asks the sampler again (a new shuffle, say)."""
        self._indices = None


class DistributedSamplerWrapper(DistributedSampler[Any]):
    """Split the indices of any sized sampler across processes, as ``DistributedSampler`` splits a dataset.

    Each epoch the wrapped sampler is drawn once (the same way on every rank, if it is seeded alike), and
    each rank keeps its share of those indices. ``set_epoch`` reaches the wrapped sampler too.

    Args:
        sampler: The sampler to split; it must have a length.
        *args: Passed to ``DistributedSampler`` (``num_replicas``, ``rank``, ``shuffle``, ``seed``,
            ``drop_last``).
        **kwargs: Passed to ``DistributedSampler``.
    """

    def __init__(self, sampler: Sampler[Any], *args: Any, **kwargs: Any) -> None:
        if not isinstance(sampler, Sized):
            raise ArgumentTypeError(  # a TypeError too, as in Lightning
                "You seem to have configured a sampler in your DataLoader which does not provide `__len__` method: "
                f"`DistributedSamplerWrapper` needs a sampler with a length; {type(sampler).__name__} has none. "
                "Give the sampler a `__len__`, or pass `use_distributed_sampler=False` to `setup_dataloaders` "
                "and split the data across processes yourself.",
                argument="sampler",
                value=sampler,
            )
        super().__init__(_SamplerIndices(sampler), *args, **kwargs)

    @property
    def sampler(self) -> Sampler[Any]:
        """The wrapped sampler."""
        indices: _SamplerIndices = self.dataset  # type: ignore[assignment]
        return indices.sampler

    def __iter__(self) -> Iterator[Any]:
        indices: _SamplerIndices = self.dataset  # type: ignore[assignment]
        indices.redraw()
        return (indices[position] for position in super().__iter__())

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        inner_set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(inner_set_epoch):
            inner_set_epoch(epoch)


def suggested_max_num_workers(local_world_size: int) -> int:
    """How many DataLoader workers each of ``local_world_size`` processes on this machine can use.

    Leaves one CPU per process for the main loop; counts only the CPUs this process may run on.

    Args:
        local_world_size: The number of processes on this machine.

    Raises:
        InvalidConfigError: ``local_world_size`` is less than 1.
    """
    if local_world_size < 1:
        raise InvalidConfigError(
            f"`local_world_size` should be >= 1, got {local_world_size}.",
            argument="local_world_size",
            value=local_world_size,
        )
    return max(1, _num_cpus_available() // local_world_size - 1)


def _num_cpus_available() -> int:
    """The CPUs this process may run on (its affinity where the platform has one, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - macOS and Windows


def sized_len(dataloader: object) -> int | None:
    """``len(dataloader)``, or ``None`` where it has no length (an iterable dataset, a generator).

    Args:
        dataloader: A DataLoader or any iterable.
    """
    try:
        return len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def has_len(dataloader: object) -> bool:
    """Whether ``len(dataloader)`` works; warns when it is 0.

    Args:
        dataloader: A DataLoader or any iterable.
    """
    length = sized_len(dataloader)
    if length is None:
        return False
    if length == 0:
        warnings.warn(
            f"`{type(dataloader).__name__}` returned 0 length. Please make sure this was your intention.",
            FabricCoreWarning,
            stacklevel=2,
        )
    return True


def has_iterable_dataset(dataloader: DataLoader[Any]) -> bool:
    """Whether the loader reads an ``IterableDataset`` (which takes no sampler)."""
    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


def requires_distributed_sampler(dataloader: DataLoader[Any]) -> bool:
    """Whether the loader still needs a distributed sampler: it samples a map-style dataset, not yet split."""
    return (
        getattr(dataloader, "batch_sampler", None) is not None
        and not isinstance(_effective_sampler(dataloader), DistributedSampler)
        and not has_iterable_dataset(dataloader)
    )


def distributed_sampler_for(dataloader: DataLoader[Any], **kwargs: Any) -> DistributedSampler[Any]:
    """A distributed sampler that keeps the loader's order: shuffled stays shuffled, custom stays custom.

    Args:
        dataloader: The loader whose sampler is to be split.
        **kwargs: ``DistributedSampler`` arguments (``num_replicas``, ``rank``, ...). ``shuffle`` defaults
            to whether the loader shuffles, ``seed`` to the one ``seed_everything`` recorded.
    """
    sampler = _effective_sampler(dataloader)
    shuffled = isinstance(sampler, RandomSampler) or _is_stateful_random_sampler(sampler)
    kwargs.setdefault("shuffle", shuffled)
    if "seed" not in kwargs:
        kwargs["seed"] = recorded_seed() or 0
    if type(sampler) in (RandomSampler, SequentialSampler) or _is_stateful_random_sampler(sampler):
        return DistributedSampler(dataloader.dataset, **kwargs)
    return DistributedSamplerWrapper(sampler, **kwargs)


def _is_stateful_random_sampler(sampler: object) -> bool:
    """Whether ``sampler`` is the ``RandomSampler`` torchdata's ``StatefulDataLoader`` uses for ``shuffle=True``.

    It is not a subclass of torch's; split like torch's (a seeded ``DistributedSampler``), never wrapped: each
    process would draw its own permutation of the dataset, and the shares would overlap.
    """
    cls = type(sampler)
    return cls.__name__ == "RandomSampler" and cls.__module__.startswith("torchdata.stateful_dataloader")


def _explicit_batch_sampler(dataloader: DataLoader[Any]) -> Any:
    """The batch sampler the user passed as ``batch_sampler=``, or ``None`` where DataLoader built its own."""
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    if batch_sampler is None:
        return None
    # DataLoader sets ``batch_size`` to None exactly when it was given a batch sampler; one of another class
    # than ``BatchSampler`` can only have come from the user.
    if type(batch_sampler) is not BatchSampler or getattr(dataloader, "batch_size", None) is None:
        return batch_sampler
    return None


def _effective_sampler(dataloader: DataLoader[Any]) -> Any:
    # With a user's batch sampler, the loader's own ``sampler`` is an unused default: the order comes from
    # the batch sampler's sampler.
    batch_sampler = _explicit_batch_sampler(dataloader)
    inner = getattr(batch_sampler, "sampler", None)
    if inner is not None:
        return inner
    return getattr(dataloader, "sampler", None)


def replace_sampler(dataloader: DataLoader[Any], sampler: Sampler[Any], **overrides: Any) -> DataLoader[Any]:
    """Build a new loader like ``dataloader`` that draws its indices from ``sampler``.

    Every other argument (dataset, batch size, workers, collate function, pinning, timeout, worker init
    function, generator, prefetching, ...) is read back from the loader's attributes, or, for one created
    inside ``fabric.launch(fn)``, from the arguments it recorded there. A loader built on a
    custom batch sampler gets a new batch sampler of the same class, built as
    ``cls(sampler, batch_size=..., drop_last=...)``.

    Args:
        dataloader: The loader to copy; it is left untouched.
        sampler: The new sampler.
        **overrides: Constructor arguments to set instead of the loader's (e.g. ``worker_init_fn``).

    Returns:
        A loader of the same class.

    Raises:
        InvalidConfigError: The loader reads an ``IterableDataset``, its batch sampler cannot be re-created
            around ``sampler``, or its class takes a constructor argument it does not keep as an attribute.
    """
    loader_cls = type(dataloader)
    if has_iterable_dataset(dataloader):
        raise InvalidConfigError(
            f"Cannot give a sampler to a `{loader_cls.__name__}` over an `IterableDataset` "
            f"({type(dataloader.dataset).__name__}): it draws its own samples.",
            argument="dataloader",
            value=dataloader,
        )
    kwargs = _constructor_arguments(dataloader)
    sampling = _sampling_arguments(dataloader, sampler)
    recorded = _recorded_arguments(dataloader)
    if recorded:
        # A batch size the loader's own arguments set (passed again) must not come a second time.
        own = inspect.signature(loader_cls.__init__).parameters
        for name in ("batch_size", "drop_last"):
            if name in sampling and name not in own and name not in recorded:
                del sampling[name]
    kwargs.update(sampling)
    kwargs.update(overrides)
    return loader_cls(**kwargs)


def _constructor_arguments(dataloader: DataLoader[Any]) -> dict[str, Any]:
    loader_cls = type(dataloader)
    parameters = inspect.signature(loader_cls.__init__).parameters
    names = [n for n, p in list(parameters.items())[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    recorded = _recorded_arguments(dataloader)
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        # A subclass that forwards **kwargs to DataLoader: DataLoader's own arguments reach it that way. Where
        # the call was recorded, a required one of them (`dataset`) came as one of the subclass's own arguments.
        base = inspect.signature(DataLoader.__init__).parameters
        names += [n for n, p in list(base.items())[1:] if n not in names and not (recorded and p.default is p.empty)]
    kwargs: dict[str, Any] = {}
    missing = []
    for name in names:
        if name in _SAMPLING_ARGUMENTS:
            continue
        if hasattr(dataloader, name):
            kwargs[name] = getattr(dataloader, name)
        elif name in recorded:
            kwargs[name] = recorded[name]
        elif parameters.get(name) is not None and parameters[name].default is inspect.Parameter.empty:
            missing.append(name)
    if missing:
        raise _LoaderNotRecreatable(
            f"Trying to inject custom `Sampler` into the `{loader_cls.__name__}` instance. The missing attributes"
            f" are {missing}. Cannot re-create `{loader_cls.__name__}` with a new sampler: its constructor requires "
            f"{', '.join(repr(m) for m in missing)}, which the loader does not keep as attributes of the "
            "same name. Store each constructor argument as `self.<name>` in its `__init__`, or pass a "
            "`DataLoader` that already has the sampler you want.",
            argument="dataloader",
            value=dataloader,
        )
    return kwargs


def _recorded_arguments(dataloader: DataLoader[Any]) -> dict[str, Any]:
    """The constructor arguments ``dataloader`` recorded, by name: a loader created inside ``fabric.launch(fn)``
    (where :func:`_replace_dunder_methods` is active) keeps them, so that one it does not keep as attributes
    can be passed again. Empty for any other loader."""
    names: tuple[str, ...] = getattr(dataloader, "__pl_saved_arg_names", ())
    args: tuple[Any, ...] = getattr(dataloader, "__pl_saved_args", ())
    return {**dict(zip(names, args)), **getattr(dataloader, "__pl_saved_kwargs", {})}


def _sampling_arguments(dataloader: DataLoader[Any], sampler: Sampler[Any]) -> dict[str, Any]:
    batch_sampler = _explicit_batch_sampler(dataloader)
    if batch_sampler is None:
        # Automatic batching (or none at all): DataLoader builds the batch sampler around our sampler.
        return {"sampler": sampler, "batch_size": dataloader.batch_size, "drop_last": dataloader.drop_last}
    batch_sampler_cls: type[Any] = type(batch_sampler)
    if batch_sampler_cls is BatchSampler:
        # A plain ``BatchSampler`` the user passed: DataLoader batches around our sampler with its size.
        return {"sampler": sampler, "batch_size": batch_sampler.batch_size, "drop_last": batch_sampler.drop_last}
    try:
        new_batch_sampler = batch_sampler_cls(
            sampler,
            batch_size=getattr(batch_sampler, "batch_size"),  # noqa: B009 - raises, like the constructor
            drop_last=getattr(batch_sampler, "drop_last"),  # noqa: B009
        )
    except (AttributeError, TypeError) as error:
        raise InvalidConfigError(
            f"Cannot put a new sampler into the batch sampler {batch_sampler_cls.__name__} ({error}). "
            f"fabric-core re-creates it as `{batch_sampler_cls.__name__}(sampler, batch_size=..., "
            "drop_last=...)`: subclass `torch.utils.data.BatchSampler` or accept those arguments, or pass "
            "`use_distributed_sampler=False` and split the data yourself.",
            argument="dataloader",
            value=dataloader,
        ) from error
    return {"batch_sampler": new_batch_sampler}


# -- Lightning's re-creation of a loader (``lightning.pytorch`` calls these): from the arguments recorded by
# -- ``_replace_dunder_methods`` where there are some, else from the loader's non-default public attributes.

_NOT_A_BATCH_SAMPLER = (
    " fabric-core can't inject a (distributed) sampler into your batch sampler, because it doesn't subclass "
    "PyTorch's `BatchSampler`. To mitigate this, either follow the API of `BatchSampler` or set "
    "`.setup_dataloaders(..., use_distributed_sampler=False)`. If you choose the latter, you will be responsible "
    "for handling the distributed sampling within your batch sampler."
)


def _update_dataloader(dataloader: DataLoader[Any], sampler: Sampler[Any] | Iterable[Any]) -> DataLoader[Any]:
    """A new loader of the same class that draws from ``sampler`` (see :func:`_get_dataloader_init_args_and_kwargs`)."""
    args, kwargs = _get_dataloader_init_args_and_kwargs(dataloader, sampler)
    return _reinstantiate_wrapped_cls(dataloader, *args, **kwargs)  # type: ignore[no-any-return]


def _get_dataloader_init_args_and_kwargs(
    dataloader: DataLoader[Any], sampler: Sampler[Any] | Iterable[Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The constructor arguments that re-create ``dataloader`` around ``sampler``.

    Raises:
        ValueError: ``dataloader`` is no ``DataLoader``.
        MisconfigurationException: A required constructor argument is neither recorded nor an attribute.
        TypeError: The class's constructor does not take an argument that must be passed.
    """
    if not isinstance(dataloader, DataLoader):
        raise ValueError(f"The dataloader {dataloader} needs to subclass `torch.utils.data.DataLoader`")
    was_wrapped = hasattr(dataloader, "__pl_saved_args")
    if was_wrapped:
        args: tuple[Any, ...] = getattr(dataloader, "__pl_saved_args")
        kwargs: dict[str, Any] = getattr(dataloader, "__pl_saved_kwargs")
        arg_names: tuple[str, ...] = getattr(dataloader, "__pl_saved_arg_names")
        original_dataset = getattr(dataloader, "__dataset", None)
    else:
        attrs = {k: v for k, v in vars(dataloader).items() if not k.startswith("_")}
        attrs["multiprocessing_context"] = dataloader.multiprocessing_context  # a property, not in `vars`
        original_dataset = None
        arg_names = ()
    params = dict(inspect.signature(dataloader.__init__).parameters)  # type: ignore[misc]
    variadic = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if variadic:
        # **kwargs are assumed to reach DataLoader.__init__; once recorded, only its defaulted ones are missing.
        base = inspect.signature(DataLoader.__init__).parameters
        params.update({k: v for k, v in base.items() if v.default is not v.empty} if was_wrapped else base)
        if not was_wrapped:
            params.pop("self", None)
    if not was_wrapped:
        # Only what differs from the constructor's default, and `dataset` (which `*args` may have hidden).
        keep = {name for name, p in params.items() if name in attrs and p.default is not attrs[name]} | {"dataset"}
        kwargs = {k: v for k, v in attrs.items() if k in keep}
        args = ()
    dataset = kwargs.get("dataset", original_dataset)
    if isinstance(dataset, IterableDataset):
        kwargs["batch_sampler"] = None
        kwargs["sampler"] = None
    else:
        kwargs.update(_dataloader_init_kwargs_resolve_sampler(dataloader, sampler))
    required = sorted(
        p.name
        for p in params.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
        and p.name not in kwargs
        and p.name not in arg_names
    )
    name = type(dataloader).__name__
    if required:
        raise MisconfigurationException(
            f"Trying to inject custom `Sampler` into the `{name}` instance. This would fail as some of the "
            f"`__init__` arguments are not available as instance attributes. The missing attributes are {required}. "
            f"Define {', '.join(f'`self.{arg}`' for arg in required)} inside your `__init__`."
        )
    if not variadic:
        unknown = sorted((set(kwargs) | set(arg_names)) - params.keys())
        if unknown:
            raise TypeError(
                f"Trying to inject parameters into the `{name}` instance. This would fail as it doesn't expose all "
                f"its attributes in the `__init__` signature. The missing arguments are {unknown}. HINT: If you "
                f"wrote the `{name}` class, add the `__init__` arguments or allow passing `**kwargs`"
            )
    return args, kwargs


def _dataloader_init_kwargs_resolve_sampler(
    dataloader: DataLoader[Any], sampler: Sampler[Any] | Iterable[Any]
) -> dict[str, Any]:
    """The sampling arguments (``sampler``, ``batch_sampler``, ...) of a loader re-created around ``sampler``.

    A custom batch sampler is re-created around ``sampler`` too: from its recorded arguments where
    ``_replace_dunder_methods`` recorded them, else as ``cls(sampler, batch_size=..., drop_last=...)``.

    Raises:
        TypeError: The custom batch sampler cannot take a new sampler.
    """
    batch_sampler = getattr(dataloader, "batch_sampler")  # noqa: B009 - raises like Lightning's for a non-loader
    if batch_sampler is None or type(batch_sampler) is BatchSampler:
        return {"sampler": sampler, "shuffle": False, "batch_sampler": None}
    batch_sampler_cls = type(batch_sampler)
    if hasattr(batch_sampler, "__pl_saved_args"):
        found, args, kwargs = _replace_value_in_saved_args(
            "sampler",
            sampler,
            getattr(batch_sampler, "__pl_saved_args"),
            getattr(batch_sampler, "__pl_saved_kwargs"),
            getattr(batch_sampler, "__pl_saved_default_kwargs"),
            getattr(batch_sampler, "__pl_saved_arg_names"),
        )
        if not found:
            raise TypeError(
                "Trying to inject a modified sampler into the batch sampler; however, it seems the class "
                f"`{batch_sampler_cls.__qualname__}` does not have an argument called `sampler.` To mitigate this, "
                "expose an argument `sampler` in the `__init__` method of your custom class."
            )
        batch_sampler = _reinstantiate_wrapped_cls(batch_sampler, *args, **kwargs)
    elif hasattr(batch_sampler, "batch_size") and hasattr(batch_sampler, "drop_last"):
        try:
            batch_sampler = batch_sampler_cls(
                sampler, batch_size=batch_sampler.batch_size, drop_last=batch_sampler.drop_last
            )
        except TypeError as error:
            if not re.match(r".*__init__\(\) (got multiple values)|(missing \d required)", str(error)):
                raise
            raise TypeError(_NOT_A_BATCH_SAMPLER) from error
    else:
        raise TypeError(_NOT_A_BATCH_SAMPLER)
    return {"sampler": None, "shuffle": False, "batch_sampler": batch_sampler, "batch_size": 1, "drop_last": False}


def _auto_add_worker_init_fn(dataloader: object, rank: int) -> None:
    """Give the loader per-worker seeding where ``seed_everything(workers=True)`` asked for it and it has none."""
    if hasattr(dataloader, "worker_init_fn") and seed_workers_enabled() and dataloader.worker_init_fn is None:
        dataloader.worker_init_fn = functools.partial(worker_init_function, rank=rank)


def _set_sampler_epoch(dataloader: object, epoch: int) -> None:
    """Call ``set_epoch(epoch)`` on the loader's sampler and its batch sampler's sampler, each once.

    A ``DistributedSampler`` shuffles anew each epoch only if told the epoch; samplers without ``set_epoch``
    are left alone.
    """
    for sampler in _epoch_samplers(dataloader):
        sampler.set_epoch(epoch)


def _epoch_samplers(dataloader: object) -> list[Any]:
    """The loader's sampler and its batch sampler's sampler that have ``set_epoch``, each once (by identity)."""
    samplers: dict[int, Any] = {}
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    for sampler in (getattr(dataloader, "sampler", None), getattr(batch_sampler, "sampler", None)):
        if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
            samplers[id(sampler)] = sampler
    return list(samplers.values())


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
