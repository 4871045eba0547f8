"""Mixture posteriors (paper section 4): seconds per bound evaluation and per SGD step, and what they reach.

Timing (float32): b = 2000 weights, m = 15 levels (4-bit grid), r = 5 components, on a seeded synthetic
regression (n = 4000, Gaussian features, 10% non-zero true weights, noise sd 0.1). Each timed function is
jit-compiled once first; figures are the median of steady-state calls.
  - Theorem-3 bound value + gradient in every parameter (``mixture_elbo_bound``, both forms);
  - one ``mixture_sgd_step`` (optax.adam) with num_samples = 3000 (the paper's "5-Mixture SGD"), 300, 30,
    for the entropy estimators (``"local"``, the default; ``"stratified"``; ``"stratified-pathwise"``;
    ``"score"``, eq. 13 as written);
  - one L-BFGS iteration of ``fit_mixture_bound`` (jaxopt), from a full fit.

Quality (float64, same problem): mean-field ELBO (CAVI) against the Theorem-3 bound and the unbiased ELBO
estimate (``mixture_elbo_unbiased``, 3000 draws) of 5-component mixtures started from it: the L-BFGS bound
fit (paper's Table 2 model) and SGD. The total variance (summed over the component logits) of the
gradient of each estimator, over 16 keys at 3000 draws (and the local one at 300, the UCI study's setting:
less time per step than 3000 stratified draws), at starts perturbed by 0.03 (as the UCI study) and 0.3. Then a tiny bimodal problem (b = 3) where everything is exact by
enumeration, including log p(y).

Run: python benchmarks/bench_mixture.py > benchmarks/results/bench_mixture.txt  [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import pathlib
import platform
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import kronvi

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import seconds, timed  # noqa: E402


def median_seconds(fn, *args, reps=10):
    """(median seconds of `reps` calls, seconds of the first, compiling call)."""
    t = timed(fn, *args, repeats=reps)
    return t.median, t.first


def make_problem(dtype, b=2000, m=15, n=4000, seed=0):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b)) / np.sqrt(b)
    w = rng.normal(size=b) * (rng.uniform(size=b) < 0.1)
    y = Phi @ w + 0.1 * rng.normal(size=n)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi, dtype), jnp.asarray(y, dtype))
    prior_w = kronvi.model.gaussian_prior(b, 1.0, levels=m, dtype=dtype)
    prior_n = kronvi.model.noise_prior(0.1 * float(np.var(y)), levels=15, span=30.0, dtype=dtype)
    return stats, prior_w, prior_n


def timing(r, sample_sizes, lbfgs_iters):
    stats, prior_w, prior_n = make_problem(jnp.float32)
    q_w, q_n, _ = kronvi.fitting.fit_regression(stats, prior_w, prior_n, max_iter=30)
    q = kronvi.mixtures.mixture_from_mean_field(jax.random.key(1), q_w, r)
    b, m = q_w.logits.shape
    print(f"## timing, float32, b={b}, m={m}, r={r}, n={int(stats.n)}")
    for rescale in (True, False):
        f = jax.jit(
            jax.value_and_grad(
                lambda q, lc, qn, rescale=rescale: kronvi.mixtures.mixture_elbo_bound(
                    stats, q, qn, lc, prior_w, prior_n, rescale=rescale
                ),
                argnums=(0, 1, 2),
            )
        )
        sec, comp = median_seconds(f, q, q.log_marginals, q_n, reps=30)
        print(f"bound value+grad (rescale={rescale}): {1e3 * sec:8.2f} ms   (compile {comp:.1f} s)")
    f = jax.jit(lambda q, lc, qn: kronvi.mixtures.mixture_elbo_bound(stats, q, qn, lc, prior_w, prior_n))
    sec, comp = median_seconds(f, q, q.log_marginals, q_n, reps=30)
    print(f"bound value only:                  {1e3 * sec:8.2f} ms")
    opt = optax.adam(1e-2)
    state = kronvi.mixtures.mixture_sgd_init(q, q_n, optimizer=opt)
    for est in kronvi.mixtures.ESTIMATORS:
        for S in sample_sizes:
            step = jax.jit(
                lambda k, s, S=S, est=est: kronvi.mixtures.mixture_sgd_step(
                    k, stats, s, prior_w, prior_n, optimizer=opt, num_samples=S, estimator=est
                )
            )
            sec, comp = median_seconds(step, jax.random.key(0), state, reps=10)
            print(f"SGD step ({est:19s}), num_samples={S:5d}: {1e3 * sec:8.2f} ms   (compile {comp:.1f} s)")
    kw = dict(init=(q, q_n), max_iter=lbfgs_iters, tol=0.0)
    jax.block_until_ready(kronvi.mixtures.fit_mixture_bound(stats, prior_w, prior_n, **dict(kw, max_iter=1)))
    out, sec = seconds(kronvi.mixtures.fit_mixture_bound, stats, prior_w, prior_n, **kw)
    it = int(out[3].num_iter)
    print(f"fit_mixture_bound (jaxopt L-BFGS): {it} iterations in {sec:.1f} s = {1e3 * sec / it:.1f} ms/it")
    # Where the time goes: bound evaluations per L-BFGS iteration (zoom line search), same objective.
    from kronvi._solvers.lbfgs import jaxopt_lbfgs

    def loss(params):
        lw, wl, lc, ln = params
        qq, qn = kronvi.mixtures.Mixture._unchecked(lw, wl), kronvi.model.MeanField._unchecked(ln)
        return -kronvi.mixtures.mixture_elbo_bound(stats, qq, qn, lc, prior_w, prior_n) / stats.n

    solver = jaxopt_lbfgs(loss, max_iter=lbfgs_iters, tol=0.0)
    params = (q.logits, q.weight_logits, q.log_marginals, q_n.logits)
    state = solver.init_state(params)
    update = jax.jit(solver.update)
    for _ in range(it):
        params, state = update(params, state)
    evals = int(state.num_fun_eval)
    print(
        f"  bound value+grad evaluations per L-BFGS iteration: {evals / it:.1f} ({evals} in {it} iterations)"
    )


def quality(r, sgd_runs, lbfgs_iters):
    with jax.enable_x64(True):
        stats, prior_w, prior_n = make_problem(jnp.float64)
        q_w, q_n, info = kronvi.fitting.fit_regression(stats, prior_w, prior_n, max_iter=200)
        mf = float(info.final_elbo)
        b = q_w.logits.shape[0]
        print(f"\n## quality, float64, same problem (b={b}, r={r}); nats relative to the mean-field ELBO")
        print(f"mean-field ELBO (CAVI, {int(info.num_iter)} sweeps): {mf:.4f}")
        print(f"mean-field entropy per weight: {float(kronvi.model.entropy(q_w)) / b:.4f} nats")
        q1 = kronvi.mixtures.Mixture.from_mean_field(q_w)
        tight = (
            float(kronvi.mixtures.mixture_elbo_bound(stats, q1, q_n, q1.log_marginals, prior_w, prior_n)) - mf
        )
        print(f"bound, r=1 at the mean-field optimum, centre a = q: {tight:+.2e}  (tight)")

        def unbiased(q, qn, repeats=10, estimator="stratified"):
            # mean of `repeats` independent 3000-draw estimates (one 30000-draw call needs ~10x the memory)
            ests, ses = zip(
                *(
                    kronvi.mixtures.mixture_elbo_unbiased(
                        jax.random.key(123 + i), stats, q, qn, prior_w, prior_n, num_samples=3000,
                        estimator=estimator,
                    )
                    for i in range(repeats)
                ),
                strict=True,
            )  # fmt: skip
            return float(np.mean(ests)) - mf, float(np.sqrt(np.sum(np.square(ses)))) / repeats

        for scale in (0.03, 0.3):
            qs = kronvi.mixtures.mixture_from_mean_field(jax.random.key(4), q_w, r, noise_scale=scale)
            for est, S in [(e, 3000) for e in kronvi.mixtures.ESTIMATORS] + [("local", 300)]:
                grad = jax.jit(
                    lambda k, est=est, qs=qs, S=S: jax.grad(
                        lambda lg: kronvi.mixtures.mixture_elbo_estimate(
                            k,
                            stats,
                            kronvi.mixtures.Mixture._unchecked(lg, qs.weight_logits),
                            q_n,
                            prior_w,
                            prior_n,
                            num_samples=S,
                            estimator=est,
                        )  # fmt: skip
                    )(qs.logits)
                )
                G = np.stack([np.asarray(grad(k)) for k in jax.random.split(jax.random.key(7), 16)])
                print(
                    f"gradient variance at a start perturbed by {scale}, {S} draws, {est!r}: total "
                    f"{np.sum(np.var(G, axis=0, ddof=1)):.4g} (squared norm of the mean gradient "
                    f"{np.sum(np.mean(G, axis=0) ** 2):.4g})"
                )
        q0 = kronvi.mixtures.mixture_from_mean_field(jax.random.key(4), q_w, r)
        for est in ("score", "stratified"):
            e, s = unbiased(q0, q_n, repeats=1, estimator=est)
            print(f"ELBO estimate at the r={r} start, 3000 draws, estimator={est!r}: {e:+.3f} +- {s:.4f}")
        b0 = (
            float(kronvi.mixtures.mixture_elbo_bound(stats, q0, q_n, q0.log_marginals, prior_w, prior_n)) - mf
        )
        lit = kronvi.mixtures.mixture_elbo_bound(
            stats, q0, q_n, q0.log_marginals, prior_w, prior_n, rescale=False
        )
        e0, s0 = unbiased(q0, q_n)
        print(
            f"r={r} start (mixture_from_mean_field, noise_scale=0.3): ELBO {e0:+.3f} +- {s0:.3f}, "
            f"bound at the marginals {b0:+.3f} (literal form {float(lit) - mf:+.3f})"
        )
        (q, qn, lc, binfo), sec = seconds(
            kronvi.mixtures.fit_mixture_bound, stats, prior_w, prior_n, init=(q0, q_n), max_iter=lbfgs_iters
        )
        bound = float(binfo.final_elbo) - mf
        e, s = unbiased(q, qn)
        print(
            f"L-BFGS bound fit ({int(binfo.num_iter)} it, converged={bool(binfo.converged)}, {sec:.0f} s): "
            f"bound {bound:+.3f}, ELBO {e:+.3f} +- {s:.3f} (bound gap {e - bound:.3f}); "
            f"weights {np.round(np.asarray(q.weights), 3).tolist()}"
        )
        for S, steps, lr, est, cosine in sgd_runs:
            opt = optax.adam(optax.cosine_decay_schedule(lr, steps) if cosine else lr)
            (q, qn, _, sinfo), sec = seconds(
                kronvi.mixtures.fit_mixture_sgd, jax.random.key(1), stats, prior_w, prior_n, init=(q0, q_n),
                optimizer=opt, num_steps=steps, num_samples=S, estimator=est,
            )  # fmt: skip
            e, s = unbiased(q, qn)
            last = float(np.mean(sinfo.steps.elbo[-50:])) - mf
            sched = "cosine-decayed " if cosine else ""
            print(
                f"SGD adam({sched}{lr}), {est} estimator, {steps} steps x {S} samples ({sec:.0f} s): "
                f"ELBO {e:+.3f} +- {s:.3f} "
                f"(mean per-step estimate over the last 50 steps {last:+.3f}); weights "
                f"{np.round(np.asarray(q.weights), 3).tolist()}"
            )


def bimodal():
    """Two nearly identical features: the posterior is ~0.6 / 0.4 on two configurations."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        n = 40
        z = rng.normal(size=(n, 1))
        Phi = np.concatenate(
            [z + 0.01 * rng.normal(size=(n, 1)), z + 0.01 * rng.normal(size=(n, 1)), rng.normal(size=(n, 1))],
            1,
        )
        y = Phi[:, 0] + 0.3 * rng.normal(size=n)
        stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
        prior_w = kronvi.model.gaussian_prior(3, 1.0, levels=3, width=1.0)
        prior_n = kronvi.model.noise_prior(0.09, levels=5)
        cfg = np.array(list(itertools.product(range(3), repeat=3)))
        W = np.asarray(prior_w.values)[np.arange(3), cfg]
        rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
        s = np.asarray(prior_n.values[0])
        log_p = np.asarray(prior_w.log_probs)[np.arange(3), cfg].sum(-1)
        ll = -0.5 * n * np.log(2 * np.pi * s)[None] - 0.5 * rss[:, None] / s[None]
        joint = ll + log_p[:, None] + np.asarray(prior_n.log_probs[0])[None]
        log_z = float(jax.nn.logsumexp(joint))

        def exact(q, qn):
            per = np.asarray(q.log_probs)[:, np.arange(3), cfg].sum(-1)
            lq = np.asarray(jax.nn.logsumexp(np.asarray(q.log_weights)[:, None] + per, axis=0))
            lqs = np.asarray(qn.log_probs[0])
            w = np.exp(lq)[:, None] * np.exp(lqs)[None]
            return float(np.sum(w * (joint - lq[:, None] - lqs[None])))

        q_w, q_n, info = kronvi.fitting.fit_regression(stats, prior_w, prior_n, anneal_sweeps=20)
        mf = float(info.final_elbo)
        print("\n## tiny bimodal problem (b=3, m=3, r=2), exact by enumeration")
        print(f"log p(y) = {log_z:.4f}; mean-field ELBO {mf:.4f} (gap {log_z - mf:.4f})")
        from_mf = kronvi.mixtures.mixture_from_mean_field(jax.random.key(1), q_w, 2, noise_scale=1.0)
        for name, q0 in [
            ("from mean field (noise_scale=1)", from_mf),
            ("leaning to the two modes", _two_modes()),
        ]:
            q, qn, lc, binfo = kronvi.mixtures.fit_mixture_bound(
                stats, prior_w, prior_n, init=(q0, q_n), max_iter=500
            )
            bound = float(binfo.final_elbo)
            print(
                f"start {name}: L-BFGS bound {bound:.4f}, exact ELBO {exact(q, qn):.4f}, "
                f"weights {np.round(np.asarray(q.weights), 3).tolist()}"
            )
            q, qn, _, sinfo = kronvi.mixtures.fit_mixture_sgd(
                jax.random.key(2), stats, prior_w, prior_n, init=(q0, q_n), optimizer=optax.adam(0.1),
                num_steps=1000, num_samples=16,
            )  # fmt: skip
            print(
                f"start {name}: SGD 1000 x 16 exact ELBO {exact(q, qn):.4f}, "
                f"weights {np.round(np.asarray(q.weights), 3).tolist()}"
            )


