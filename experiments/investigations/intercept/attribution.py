"""Which of two changes moved a dataset in the default study: `experiments/uci.py` with the GP's float32
inverse in the host's `potri` at every size (`_HOST_INVERSE_MIN_ROWS = 0`, the GP's rounding before the
XLA inverse below 400 rows), the features centred as now. Folds equal to the study's come from the
centring (docs/notes/2026-11-27-intercept.md). Takes uci.py's arguments.

Usage: python experiments/investigations/intercept/attribution.py --data-dir ../shared/data/uci
  --datasets bike,concreteslump,challenger,sml,parkinsons,gas --methods direct-mf --max-folds 2
  --json experiments/investigations/intercept/results/attribution.json --overwrite
  --log experiments/investigations/intercept/results/attribution_run.log
"""

import pathlib
import runpy
import sys

import kronvi._inputs.gp as gp

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[2]

if __name__ == "__main__":
    gp._HOST_INVERSE_MIN_ROWS = 0
    sys.path.insert(0, str(EXPERIMENTS))
    sys.argv = [str(EXPERIMENTS / "uci.py"), *sys.argv[1:]]
    runpy.run_path(str(EXPERIMENTS / "uci.py"), run_name="__main__")
