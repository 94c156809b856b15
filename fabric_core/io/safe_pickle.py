"""Pickles read with an allow-list of globals: nothing named outside it is ever imported or called.

Two ways to read a pickle here:

* :func:`load_restricted` builds the object, resolving only allowed globals (for files whose objects are
  needed, such as a sharded checkpoint's ``.metadata``).
* :func:`scan` builds nothing: every global the pickle names is checked against the allow-list and replaced
  by an inert stand-in, and persistent ids (a torch file's storages) become placeholders, so no tensor is
  read. It proves that a file which another library will unpickle without restrictions names only allowed
  globals.

A pickle can only reach code through a global (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, the extension-registry
opcodes all name one) or through ``persistent_load``; each goes through a method overridden here. This module
imports torch only in :func:`check_torch_file`.
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
from collections.abc import Collection
from typing import IO, Any

from fabric_core.errors import CheckpointError, UnsafeCheckpointError

# How a zip archive starts; `torch.load` reads any other file with its legacy loader, which unpickles
# several objects (or the members of a tar archive) before the data.
_ZIP_MAGIC = b"PK\x03\x04"

__all__ = [
    "RefusedGlobal",
    "check_torch_file",
    "forwarded_weights_only",
    "load_restricted",
    "refused_error",
    "resolve_weights_only",
    "scan",
]

#: torch's own switches (torch.load reads them too): force weights-only loads, or lift the default.
FORCE_SAFE_ENV = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
FORCE_UNSAFE_ENV = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
_TRUE = ("1", "y", "yes", "true")


def _switched_on(variable: str) -> bool:
    """Whether one of torch's switches is set, read as torch reads it."""
    return os.environ.get(variable, "0").strip().lower() in _TRUE


def resolve_weights_only(weights_only: bool | None) -> bool:
    """``weights_only`` as every load here applies it: ``None`` means ``True``, as in torch 2.6 and later.

    torch's escape hatches are honoured as torch (and so Lightning) honours them, so that one switch means the
    same everywhere: with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, a load that did not pass ``weights_only`` uses
    ``False``, and a warning says that the file may run code; with ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1``, every load
    uses ``True``, even one that passed ``False``.

    Raises:
        InvalidConfigError: Both variables are set.
    """
    force_safe, force_unsafe = _switched_on(FORCE_SAFE_ENV), _switched_on(FORCE_UNSAFE_ENV)
    if force_safe and force_unsafe:
        from fabric_core.errors import InvalidConfigError

        raise InvalidConfigError(
            f"Only one of `{FORCE_SAFE_ENV}` or `{FORCE_UNSAFE_ENV}` should be set, but both were set.",
            argument=FORCE_UNSAFE_ENV,
            value=os.environ.get(FORCE_UNSAFE_ENV),
        )
    if force_safe:
        return True
    if weights_only is None and force_unsafe:
        import warnings

        from fabric_core.errors import FabricCoreWarning

        warnings.warn(
            f"Environment variable {FORCE_UNSAFE_ENV} detected, since the `weights_only` argument was not "
            "explicitly passed, forcing weights_only=False: the checkpoint may run any code it holds while it "
            "loads. Load only files you trust, or unset the variable.",
            FabricCoreWarning,
            stacklevel=3,
        )
        return False
    return True if weights_only is None else weights_only


def forwarded_weights_only(weights_only: bool | None) -> bool | None:
    """``weights_only`` as a load hands it on to the strategy and its readers.

    ``None`` stays ``None`` (torch's default, which every reader here and ``torch.load`` since 2.6 read as
    ``True``; Lightning hands it on the same way), so a strategy of the user's own sees what was passed. When
    one of torch's switches is set, the value is decided here, once per load, by :func:`resolve_weights_only`.
    """
    if weights_only is None and not (_switched_on(FORCE_SAFE_ENV) or _switched_on(FORCE_UNSAFE_ENV)):
        return None
    return resolve_weights_only(weights_only)


Allowed = Collection[tuple[str, str]]


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global outside the allow-list.

    Attributes:
        module: The global's module (``"posix"`` for ``os.system`` on Linux).
        name: The global's name.
    """

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name
        super().__init__(f"global {module}.{name} is not allowed")

    @property
    def qualified(self) -> str:
        """``module.name``."""
        return f"{self.module}.{self.name}"


class _Inert:
    """What a scanned pickle's globals become: accepts every construction and mutation, does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass

    def add(self, value: Any) -> None:
        pass


class _Checks:
    """The checks, shared by the C unpickler and the pure-Python one."""

    _allowed: Allowed
    _build: bool

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._allowed:
            raise RefusedGlobal(module, name)
        if not self._build:
            # A class object, so that NEWOBJ's ``cls.__new__(cls, ...)`` works on it too.
            return _Inert
        return super().find_class(module, name)  # type: ignore[misc]  # the unpickler's, after this mixin

    def persistent_load(self, pid: Any) -> Any:
        if self._build:
            raise pickle.UnpicklingError("persistent ids are not supported in this file")
        return _Inert()


