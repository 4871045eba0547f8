"""The large-n story: DIRECT mean-field regression on a synthetic 2,000,000-point, 11-input dataset (the size
of the paper's largest, houseelectric), with the sufficient statistics built in one chunked pass.

The statistics (n, y'y, Phi'y, Phi'Phi) are sums over rows, so the data are streamed through the feature map
in chunks (``kronvi.stats.regression_stats_from_inputs``) and never exist as an n x 2000 feature matrix; the
20k / 200k / 2M statistics are prefixes of one pass combined with ``kronvi.stats.merge_stats``. The fit (exact
CAVI on the ELBO from the statistics, from the prior and from ``kronvi.fitting.gaussian_start``, keeping the higher
ELBO) costs O(b^2) per sweep (and O(b^3) for the start) whatever n is: its time must not grow with n.

Usage: python experiments/scale_2m.py [--n 2000000] [--out experiments/results/scale_2m.txt]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import resource
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import kronvi  # noqa: E402
from kronvi.model import noise_moments  # noqa: E402


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def make_data(rng, n, d=11):
    """Smooth nonlinear target of 5 of the 11 inputs plus Gaussian noise (sd 0.1)."""
    X = rng.uniform(-2.0, 2.0, size=(n, d)).astype(np.float32)
    f = (
        np.sin(1.5 * X[:, 0])
        + 0.5 * np.cos(X[:, 1] * X[:, 2])
        + 0.3 * X[:, 3] ** 2
        - 0.4 * np.tanh(2 * X[:, 4])
    )
    y = (f + 0.1 * rng.standard_normal(n)).astype(np.float32)
    return X, y, f.astype(np.float32)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--num-features", type=int, default=2000)
    p.add_argument("--chunk-size", type=int, default=4096)
    p.add_argument("--out", default="experiments/results/scale_2m.txt")
    args = p.parse_args(argv)
    lines = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    t_start = time.perf_counter()
    log(
        f"# scale_2m: jax {jax.__version__} on {jax.devices()[0].platform} ({platform.machine()}, "
        f"{os.cpu_count()} cores), float32, b = {args.num_features}, chunk {args.chunk_size} rows, load "
        f"average at start {tuple(round(x, 2) for x in os.getloadavg())}"
    )
    rng = np.random.default_rng(0)
    X, y, _ = make_data(rng, args.n)
    Xt, yt, ft = make_data(np.random.default_rng(1), 20_000)
    log(f"data: n = {args.n:,} x d = {X.shape[1]} (+ 20,000 test rows), {X.nbytes / 2**20:.0f} MiB of inputs")
    log(f"peak RSS after generating the data: {peak_rss_mb():.0f} MiB")

    # Standardize with training statistics; GP hyperparameters from 1000 random training rows.
    t0 = time.perf_counter()
    st = kronvi.inputs.fit_standardizer(jnp.asarray(X))
    Xs = kronvi.inputs.standardize(st, jnp.asarray(X))
    offset = float(np.mean(y))
    yc = jnp.asarray(y - offset)
    hyper, info = kronvi.inputs.fit_gp_hyperparameters(jax.random.key(0), Xs, yc, num_points=1000)
    jax.block_until_ready(hyper)
    t_init = time.perf_counter() - t0
    log(
        f"GP init (1000 rows, 4 starts): {t_init:.1f}s; lengthscales {np.round(np.asarray(hyper.lengthscales), 2)}"
        f", signal variance {float(hyper.signal_variance):.3g}, noise variance {float(hyper.noise_variance):.3g}"
        f" (true 0.01), degenerate {bool(info.degenerate)}"
    )
    feats = kronvi.inputs.rff_init(jax.random.key(1), hyper.lengthscales, args.num_features // 2)
    fmap = functools.partial(kronvi.inputs.rff_features, feats)
    b = args.num_features
    prior_w = kronvi.model.gaussian_prior(b, jnp.sqrt(hyper.signal_variance), levels=15, width=3.0)
    prior_n = kronvi.model.noise_prior(hyper.noise_variance, levels=15, span=10.0)
    Xts = kronvi.inputs.standardize(st, jnp.asarray(Xt))
    Phi_test = fmap(Xts)

    # One pass over the rows, in prefixes: [0, 20k), [20k, 200k), [200k, n).
    cuts = [c for c in (20_000, 200_000) if c < args.n] + [args.n]
    stats, start, t_pass = None, 0, 0.0
    log("")
    log("| n | rows in this segment | stats s (segment) | stats s (cumulative) | fit s (both starts) | ELBO "
        "from prior / from gaussian_start | kept | sweeps | test RMSE | RMSE of the noise-free f | E[sigma^2] | "
        "sparsity % | peak RSS MiB |")  # fmt: skip
    log("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for cut in cuts:
        t0 = time.perf_counter()
        seg = kronvi.stats.regression_stats_from_inputs(
            fmap, Xs[start:cut], yc[start:cut], chunk_size=args.chunk_size
        )
        jax.block_until_ready(seg)
        dt = time.perf_counter() - t0
        t_pass += dt
        stats = seg if stats is None else kronvi.stats.merge_stats(stats, seg)
        # Fit from both starts and keep the higher ELBO (the library pipeline's default); the first call of
        # each compiles (once for every n: the statistics have the same shapes).
        if not results:
            for init in ("prior", "gaussian"):
                kronvi.fitting.fit_regression(stats, prior_w, prior_n, max_iter=2, init=init)
        t0 = time.perf_counter()
        fits = {}
        for init in ("prior", "gaussian"):
            q_w, q_n, finfo = kronvi.fitting.fit_regression(
                stats, prior_w, prior_n, key=jax.random.key(2), init=init
            )
            jax.block_until_ready(q_w)
            fits[init] = (q_w, q_n, finfo, float(finfo.final_elbo))
        t_fit = time.perf_counter() - t0
        best = max(fits, key=lambda k: fits[k][3])
        q_w, q_n, finfo, _ = fits[best]
        mean, _ = kronvi.model.predict_regression(q_w, q_n, prior_w, prior_n, Phi_test)
        rmse = float(jnp.sqrt(jnp.mean((mean + offset - yt) ** 2)))
        rmse_f = float(jnp.sqrt(jnp.mean((mean + offset - ft) ** 2)))
        noise = float(noise_moments(q_n, prior_n)[2])
        sp = 100 * float(kronvi.model.expected_sparsity(q_w, prior_w))
        results.append((cut, t_fit))
        log(
            f"| {cut:,} | {cut - start:,} | {dt:.1f} | {t_pass:.1f} | {t_fit:.2f} | {fits['prior'][3]:.1f} / "
            f"{fits['gaussian'][3]:.1f} | {best} | {int(finfo.num_iter)} | "
            f"{rmse:.4f} | {rmse_f:.4f} | {noise:.4f} | {sp:.1f} | {peak_rss_mb():.0f} |"
        )
        start = cut
    total = time.perf_counter() - t_start
    log("")
    log(
        f"total wall time {total:.0f}s (data generation, GP init {t_init:.0f}s, one {args.n:,}-row pass "
        f"{t_pass:.0f}s, fits, predictions); peak resident memory {peak_rss_mb():.0f} MiB "
        f"(resource.getrusage ru_maxrss; the inputs alone are {X.nbytes / 2**20:.0f} MiB, a float32 "
        f"{args.n:,} x {b} feature matrix would be {args.n * b * 4 / 2**30:.1f} GiB)"
    )
    fit_times = [t for _, t in results]
    log(
        f"fit seconds for n = {', '.join(f'{c:,}' for c, _ in results)}: "
        f"{', '.join(f'{t:.2f}' for t in fit_times)} (independent of n: O(b^2) per sweep and one O(b^3) "
        "start from the statistics; differences are the number of sweeps to convergence)"
    )
    log(f"load average at end {tuple(round(x, 2) for x in os.getloadavg())}")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
