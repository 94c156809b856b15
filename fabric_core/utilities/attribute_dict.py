"""A dict whose keys are also attributes, for hyper-parameters and configs."""

from __future__ import annotations

from typing import Any

__all__ = ["AttributeDict"]


class AttributeDict(dict[str, Any]):
    """A ``dict`` whose entries can also be read, set and deleted as attributes.

    Example:
        >>> hparams = AttributeDict(lr=0.1)
        >>> hparams.batch_size = 32
        >>> hparams["batch_size"], hparams.lr
        (32, 0.1)
    """

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            # copy, pickle and hasattr() expect AttributeError for names that are not there.
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError:
            raise _MissingKey(f"'{type(self).__name__}' object has no attribute {key!r}") from None

    def __repr__(self) -> str:
        if not self:
            return f"{type(self).__name__}()"
        keys = sorted(self, key=str)
        width = max(len(repr(k)) for k in keys) + 1
        return "\n".join(f"{repr(k) + ':':<{width}} {self[k]!r}" for k in keys)


class _MissingKey(AttributeError, KeyError):
    """Deleting an attribute that is not there: an ``AttributeError``, as Python expects of ``delattr``, and the
    ``KeyError`` Lightning's ``AttributeDict`` raises."""

    def __str__(self) -> str:
        return str(self.args[0])  # the message as it is, not quoted as a key
