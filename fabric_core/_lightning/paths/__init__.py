"""Lightning's module paths, served outside zero-edit mode too: ``fabric_core.strategies.ddp`` and the rest.

- ``plugin_modules``: the import hook's work: a path a plugin declares (``fabric_core_register_modules``) is that
  plugin's module, and a first-party plugin's path whose plugin is absent is its stand-in;
- ``package_classes``: the ``__getattr__`` of each public package (``fabric_core.strategies.DDPStrategy``), from the
  core's own classes, then the catalog;
- ``absent_plugins``: the stand-in modules of absent first-party plugins, with Lightning's names;
- ``reexported_names`` and ``absent_names``: the tables generated from Lightning Fabric for them (foundation:
  any layer may read them).
"""
