"""Would a compile-free route meet issue 26's classification line? direct-logistic's fold in NumPy, timed.

The classification study's 10-fold mean of direct-logistic's fit time includes fold 0, and fold 0 includes
XLA's compilation of the fit's two programs (1.3-1.8 s on 2 cores; `logistic_compile.py`). On
breastcancer_wdbc scikit-learn's whole 10-fold run takes about 1.4 s, so a compiled route cannot match its
mean on a cold start. This checks the other way out: the same fold computed in NumPy and SciPy, which compile
nothing.

The NumPy route repeats the study's `fit_direct` step by step, as plainly as NumPy allows: damped Newton for
the Laplace MAP at each prior scale (eigendecomposition of the Hessian, a backtracking line search over 12
halvings), the scale with the largest Laplace evidence, grids on MAP +- 4 Laplace sds, the Laplace start of
`fit_logistic` (a Newton solve under the grid's moments), then coordinate ascent on the tilted bound (the
closed-form updates of `fit_logistic(method="cavi")`, with each sweep's exponentials computed for every weight
at once, before the sequential loop over weights). Its probabilities on the test rows come from kronvi's exact
`predict_logistic` (not timed), so its log loss is comparable with the study's.

In the same process and on the same folds it times: the study's JAX route (`run_direct`; fold 0 compiles), the
NumPy route and `sklearn-logistic` (`run_sklearn`). Per dataset it prints each fold and the 10-fold mean and
median of each.

Usage:
  python experiments/investigations/logistic_numpy_route.py --data-dir ../shared/data/classification \
      > experiments/investigations/results/logistic_numpy_route.txt
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import jax.numpy as jnp
import numpy as np
from scipy.special import expit, log_expit, logsumexp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import classification as study  # noqa: E402

import kronvi  # noqa: E402
import kronvi.logistic as kl  # noqa: E402

STEPS = 2.0 ** -np.arange(12.0)
NEWTON_TOL = 100 * float(np.finfo(np.float32).eps)  # `laplace_grid_prior`'s default for float32
EXPONENTS = np.array([-1.0, -0.5, 0.5, 1.0])  # the MGF exponents of the tilted bound (its default)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Laplace: damped Newton, as in `laplace_grid_prior`
# ------------------------------------------------------------------------------------------------


def neg_log_joint(z, w, s, prec, mean):
    return -np.sum(log_expit(s * z)) + 0.5 * np.sum(prec * (w - mean) ** 2)


def hessian_eigh(Phi, z, prec):
    p = expit(z)
    lam, U = np.linalg.eigh(Phi.T @ ((p * (1 - p))[:, None] * Phi) + np.diag(prec))
    return np.maximum(lam, prec.min()), U


def laplace(Phi, y, prec, mean, start, max_iter=50, tol=NEWTON_TOL):
    """`(map, marginal sds, log evidence)` of the prior N(mean, diag(prec)^-1)."""
    s = 2 * y - 1
    f = lambda w: neg_log_joint(Phi @ w, w, s, prec, mean)  # noqa: E731
    w = start if start is not None and f(start) < f(mean) else mean.copy()
    for _ in range(max_iter):
        z = Phi @ w
        fw = neg_log_joint(z, w, s, prec, mean)
        g = Phi.T @ (expit(z) - y) + prec * (w - mean)
        lam, U = hessian_eigh(Phi, z, prec)
        d = -(U @ ((U.T @ g) / lam))
        decrement = -g @ d
        zd = Phi @ d
        for step in STEPS:
            trial = neg_log_joint(z + step * zd, w + step * d, s, prec, mean)
            if trial <= fw - 1e-4 * step * decrement:
                break
        if trial < fw:
            w = w + step * d
        if 0.5 * decrement <= tol * (1 + abs(fw)) or not trial < fw:
            break
    z = Phi @ w
    lam, U = hessian_eigh(Phi, z, prec)
    sd = np.sqrt(np.sum(U**2 / lam[None], axis=1))
    evidence = -neg_log_joint(z, w, s, prec, mean) + 0.5 * np.sum(np.log(prec)) - 0.5 * np.sum(np.log(lam))
    return w, sd, evidence


# ------------------------------------------------------------------------------------------------
# Coordinate ascent on the tilted bound, as in `fit_logistic(method="cavi")`
# ------------------------------------------------------------------------------------------------


def tilts(L, sez):
    """The three tilts' terms `(a0, a1, a2)` of every row."""
    with np.errstate(invalid="ignore"):
        return (
            np.logaddexp(0.0, L[0]),
            -0.5 * sez + np.logaddexp(L[2], L[1]),
            -sez + np.logaddexp(L[3], 0.0),
        )


