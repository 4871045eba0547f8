"""The GP likelihood in float32 against float64 (issue 26, item 5): rounding, evaluations, seconds.

Three parts, on fold 0 of each dataset (inputs standardized, targets centred, as the pipeline does):

1. Rounding: the float32 log marginal likelihood (`_lml`, XLA) against float64 on the first 300 training
   rows, at lengthscales sqrt(d) x {0.3, 1, 3} and noise variances {1e-4, 1e-3, 1e-2} var(y).
2. Seconds and evaluations of `fit_gp_hyperparameters(restarts="screened")` with each `precision`
   (`native`: float32 in XLA; `float64`: float64 on the host), warm medians of interleaved repeats, one
   process. Evaluations are counted per subsample size.
3. Each run's chosen optimum scored by the float64 likelihood on the same subsample.

Also the cost of one likelihood-and-gradient evaluation at 200-927 rows (8 inputs, random data).

Usage (about 3 min on 2 cores):
  python experiments/investigations/gp_float64/run.py --data-dir ../shared/data/uci \
      --datasets yacht,energy,concrete > experiments/investigations/gp_float64/results/gp_float64.txt
"""

import argparse
import collections
import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi._base.threads import single_blas_thread
from kronvi._inputs import gp as G

PRECISIONS = ("native", "float64")


def fold0(root, name):
    X, y, mask = kronvi.load_uci(pathlib.Path(root) / name)
    test = np.asarray(mask)[:, 0].astype(bool)
    X, y = np.asarray(X, np.float64)[~test], np.asarray(y, np.float64)[~test]
    sd = X.std(0)
    return (X - X.mean(0)) / np.where(sd > 0, sd, 1.0), y - y.mean()


def lml64(theta, X, y):
    return float(G._host_lml(np.asarray(theta, np.float64), X, y, with_grad=False)[0])


def rounding(name, X, y):
    X, y = X[:300], y[:300]
    d, var_y = X.shape[1], y.var()
    X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    print(f"\n## {name}: float32 log marginal likelihood minus float64's, first {len(y)} rows")
    print("| noise / var(y) | lengthscale / sqrt(d) | float64 | float32 - float64 |")
    print("|---:|---:|---:|---:|")
    for frac in (1e-4, 1e-3, 1e-2):
        for f in (0.3, 1.0, 3.0):
            theta = np.r_[np.full(d, math.log(f * math.sqrt(d))), math.log(var_y), math.log(frac * var_y)]
            p = jnp.exp(jnp.asarray(theta, jnp.float32))
            v32 = float(G._lml(G.GPHyperparameters(p[:d], p[d], p[d + 1]), X32, y32))
            v64 = lml64(theta, X, y)
            print(f"| {frac:g} | {f:g} | {v64:.3f} | {v32 - v64:+.4f} |")


def count_evaluations():
    counts = collections.Counter()
    host = G._host_lml

    def counted_host(theta, X, y, with_grad):
        counts[X.shape[0]] += 1
        return host(theta, X, y, with_grad)

    native = G._lml

    def counted_native(hyper, X, y):
        jax.debug.callback(lambda n: counts.update([int(n)]), X.shape[0])
        return native(hyper, X, y)

    G._host_lml, G._lml = counted_host, counted_native
    return counts


def fits(name, X, y, repeats, counts):
    X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    seconds = {p: [] for p in PRECISIONS}
    last = {}
    for r in range(repeats + 1):  # the first round compiles
        for prec in PRECISIONS:
            counts.clear()
            t = time.perf_counter()
            hyper, info = G.fit_gp_hyperparameters(
                jax.random.key(0), X32, y32, restarts="screened", precision=prec
            )
            jax.block_until_ready(hyper)
            if r:
                seconds[prec].append(time.perf_counter() - t)
            last[prec] = (hyper, info, dict(counts))
    m = min(len(y), 1000)
    idx = (
        np.asarray(jax.random.choice(jax.random.key(0), len(y), (m,), replace=False))
        if m < len(y)
        else slice(None)
    )
    Xm, ym = X[idx], y[idx]
    print(
        f"\n## {name}: fit_gp_hyperparameters(restarts='screened'), {len(y)} rows, warm median of {repeats}"
    )
    print(
        "| precision | seconds | evaluations (rows: count) | iterations (screening; all rows) | chosen optimum, float64 log likelihood |"
    )
    print("|---|---:|---|---|---:|")
    for prec in PRECISIONS:
        hyper, info, ev = last[prec]
        h = jax.tree.map(lambda a: np.asarray(a, np.float64), hyper)
        theta = np.r_[np.log(h.lengthscales), np.log(h.signal_variance), np.log(h.noise_variance)]
        its = np.asarray(info.num_iterations).tolist()
        scr = [] if info.screened is None else np.asarray(info.screened.num_iterations).tolist()
        evs = ", ".join(f"{k}: {v}" for k, v in sorted(ev.items()))
        print(
            f"| {prec} | {np.median(seconds[prec]):.3f} | {evs} | {scr}; {its} | {lml64(theta, Xm, ym):.3f} |"
        )


def evaluation_cost():
    rng = np.random.default_rng(0)
    print("\n## One likelihood-and-gradient evaluation, 8 inputs, one BLAS thread (median of 7, ms)")
    print("| rows | float32 in XLA | float64 on the host | ratio |")
    print("|---:|---:|---:|---:|")
    with single_blas_thread():
        for n in (200, 300, 400, 500, 692, 927):
            X = jnp.asarray(rng.standard_normal((n, 8)), jnp.float32)
            y = jnp.asarray(rng.standard_normal(n), jnp.float32)
            th = jnp.asarray(np.r_[np.log(np.full(8, 3.0)), 0.0, np.log(0.01)], jnp.float32)
            f32 = jax.jit(
                jax.value_and_grad(
                    lambda t, X=X, y=y: G._lml(
                        G.GPHyperparameters(jnp.exp(t[:8]), jnp.exp(t[8]), jnp.exp(t[9])), X, y
                    )
                )
            )
            f64 = jax.jit(jax.value_and_grad(lambda t, X=X, y=y: G._lml64(t, X, y)))
            out = []
            for f in (f32, f64):
                jax.block_until_ready(f(th))
                ts = []
                for _ in range(7):
                    t = time.perf_counter()
                    jax.block_until_ready(f(th))
                    ts.append(time.perf_counter() - t)
                out.append(1e3 * np.median(ts))
            print(f"| {n} | {out[0]:.2f} | {out[1]:.2f} | {out[1] / out[0]:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/uci")
    ap.add_argument("--datasets", default="yacht,energy,concrete")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(
        f"# {__doc__.splitlines()[0]}\n# jax {jax.__version__}, {jax.default_backend()}, load average {np.round(__import__('os').getloadavg(), 2).tolist()}"
    )
    data = {name: fold0(args.data_dir, name) for name in args.datasets.split(",")}
    for name, (X, y) in data.items():
        rounding(name, X, y)
    evaluation_cost()
    counts = count_evaluations()
    for name, (X, y) in data.items():
        fits(name, X, y, args.repeats, counts)


if __name__ == "__main__":
    main()
