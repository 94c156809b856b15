"""Zero-edit mode's handover for ``import lightning_fabric`` in a child process.

It turns the mode on and imports ``lightning_fabric`` again, now served by the mode; that module replaces this
one in ``sys.modules``. See :mod:`fabric_core._lightning.alias`.
"""

from __future__ import annotations

from fabric_core._lightning.alias import hand_over

hand_over(__name__)
