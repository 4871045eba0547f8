#!/usr/bin/env bash
# Installs kronvi with its test dependencies (idempotent) and runs lint and the full test suite.
# Every precision-sensitive test runs in float32 and float64 (the `dtype` fixture).
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenBLAS threads inside XLA's thread pool oversubscribe a small machine (and deadlocked a vmapped
# Cholesky on 2 cores); the variable must be set before Python loads OpenBLAS, so it is set here.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
python -m pip install -q -e ".[test]"
python -m ruff check src tests benchmarks experiments
# One worker per core (pytest-xdist): each test mostly compiles XLA programs on one thread. pytest-benchmark,
# where installed, turns itself off under xdist with a warning that filterwarnings=error would raise.
# --dist worksteal hands each worker a contiguous half of the tests (idle workers steal from the other's
# tail), so a module's tests, which share their compiled programs, mostly run in one worker; the default
# round-robin compiled them in both (tests/model: 285 s of CPU against 218 s).
workers="${KRONVI_TEST_WORKERS:-auto}"
# -rs: each skipped test says why in the summary.
python -m pytest -p no:cacheprovider -p no:benchmark -n "$workers" --dist worksteal -rs "$@"
# The experiments' own tests (smoke runs of every study) and the strict docs build run after this in CI
# (.ci/run); they are checks of the studies and tutorials, not of the library, and would push this command
# past ten minutes on two cores.
