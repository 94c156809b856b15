"""The LitGPT end-to-end test needs litgpt, which only scripts/litgpt_check.sh's venv has.

Elsewhere (the project's own venv, the default ``python -m pytest``) this folder's modules are not even
imported: both import litgpt at module level.
"""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("litgpt") else ["test_litgpt_e2e.py", "litgpt_offline.py"]
