"""What the default's Nyström features cost a user beyond the fit: the first fit in a fresh process, the model
file's bytes and the prediction, against `feature_map="fourier"` (the default before), on kin40k's fold 0.

In one fresh process (no persistent compilation cache): the default fit (`kronvi.fit_direct`, key 0; 6000
Nyström features on 36,000 rows) timed first (cold: compilation included) and again (warm), then the same for
`DirectConfig(feature_map="fourier")` (4000 random Fourier features; its first fit shares some programs with the
first map's, so its cold figure is an underestimate), each followed by `predict` of the 4,000 test rows (the
second call timed), `log_density` of them, and `save_model`'s file size. Test RMSE over the training targets' sd.

    python benchmarks/bench_nystrom_model.py --data-dir ../shared/data/uci > benchmarks/results/bench_nystrom_model_cpu.txt
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile

import jax
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine, seconds  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(pathlib.Path(__file__).resolve().parents[2] / "shared/data/uci"))
    ap.add_argument("--dataset", default="kin40k")
    args = ap.parse_args(argv)
    X, y, mask = kronvi.load_uci(pathlib.Path(args.data_dir) / args.dataset)
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    test = np.asarray(mask)[:, 0].astype(bool)
    Xtr, ytr, Xte, yte = X[~test], y[~test], X[test], y[test]
    print(f"# python benchmarks/bench_nystrom_model.py --dataset {args.dataset}")
    print(f"# {machine()}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; {load_average()}")
    print(f"{args.dataset} fold 0: {len(ytr)} training rows, {len(yte)} test rows\n")
    print("| features | first fit (fresh process) | warm fit | predict | log_density | model file | RMSE / sd | NLPD |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, config in (("default", kronvi.DirectConfig()), ("fourier", kronvi.DirectConfig(feature_map="fourier"))):
        _, cold = seconds(kronvi.fit_direct, jax.random.key(0), Xtr, ytr, config)
        result, warm = seconds(kronvi.fit_direct, jax.random.key(0), Xtr, ytr, config)
        model = result.model
        seconds(kronvi.predict, model, Xte)
        prediction, predict_s = seconds(kronvi.predict, model, Xte)
        ld, density_s = seconds(kronvi.log_density, model, Xte, yte)
        pred, ld = np.asarray(prediction.mean), np.asarray(ld)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.npz")
            kronvi.save_model(path, model)
            size = os.path.getsize(path)
        rmse = float(np.sqrt(np.mean((pred - yte) ** 2)) / np.std(ytr))
        b = int(model.q_w.logits.shape[0])
        print(f"| {name}: {result.info.feature_map}, b = {b} | {cold:.1f} s | {warm:.1f} s | {predict_s:.2f} s | "
              f"{density_s:.2f} s | {size / 2**20:.0f} MiB | {rmse:.4f} | {-float(np.mean(ld)):.3f} |", flush=True)  # fmt: skip
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
