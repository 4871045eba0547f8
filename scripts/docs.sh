#!/usr/bin/env bash
# Builds the documentation site strictly (any warning fails), executing the tutorials in docs/tutorials/.
# One command from a fresh clone: pip install -e ".[docs]" && bash scripts/docs.sh
# Usage: bash scripts/docs.sh [SITE_DIR]   (default: site/, which git ignores)
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenBLAS threads inside XLA's thread pool oversubscribe a small machine; must be set before Python starts
# (the tutorial kernels inherit it).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# The tutorials print no progress bars and must not download anything. Their kernels draw figures with
# matplotlib's inline backend, which puts each figure into the page (Agg would draw none).
export MPLBACKEND=module://matplotlib_inline.backend_inline
# The tutorials run in separate kernels that compile many of the same XLA programs: share one JAX
# compilation cache between them, fresh for every build (KRONVI_DOCS_JAX_CACHE=DIR keeps one across builds).
cache_dir="${KRONVI_DOCS_JAX_CACHE:-}"
if [ -z "$cache_dir" ]; then
  cache_dir="$(mktemp -d)"
  trap 'rm -rf "$cache_dir"' EXIT
fi
export JAX_COMPILATION_CACHE_DIR="$cache_dir"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
python -m mkdocs build --strict --site-dir "${1:-site}"