class _Fast(_Checks, pickle.Unpickler):
    pass


class _Careful(_Checks, pickle._Unpickler):
    def get_extension(self, code: int) -> None:
        key = copyreg._inverted_registry.get(code)  # type: ignore[attr-defined]  # private, untyped
        if key is None:
            raise pickle.UnpicklingError(f"unregistered extension code {code}")
        self.append(self.find_class(*key))  # type: ignore[attr-defined]  # the stack's method, untyped


def _unpickler(file: IO[bytes], allowed: Allowed, *, build: bool) -> pickle.Unpickler | pickle._Unpickler:
    # The C unpickler resolves an extension-registry code from a process-wide cache, without `find_class`, once
    # any pickle has used the code. With no code registered (Python and torch register none) there is no such
    # cache; otherwise the pure-Python unpickler (about 2.5 times slower) resolves each code through the checks.
    registered = bool(copyreg._inverted_registry)  # type: ignore[attr-defined]  # private, untyped
    unpickler = _Careful(file) if registered else _Fast(file)
    unpickler._allowed = allowed
    unpickler._build = build
    return unpickler


def load_restricted(file: IO[bytes], allowed: Allowed) -> Any:
    """Unpickle ``file``, resolving only the globals in ``allowed`` (``(module, name)`` pairs).

    Raises:
        RefusedGlobal: The pickle names a global outside ``allowed`` (nothing of it was imported or called).
        pickle.UnpicklingError, EOFError, ValueError: The bytes are not a pickle.
    """
    return _unpickler(file, allowed, build=True).load()


def scan(data: bytes | IO[bytes], allowed: Allowed) -> None:
    """Walk one pickle without building anything and check every global it names against ``allowed``.

    Persistent ids (torch storages) are accepted as placeholders, so a torch ``data.pkl`` is checked without
    reading a tensor.

    Raises:
        RefusedGlobal: The first global outside ``allowed``.
        pickle.UnpicklingError, EOFError, ValueError: The bytes are not a pickle.
    """
    file = io.BytesIO(data) if isinstance(data, bytes) else data
    _unpickler(file, allowed, build=False).load()


def refused_error(path: str | os.PathLike[str], refused: RefusedGlobal) -> CheckpointError:
    """The error for a file that names a global outside the allow-list: the file, the global, the way out."""
    text = os.fspath(path)
    return UnsafeCheckpointError(
        f"Checkpoint file {text!r} holds a reference to `{refused.qualified}`, which is not one of the types a "
        "checkpoint of this format consists of; unpickling it could run code stored in the file, so loading "
        "was refused (`weights_only=True` is the default). Only if you trust the source of this checkpoint, "
        "load it with `weights_only=False` (e.g. `fabric.load(path, state, weights_only=False)`).",
        path=text,
    )


def check_torch_file(path: str | os.PathLike[str], allowed: Allowed) -> None:
    """Check, without reading a tensor, that ``torch.load(path, weights_only=False)`` would build only ``allowed``.

    The file must be a zip archive written by ``torch.save`` (the format since torch 1.6); its pickles are
    read through torch's own archive reader, the one ``torch.load`` uses, and scanned (see :func:`scan`).

    Raises:
        CheckpointError: A pickle names a global outside ``allowed`` (``reason="unsafe"``), or the file is in
            another format, which cannot be checked (``"unsafe"``), or is damaged (``"corrupt"``).
    """
    import torch

    text = os.fspath(path)
    with open(path, "rb") as file:
        head = file.read(len(_ZIP_MAGIC))
    if head != _ZIP_MAGIC:
        raise UnsafeCheckpointError(
            f"Checkpoint file {text!r} is not a zip archive written by `torch.save` (torch's format since 1.6), so "
            "it cannot be checked for code before it is unpickled; loading was refused (`weights_only=True` is "
            "the default). Only if you trust the source of this checkpoint, load it with `weights_only=False`.",
            path=text,
        )
    try:
        reader = torch._C.PyTorchFileReader(text)
        records = [name for name in reader.get_all_records() if name.endswith(".pkl")]
        for name in records:
            scan(reader.get_record(name), allowed)
    except RefusedGlobal as refused:
        raise refused_error(path, refused) from None
    except (RuntimeError, EOFError, pickle.UnpicklingError, ValueError) as err:
        raise CheckpointError(
            f"Checkpoint file {text!r} is truncated or is not a PyTorch checkpoint ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'unexpected end of data'}).",
            path=text,
            reason="corrupt",
        ) from None
    if not records:
        raise CheckpointError(
            f"Checkpoint file {text!r} is a zip archive without the pickle `torch.save` writes (data.pkl).",
            path=text,
            reason="corrupt",
        )
