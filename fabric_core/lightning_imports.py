"""``python -m fabric_core.lightning_imports SCRIPT [ARGS]``: run a program unchanged in zero-edit mode.

``-m MODULE [ARGS]`` runs a module instead (``python -m fabric_core.lightning_imports -m litgpt pretrain ...``).
The program runs as ``python SCRIPT`` / ``python -m MODULE`` would run it (``sys.argv``, ``sys.path[0]``,
``__main__``), with ``lightning_fabric`` and ``lightning.fabric`` served by fabric_core
(:func:`fabric_core.compat.provide_lightning_fabric`). The processes it starts run in the mode too.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence
from typing import Final

from fabric_core._lightning_alias import install
from fabric_core._run_worker import run_script

__all__ = ["main"]

USAGE: Final = (
    "usage: python -m fabric_core.lightning_imports SCRIPT [ARGS...]\n"
    "       python -m fabric_core.lightning_imports -m MODULE [ARGS...]\n"
    "Runs SCRIPT or MODULE with lightning_fabric and lightning.fabric served by fabric_core (zero-edit mode)."
)


def main(argv: Sequence[str]) -> int:
    """Turn zero-edit mode on, then run ``argv`` as the Python command line ``python ARGV`` would.

    Args:
        argv: ``[SCRIPT, *ARGS]`` or ``["-m", MODULE, *ARGS]``.

    Returns:
        ``2`` for a usage error (printed), else ``0``; the program's own ``sys.exit`` passes through.
    """
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "-m":
        if len(argv) < 2 or argv[1].startswith("-"):
            print(f"python -m fabric_core.lightning_imports: -m needs a module name\n{USAGE}", file=sys.stderr)
            return 2
        install()
        sys.argv = [argv[1], *argv[2:]]  # run_module puts the module's file in argv[0], as `python -m` does
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    if argv[0].startswith("-"):
        print(f"python -m fabric_core.lightning_imports: unknown option {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    if not os.path.exists(argv[0]):
        print(f"python -m fabric_core.lightning_imports: can't open file {argv[0]!r}: no such file", file=sys.stderr)
        return 2
    install()
    run_script(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
