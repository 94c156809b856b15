"""Lightning-shaped views of the catalog: ``ACCELERATOR_REGISTRY`` and ``STRATEGY_REGISTRY``.

Lightning keeps a dict per kind that classes register themselves into; in fabric-core, plugins register
components through hooks, and these views show the resulting catalog in Lightning's shape
(``{name: {"description", "init_params", <kind>, "<kind>_name"}}``). Nothing is imported until an entry's
class is asked for. ``register`` adds a component for the running process, as Lightning's does, beside the
plugins' entries (:meth:`fabric_core._kernel.manager.PluginManager.add_in_code`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from fabric_core.errors import FabricCoreError

__all__ = ["CatalogView", "ReadOnlyRegistryError", "plugin_export"]


class ReadOnlyRegistryError(FabricCoreError, TypeError):
    """A plugin's entry cannot be removed through the registry views: the plugin is disabled instead."""


class CatalogView(Mapping[str, dict[str, Any]]):
    """The catalog's components of one ``kind``, by every name and alias ``Fabric(...)`` accepts.

    Args:
        kind: ``"accelerator"`` or ``"strategy"``.
        title: How :func:`str` introduces the names (``"Registered Accelerators"``).
    """

    #: The exception a name registered twice raises (Lightning's differ between its two registries).
    duplicate_error: type[Exception] = ValueError

    def __init__(self, kind: str, title: str) -> None:
        self._kind = kind
        self._title = title

    @staticmethod
    def _catalog() -> Any:
        from fabric_core._kernel.manager import get_manager

        return get_manager().catalog

    def _entry(self, name: str) -> Any:
        entry = self._catalog().find(self._kind, name) if isinstance(name, str) else None
        if entry is None:
            raise KeyError(f"'{name}' not found in registry. Available names: {self._names()}")
        return entry

    def _names(self) -> list[str]:
        names: list[str] = self._catalog().names(self._kind)
        return names

    def __getitem__(self, name: str) -> dict[str, Any]:
        entry = self._entry(name)
        return {
            "description": entry.description,
            "init_params": dict(entry.defaults),
            self._kind: entry.load(),
            f"{self._kind}_name": name,
        }

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._catalog().find(self._kind, name) is not None

    def get(self, name: str, default: Any = None) -> Any:
        """Build the component ``name`` with its registered arguments; ``default`` if there is none.

        Raises:
            KeyError: No such name and no ``default``; the message lists the names.
        """
        if name in self:
            return self._entry(name).build()
        if default is not None:
            return default
        return self._entry(name)  # raises the KeyError

    def register(
        self, name: str, obj: Any = None, description: str = "", override: bool = False, **init_params: Any
    ) -> Any:
        """Register ``obj`` under ``name`` for this process (or, without ``obj``, return a decorator that does).

        As Lightning's ``register``: ``Fabric(accelerator=name)`` then builds ``obj(**init_params)``. The entry
        joins the catalog beside the plugins' (its plugin is ``"in-code"``, as ``fabric-core explain`` and
        ``list-plugins`` show in this process); it lasts as long as the process. For a component every
        program should find, write a plugin (docs: writing-a-plugin.md).

        Raises:
            TypeError: ``name`` is not a string.
            duplicate_error: ``name`` is taken already (by a plugin or by code) and ``override`` is not set.
        """
        if not isinstance(name, str):
            raise TypeError(f"`name` must be a str, found {name}")
        if name in self and not override:
            raise self.duplicate_error(f"'{name}' is already present in the registry. HINT: Use `override=True`.")

        def do_register(registered: Any) -> Any:
            from fabric_core._kernel.manager import IN_CODE, get_manager
            from fabric_core._kernel.registry import in_code_entry

            entry = in_code_entry(
                self._kind, name, registered, description=description, defaults=init_params, plugin=IN_CODE
            )
            get_manager().add_in_code(entry)
            return registered

        return do_register(obj) if obj is not None else do_register

    def remove(self, name: str) -> None:
        """Forget ``name`` if code registered it in this process.

        Raises:
            ReadOnlyRegistryError: ``name`` comes from a plugin: disable the plugin instead.
            KeyError: There is no such name.
        """
        from fabric_core._kernel.manager import get_manager

        entry = self._entry(name)
        if not get_manager().remove_in_code(self._kind, entry.name):
            raise ReadOnlyRegistryError(
                f"Cannot remove {name!r}: it comes from the plugin {entry.plugin!r}, not from code in this process. "
                "Disable the plugin that provides it instead (FABRIC_CORE_BLOCK_PLUGINS; `fabric-core "
                "list-plugins` shows which one)."
            )

    def __str__(self) -> str:
        return f"{self._title}: {', '.join(self._names())}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of the {self._kind}s: {', '.join(self._names())}>"


