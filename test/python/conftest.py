"""Tests of the Python worker SDK (python/elasticrun), without the launcher.

CTest sets PYTHONPATH to python/; by hand (.venv/bin/python -m pytest
test/python) this puts the checkout's package first all the same, so the
tests never pick up an installed copy. The directory is a package
(__init__.py), so that its conftest and test modules never collide with
the integration suite's of the same names when one pytest call runs both
(`pytest test/integration test/python`); its helper modules (warm_ranks)
are put on the path here, as pytest puts a plain directory's."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))
