"""The default recipe's 10-fold test RMSE under variants of its GP step, with `uci.py`'s keys (issue 49).

Which GP-step setting gives back the filed default's RMSE on the sets the float64 step moved: the
default, the float32 step (`GPOptions(precision="native")`, the filed default's), eight starts instead of
four, starts run to the gradient test (`gain_tol=0`) and a tenth of the stall rule (`gain_tol=0.01`), each
through `kronvi.fit_direct` on `uci.py`'s folds and keys (`dataset_key(name, 0)` folded with the fold).
Prints per variant the mean RMSE, each fold's, and the seconds of the ten fits.

  python experiments/investigations/gp_step_variants.py --data-dir ../shared/data/uci --datasets fertility,yacht \\
      --out experiments/investigations/results/gp_step_variants.txt
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import kronvi  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from uci import dataset_key, fold_masks  # noqa: E402

VARIANTS = {
    "default": {},
    "float32 step (the filed default's)": dict(precision="native"),
    "8 starts": dict(restarts=8),
    "starts to the gradient test (gain_tol=0)": dict(gain_tol=0.0),
    "gain_tol=0.01": dict(gain_tol=0.01),
}


def run(data_dir: pathlib.Path, name: str) -> list[str]:
    X, y, mask = kronvi.load_uci(data_dir / name)
    lines = [f"== {name}: {X.shape[0]} rows, {X.shape[1]} inputs, 10 folds"]
    for label, options in VARIANTS.items():
        config = kronvi.DirectConfig(gp=kronvi.GPOptions(**options))
        rmse, t0 = [], time.perf_counter()
        for k in range(10):
            train, test = fold_masks(mask, k)
            key = jax.random.fold_in(dataset_key(name, 0), k)
            model = kronvi.fit_direct(key, X[train], y[train], config).model
            mean = np.asarray(model.predict(X[test]).mean)
            rmse.append(float(np.sqrt(np.mean((mean - y[test]) ** 2))))
        seconds = time.perf_counter() - t0
        folds = " ".join(f"{r:.4f}" for r in rmse)
        lines.append(f"  {label}: mean RMSE {np.mean(rmse):.4f} ({seconds:.1f} s); folds {folds}")
        print(lines[-1], flush=True)
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=pathlib.Path, default=pathlib.Path("../shared/data/uci"))
    p.add_argument("--datasets", default="fertility,yacht")
    p.add_argument("--out", type=pathlib.Path)
    args = p.parse_args(argv)
    out = [f"# python experiments/investigations/gp_step_variants.py --datasets {args.datasets}", ""]
    for name in args.datasets.split(","):
        out += run(args.data_dir, name) + [""]
    if args.out is not None:
        kronvi.files.write_atomic(args.out, "\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
