"""Run code, log and warn on global rank 0 only.

Every process of a distributed run executes the same script; these helpers keep side effects that should
happen once (a warning, a log line, a file write) on the process whose global rank is 0.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar, overload

from fabric_core.errors import FabricCoreWarning, InvalidConfigError

__all__ = [
    "RANK_ENV_VARS",
    "LightningDeprecationWarning",
    "RankZeroOnly",
    "WarningCache",
    "rank_prefixed_message",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "show_info_lines",
]

P = ParamSpec("P")
T = TypeVar("T")

# Launchers and schedulers that announce a global rank, most specific first: torchrun / fabric-core run,
# then the local rank (single node), SLURM and IBM LSF (jsrun).
RANK_ENV_VARS: Final[tuple[str, ...]] = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")

# The helpers below add two frames (the rank-zero wrapper and their own body) between the caller and the
# `warnings` / `logging` call; a user-facing stacklevel of 1 must land on the line that called them.
_OWN_FRAMES: Final = 2

log = logging.getLogger(__name__)
_console_checked = False


def show_info_lines() -> None:
    """Let fabric-core's INFO lines ("Seed set to 42", ...) reach stderr, as Lightning Fabric's do.

    Done once, when the first such line is about to be logged (never at import). A program that configured
    logging itself (the root logger has a handler) or the ``fabric_core`` logger is left alone; either way
    ``logging.getLogger("fabric_core").setLevel(logging.WARNING)`` silences the lines.
    """
    global _console_checked
    if _console_checked:
        return
    _console_checked = True
    package = logging.getLogger("fabric_core")
    if package.handlers or logging.getLogger().hasHandlers():
        return
    if package.level == logging.NOTSET:
        package.setLevel(logging.INFO)
    package.addHandler(logging.StreamHandler())
    package.propagate = False


def announced_rank() -> int | None:
    """The global rank a launcher announced in the environment, or ``None`` where none did."""
    if any(os.environ.get(name, "").strip() for name in RANK_ENV_VARS):
        return _rank_from_env()
    return None


# The rank is read on every rank-zero-only call (every logged metric of a single-process run), and
# `os.environ.get` raises and catches a KeyError inside the mapping for each name that is not set (0.7 us
# apiece). CPython's `os.environ` keeps its names, encoded, in the dict `_data`: one set operation on its keys
# tells that none is set. Where the mapping is not CPython's, the public lookups below answer alone.
_ENCODE_KEY = getattr(os.environ, "encodekey", None)
_ENCODED_RANK_VARS: Final = frozenset(_ENCODE_KEY(name) for name in RANK_ENV_VARS) if _ENCODE_KEY else frozenset()


def _rank_from_env() -> int:
    data = getattr(os.environ, "_data", None)
    if _ENCODED_RANK_VARS and type(data) is dict and data.keys().isdisjoint(_ENCODED_RANK_VARS):
        return 0
    for name in RANK_ENV_VARS:
        value = os.environ.get(name)
        if value is None or value.strip() == "":
            continue
        try:
            return int(value)
        except ValueError:
            raise InvalidConfigError(
                f"The environment variable {name}={value!r} is not a valid rank: expected an integer >= 0. "
                f"The rank is read from the first of {', '.join(RANK_ENV_VARS)} that is set.",
                argument=name,
                value=value,
            ) from None
    return 0


class RankZeroOnly:
    """Decorator: the wrapped function runs only on global rank 0 and returns ``default`` elsewhere.

    The rank is read at every call from :attr:`rank`: a value assigned to it (strategies do so once the
    process group exists) wins over the environment (``RANK``, ``LOCAL_RANK``, ``SLURM_PROCID``,
    ``JSM_NAMESPACE_RANK``, else 0).

    Example::

        @rank_zero_only
        def save_report(path: str) -> None: ...

        rank_zero_only.rank = 1  # as a strategy would on the second process
        save_report("r.txt")  # does nothing, returns None
    """

    def __init__(self) -> None:
        self._rank: int | None = None

    @property
    def rank(self) -> int:
        """The global rank of this process: the value assigned, else the one the environment announces."""
        return self._rank if self._rank is not None else _rank_from_env()

    @rank.setter
    def rank(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidConfigError(
                f"`rank_zero_only.rank = {value!r}` is not a valid rank: expected an integer >= 0.",
                argument="rank",
                value=value,
            )
        self._rank = value

    def reset(self) -> None:
        """Forget an assigned rank, so that the environment decides again."""
        self._rank = None

    @overload
    def __call__(self, fn: Callable[P, T]) -> Callable[P, T | None]: ...

    @overload
    def __call__(self, fn: Callable[P, T], default: T) -> Callable[P, T]: ...

    def __call__(self, fn: Callable[P, T], default: T | None = None) -> Callable[P, T | None]:
        """Wrap ``fn`` so that it runs on rank 0 only.

        Args:
            fn: The function to guard.
            default: What the wrapper returns on the other ranks.

        Returns:
            The wrapper, with ``fn``'s name and docstring.
        """

        @functools.wraps(fn)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> T | None:
            if self.rank == 0:
                return fn(*args, **kwargs)
            return default

        return wrapped


rank_zero_only: Final[RankZeroOnly] = RankZeroOnly()


def _lightning_import_again() -> None:
    """Zero-edit mode, on an import of Lightning's name for this module after it was removed from
    ``sys.modules``: Lightning's module, run again, reads the rank from the environment; so does this one."""
    rank_zero_only.reset()


