"""Fixtures of the experiments' tests: the study scripts import as modules (``import uci``), and so does the
tests' own data writer (``study_folds``)."""

import pathlib
import sys

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1]
for path in (EXPERIMENTS, EXPERIMENTS / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_persistent_cache(monkeypatch):
    """The studies turn JAX's persistent compilation cache on by default (process-wide): not inside the test
    process, whose other tests would then write to the user's cache folder."""
    import study_cli

    monkeypatch.setattr(study_cli, "compilation_cache", lambda args: "off")
