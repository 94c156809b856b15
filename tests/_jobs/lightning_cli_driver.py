"""Calls `lightning_fabric.cli._run.main(ARGS)` for each case with torchrun replaced, and prints what happened.

Usage: python lightning_cli_driver.py CASES_JSON   (under `python -m fabric_core.lightning_imports` for ours)
Prints one JSON list: per case the exit code, the LT_* variables set, torchrun's arguments and stderr. The
same file runs against Lightning's own module and fabric-core's, so the two answers can be compared.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from unittest import mock

from lightning_fabric.cli import _run

results = []
for argv in json.loads(sys.argv[1]):
    for name in [k for k in os.environ if k.startswith("LT_")]:
        del os.environ[name]
    torchrun = mock.Mock()
    err = io.StringIO()
    with mock.patch.dict(sys.modules, {"torch.distributed.run": torchrun}), contextlib.redirect_stderr(err):
        try:
            _run.main(argv)
            code: object = None
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # what a process would end with: a traceback and exit code 1
            code = 1
            err.write(f"{type(exc).__name__}: {exc}")
    results.append(
        {
            "code": code,
            "lt": {k: v for k, v in os.environ.items() if k.startswith("LT_")},
            "torchrun": torchrun.main.call_args.args[0] if torchrun.main.called else None,
            "stderr": err.getvalue(),
        }
    )
print(json.dumps(results))
