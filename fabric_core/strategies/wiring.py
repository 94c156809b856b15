"""The strategy wiring, defined once: the components selection connects to a strategy.

A user may pass the same components to a strategy's constructor under Lightning's keyword names
(``DDPStrategy(accelerator=..., parallel_devices=..., timeout=...)``). Each constructor declares only its own
parameters and ``**wiring: Unpack[ParallelWiring]`` (typed for mypy); :func:`wired` gives it the signature that
``inspect``, the catalog's option check and Lightning's users see, and binds every call to it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, ForwardRef, TypedDict, TypeVar, cast

from fabric_core.errors import ArgumentTypeError, UnknownOptionError

if TYPE_CHECKING:
    import torch

    from fabric_core.accelerators.accelerator import Accelerator
    from fabric_core.environments.environment import ClusterEnvironment
    from fabric_core.io.checkpoint_io import CheckpointIO
    from fabric_core.precision.precision import Precision

__all__ = [
    "DEFAULT_PG_TIMEOUT",
    "DEVICES_WIRING_ORDER",
    "PARALLEL_WIRING_ORDER",
    "WIRING_ORDER",
    "DevicesWiring",
    "ParallelWiring",
    "Placement",
    "Wiring",
    "split_wiring",
    "wired",
]

#: How long a collective waits for the other ranks before failing (torch's own default).
DEFAULT_PG_TIMEOUT: Final = timedelta(minutes=30)


class Wiring(TypedDict, total=False):
    """What every strategy is wired with."""

    accelerator: Accelerator | None
    checkpoint_io: CheckpointIO | None
    precision: Precision | None


class DevicesWiring(Wiring, total=False):
    """The wiring of a strategy over several devices whose processes it does not configure itself (XLA)."""

    parallel_devices: list[torch.device] | None


class ParallelWiring(DevicesWiring, total=False):
    """The wiring of a parallel strategy: where its processes run and how they meet."""

    cluster_environment: ClusterEnvironment | None
    process_group_backend: str | None
    #: A ``timedelta`` or a number of seconds.
    timeout: timedelta | float | None
    #: ``"popen"``, ``"spawn"``, ``"fork"`` or ``"forkserver"``; ``None``: ``fabric.launch()`` starts nothing.
    start_method: str | None


#: Lightning's positional order of each wiring, for ``wired(positional=...)``; a strategy whose own options
#: follow them by position lists those after (``(*DEVICES_WIRING_ORDER, "sync_module_states")``).
WIRING_ORDER: Final = ("accelerator", "checkpoint_io", "precision")
DEVICES_WIRING_ORDER: Final = ("accelerator", "parallel_devices", "checkpoint_io", "precision")
PARALLEL_WIRING_ORDER: Final = (
    "accelerator",
    "parallel_devices",
    "cluster_environment",
    "checkpoint_io",
    "precision",
    "process_group_backend",
    "timeout",
    "start_method",
)

#: The default of each wiring keyword that is not ``None``.
_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType({"timeout": DEFAULT_PG_TIMEOUT})


@dataclass(frozen=True)
class Placement:
    """Where selection placed the job: what :meth:`Strategy.connect` hands to :meth:`Strategy.place`.

    Attributes:
        cluster_environment: Where the ranks come from.
        parallel_devices: One device per local process (the devices of a one-process strategy).
        num_nodes: How many nodes the job spans.
    """

    cluster_environment: ClusterEnvironment
    parallel_devices: list[torch.device]
    num_nodes: int


Init = TypeVar("Init", bound=Callable[..., None])


def _keys(wiring: type) -> list[str]:
    # A TypedDict's annotations hold its bases' keys first, in declaration order.
    return list(wiring.__annotations__)


def _annotation(value: Any) -> Any:
    return value.__forward_arg__ if isinstance(value, ForwardRef) else value


def wired(wiring: type, positional: Sequence[str] | None = None, **defaults: Any) -> Callable[[Init], Init]:
    """Give a constructor that takes ``**wiring`` the full signature, and bind every call to it.

    The signature is the constructor's own parameters, then each key of ``wiring`` as a keyword argument (its
    default ``None``, the timeout's torch's 30 minutes, or as ``defaults`` says, e.g. ``start_method="popen"``),
    then the constructor's ``**kwargs`` if it takes options beyond the wiring (its variadic keyword parameter
    is then not named ``wiring``; see :func:`split_wiring`). Every call reaches the constructor with all wiring
    keys, defaults filled in.

    ``positional`` names the parameters a call may pass by position, in their order, own and wiring mixed
    (Lightning's order for a strategy Lightning has: ``DDPStrategy(accelerator, parallel_devices, ...)``);
    every other parameter is then keyword-only. Without it, the constructor's own parameters are positional
    as written and the wiring keys keyword-only.

    Args:
        wiring: The ``TypedDict`` of the keys the constructor forwards.
        positional: The parameters that may be given by position, in order.
        **defaults: Defaults of this constructor that differ from the wiring's.

    Raises:
        UnknownOptionError: At the call: a keyword the constructor takes neither as its own nor as wiring
            (a ``TypeError`` too, as Python raises), with the closest valid names.
        ArgumentTypeError: At the call: more positional arguments than ``positional`` names, or one given both
            by position and by keyword (a ``TypeError`` too).
    """
    keys = _keys(wiring)
    unknown = sorted(set(defaults) - set(keys))
    if unknown:
        raise ValueError(f"wired(): {unknown} are not keys of {wiring.__name__}")
    order = None if positional is None else tuple(positional)

    def decorate(init: Init) -> Init:
        written = list(inspect.signature(init).parameters.values())
        variadic = [p for p in written if p.kind is inspect.Parameter.VAR_KEYWORD]
        own = [p for p in written if p.kind is not inspect.Parameter.VAR_KEYWORD]
        forwarded = [
            inspect.Parameter(
                key,
                inspect.Parameter.KEYWORD_ONLY,
                default=defaults.get(key, _DEFAULTS.get(key)),
                annotation=_annotation(wiring.__annotations__[key]),
            )
            for key in keys
            if key not in {p.name for p in own}
        ]
        extras = [p for p in variadic if p.name != "wiring"]
        if order is None:
            positional_params = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
            keyword_only = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
            parameters = [*positional_params, *keyword_only, *forwarded]
        else:
            by_name = {p.name: p for p in [*own[1:], *forwarded]}  # own[0] is self
            missing = [name for name in order if name not in by_name]
            if missing:
                raise ValueError(f"wired(positional=...): {missing} are not parameters of {init.__qualname__}")
            first = [by_name[name].replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in order]
            rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in by_name.values() if p.name not in order]
            parameters = [own[0], *first, *rest]
        signature = inspect.signature(init).replace(parameters=[*parameters, *extras])
        accepted = {p.name for p in own[1:]} | set(keys)
        # Filling in the wiring defaults, and naming positional arguments where `positional` orders them, is
        # all the binding a call needs (Python binds the rest): a dict merge, not ``Signature.bind`` per build.
        filled = {p.name: p.default for p in forwarded}

        @functools.wraps(init)
        def constructor(self: Any, *args: Any, **kwargs: Any) -> None:
            owner = type(self).__name__  # the class built, also where it inherits this constructor
            if not extras:
                for name in kwargs:
                    if name not in accepted:
                        raise UnknownOptionError(
                            f"{owner}({name}={kwargs[name]!r})", name, accepted, owner=owner, value=kwargs[name]
                        )
            if order is not None and args:
                kwargs = _by_position(owner, order, args, kwargs)
                args = ()
            init(self, *args, **{**filled, **kwargs})

        constructor.__signature__ = signature  # type: ignore[attr-defined]
        return cast(Init, constructor)

    return decorate


def _by_position(owner: str, order: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the positional ``args`` added under the names ``order`` gives their positions."""
    if len(args) > len(order):
        raise ArgumentTypeError(
            f"`{owner}(...)` takes at most {len(order)} positional arguments ({', '.join(order)}) but {len(args)} "
            "were given; pass the others by keyword.",
            argument=None,
            value=args,
        )
    named = dict(zip(order, args))
    twice = [name for name in named if name in kwargs]
    if twice:
        raise ArgumentTypeError(
            f"`{owner}(...)` got {twice[0]!r} both by position and by keyword.",
            argument=twice[0],
            value=named[twice[0]],
        )
    return {**named, **kwargs}


def split_wiring(options: dict[str, Any], wiring: type = ParallelWiring) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate the wiring keys from the options a constructor hands to the class it wraps (``**ddp_kwargs``).

    Returns:
        ``(wiring, others)``.
    """
    keys = set(_keys(wiring))
    return {k: v for k, v in options.items() if k in keys}, {k: v for k, v in options.items() if k not in keys}
