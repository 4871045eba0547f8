"""direct-logistic's first fold in the classification study: XLA programs compiled and seconds (issue 26).

Runs `experiments/classification.py`'s `fit_direct` on folds 0 and 1 of each dataset in this process (fold 0
compiles, fold 1 reuses the programs), with JAX's compile log on, and prints the number of XLA compilations
during fold 0, their seconds, and the two folds' fit seconds. Run it once per version of kronvi to compare
(`PYTHONPATH=<checkout>/src`), in fresh processes.

Usage: python experiments/investigations/logistic_first_fold.py --datasets breastcancer_wdbc,digits_parity
"""

import argparse
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import classification as study  # noqa: E402


class Compiles(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seconds = []

    def emit(self, record):
        m = re.search(r"Finished XLA compilation of .* in ([0-9.]+) sec", record.getMessage())
        if m:
            self.seconds.append(float(m.group(1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="breastcancer_wdbc,digits_parity,anes96_vote")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "classification"))
    args = ap.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(Path(study.kronvi.__file__).parent), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    print(
        f"# python {' '.join(sys.argv)}  (kronvi from {Path(study.kronvi.__file__).parent}, commit {commit})"
    )
    print(
        "| dataset | fold 0 s | XLA compilations in fold 0 | their seconds | fold 1 s |\n|---|---:|---:|---:|---:|"
    )
    compiles = Compiles()
    logging.getLogger("jax").addHandler(compiles)
    logging.getLogger("jax").setLevel(logging.DEBUG)
    for name in args.datasets.split(","):
        X, y, folds, _ = study.load_dataset(args.data_dir, name, 10)
        preps = [study.prepare(X, y, folds, k, 0, 50) for k in range(2)]
        n = max(p["Ptr"].shape[0] for p in preps)
        fit = study.direct_fitter(10, 1e-3)
        seconds = []
        for k in range(2):
            jax.config.update("jax_log_compiles", k == 0)
            compiles.seconds.clear()
            t = time.perf_counter()
            study.fit_direct(preps[k], n, fit, [1.0, 3.0, 10.0, 30.0])
            seconds.append(time.perf_counter() - t)
            if k == 0:
                fold0 = (len(compiles.seconds), sum(compiles.seconds))
        print(f"| {name} | {seconds[0]:.2f} | {fold0[0]} | {fold0[1]:.2f} | {seconds[1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
