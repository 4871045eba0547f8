#!/usr/bin/env bash
# Installs kronvi (idempotent) and runs the main job: 10-fold CV of DIRECT regression on the shipped yacht data.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e .
python -m kronvi fit "$@"
