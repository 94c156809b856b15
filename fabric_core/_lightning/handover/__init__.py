"""Zero-edit mode's handover folder (``HANDOVER_PATH`` in :mod:`fabric_core._lightning.alias`).

The folder itself is put on a child process's import path; its ``lightning`` and ``lightning_fabric`` packages
turn zero-edit mode on when first imported. This ``__init__`` only makes the folder part of the distribution.
"""
