"""Lightning's ``utilities.consolidate_checkpoint`` path: ``python -m`` it to consolidate a sharded checkpoint.

``python -m fabric_core.utilities.consolidate_checkpoint FOLDER [--output_file FILE]`` does what
``fabric-core consolidate`` does (the same command line as Lightning's module): read the sharded folder that
``fabric.save`` wrote and write one file ``torch.load`` reads, never overwriting one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fabric-core consolidate`` with ``argv`` (``sys.argv[1:]`` if ``None``); return its exit code."""
    from fabric_core.cli import main as cli

    return cli(["consolidate", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
