"""Fixtures of the experiments' tests: the study scripts import as modules (``import uci``), and so does the
tests' own data writer (``study_folds``)."""

import pathlib
import sys

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1]
for path in (EXPERIMENTS, EXPERIMENTS / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