def bound_grads(L, sez):
    a0, a1, a2 = tilts(L, sez)
    p0 = (a0 <= a1) & (a0 <= a2)
    p1 = ~p0 & (a1 <= a2)
    p2 = ~p0 & ~p1
    t1 = expit(L[1] - L[2])
    gL = -np.stack(
        [
            np.where(p0, expit(L[0]), 0),
            np.where(p1, t1, 0),
            np.where(p1, 1 - t1, 0),
            np.where(p2, expit(L[3]), 0),
        ]
    )
    return gL, np.where(p1, 0.5, np.where(p2, 1.0, 0.0))


def elbo(log_q, log_p, L, sez):
    return -np.sum(np.minimum.reduce(tilts(L, sez))) + np.sum(np.exp(log_q) * (log_p - log_q))


def log_normalize(a):
    a = a - a.max()
    return a - np.log(np.sum(np.exp(a)))


def cavi(log_q, V, log_p, Phi, y, max_iter, tol):
    X = ((2 * y - 1)[:, None] * Phi).T.astype(np.float32)  # (b, n) signed columns
    b, n = X.shape
    m = V.shape[1]
    E = EXPONENTS.astype(np.float32)[None, None, :, None] * (
        V.astype(np.float32)[:, :, None, None] * X[:, None, None, :]
    )
    T = logsumexp(E + log_q.astype(np.float32)[:, :, None, None], axis=1)  # (b, K, n) per-weight log-MGFs
    L = T.sum(0)
    sez = np.sum(np.exp(log_q) * V, axis=1).astype(np.float32) @ X
    value = elbo(log_q, log_p, L, sez)
    tiny = np.sqrt(np.finfo(np.float32).tiny)
    sweeps = 0
    while sweeps < max_iter:
        sweeps += 1
        R = np.exp(np.minimum(E - T[:, None], 60.0))  # (b, m, K, n): each weight's at its current factor
        new_q, new_T = log_q.copy(), T.copy()
        for j in range(b):
            gL, gE = bound_grads(L, sez)
            r = R[j].reshape(m, -1)
            nq = log_normalize(
                np.maximum(log_normalize(log_p[j] + r @ gL.reshape(-1) + V[j] * (gE @ X[j])), -200.0)
            )
            ratio = (np.exp(nq).astype(np.float32) @ r).reshape(T[j].shape)
            if ratio.min() < tiny or R[j].max() >= np.exp(59.99):
                lm = logsumexp(E[j] + nq.astype(np.float32)[:, None, None], axis=0)
            else:
                lm = T[j] + np.log(ratio)
            L = L + lm - T[j]
            sez = sez + X[j] * np.sum((np.exp(nq) - np.exp(new_q[j])) * V[j])
            new_q[j], new_T[j] = nq, lm
        new_value = elbo(new_q, log_p, L, sez)
        if new_value >= value:
            log_q, T = new_q, new_T
        done = not new_value - value > tol * n
        value = max(value, new_value)
        if done:
            break
    return log_q, sweeps


def fit_numpy(p, scales, max_iter, tol):
    """The study's `fit_direct` in NumPy: `(log_q, values, log_probs, sweeps)`."""
    Phi, y = p["Ptr"].astype(np.float64), p["ytr"].astype(np.float64)
    b = Phi.shape[1]
    fits, init = [], None
    for s in scales:
        fits.append(laplace(Phi, y, np.full(b, 1 / s**2), np.zeros(b), init))
        init = fits[-1][0]
    k = int(np.argmax([f[2] for f in fits]))
    w, sd, _ = fits[k]
    V = w[:, None] + 4.0 * sd[:, None] * np.linspace(-1.0, 1.0, 15)[None]
    log_p = -(V**2) / (2 * scales[k] ** 2)
    log_p -= logsumexp(log_p, axis=1, keepdims=True)
    q = np.exp(log_p)
    mu = np.sum(q * V, axis=1)
    tau2 = np.sum(q * (V - mu[:, None]) ** 2, axis=1)
    ws, _, _ = laplace(Phi, y, 1 / tau2, mu, w)  # `fit_logistic`'s Laplace start
    pz = expit(Phi @ ws)
    prec = np.sum((np.sqrt(pz * (1 - pz))[:, None] * Phi) ** 2, axis=0) + 1 / tau2
    logits = (
        log_p - 0.5 * prec[:, None] * (V - ws[:, None]) ** 2 + 0.5 * (V - mu[:, None]) ** 2 / tau2[:, None]
    )
    log_q, sweeps = cavi(logits - logsumexp(logits, axis=1, keepdims=True), V, log_p, Phi, y, max_iter, tol)
    return log_q, V, log_p, sweeps


