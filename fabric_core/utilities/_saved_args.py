"""Recording the arguments a DataLoader or BatchSampler was built with, so that it can be built again.

Lightning's way of re-creating a custom loader around a new sampler: while :func:`_replace_dunder_methods` is
active, the ``__init__`` of a class and of all its subclasses records the call's arguments on the instance
(``__pl_saved_args``, ``__pl_saved_kwargs``, ``__pl_saved_arg_names``, ``__pl_saved_default_kwargs``), and
attribute assignments and deletions made after ``__init__`` are recorded (``__pl_attrs_record``) so that
:func:`_reinstantiate_wrapped_cls` can replay them on the new object. The attribute names are Lightning's:
``lightning.pytorch`` reads them. :mod:`fabric_core.utilities.data` serves these names at Lightning's path.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

from fabric_core.utilities.enums import LightningEnum
from fabric_core.utilities.exceptions import MisconfigurationException

__all__: list[str] = []


class _WrapAttrTag(LightningEnum):
    """Which attribute operation a record replays: ``SET`` calls ``setattr``, ``DEL`` calls ``delattr``."""

    SET = "set"
    DEL = "del"

    def __call__(self, *args: Any) -> None:
        operation: Callable[..., None] = setattr if self == self.SET else delattr
        operation(*args)


def _all_subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    pending = [cls]
    while pending:
        sub: type
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                pending.append(sub)
    return found


def _reinstantiate_wrapped_cls(orig_object: Any, *args: Any, explicit_cls: type | None = None, **kwargs: Any) -> Any:
    """``type(orig_object)(*args, **kwargs)`` (or ``explicit_cls``), with the attribute changes recorded on the old one.

    Raises:
        MisconfigurationException: The class maps two of its own arguments to one argument of its parent (the
            constructor got multiple values for it); any other ``TypeError`` is raised as it is.
    """
    constructor = type(orig_object) if explicit_cls is None else explicit_cls
    try:
        result = constructor(*args, **kwargs)
    except TypeError as error:
        match = re.match(r".*__init__\(\) got multiple values .* '(\w+)'", str(error))
        if not match:
            raise
        argument = match.groups()[0]
        raise MisconfigurationException(
            f"The {constructor.__name__} implementation has an error where more than one `__init__` argument"
            f" can be passed to its parent's `{argument}=...` `__init__` argument. This is likely caused by allowing"
            f" passing both a custom argument that will map to the `{argument}` argument as well as `**kwargs`."
            f" `kwargs` should be filtered to make sure they don't contain the `{argument}` key."
            " This argument was automatically passed to your object by fabric-core."
        ) from error
    for record_args, operation in getattr(orig_object, "__pl_attrs_record", []):
        operation(result, *record_args)
    return result


def _wrap_init_method(init: Callable[..., None], store_explicit_arg: str | None = None) -> Callable[..., None]:
    """``init`` that first records its call's arguments on the instance (the outermost ``__init__`` only).

    Args:
        init: The class's own ``__init__``.
        store_explicit_arg: An argument whose value, as the innermost ``__init__`` received it, is also stored as
            ``__<name>`` (``dataset`` for loaders).
    """

    @functools.wraps(init)
    def wrapper(obj: Any, *args: Any, **kwargs: Any) -> None:
        outer_inside_init = getattr(obj, "__pl_inside_init", False)
        object.__setattr__(obj, "__pl_inside_init", True)
        # `init`'s own signature: `obj.__init__` may be another class's under multiple inheritance.
        parameters = inspect.signature(init).parameters
        defaults = {
            p.name: p.default
            for p in parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        arg_names = tuple(defaults)[: len(args)]
        default_kwargs = {
            name: value
            for name, value in defaults.items()
            if name not in kwargs and name not in arg_names and value != inspect.Parameter.empty
        }
        if not hasattr(obj, "__pl_saved_args"):
            object.__setattr__(obj, "__pl_saved_args", args)
            object.__setattr__(obj, "__pl_saved_kwargs", kwargs)
            object.__setattr__(obj, "__pl_saved_arg_names", arg_names)
            object.__setattr__(obj, "__pl_saved_default_kwargs", default_kwargs)
        # Set at every level, so that the value kept is the one the base class finally receives.
        if store_explicit_arg is not None:
            if store_explicit_arg in arg_names:
                object.__setattr__(obj, f"__{store_explicit_arg}", args[arg_names.index(store_explicit_arg)])
            elif store_explicit_arg in kwargs:
                object.__setattr__(obj, f"__{store_explicit_arg}", kwargs[store_explicit_arg])
        init(obj, *args, **kwargs)
        object.__setattr__(obj, "__pl_inside_init", outer_inside_init)

    return wrapper


def _wrap_attr_method(method: Callable[..., None], tag: _WrapAttrTag) -> Callable[..., None]:
    """``method`` (a ``__setattr__`` or ``__delattr__``) that records successful calls made outside ``__init__``.

    A call that reaches the same method of a parent class (``super().__setattr__``) is recorded once.
    """

    @functools.wraps(method)
    def wrapper(obj: Any, *args: Any) -> None:
        name = args[0]
        previous = getattr(obj, "__pl_current_call", (None, "method"))
        first_call = previous != (name, tag)
        object.__setattr__(obj, "__pl_current_call", (name, tag))
        method(obj, *args)
        if first_call and not getattr(obj, "__pl_inside_init", True):
            record = getattr(obj, "__pl_attrs_record", [])
            record.append((args, tag))
            object.__setattr__(obj, "__pl_attrs_record", record)
        object.__setattr__(obj, "__pl_current_call", previous)

    return wrapper


@contextmanager
def _replace_dunder_methods(base_cls: type, store_explicit_arg: str | None = None) -> Generator[None, None, None]:
    """Inside the block, ``base_cls`` and every subclass record their constructor arguments and later changes.

    Patches each class's own ``__init__`` (see :func:`_wrap_init_method`) and its own ``__setattr__`` and
    ``__delattr__`` (always ``base_cls``'s; see :func:`_wrap_attr_method`); restores them on leaving.

    Args:
        base_cls: ``DataLoader`` or ``BatchSampler``.
        store_explicit_arg: Passed to :func:`_wrap_init_method`.
    """
    classes = _all_subclasses(base_cls) | {base_cls}
    for cls in classes:
        if "__init__" in cls.__dict__:
            cls.__old__init__ = cls.__init__  # type: ignore[attr-defined,misc]
            cls.__init__ = _wrap_init_method(cls.__init__, store_explicit_arg)  # type: ignore[misc]
        for name, tag in (("__setattr__", _WrapAttrTag.SET), ("__delattr__", _WrapAttrTag.DEL)):
            if name in cls.__dict__ or cls is base_cls:
                setattr(cls, f"__old{name}", getattr(cls, name))
                setattr(cls, name, _wrap_attr_method(getattr(cls, name), tag))
    try:
        yield
    finally:  # also when the block raised: the classes must not stay patched
        for cls in classes:
            for name in ("__setattr__", "__delattr__", "__init__"):
                if f"__old{name}" in cls.__dict__:
                    setattr(cls, name, getattr(cls, f"__old{name}"))
                    delattr(cls, f"__old{name}")


def _replace_value_in_saved_args(
    replace_key: str,
    replace_value: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    default_kwargs: dict[str, Any],
    arg_names: tuple[str, ...],
) -> tuple[bool, tuple[Any, ...], dict[str, Any]]:
    """Put ``replace_value`` where ``replace_key`` was passed (positionally, by keyword, or left at its default).

    Returns:
        ``(found, args, kwargs)``: whether the argument exists, and the saved arguments with it replaced
        (``kwargs`` is changed in place).
    """
    if replace_key in arg_names:
        index = arg_names.index(replace_key)
        return True, (*args[:index], replace_value, *args[index + 1 :]), kwargs
    if replace_key in kwargs or replace_key in default_kwargs:
        kwargs[replace_key] = replace_value
        return True, args, kwargs
    return False, args, kwargs
