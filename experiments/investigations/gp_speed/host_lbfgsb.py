"""SciPy's L-BFGS-B in the host for the GP's four default starts (docs/notes/2026-11-27-gp-speed.md):
box bounds instead of the sigmoid map, the value and analytic gradient in NumPy, in float32 (as measured
there) and in float64 (kronvi's `_host_lml`, `precision="float64"`). Prints, per dataset and subsample
size, the seconds for the four starts and each start's (log likelihood, iterations, evaluations), and the
float64 gradient against central differences.

Usage (about 1 min on 2 cores):
  python experiments/investigations/gp_speed/host_lbfgsb.py --datasets yacht,energy \
      > experiments/investigations/gp_speed/results/host_lbfgsb.txt
"""

import argparse
import pathlib
import time

import numpy as np
import scipy.optimize
from scipy.linalg import lapack
from threadpoolctl import threadpool_limits

import kronvi
from kronvi._inputs.gp import _host_lml

FACTORS, NOISES = (1.0, 0.3, 3.0, 0.1), (0.1, 0.01, 0.1, 0.01)  # the GP's first four starts


def float32_value_and_grad(theta, X, y):
    """The same formulas as `_host_lml`, every array in float32 (LAPACK's s-routines)."""
    n, d = X.shape
    p = np.exp(theta)
    A = (X / p[:d]).astype(np.float32)
    sq = np.sum(A * A, 1)
    D = np.maximum(sq[:, None] + sq[None, :] - 2 * (A @ A.T), 0)
    Kf = (p[d] * np.exp(-0.5 * D)).astype(np.float32)
    L, info = lapack.spotrf(Kf + np.float32(p[d + 1]) * np.eye(n, dtype=np.float32), lower=1, clean=1)
    if info:
        return np.nan, np.full(d + 2, np.nan)
    alpha = lapack.spotrs(L, y, lower=1)[0]
    value = -0.5 * y @ alpha - np.sum(np.log(np.diag(L))) - 0.5 * n * np.log(2 * np.pi)
    R = lapack.spotri(L, lower=1)[0]
    W = 0.5 * (np.outer(alpha, alpha) - (np.tril(R) + np.tril(R, -1).T))
    G = W * Kf
    r = G.sum(1)
    grad = np.r_[2 * (A * A).T @ r - 2 * np.sum(A * (G @ A), 0), G.sum(), p[d + 1] * np.trace(W)]
    return float(value), grad.astype(np.float64)


def fit(vg, X, y, start, bounds):
    count = [0]

    def f(t):
        count[0] += 1
        v, g = vg(t, X, y)
        return -v / len(y), -np.asarray(g, np.float64) / len(y)

    r = scipy.optimize.minimize(
        f, start, jac=True, method="L-BFGS-B", bounds=bounds, options=dict(maxiter=200, gtol=1e-5)
    )
    return -r.fun * len(y), r.nit, count[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="yacht,energy")
    args = ap.parse_args()
    host64 = lambda t, X, y: _host_lml(t, X, y, with_grad=True)  # noqa: E731
    for name in args.datasets.split(","):
        X, y, mask = kronvi.load_uci(pathlib.Path(args.data_dir) / name)
        test = np.asarray(mask)[:, 0].astype(bool)
        X, y = np.asarray(X, np.float64)[~test], np.asarray(y, np.float64)[~test]
        X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
        y = y - y.mean()
        m = min(1000, len(y))
        idx = np.random.default_rng(0).choice(len(y), m, replace=False)
        X, y = X[idx], y[idx]
        d, vy = X.shape[1], float(np.var(y))
        bounds = [(np.log(1e-2), np.log(1e3))] * d + [
            (np.log(1e-4 * vy), np.log(1e2 * vy)),
            (np.log(1e-4 * vy), np.log(10 * vy)),
        ]
        t0 = np.r_[np.log(np.full(d, np.sqrt(d))), np.log(0.9 * vy), np.log(0.1 * vy)]
        g = _host_lml(t0, X, y, True)[1]
        e = 1e-6
        fd = [
            (_host_lml(t0 + e * u, X, y, False)[0] - _host_lml(t0 - e * u, X, y, False)[0]) / (2 * e)
            for u in np.eye(d + 2)
        ]
        print(
            f"{name}: {m} rows; float64 gradient against central differences, max abs error {np.abs(g - fd).max():.1e}"
        )
        with threadpool_limits(1):
            for label, vg, dt in (
                ("float32", float32_value_and_grad, np.float32),
                ("float64", host64, np.float64),
            ):
                for sub in sorted({min(300, m), m}):
                    Xs, ys = X[:sub].astype(dt), y[:sub].astype(dt)
                    t = time.perf_counter()
                    res = []
                    for f_, nf in zip(FACTORS, NOISES, strict=True):
                        start = np.r_[
                            np.log(np.full(d, np.sqrt(d) * f_)), np.log((1 - nf) * vy), np.log(nf * vy)
                        ]
                        lml, nit, nev = fit(vg, Xs, ys, start, bounds)
                        res.append(f"({lml:.2f}, {nit} its, {nev} evals)")
                    print(
                        f"  {label}, {sub} rows: 4 starts {time.perf_counter() - t:.3f} s; " + " ".join(res),
                        flush=True,
                    )


if __name__ == "__main__":
    main()
