"""``python -m fabric_core ...`` is ``fabric-core ...``."""

from __future__ import annotations

import sys

from fabric_core.cli import main

sys.exit(main())