@rank_zero_only
def rank_zero_debug(*args: Any, stacklevel: int = 1, **kwargs: Any) -> None:
    """Log at DEBUG level (logger ``fabric_core.utilities.rank_zero``) on rank 0 only.

    Args:
        args: Passed to :meth:`logging.Logger.debug` (message and %-arguments).
        stacklevel: 1 attributes the record to the line calling this function, 2 to its caller, and so on.
        kwargs: Passed to :meth:`logging.Logger.debug`.
    """
    log.debug(*args, stacklevel=stacklevel + _OWN_FRAMES, **kwargs)


@rank_zero_only
def rank_zero_info(*args: Any, stacklevel: int = 1, **kwargs: Any) -> None:
    """Log at INFO level (logger ``fabric_core.utilities.rank_zero``) on rank 0 only.

    Args:
        args: Passed to :meth:`logging.Logger.info` (message and %-arguments).
        stacklevel: 1 attributes the record to the line calling this function, 2 to its caller, and so on.
        kwargs: Passed to :meth:`logging.Logger.info`.
    """
    show_info_lines()
    log.info(*args, stacklevel=stacklevel + _OWN_FRAMES, **kwargs)


@rank_zero_only
def rank_zero_warn(
    message: str | Warning,
    stacklevel: int = 1,
    category: type[Warning] = FabricCoreWarning,
    **kwargs: Any,
) -> None:
    """Issue a warning on rank 0 only.

    Args:
        message: The warning text (or a warning instance, whose class then is the category).
        stacklevel: 1 attributes the warning to the line calling this function, 2 to its caller, and so on.
        category: The warning class; :class:`~fabric_core.errors.FabricCoreWarning` unless given.
        kwargs: Passed to :func:`warnings.warn` (``source``, ``skip_file_prefixes``).
    """
    warnings.warn(message, category, stacklevel=stacklevel + _OWN_FRAMES, **kwargs)


class LightningDeprecationWarning(DeprecationWarning):
    """The category of :func:`rank_zero_deprecation` warnings (Lightning's class of the same name).

    A :class:`DeprecationWarning`, so filters written for either catch it.
    """


@rank_zero_only
def rank_zero_deprecation(
    message: str | Warning,
    stacklevel: int = 2,
    category: type[Warning] = LightningDeprecationWarning,
    **kwargs: Any,
) -> None:
    """Issue a :class:`DeprecationWarning` on rank 0 only.

    Args:
        message: What is deprecated and what to use instead.
        stacklevel: 1 attributes the warning to the line calling this function; the default, 2, to the
            caller of the deprecated API, which is the code that has to change.
        category: The warning class.
        kwargs: Passed to :func:`warnings.warn`.
    """
    warnings.warn(message, category, stacklevel=stacklevel + _OWN_FRAMES, **kwargs)


class WarningCache(set[str]):
    """Warn, deprecate or log each distinct message once, on rank 0 (Lightning's class of the same name).

    The set holds the messages already issued. ``stacklevel`` counts as in :func:`rank_zero_warn`: 1 (the
    default) attributes the record to the line calling the method.
    """

    def warn(self, message: str, stacklevel: int = 1, **kwargs: Any) -> None:
        """:func:`rank_zero_warn` ``message`` unless it was issued before."""
        if message not in self:
            self.add(message)
            rank_zero_warn(message, stacklevel=stacklevel + 1, **kwargs)

    def deprecation(self, message: str, stacklevel: int = 1, **kwargs: Any) -> None:
        """:func:`rank_zero_deprecation` ``message`` unless it was issued before."""
        if message not in self:
            self.add(message)
            rank_zero_deprecation(message, stacklevel=stacklevel + 1, **kwargs)

    def info(self, message: str, stacklevel: int = 1, **kwargs: Any) -> None:
        """:func:`rank_zero_info` ``message`` unless it was issued before."""
        if message not in self:
            self.add(message)
            rank_zero_info(message, stacklevel=stacklevel + 1, **kwargs)


def rank_prefixed_message(message: str, rank: int | None) -> str:
    """Prefix ``message`` with ``[rank: N]`` so that interleaved output of many processes stays readable.

    Args:
        message: The text.
        rank: The process's rank; ``None`` leaves the message unchanged.

    Returns:
        The message, prefixed when a rank is given.
    """
    if rank is None:
        return message
    return f"[rank: {rank}] {message}"


# Lightning's private name for the rank the environment announces (``None`` where none is).
_get_rank = announced_rank

# Lightning's name for the module whose `log` the helpers above write to: `rank_zero_module.log = logger`
# sends them elsewhere (lightning.pytorch does so at import). Here that module is this one.
rank_zero_module = sys.modules[__name__]
