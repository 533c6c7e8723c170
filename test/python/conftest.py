"""Tests of the Python worker SDK (python/elasticrun), without the launcher.

CTest sets PYTHONPATH to python/; by hand (.venv/bin/python -m pytest
test/python) this puts the checkout's package first all the same, so the
tests never pick up an installed copy."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
