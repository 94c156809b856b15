"""Zero-edit mode from Python: make ``lightning_fabric`` and ``lightning.fabric`` fabric_core's own modules.

For a notebook, or a script whose first lines you can change but whose libraries you cannot::

    from fabric_core.compat import provide_lightning_fabric

    provide_lightning_fabric()  # before anything imports lightning
    import lightning as L       # L.Fabric is fabric_core.Fabric

``python -m fabric_core.lightning_imports SCRIPT`` and ``fabric-core run --lightning-imports`` do the same for a
program you run unchanged. See ``docs/lightning-imports.md`` for what the mode covers and its limits.
"""

from __future__ import annotations

from fabric_core._lightning import alias as _lightning_alias

__all__ = ["lightning_fabric_provided", "provide_lightning_fabric"]


def provide_lightning_fabric() -> None:
    """Serve ``lightning_fabric.X`` and ``lightning.fabric.X`` as the module ``fabric_core.X`` from now on.

    The modules are the same objects under every name, so ``isinstance`` checks and ``mock.patch`` agree
    whichever name a library uses. ``lightning`` is the installed ``lightning`` distribution (whose
    ``lightning.pytorch`` stays Lightning's), or, without it, a stand-in with ``Fabric``, ``fabric`` and
    ``seed_everything``. Processes this one starts afterwards run in the mode too: it sets
    ``FABRIC_CORE_LIGHTNING_IMPORTS=1`` and puts a handover folder first on ``PYTHONPATH`` and ``sys.path``.
    Calling it again does nothing.

    Raises:
        InvalidConfigError: Lightning Fabric's own modules were imported before the call; serving the names now
            would leave two copies of each class. Call it before anything imports lightning.
    """
    _lightning_alias.install()


def lightning_fabric_provided() -> bool:
    """Whether zero-edit mode is on in this process."""
    return _lightning_alias.is_installed()
