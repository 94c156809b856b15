"""Lazy loading of a ``torch.save`` file: the structure now, each tensor's bytes when it is first used.

``lazy_load(path)`` unpickles a checkpoint without reading its tensor data: every tensor becomes a
:class:`NotYetLoadedTensor` that knows its shape, dtype and place in the archive, and reads its bytes from the
file when an operation needs them (``model.load_state_dict(lazy_load(path))`` copies one parameter at a time,
so the peak memory is the model plus one tensor, not the model plus the checkpoint). This is what Lightning
offers as ``utilities.load._lazy_load``; that path re-exports it.

Like every load in fabric-core, it is weights-only by default: the pickle may name only the globals torch's
weights-only loader allows (plus those registered with ``torch.serialization.add_safe_globals``), so a
checkpoint from an untrusted source runs no code. ``weights_only=False`` lifts the check for a trusted file.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from io import BytesIO
from typing import IO, Any

import torch
from torch import Tensor

from fabric_core.errors import UnsafeCheckpointError
from fabric_core.utilities.types import _PATH

__all__ = ["LazyLoadingUnpickler", "NotYetLoadedTensor", "lazy_load", "materialize_tensors"]

# torch's (untyped) rebuild functions, which a pickled tensor names and which are replaced here.
_utils: Any = torch._utils
_tensor: Any = torch._tensor

# What may be read without materialising: the meta tensor already knows it.
_META_ATTRIBUTES = frozenset(
    {
        "dtype",
        "grad",
        "grad_fn",
        "is_meta",
        "layout",
        "names",
        "ndim",
        "output_nr",
        "requires_grad",
        "retains_grad",
        "size",
        "shape",
        "volatile",
    }
)
# What needs the data: returned from the loaded tensor (quantising loaders call these on a lazy tensor).
_LOADING_ATTRIBUTES = frozenset({"contiguous", "cuda", "half", "data", "to"})


class NotYetLoadedTensor:
    """A tensor of a lazily loaded checkpoint whose bytes are read from the archive on first use.

    Any torch operation on it (``param.copy_(t)``, ``t + 1``, ``torch.cat``) reads the bytes first;
    ``dtype``/``shape``/``requires_grad`` and the like are answered from a meta tensor without reading.

    Attributes:
        metatensor: A tensor on the meta device with the real one's shape, stride and dtype.
        archiveinfo: The unpickler, holding the archive reader.
        storageinfo: The storage's persistent id (``("storage", type, key, location, numel)``).
        rebuild_args: The arguments after the storage that rebuild the tensor.
    """

    def __init__(
        self,
        metatensor: Tensor,
        archiveinfo: LazyLoadingUnpickler,
        storageinfo: tuple[Any, ...],
        rebuild_args: tuple[Any, ...],
    ) -> None:
        self.metatensor = metatensor
        self.archiveinfo = archiveinfo
        self.storageinfo = storageinfo
        self.rebuild_args = rebuild_args

    @classmethod
    def rebuild_from_type_v2(
        cls,
        func: Callable[..., Any],
        new_type: Any,
        args: tuple[Any, ...],
        state: dict[str, Any],
        *,
        archiveinfo: LazyLoadingUnpickler | None = None,
    ) -> Any:
        """``_tensor._rebuild_from_type_v2`` that keeps a lazy tensor lazy (the subclass applies on load)."""
        rebuilt = func(*args)
        if isinstance(rebuilt, NotYetLoadedTensor):
            inner = rebuilt._load_tensor

            def load() -> Any:
                tensor = inner()
                return _tensor._rebuild_from_type_v2(lambda: tensor, new_type, (), state)

            rebuilt._load_tensor = load  # type: ignore[method-assign]
            return rebuilt
        return _tensor._rebuild_from_type_v2(func, new_type, args, state)

    @classmethod
    def rebuild_parameter(
        cls,
        data: Any,
        requires_grad: bool,
        backward_hooks: dict[Any, Any],
        *,
        archiveinfo: LazyLoadingUnpickler | None = None,
    ) -> Tensor | NotYetLoadedTensor:
        """``_utils._rebuild_parameter`` that keeps a lazy tensor lazy (a Parameter on load)."""
        if isinstance(data, NotYetLoadedTensor):
            inner = data._load_tensor

            def load() -> Tensor:
                parameter: Tensor = _utils._rebuild_parameter(inner(), requires_grad, backward_hooks)
                return parameter

            data._load_tensor = load  # type: ignore[method-assign]
            return data
        parameter: Tensor = _utils._rebuild_parameter(data, requires_grad, backward_hooks)
        return parameter

    @classmethod
    def rebuild_tensor_v2(
        cls,
        storage: Any,
        storage_offset: int,
        size: tuple[int, ...],
        stride: tuple[int, ...],
        requires_grad: bool,
        backward_hooks: dict[Any, Any],
        metadata: Any = None,
        *,
        archiveinfo: LazyLoadingUnpickler,
    ) -> NotYetLoadedTensor:
        """``_utils._rebuild_tensor_v2`` on a meta storage: the tensor's layout now, its bytes later."""
        rebuild_args = (storage_offset, size, stride, requires_grad, backward_hooks, metadata)
        metatensor = _utils._rebuild_tensor_v2(
            storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata
        )
        return cls(metatensor, archiveinfo, storage.archiveinfo, rebuild_args)

    def _load_tensor(self) -> Tensor:
        from torch.storage import TypedStorage, UntypedStorage

        _, _, key, _, numel = self.storageinfo
        dtype = self.metatensor.dtype
        nbytes = numel * _utils._element_size(dtype)
        untyped = self.archiveinfo.file_reader.get_storage_from_record(f"data/{key}", nbytes, UntypedStorage)
        wrapped = untyped._typed_storage()._untyped_storage
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TypedStorage is deprecated, and the only way to rebuild
            storage: Any = TypedStorage(wrap_storage=wrapped, dtype=dtype, _internal=True)  # type: ignore[no-untyped-call]
        tensor: Tensor = _utils._rebuild_tensor_v2(storage, *self.rebuild_args)
        return tensor

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        loaded = [arg._load_tensor() if isinstance(arg, NotYetLoadedTensor) else arg for arg in args]
        return func(*loaded, **(kwargs or {}))

    @property
    def device(self) -> torch.device:
        """Where the tensor was saved from (its storage's location)."""
        return torch.device(self.storageinfo[3])

    def __getattr__(self, name: str) -> Any:
        if name in _META_ATTRIBUTES:
            return getattr(self.metatensor, name)
        if name in _LOADING_ATTRIBUTES:
            return getattr(self._load_tensor(), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.metatensor!r})"


