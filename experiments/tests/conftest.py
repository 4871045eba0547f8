"""Fixtures of the experiments' tests: the study scripts import as modules (``import uci``)."""

import pathlib
import sys

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1]
if str(EXPERIMENTS) not in sys.path:
    sys.path.insert(0, str(EXPERIMENTS))