def plugin_export(name: str, kind: str) -> Any:
    """A public function or constant that an installed plugin of ``kind`` exports under ``name``.

    Lightning's packages export helpers next to their classes (``accelerators.find_usable_cuda_devices``);
    here a plugin's top-level package does, in its ``__all__``.

    Raises:
        AttributeError: No installed plugin of ``kind`` exports ``name``.
    """
    import importlib

    from fabric_core._kernel.manager import get_manager

    packages = dict.fromkeys(e.target.split(".", 1)[0] for e in get_manager().catalog.entries(kind))
    for package in packages:
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        if name in getattr(module, "__all__", ()):
            return getattr(module, name)
    raise AttributeError(name)


class NameRegistry(dict[str, dict[str, Any]]):
    """A registry of names to classes of one kind, as Lightning's ``_AcceleratorRegistry``/``_StrategyRegistry``.

    Lightning's own code (``lightning.pytorch``) and third parties create such registries for themselves
    (``StrategyRegistry = _StrategyRegistry()``) and fill them with ``register``; ``Fabric(...)`` does not read
    them: fabric-core's names come from plugins, and ``ACCELERATOR_REGISTRY``/``STRATEGY_REGISTRY`` are read-only
    views of that catalog. Each entry is ``{"description", "init_params", KIND, KIND + "_name"}``.
    """

    #: The kind of class registered: names the entry's keys and the messages.
    kind: str = "component"
    #: How ``str()`` introduces the names.
    title: str = "Registered Components"
    #: The exception a name registered twice raises (Lightning's differ between its two registries).
    duplicate_error: type[Exception] = ValueError

    def register(
        self, name: str, obj: Any = None, description: str = "", override: bool = False, **init_params: Any
    ) -> Any:
        """Register ``obj`` under ``name`` (or, without ``obj``, return a decorator that does).

        Raises:
            TypeError: ``name`` is not a string.
            duplicate_error: ``name`` is registered already and ``override`` is not set.
        """
        if not (name is None or isinstance(name, str)):
            raise TypeError(f"`name` must be a str, found {name}")
        if name in self and not override:
            raise self.duplicate_error(f"'{name}' is already present in the registry. HINT: Use `override=True`.")
        data: dict[str, Any] = {"description": description, "init_params": init_params}

        def do_register(registered: Any) -> Any:
            data[self.kind] = registered
            data[f"{self.kind}_name"] = name
            self[name] = data
            return registered

        return do_register(obj) if obj is not None else do_register

    def get(self, name: str, default: Any = None) -> Any:
        """Build the class registered under ``name`` with its registered arguments; ``default`` if unknown.

        Raises:
            KeyError: ``name`` is unknown and there is no ``default``; the message lists the names.
        """
        if name in self:
            data = self[name]
            return data[self.kind](**data["init_params"])
        if default is not None:
            return default
        raise KeyError(f"'{name}' not found in registry. Available names: {self._available()}")

    def remove(self, name: str) -> None:
        """Forget ``name``."""
        self.pop(name)

    def _available(self) -> Any:
        return list(self)

    def __str__(self) -> str:
        return f"{self.title}: {', '.join(self._available())}"
