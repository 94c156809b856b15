"""The precision interface and the full-precision (``"32-true"``) default."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Final, TypeVar

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.utilities.apply_func import apply_to_collection

__all__ = [
    "TO_DEFAULT_DTYPE",
    "Precision",
    "autocast_context",
    "autocast_of",
    "casts_floats_to",
    "checked_autocast",
    "convert_floating_tensors",
    "default_dtype",
    "default_dtype_of",
    "float_cast_of",
]

_Hook = TypeVar("_Hook", bound=Callable[..., Any])
#: The attributes :func:`casts_floats_to` and :func:`autocast_context` set on a hook.
_CAST_MARK: Final = "__fabric_casts_floats_to__"
_AUTOCAST_MARK: Final = "__fabric_autocast_context__"


class Precision:
    """Full precision (``"32-true"``): every hook is a no-op. Other precisions override what differs.

    The wrappers call :meth:`convert_input`, :meth:`forward_context` and :meth:`convert_output` around
    every forward, so these must cost nothing when there is nothing to do.
    """

    #: The canonical precision string this plugin serves. A plain attribute, not a ``ClassVar``: classes
    #: that serve several strings (``HalfPrecision``: ``16-true`` and ``bf16-true``) set it per instance.
    precision: str = "32-true"
    #: Hooks this instance's class overrides but that, in this instance's configuration, do exactly what the
    #: base class does (``"bf16-mixed"`` has no grad scaler: its ``backward`` and ``optimizer_step`` are
    #: plain). The wrappers then leave them out of the training step: no guard on raw ``loss.backward()``,
    #: no detour through the strategy for ``backward`` and ``optimizer.step()``.
    plain_hooks: frozenset[str] = frozenset()

    def convert_module(self, module: Module) -> Module:
        """Convert the module's parameters and buffers (``module.to(dtype)`` for "true" precisions)."""
        return module

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Context for ``fabric.init_tensor()``: tensors are created in this precision's dtype."""
        return contextlib.nullcontext()

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Context for ``fabric.init_module()``: parameters are created in this precision's dtype."""
        return self.tensor_init_context()

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Context around the model's forward (autocast for mixed precision)."""
        return contextlib.nullcontext()

    def convert_input(self, data: Any) -> Any:
        """Convert floating-point tensors of the inputs to the compute dtype."""
        return data

    def convert_output(self, data: Any) -> Any:
        """Convert floating-point tensors of the outputs back to ``torch.get_default_dtype()``."""
        return data

    def pre_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        """Run before backward; returns the tensor to call :meth:`backward` on."""
        return tensor

    def backward(self, tensor: Tensor, model: Module | None, *args: Any, **kwargs: Any) -> None:
        """Run the backward pass."""
        tensor.backward(*args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated

    def post_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        """Run after backward."""
        return tensor

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Step the optimizer (through the grad scaler where there is one)."""
        return optimizer.step(**kwargs)

    def main_params(self, optimizer: Optimizer) -> Iterator[Tensor]:
        """The parameters the optimizer updates (what gradient clipping looks at)."""
        for group in optimizer.param_groups:
            yield from group["params"]

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Undo loss scaling of the gradients before clipping."""

    def state_dict(self) -> dict[str, Any]:
        """State to checkpoint (the grad scaler's)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def teardown(self) -> None:
        """Undo global changes made by this plugin."""


def casts_floats_to(dtype_of: Callable[[Any], torch.dtype]) -> Callable[[_Hook], _Hook]:
    """Declare that a ``convert_input`` or ``convert_output`` only casts floating tensors to one dtype.

    ``FabricModule`` then casts the forward's arguments (or its output) itself with
    :func:`convert_floating_tensors`, without packing them into the hook's ``(args, kwargs)`` argument:
    about a microsecond less per step, which is several percent of a small model's step. A subclass that
    overrides the hook without this mark gets its hook called as usual.

    Args:
        dtype_of: Gives the target dtype from the precision instance. For inputs it may be called once, when
            the wrapper is built; :data:`TO_DEFAULT_DTYPE`'s follows ``torch.get_default_dtype()`` on every
            forward.

    Returns:
        A decorator that marks the hook and returns it unchanged.
    """

    def mark(hook: _Hook) -> _Hook:
        setattr(hook, _CAST_MARK, dtype_of)
        return hook

    return mark


def _declared(precision: Precision, hook: str, mark: str) -> Any:
    """What ``precision``'s class marked its ``hook`` with (``None``: unmarked, or replaced on the instance)."""
    if hook in getattr(precision, "__dict__", {}):  # replaced on the instance: no declaration applies
        return None
    return getattr(getattr(type(precision), hook), mark, None)


def float_cast_of(precision: Precision, hook: str) -> Callable[[Any], torch.dtype] | None:
    """The ``dtype_of`` that :func:`casts_floats_to` declared for ``precision``'s hook, if it did."""
    cast: Callable[[Any], torch.dtype] | None = _declared(precision, hook, _CAST_MARK)
    return cast


def autocast_context(hook: _Hook) -> _Hook:
    """Declare that a ``forward_context`` returns ``torch.autocast(self.device, dtype=self.dtype)``, no more.

    Where the conversions are declared casts too (:func:`casts_floats_to`, :data:`TO_DEFAULT_DTYPE`),
    ``FabricModule`` then runs a one-argument forward in a few inlined lines: the hooks' calls cost 2% of
    a small model's step.

    Args:
        hook: The ``forward_context`` method.

    Returns:
        ``hook``, marked.
    """
    setattr(hook, _AUTOCAST_MARK, True)
    return hook


def autocast_of(precision: Precision) -> tuple[str, torch.dtype] | None:
    """``(device type, dtype)`` of the autocast that ``precision`` declared with :func:`autocast_context`."""
    if not _declared(precision, "forward_context", _AUTOCAST_MARK):
        return None
    device: str = getattr(precision, "device")  # noqa: B009 - not an attribute of the base class
    dtype: torch.dtype = getattr(precision, "dtype")  # noqa: B009
    return device, dtype


_CHECKED_AUTOCASTS: Final[dict[tuple[str, torch.dtype], type[torch.autocast]]] = {}


def checked_autocast(device: str, dtype: torch.dtype) -> type[torch.autocast]:
    """A ``torch.autocast`` class for ``(device, dtype)`` whose arguments were checked once, when it was made.

    ``torch.autocast(device, dtype=dtype)`` checks device and dtype on every construction, about 0.85 µs:
    1.5% of a small model's step when done per forward. An instance of the returned class starts as that
    object would (its settings are class attributes), and enters and exits through ``torch.autocast``'s own
    methods. Each instance keeps its own saved state, so nesting and threads are as safe as with
    ``torch.autocast``.

    Args:
        device: The device type, as ``torch.autocast`` takes it (``"cpu"``, ``"cuda"``).
        dtype: The autocast dtype.

    Returns:
        A subclass of ``torch.autocast`` whose constructor takes no arguments.

    Raises:
        RuntimeError: ``device`` is not a device type (torch's own check). A dtype the device cannot autocast
            to gives torch's warning once, here, and an autocast that is disabled.
    """
    key = (device, dtype)
    cls = _CHECKED_AUTOCASTS.get(key)
    if cls is None:
        settings = vars(torch.autocast(device, dtype=dtype))  # torch checks the pair here, once
        # `object.__init__` is a C call that takes no arguments: the settings are the class's.
        namespace = {**settings, "__init__": object.__init__, "__module__": __name__}
        cls = type(f"CheckedAutocast[{device}, {dtype}]", (torch.autocast,), namespace)
        _CHECKED_AUTOCASTS[key] = cls
    return cls


def default_dtype_of(_: object) -> torch.dtype:
    """``torch.get_default_dtype()``, as the ``dtype_of`` of :data:`TO_DEFAULT_DTYPE` (the wrappers know it)."""
    return torch.get_default_dtype()


#: For ``convert_output`` hooks that cast floating outputs back to ``torch.get_default_dtype()``.
TO_DEFAULT_DTYPE: Final = casts_floats_to(default_dtype_of)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Generator[None, None, None]:
    """Set ``torch.get_default_dtype()`` inside the block and restore it after."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def convert_floating_tensors(data: Any, dtype: torch.dtype) -> Any:
    """Cast every floating-point tensor in ``data`` to ``dtype``; other values are left alone.

    This runs around every forward, so it is built to cost nothing when there is nothing to do: lists,
    tuples and dicts are walked directly, tensors already in ``dtype`` are skipped, and a container is only
    rebuilt (with its own type) when one of its elements changed; otherwise ``data`` itself is returned.
    Other mappings and dataclass instances take the general, slower :func:`apply_to_collection` path.

    Args:
        data: A tensor or a nested collection of them.
        dtype: The floating-point dtype to cast to.

    Returns:
        ``data`` itself when nothing needed converting, else a converted copy.
    """
    if isinstance(data, Tensor):
        current = data.dtype
        if current is dtype or not current.is_floating_point:
            return data
        return data.to(dtype=dtype)  # the keyword skips torch's overload matching: ~0.4 µs less per call
    if isinstance(data, (list, tuple)):
        converted: list[Any] | None = None
        for index, value in enumerate(data):
            if isinstance(value, Tensor):  # inlined: a forward's positional tensors are the common case
                current = value.dtype
                new = value if current is dtype or not current.is_floating_point else value.to(dtype=dtype)
            else:
                new = convert_floating_tensors(value, dtype)
            if new is not value and converted is None:
                converted = list(data[:index])
            if converted is not None:
                converted.append(new)
        if converted is None:
            return data
        cls = type(data)
        if cls is not tuple and cls is not list and hasattr(data, "_fields"):  # namedtuple: fields are positional
            return cls(*converted)
        return cls(converted)
    if isinstance(data, dict):
        if not data:  # the kwargs of most forwards
            return data
        changed: dict[Any, Any] | None = None
        for key, value in data.items():
            new = convert_floating_tensors(value, dtype)
            if new is not value:
                if changed is None:
                    changed = {}
                changed[key] = new
        if changed is None:
            return data
        # copy.copy keeps the dict's own type and state (an OrderedDict's order, a defaultdict's factory).
        result = copy.copy(data)
        result.update(changed)
        return result
    if data is None or isinstance(data, (bool, int, float, str, bytes)):
        return data
    if isinstance(data, Mapping) or (dataclasses.is_dataclass(data) and not isinstance(data, type)):
        return apply_to_collection(data, Tensor, convert_floating_tensors, dtype, allow_frozen=True)
    return data
