"""Zero-edit mode: Lightning programs run unchanged, with ``lightning.fabric`` served by fabric_core's modules.

``alias`` installs the import hook and hands the mode to child processes (through the ``handover`` packages);
``loggers`` gives fabric-core's log records Lightning's logger names; ``module`` runs a ``LightningModule`` under
``fabric.setup``. The public entry points are :mod:`fabric_core.lightning_imports` and :mod:`fabric_core.compat`.
Lightning's import paths themselves (``fabric_core.strategies.ddp``, ...) are served by the kernel, outside this
mode too.
"""
