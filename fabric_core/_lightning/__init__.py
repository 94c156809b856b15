"""Lightning's layer: zero-edit mode (Lightning programs run unchanged, ``lightning.fabric`` served by fabric_core's
modules) and Lightning's module paths.

``alias`` installs the import hook and hands the mode to child processes (through the ``handover`` packages);
``loggers`` gives fabric-core's log records Lightning's logger names; ``module`` runs a ``LightningModule`` under
``fabric.setup``. The public entry points are :mod:`fabric_core.lightning_imports` and :mod:`fabric_core.compat`.
``paths`` serves Lightning's import paths themselves (``fabric_core.strategies.ddp``, ...), outside this mode
too.
"""