def _weights_only_globals() -> dict[str, Any]:
    """``"module.name" -> object`` for what torch's weights-only loader allows, user-registered ones included."""
    import torch._weights_only_unpickler as weights_only

    allowed: dict[str, Any] = {**weights_only._get_allowed_globals(), **weights_only._get_user_allowed_globals()}  # type: ignore[no-untyped-call]
    return allowed


class LazyLoadingUnpickler(pickle.Unpickler):
    """Unpickles a ``torch.save`` archive's ``data.pkl`` with tensors as :class:`NotYetLoadedTensor`.

    Args:
        file: ``data.pkl``'s bytes.
        file_reader: The archive, read from when a tensor is used.
        weights_only: Refuse every global outside torch's weights-only allow-list.
    """

    def __init__(self, file: IO[bytes], file_reader: Any, weights_only: bool | None = True) -> None:
        super().__init__(file)
        self.file_reader = file_reader
        self._allowed = None if weights_only is False else _weights_only_globals()

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return partial(NotYetLoadedTensor.rebuild_tensor_v2, archiveinfo=self)
        if module == "torch._tensor" and name == "_rebuild_from_type_v2":
            return partial(NotYetLoadedTensor.rebuild_from_type_v2, archiveinfo=self)
        if module == "torch._utils" and name == "_rebuild_parameter":
            return partial(NotYetLoadedTensor.rebuild_parameter, archiveinfo=self)
        if self._allowed is None:
            return super().find_class(module, name)
        found = self._allowed.get(f"{module}.{name}")
        if found is None:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a weights-only load")
        return found

    def persistent_load(self, pid: Any) -> Any:
        from torch.storage import TypedStorage

        storage_type = pid[1]
        # torch's weights-only globals give a StorageType (``.dtype``); the plain ones a legacy storage class
        dtype = storage_type if isinstance(storage_type, torch.dtype) else getattr(storage_type, "dtype", None)
        if not isinstance(dtype, torch.dtype):
            dtype = storage_type().dtype
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TypedStorage is deprecated
            storage: Any = TypedStorage(dtype=dtype, device="meta")  # type: ignore[no-untyped-call]
        storage.archiveinfo = pid
        return storage


def lazy_load(filename: _PATH, *, weights_only: bool | None = True) -> Any:
    """Read a ``torch.save`` file's structure, leaving each tensor's data in the file until it is used.

    Args:
        filename: A file written by ``torch.save`` (the zip format, torch's default since 1.6).
        weights_only: Allow only the globals torch's weights-only loader allows (the default, also for
            ``None``); ``False`` for a trusted file that pickles other objects.

    Raises:
        FileNotFoundError: ``filename`` is not a file.
        UnsafeCheckpointError: The file names a global outside the allow-list (nothing of it was run).
    """
    if not os.path.isfile(filename):
        raise FileNotFoundError(f"Path {str(filename)!r} does not exist or is not a file.")
    file_reader = torch.PyTorchFileReader(str(filename))
    with BytesIO(file_reader.get_record("data.pkl")) as pickled:
        unpickler = LazyLoadingUnpickler(pickled, file_reader, weights_only=weights_only)
        try:
            return unpickler.load()
        except pickle.UnpicklingError as err:
            if weights_only is False:
                raise
            raise UnsafeCheckpointError(
                f"{str(filename)!r} was not loaded: {err}. Nothing in it was run. Load it with "
                "`weights_only=False` only if you trust its source, or register the class with "
                "`torch.serialization.add_safe_globals([...])`.",
                path=str(filename),
            ) from err


def materialize_tensors(collection: Any) -> Any:
    """Read every :class:`NotYetLoadedTensor` in ``collection`` (nested dicts, lists, tuples) into a tensor."""
    from fabric_core.utilities.apply_func import apply_to_collection

    return apply_to_collection(collection, dtype=NotYetLoadedTensor, function=lambda t: t._load_tensor())
