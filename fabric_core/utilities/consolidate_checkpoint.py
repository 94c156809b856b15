"""Lightning's ``utilities.consolidate_checkpoint`` path: ``python -m`` it to consolidate a sharded checkpoint.

``python -m fabric_core.utilities.consolidate_checkpoint FOLDER [--output_file FILE]`` does what
``fabric-core consolidate`` does (the same command line as Lightning's module): read the sharded folder that
``fabric.save`` wrote and write one file ``torch.load`` reads, never overwriting one.
"""

from __future__ import annotations

import logging
import sys
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path

from fabric_core._deferred import lightning_reexports
from fabric_core.utilities.imports import _TORCH_GREATER_EQUAL_2_3

__all__ = ["main"]

_log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fabric-core consolidate`` with ``argv`` (``sys.argv[1:]`` if ``None``); return its exit code."""
    from fabric_core.cli import main as cli

    return cli(["consolidate", *(sys.argv[1:] if argv is None else argv)])


def _parse_cli_args() -> Namespace:
    """This module's command line (``sys.argv[1:]``), as ``Namespace(checkpoint_folder, output_file)``.

    Parsed by ``fabric-core consolidate``'s own parser, so both accept the same options.
    """
    from fabric_core.cli import build_parser

    args = build_parser().parse_args(["consolidate", *sys.argv[1:]])
    return Namespace(checkpoint_folder=args.checkpoint_folder, output_file=args.output)


def _process_cli_args(args: Namespace) -> Namespace:
    """Check the parsed command line; the folder and the output file as paths.

    The output defaults to ``<folder>.consolidated`` next to the folder. Each problem is logged as an error and
    ends the program with exit code 1: the folder is missing, is no folder, or is not a sharded checkpoint (it
    has no ``.metadata``), or the output exists already (it is never overwritten).

    Args:
        args: ``checkpoint_folder`` and ``output_file`` (``None`` for the default).
    """
    from fabric_core.io.distributed import is_distributed_checkpoint

    if not _TORCH_GREATER_EQUAL_2_3:  # Lightning's flag, read here as Lightning reads it (fabric-core needs more)
        _log.error("Processing distributed checkpoints requires PyTorch >= 2.3.")
        sys.exit(1)
    folder = Path(args.checkpoint_folder)
    if not folder.exists():
        _log.error(f"The provided checkpoint folder does not exist: {folder}")
        sys.exit(1)
    if not folder.is_dir():
        _log.error(f"The provided checkpoint path must be a folder, containing the checkpoint shards: {folder}")
        sys.exit(1)
    if not is_distributed_checkpoint(folder):
        _log.error(
            "Only FSDP-sharded checkpoints saved with Lightning are supported for consolidation, and those "
            "fabric-core writes: folders of `torch.distributed.checkpoint` with a `.metadata` file (FSDP, "
            f"ModelParallel). The provided folder is not in that format: {folder}"
        )
        sys.exit(1)
    output = folder.with_name(folder.name + ".consolidated") if args.output_file is None else Path(args.output_file)
    if output.exists():
        _log.error(
            "The path for the converted checkpoint already exists. Choose a different path by providing "
            f"`--output_file` or move/delete the file first: {output}"
        )
        sys.exit(1)
    return Namespace(checkpoint_folder=folder, output_file=output)


if __name__ == "__main__":
    sys.exit(main())

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
