#!/usr/bin/env bash
# One install: fabric-core alone next to `lightning`, no plugin, zero-edit mode (tests/test_one_install.py).
#
# Builds the venv a Lightning user gets from `pip install torch==2.13.0 fabric-core lightning==2.6.6`
# (.venv-one-install, or $ONE_INSTALL_VENV): torch first, then fabric-core from this checkout (not editable,
# as from an index) and lightning, plus pytest to run the test. No fabric-core plugin is installed; the test
# checks that. Re-running reuses the venv (fabric-core is reinstalled). Prints the wall times.
#
# Usage: scripts/one_install_check.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

VENV="${ONE_INSTALL_VENV:-.venv-one-install}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
pip() { python -m pip --disable-pip-version-check "$@" 2> >(grep -v "^WARNING: Location" >&2); }

pip install --quiet "torch==2.13.0"
pip install --quiet --force-reinstall --no-deps .
pip install --quiet . "lightning==2.6.6" pytest pytest-timeout
echo "one_install_check: venv ready in $((SECONDS - start)) s"

installed=$SECONDS
status=0
python -m pytest tests/test_one_install.py -m one_install -p no:cacheprovider -q -rA "$@" || status=$?
echo "one_install_check: tests took $((SECONDS - installed)) s, $((SECONDS - start)) s in all"
exit $status
