"""Pickles read with an allow-list of globals: nothing named outside it is ever imported or called.

Two ways to read a pickle here:

* :func:`load_restricted` builds the object, resolving only allowed globals (for files whose objects are
  needed, such as a sharded checkpoint's ``.metadata``).
* :func:`scan` builds nothing: every global the pickle names is checked against the allow-list and replaced
  by an inert stand-in, and persistent ids (a torch file's storages) become placeholders, so no tensor is
  read. It proves that a file which another library will unpickle without restrictions names only allowed
  globals.

A pickle can only reach code through a global (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, the extension-registry
opcodes all go through ``find_class``) or through ``persistent_load``; both are overridden here. This module
does not import torch.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Collection
from typing import IO, Any

from fabric_core.errors import CheckpointError

__all__ = ["RefusedGlobal", "load_restricted", "refused_error", "scan"]

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


class _Restricted(pickle.Unpickler):
    def __init__(self, file: IO[bytes], allowed: Allowed, *, build: bool) -> None:
        super().__init__(file)
        self._allowed = allowed
        self._build = build

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._allowed:
            raise RefusedGlobal(module, name)
        if not self._build:
            # A class object, so that NEWOBJ's ``cls.__new__(cls, ...)`` works on it too.
            return _Inert
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        if self._build:
            raise pickle.UnpicklingError("persistent ids are not supported in this file")
        return _Inert()


def load_restricted(file: IO[bytes], allowed: Allowed) -> Any:
    """Unpickle ``file``, resolving only the globals in ``allowed`` (``(module, name)`` pairs).

    Raises:
        RefusedGlobal: The pickle names a global outside ``allowed`` (nothing of it was imported or called).
        pickle.UnpicklingError, EOFError, ValueError: The bytes are not a pickle.
    """
    return _Restricted(file, allowed, build=True).load()


def scan(data: bytes | IO[bytes], allowed: Allowed) -> None:
    """Walk one pickle without building anything and check every global it names against ``allowed``.

    Persistent ids (torch storages) are accepted as placeholders, so a torch ``data.pkl`` is checked without
    reading a tensor.

    Raises:
        RefusedGlobal: The first global outside ``allowed``.
        pickle.UnpicklingError, EOFError, ValueError: The bytes are not a pickle.
    """
    file = io.BytesIO(data) if isinstance(data, bytes) else data
    _Restricted(file, allowed, build=False).load()


def refused_error(path: str | os.PathLike[str], refused: RefusedGlobal) -> CheckpointError:
    """The error for a file that names a global outside the allow-list: the file, the global, the way out."""
    text = os.fspath(path)
    return CheckpointError(
        f"Checkpoint file {text!r} holds a reference to `{refused.qualified}`, which is not one of the types a "
        "checkpoint of this format consists of; unpickling it could run code stored in the file, so loading "
        "was refused (`weights_only=True` is the default). Only if you trust the source of this checkpoint, "
        "load it with `weights_only=False` (e.g. `fabric.load(path, state, weights_only=False)`).",
        path=text,
        reason="unsafe",
    )
