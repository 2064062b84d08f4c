"""Benchmarks for shardline: figures and ratios against peers (aiokpl, aws-kinesis-agg) measured in one run.

Run from the repository root with ``.venv/bin/python -m bench`` (``make bench``). Importing this
package puts the shardline library (``layers/shardline/python``) first on ``sys.path``, so the
benchmark measures the working tree, not an installed copy.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LIBRARY_PATH = REPO_ROOT / "layers" / "shardline" / "python"

if str(LIBRARY_PATH) not in sys.path:
    sys.path.insert(0, str(LIBRARY_PATH))
