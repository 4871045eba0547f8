#!/usr/bin/env bash
# Installs kronvi (idempotent) and runs the main job: 10-fold CV of DIRECT regression on the shipped yacht data.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenBLAS threads inside XLA's thread pool oversubscribe a small machine (and deadlocked a vmapped
# Cholesky on 2 cores); the variable must be set before Python loads OpenBLAS, so it is set here.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
python -m pip install -q -e .
python -m kronvi fit "$@"