def numpy_probabilities(log_q, V, log_p, Pte):
    prior = kronvi.DiscretePrior(jnp.asarray(V, jnp.float32), jnp.asarray(log_p, jnp.float32))
    q = kronvi.MeanField(jnp.asarray(log_q, jnp.float32))
    return np.asarray(kl.predict_logistic(q, prior, jnp.asarray(Pte, jnp.float32)))


def summary(name, seconds, losses):
    return (
        f"{name:16s} mean {np.mean(seconds):6.3f} s  median {np.median(seconds):6.3f} s  "
        f"fold 0 {seconds[0]:6.3f} s  log loss {np.mean(losses):.4f}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--datasets", default="anes96_vote,breastcancer_wdbc,digits_parity")
    ap.add_argument("--folds", type=int, default=10)
    args = ap.parse_args(argv)
    # the study's own options at their defaults (`--json` is required there, and not written here)
    opts = study.parse_args(
        ["--data-dir", args.data_dir, "--json", "unused.json", "--folds", str(args.folds)]
    )
    errors = study.check_args(opts)  # also parses `--prior-scales`
    if errors:
        ap.error("; ".join(errors))
    stamp = time.strftime("%Y-%m-%d %H:%M")
    print(f"# python experiments/investigations/logistic_numpy_route.py (at {stamp})")
    for name in args.datasets.split(","):
        X, y, folds, K = study.load_dataset(args.data_dir, name, opts.folds)
        log(f"{name}: n={X.shape[0]}, {K} folds")
        preps = [study.prepare(X, y, folds, k, opts.seed, opts.num_frequencies) for k in range(K)]
        with contextlib.redirect_stdout(sys.stderr):  # the study's own progress lines
            jax_out = study.run_direct(preps, opts)
        print(f"\n## {name} (n = {X.shape[0]}, b = {preps[0]['Ptr'].shape[1]})", flush=True)
        rows = {"jax (study)": [], "numpy": [], "sklearn": []}
        for f, p in enumerate(preps):
            t = time.perf_counter()
            log_q, V, log_p, sweeps = fit_numpy(p, opts.prior_scales, opts.max_iter, opts.tol)
            t_np = time.perf_counter() - t
            prob_sk, t_sk = study.run_sklearn(p["Ptr"], p["ytr"], p["Pte"], opts.seed)
            prob_np = numpy_probabilities(log_q, V, log_p, p["Pte"])
            for key, sec, prob in (
                ("jax (study)", jax_out[f]["seconds"], jax_out[f]["prob"]),
                ("numpy", t_np, prob_np),
                ("sklearn", t_sk, prob_sk),
            ):
                rows[key].append((sec, study.metrics(prob, p["yte"])[1]))
            (t_jax, ll_jax), (_, ll_np), (_, ll_sk) = (rows[key][-1] for key in rows)
            print(
                f"  fold {f}: jax {t_jax:.3f} s, numpy {t_np:.3f} s ({sweeps} sweeps), sklearn {t_sk:.3f} s; "
                f"log loss {ll_jax:.4f}, {ll_np:.4f}, {ll_sk:.4f}",
                flush=True,
            )
        for key, vals in rows.items():
            print(summary(key, [v[0] for v in vals], [v[1] for v in vals]))
        mean = {key: np.mean([v[0] for v in vals]) for key, vals in rows.items()}
        for key in ("numpy", "jax (study)"):
            print(f"{key} / sklearn: ratio of means {mean[key] / mean['sklearn']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
