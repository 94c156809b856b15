"""``python -m fabric_core.lightning_imports SCRIPT [ARGS]``: run a program unchanged in zero-edit mode.

``-m MODULE [ARGS]`` runs a module instead (``python -m fabric_core.lightning_imports -m litgpt pretrain ...``).
SCRIPT may also be a Python console script found on ``PATH`` (``... lightning_imports fabric run train.py``).
The program runs as ``python SCRIPT`` / ``python -m MODULE`` would run it (``sys.argv``, ``sys.path[0]``,
``__main__``), with ``lightning_fabric`` and ``lightning.fabric`` served by fabric_core
(:func:`fabric_core.compat.provide_lightning_fabric`). The processes it starts run in the mode too.

``--print-env`` prints the shell lines that put a whole shell (or a job file) in the mode instead: after
``eval "$(python -m fabric_core.lightning_imports --print-env)"`` every Python program that imports
``lightning`` or ``lightning_fabric``, Lightning's own ``fabric`` command included, runs in it.
"""

from __future__ import annotations

import os
import runpy
import shlex
import shutil
import sys
from collections.abc import Sequence
from typing import Final

from fabric_core._lightning.alias import ENV, HANDOVER_PATH, install
from fabric_core._run.worker import run_script

__all__ = ["main"]

USAGE: Final = (
    "usage: python -m fabric_core.lightning_imports SCRIPT [ARGS...]\n"
    "       python -m fabric_core.lightning_imports -m MODULE [ARGS...]\n"
    "       python -m fabric_core.lightning_imports --print-env\n"
    "Runs SCRIPT (a file, or a Python console script on PATH such as `fabric`) or MODULE with lightning_fabric\n"
    "and lightning.fabric served by fabric_core (zero-edit mode). --print-env prints the shell lines that turn\n"
    'the mode on for a whole shell or job file: eval "$(python -m fabric_core.lightning_imports --print-env)".'
)


def environment_lines() -> str:
    """The ``export`` lines (POSIX shell) that put every Python process started after them in zero-edit mode.

    The handover folder goes first on ``PYTHONPATH`` (ahead of what it holds when the lines run), so that
    the first ``import lightning`` or ``import lightning_fabric`` of any process turns the mode on.
    """
    folder = shlex.quote(HANDOVER_PATH)
    return f'export PYTHONPATH={folder}"${{PYTHONPATH:+:$PYTHONPATH}}"\nexport {ENV}=1'


def _console_script(name: str) -> str | None:
    """The Python console script ``name`` names on ``PATH`` (as a shell would find it), else ``None``."""
    if os.sep in name or (os.altsep and os.altsep in name):
        return None  # a path: the shell would not search PATH either
    found = shutil.which(name)
    if found is None:
        return None
    try:
        with open(found, "rb") as file:
            first = file.readline()
    except OSError:
        return None
    return found if first.startswith(b"#!") and b"python" in first else None


def main(argv: Sequence[str]) -> int:
    """Turn zero-edit mode on, then run ``argv`` as the Python command line ``python ARGV`` would.

    Args:
        argv: ``[SCRIPT, *ARGS]`` (SCRIPT: a file, or a Python console script on ``PATH``), ``["-m", MODULE,
            *ARGS]`` or ``["--print-env"]``.

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
    if argv[0] == "--print-env":
        print(environment_lines())
        return 0
    if argv[0].startswith("-"):
        print(f"python -m fabric_core.lightning_imports: unknown option {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    if not os.path.exists(argv[0]):
        script = _console_script(argv[0])
        if script is None:
            print(
                f"python -m fabric_core.lightning_imports: can't open file {argv[0]!r}: no such file, nor a Python "
                "console script of that name on PATH",
                file=sys.stderr,
            )
            return 2
        argv[0] = script
    install()
    run_script(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
