"""ELBO reached and seconds per fitting method (issue: 'make the default the one that reaches the
highest ELBO fastest').

Seeded synthetic regression, n = 20,000 points (16,000 train / 4,000 test), d = 5 inputs, random
Fourier features of an SE kernel, b in {200, 1000, 2000}, 15-level Gaussian grid prior (4-bit),
15-level noise prior. Every method is compiled once first; seconds are the median of steady-state
runs. Spread over seeds is reported (min / median / max ELBO gap to the best method of that seed).

Run: python benchmarks/bench_fit_methods.py [--sizes 200,1000,2000] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import timed  # noqa: E402


def make_problem(seed, b, n=20000, d=5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    f = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 - X[:, 2] * X[:, 3] + 0.5 * np.cos(3 * X[:, 4])
    y = f + 0.2 * rng.normal(size=n)
    D = b // 2
    W = rng.normal(size=(d, D)) / 0.8
    Phi = np.concatenate([np.cos(X @ W), np.sin(X @ W)], 1) / np.sqrt(D)
    ntr = int(0.8 * n)
    ymean = y[:ntr].mean()
    y = y - ymean
    to = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    stats = kronvi.stats.regression_stats(to(Phi[:ntr]), to(y[:ntr]))
    vy = float(np.var(y[:ntr]))
    prior_w = kronvi.model.gaussian_prior(b, np.sqrt(vy))
    prior_n = kronvi.model.noise_prior(0.1 * vy, levels=15, span=30.0)
    return stats, prior_w, prior_n, to(Phi[ntr:]), y[ntr:]


def methods():
    def cavi(order, **kw):
        return lambda st, pw, pn: kronvi.fitting.fit_regression(st, pw, pn, method="cavi", order=order, **kw)

    def lbfgs(backend):
        return lambda st, pw, pn: kronvi.fitting.fit_regression(st, pw, pn, method=backend, max_iter=1000)

    def polish(st, pw, pn):
        q, qn, _ = kronvi.fitting.fit_regression(st, pw, pn, method="cavi", order="gain")
        return kronvi.fitting.fit_regression(st, pw, pn, method="lbfgs", init=(q, qn), max_iter=300)

    def restarts(st, pw, pn, r=4):
        keys = jax.random.split(jax.random.key(1), r)
        q, qn, info = jax.vmap(lambda k: kronvi.fitting.fit_regression(st, pw, pn, order="random", key=k))(
            keys
        )
        final = jax.vmap(lambda e, i: e[i])(info.elbo, info.num_iter)
        best = jnp.argmax(final)
        pick = lambda t: jax.tree.map(lambda x: x[best], t)  # noqa: E731
        return pick(q), pick(qn), pick(info)

    def best_of_starts(st, pw, pn):
        # The pipeline's default: CAVI from the prior and from kronvi.fitting.gaussian_start, keep the higher ELBO.
        fits = [kronvi.fitting.fit_regression(st, pw, pn, init=s) for s in ("prior", "gaussian")]
        final = [f.info.final_elbo for f in fits]
        return jax.tree.map(lambda a, b: jnp.where(final[1] > final[0], b, a), *fits)

    return {
        "lbfgs (jaxopt, paper)": lbfgs("lbfgs"),
        "optax-lbfgs": lbfgs("optax-lbfgs"),
        "cavi cyclic": cavi("cyclic"),
        "cavi greedy": cavi("greedy"),
        "cavi gain (default)": cavi("gain"),
        "cavi greedy + anneal20": cavi("greedy", anneal_sweeps=20),
        "cavi random": cavi("random"),
        "cavi random + anneal20": cavi("random", anneal_sweeps=20),
        "cavi gain + lbfgs polish": polish,
        "cavi best of 4 random orders": restarts,
        "cavi gain from gaussian_start": cavi("gain", init="gaussian"),
        "cavi gain, best of prior / gaussian_start (pipeline default)": best_of_starts,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="200,1000,2000")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, float32, n=20000 (16000 train)")
    for b in sizes:
        rows = {}
        for seed in seeds:
            stats, pw, pn, Phi_te, y_te = make_problem(seed, b)
            for name, fn in methods().items():
                sec, _, (q, qn, info) = timed(jax.jit(fn), stats, pw, pn, repeats=args.repeats)
                elbo = float(info.final_elbo)
                mu, _ = kronvi.model.predict_regression(q, qn, pw, pn, Phi_te)
                rmse = float(np.sqrt(np.mean((np.asarray(mu) - y_te) ** 2)))
                rows.setdefault(name, []).append((seed, elbo, sec, rmse, int(info.num_iter)))
                print(
                    f"  b={b} seed={seed} {name:28s} elbo={elbo:12.1f} t={sec:7.3f}s"
                    f" rmse={rmse:.4f} iters={int(info.num_iter)}",
                    flush=True,
                )
        best = {s: max(r[1] for rs in rows.values() for r in rs if r[0] == s) for s in seeds}
        print(
            f"\nb = {b}: ELBO gap to the best method of the same seed (nats; 0 = best), median seconds, test RMSE"
        )
        print("| method | gap min | gap median | gap max | seconds (median) | RMSE (median) | iters |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, rs in rows.items():
            gaps = [best[r[0]] - r[1] for r in rs]
            print(
                f"| {name} | {min(gaps):.1f} | {statistics.median(gaps):.1f} | {max(gaps):.1f} | "
                f"{statistics.median(r[2] for r in rs):.3f} | {statistics.median(r[3] for r in rs):.4f} | "
                f"{statistics.median(r[4] for r in rs):.0f} |"
            )
        print(flush=True)


if __name__ == "__main__":
    main()
