#!/usr/bin/env bash
# Installs kronvi with its test dependencies (idempotent) and runs lint and the full test suite.
# Every precision-sensitive test runs in float32 and float64 (the `dtype` fixture).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[test]"
python -m ruff check src tests benchmarks experiments
python -m pytest -p no:cacheprovider "$@"