def _two_modes():
    L = np.zeros((2, 3, 3))
    L[0, 0, 2] = L[0, 1, 1] = L[1, 0, 1] = L[1, 1, 2] = L[:, 2, 1] = 1.0
    return kronvi.mixtures.Mixture(L, np.zeros(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer L-BFGS iterations and SGD steps")
    args = ap.parse_args()
    print(
        f"# bench_mixture: jax {jax.__version__}, {jax.devices()[0].device_kind} ({platform.machine()}), "
        f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f} (the cores may be shared)"
    )
    r = 5
    timing(r, sample_sizes=(3000, 300, 30), lbfgs_iters=20 if args.quick else 100)
    if args.quick:
        quality(r, sgd_runs=[(300, 50, 1e-2, "local", True)], lbfgs_iters=50)
    else:
        runs = [
            (300, 150, 1e-2, "local", True),  # the UCI study's setting
            (3000, 150, 1e-2, "stratified", True),  # the previous study setting (the paper's t = 3000)
            (3000, 150, 1e-2, "stratified-pathwise", True),
            (300, 150, 1e-2, "stratified", True),  # the earlier study setting
            (300, 1000, 1e-2, "stratified", False),
            (300, 1000, 1e-2, "score", False),
            (3000, 300, 1e-2, "stratified", False),
            (3000, 300, 1e-2, "score", False),
        ]
        quality(r, sgd_runs=runs, lbfgs_iters=300)
    bimodal()


if __name__ == "__main__":
    main()
