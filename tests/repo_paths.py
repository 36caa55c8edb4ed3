"""Where the checkout and the data beside it are, for tests that start subprocesses.

A module of its own: `from conftest import ...` would resolve to whichever `conftest.py` pytest
imported last (tests/ or tests/pipelines/).
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MULTI30K_DIR = Path(
    os.environ.get("KT_DATA_DIR", REPO_ROOT.parent / "shared" / "data" / "multi30k")
)
PTB_DIR = Path(os.environ.get("KT_PTB_DIR", REPO_ROOT.parent / "shared" / "data" / "ptb_sample"))
