"""The microkernel: plugin discovery and isolation, the catalog of names and selection.

It is the ground floor: it imports only the torch-free leaves and its own contract, knows no hardware and no
distributed algorithm, and imports no torch when imported. Plugins reach it through
the public contract (:mod:`fabric_core.plugin_api`, :mod:`fabric_core.hookspecs`); the rest of fabric-core
through :class:`~fabric_core._kernel.manager.PluginManager`'s typed methods. Its modules:

- ``manager``: discovery (entry points), loading one plugin at a time, the switches, the typed hook facade;
- ``registry``: ``Entry``, ``Registry``, ``Catalog``, ``spec``: names to lazy targets;
- ``metadata``: what installed distributions declare, read without importing them;
- ``context``: ``SelectionContext`` and ``Decision``, the records of each choice;
- ``arguments``: how ``Fabric(...)`` arguments and their environment variables are read;
- ``selection``: deciding what the arguments mean (builds nothing);
- ``catalog_view``: ``ACCELERATOR_REGISTRY`` / ``STRATEGY_REGISTRY``, Lightning-shaped views of the catalog.

The core's own components register from :mod:`fabric_core._builtin`, a plugin found through its entry point like
any other. Lightning's module paths are served by :mod:`fabric_core._lightning.paths`.
"""
