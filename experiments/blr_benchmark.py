"""How close is each approximate posterior to the exact one? Featurized Bayesian linear regression as a
benchmark with a known answer (Burt et al. 2020, section 4 and appendix F), for kronvi's families.

Model: y = Phi w + eps, w ~ N(0, sw^2 I), eps ~ N(0, s2 I) with s2 fixed, so the posterior is Gaussian and
known exactly (kronvi.gaussian.blr_posterior). Everything runs in float64 (``main`` enables it) and in prior-standard-deviation units
(features multiplied by sw, prior N(0, I)), which changes no KL and no prediction.

Data (one train/test split each):
  toy      Burt et al.'s 1-D problem: 20 RBF features (centres linspace(-2, 2), lengthscale 0.2), 40 inputs
           (20 from N(-1.2, 0.3^2), 20 from N(1.2, 0.3^2)), weights drawn from the prior, noise sd 0.1; test
           inputs a grid of 200 points on [-2.5, 2.5] with targets from the same model.
  UCI      housing (the paper's boston), concrete, energy, yacht, wine, autompg from ../shared/data/uci, fold 0
           of the published 10-fold split. Features: kronvi's random-Fourier-feature pipeline
           (kronvi.pipeline.prepare_fold with basis "features": inputs standardized on the training rows,
           targets centred, squared-exponential ARD hyperparameters by GP marginal likelihood on 500 training
           rows, 2 restarts), --num-features features, prior sd sw = the GP signal sd, noise variance s2 the
           maximizer of this model's exact evidence (kronvi.gaussian.blr_evidence_noise, within 1e4x of the GP's),
           kept fixed. The paper used the 100 inducing-point features of a sparse GP (and its noise); random Fourier
           features are the features every kronvi study uses, they approximate the same kernel, and b = 100
           matches the paper's feature count, so the posterior has the same size.

Families (the Gaussian ones are kronvi.gaussian.ELRG: covariance diag(d) + V V^T with V of shape (b, rank)):
  full          rank b (every covariance)           factorized    rank 0 (the mean field)
  elrg-R        rank R, one variance per weight (Tomczak et al.'s ELRG-D)
  elrg-c-R      rank R, one shared diagonal variance, learned (their ELRG with the constant diagonal)
  direct-mf     DIRECT mean field on the discretized prior: each weight on linspace(-3, 3, 15) prior sds
                (kronvi.model.gaussian_prior), the noise on one level s2; CAVI from the prior and from
                kronvi.fitting.gaussian_start, the higher ELBO kept (the pipeline's "features" recipe)
  direct-mix5   DIRECT 5-mixture (Theorem-3 bound, L-BFGS, 100 iterations) from that mean field
  direct-eigen  DIRECT mean field in the eigenbasis of Phi^T Phi, 15 levels on +-4 exact posterior sds per
                weight (kronvi's default recipe), the same noise level

Objectives for the Gaussian families (the expected log-likelihood is computed exactly from the statistics in
all of them, as in the paper's toy experiment, so the function-space ones differ only in the KL term):
  exact          the ELBO; full and factorized: their closed-form optima (kronvi.gaussian.blr_posterior,
                 kronvi.gaussian.fit_gaussian_mf); ELRG: kronvi.gaussian.fit_elrg (L-BFGS on the closed-form ELBO)
  local-reparam  the ELBO by minibatches of 100 rows with outputs sampled per row (Tomczak et al.'s Lemma 1,
                 kronvi.gaussian.fit_elrg(objective="local-reparam")); Adam; elrg-10 only (one compile per dataset)
  fixed-a        the function-space objective E_q log p(y|w) - KL(q_A || p_A) on one measurement set A drawn
                 once: |A|/2 training inputs and |A|/2 uniform in their bounding box (|A| = 10 on the toy, 80
                 on UCI); q_A, p_A are the Gaussian laws of Phi_A w under q and the prior; L-BFGS (the paper)
  rand-a         the same with a fresh A every step (Sun et al.'s estimate of the expected KL); Adam
  ssge           rand-a with the gradient of KL(q_A || p_A) estimated from 100 samples of q_A by the spectral
                 Stein gradient estimator for q_A's score (p_A's score is exact); Adam
  fixed-a-adam   a diagnostic: fixed-a's objective and A, optimized by Adam like rand-a
The function-space objectives run for the full and factorized families (the paper's comparison), ELRG with
its own objectives. Adam runs --steps steps (toy: --toy-steps) with the step size decaying from 1e-2 to 0
(cosine). Every iterative fit starts at the exact posterior mean (the exact ELBO's optimal mean for every
Gaussian family; --cold-start: mean 0), the diagonal at the factorized optimum and small random factors; the
function-space fits move the mean in the coordinates u of mean = m + R u, (m, R R^T) the exact posterior,
where the exact ELBO's Hessian is the identity. Neither changes an objective or a family; they keep the
ill-conditioned posteriors (energy: precision eigenvalues spanning 5e6) from turning a comparison of objectives
into one of step budgets (measured with --cold-start: see `git show cb40ac0:docs/notes/2026-11-22-elrg-benchmark.md`). Jitter 1e-6 (relative to the mean diagonal of Phi_A Phi_A^T) keeps q_A and p_A
factorable.

Metrics (test rows):
  kl_to_exact   KL(q || exact posterior) over the weights, nats (Gaussian families; none for DIRECT: a discrete
                posterior has no finite KL to a Gaussian)
  kl_pred       KL from the moment-matched joint Gaussian of y* on all test inputs under q to the exact joint
                predictive (every family)
  mean_err      RMS of (predictive mean - exact mean) / exact predictive sd
  var_err       mean |latent predictive variance / exact latent variance - 1| (f* = phi*^T w, no noise)
  nlpd          mean negative log predictive density of the test targets (DIRECT: kronvi's exact discrete
                predictive density)
  seconds       the fit's wall time without compilation (a second call, or one compiled ahead of time)

Usage:
  python experiments/blr_benchmark.py --json experiments/results/blr_benchmark.json
  python experiments/blr_benchmark.py --json experiments/results/blr_benchmark.json --render-only
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import pathlib
import platform
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import study_cli  # noqa: E402

import kronvi  # noqa: E402
from kronvi.pipeline import DirectConfig, eigen_posterior_grid, fold_features, prepare_fold  # noqa: E402

DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"
UCI = ("housing", "concrete", "energy", "yacht", "wine", "autompg")
GAUSSIAN_FAMILIES = ("full", "factorized", "elrg-2", "elrg-10", "elrg-c-10")
DIRECT_FAMILIES = ("direct-mf", "direct-mix5", "direct-eigen")
OBJECTIVES = ("exact", "local-reparam", "fixed-a", "rand-a", "ssge", "fixed-a-adam")
LR = 1e-2
JITTER = 1e-6
SSGE_SAMPLES = 100
SSGE_THRESHOLD = 0.99


# ----------------------------------------------------------------------------------------------------
# Problems


@dataclasses.dataclass
class Problem:
    """One regression problem in prior-sd units: features ``fmap(X)`` (already multiplied by sw), prior
    N(0, I), noise variance ``s2``; training inputs ``X`` (where measurement sets are drawn), statistics,
    test features and targets, and the exact posterior."""

    experiment: str
    name: str
    fmap: object  # jittable (N, d) -> (N, b)
    X: jax.Array
    y: jax.Array
    s2: float
    X_test: jax.Array
    y_test: jax.Array
    num_measure: int  # |A|
    Phi: jax.Array = None
    stats: kronvi.stats.RegressionStats = None
    Phi_test: jax.Array = None
    post: tuple = None

    def __post_init__(self):
        self.Phi = self.fmap(self.X)
        self.stats = kronvi.stats.regression_stats(self.Phi, self.y)
        self.Phi_test = self.fmap(self.X_test)
        self.post = kronvi.gaussian.blr_posterior(self.stats, 1.0, self.s2)
        self.frame = (self.post[0], jnp.linalg.cholesky(self.post[1]))  # the optimizers' mean coordinates
        self.lo, self.hi = jnp.min(self.X, axis=0), jnp.max(self.X, axis=0)

    @property
    def b(self):
        return self.Phi.shape[1]


def rbf_features(centres, lengthscale, X):
    return jnp.exp(-0.5 * ((X - centres[None, :]) / lengthscale) ** 2)


def toy_problem(seed: int = 0) -> Problem:
    """Burt et al.'s toy (appendix F.1), test targets from the same model."""
    rng = np.random.default_rng(seed)
    centres = jnp.linspace(-2.0, 2.0, 20)
    fmap = jax.tree_util.Partial(rbf_features, centres, 0.2)
    w = rng.normal(size=20)
    x = np.concatenate([rng.normal(-1.2, 0.3, 20), rng.normal(1.2, 0.3, 20)])[:, None]
    x_test = np.linspace(-2.5, 2.5, 200)[:, None]
    y = np.asarray(fmap(jnp.asarray(x))) @ w + 0.1 * rng.normal(size=40)
    y_test = np.asarray(fmap(jnp.asarray(x_test))) @ w + 0.1 * rng.normal(size=200)
    return Problem(
        "toy", "toy", fmap, jnp.asarray(x), jnp.asarray(y), 0.01, jnp.asarray(x_test), jnp.asarray(y_test), 10
    )


def _rff_map(features, sw, X):
    return sw * kronvi.inputs.rff_features(features, X)


def uci_problem(name: str, *, data_dir, num_features: int, seed: int = 0) -> Problem:
    """Fold 0 of a shared UCI dataset through kronvi's random-Fourier-feature pipeline."""
    X, y, mask = kronvi.load_uci(pathlib.Path(data_dir) / name)
    test = kronvi.inputs.fold_indices(mask) == 0
    config = DirectConfig(
        recipe=kronvi.Features(noise_cv=()), num_frequencies=num_features // 2, gp=kronvi.GPOptions(points=500, restarts=2)
    )
    key = jax.random.fold_in(jax.random.key(seed), sum(map(ord, name)))
    fold = prepare_fold(key, X[~test], y[~test], config, dtype=jnp.float64)
    sw = jnp.sqrt(fold.hyper.signal_variance)
    fmap = jax.tree_util.Partial(_rff_map, fold.features, sw)
    # test inputs standardized as the training ones (fold_features = rff_features of standardized inputs)
    X_test = kronvi.inputs.standardize(fold.standardizer, jnp.asarray(X[test], jnp.float64))
    np.testing.assert_allclose(fmap(X_test[:3]), sw * fold_features(fold, X[test][:3]), rtol=1e-10)
    y_test = jnp.asarray(y[test], jnp.float64) - fold.y_offset
    # the noise variance of this model (these features, this prior) with the highest evidence, near the GP's
    gp_s2 = fold.hyper.noise_variance
    stats = kronvi.stats.regression_stats(fmap(fold.X), fold.y)
    s2 = float(kronvi.gaussian.blr_evidence_noise(stats, 1.0, lower=gp_s2 * 1e-4, upper=gp_s2 * 1e4))
    return Problem("uci", name, fmap, fold.X, fold.y, s2, X_test, y_test, 80)


# ----------------------------------------------------------------------------------------------------
# Function-space objectives (Burt et al. section 4; Sun et al. 2018)


def family_shape(family: str, b: int):
    """``(rank, diagonal)`` of a Gaussian family."""
    if family == "full":
        return b, "full"
    if family == "factorized":
        return 0, "full"
    if family.startswith("elrg-c-"):
        return int(family.rsplit("-", 1)[1]), "constant"
    if family.startswith("elrg-"):
        return int(family.split("-")[1]), "full"
    raise ValueError(f"unknown Gaussian family {family!r}")


def start_point(key, prob: Problem, family: str, *, cold: bool = False) -> kronvi.gaussian.ELRG:
    """The common start of the iterative fits: the exact posterior mean (mean 0 when ``cold``), the diagonal
    at the factorized optimum (its geometric mean for a constant diagonal), small random factors."""
    rank, diagonal = family_shape(family, prob.b)
    d = 1.0 / (jnp.diagonal(prob.stats.PhitPhi) / prob.s2 + 1.0)
    log_diag = jnp.mean(jnp.log(d)) if diagonal == "constant" else jnp.log(d)
    V = 0.1 * jnp.sqrt(d)[:, None] * jax.random.normal(key, (prob.b, rank)) / math.sqrt(max(rank, 1))
    return kronvi.gaussian.ELRG(jnp.zeros(prob.b) if cold else prob.post[0], log_diag, V)


def expected_loglik(q, stats, s2):
    """E_q log p(y | w), exactly from the statistics (ELBO + KL to the N(0, I) prior)."""
    return kronvi.gaussian.elrg_elbo(stats, q, s2, prior_scale=1.0) + kronvi.gaussian.elrg_kl(q, 1.0)


def measurement_cov(q, Phi_A):
    """Covariance of f_A = Phi_A w under q, and p_A's (prior N(0, I)): ``(C_q, C_p)``, jittered."""
    lowrank = Phi_A @ q.factors
    C_q = (Phi_A * q.diag) @ Phi_A.T + lowrank @ lowrank.T
    C_p = Phi_A @ Phi_A.T
    jitter = JITTER * jnp.mean(jnp.diagonal(C_p)) * jnp.eye(Phi_A.shape[0])
    return C_q + jitter, C_p + jitter


def function_space_kl(q, Phi_A):
    """KL(q_A || p_A) between the laws of Phi_A w under q and under the prior."""
    C_q, C_p = measurement_cov(q, Phi_A)
    return kronvi.gaussian.gaussian_kl(Phi_A @ q.mean, C_q, jnp.zeros(Phi_A.shape[0]), C_p)


def ssge_score(x, *, threshold: float = SSGE_THRESHOLD):
    """Spectral Stein gradient estimate of the score of the law that drew ``x (M, k)``, at those samples.

    Shi, Sun, Zhu (2018): the Nystrom eigenfunctions psi_j of a Gaussian kernel k (bandwidth h: the median
    pairwise distance) on the samples; the score is sum_j beta_j psi_j with beta_j = -mean_i grad psi_j(x_i)
    (Stein's identity), keeping the largest eigenvalues that hold ``threshold`` of the kernel matrix's trace.
    With T_m = sum_i grad_{x_i} k(x_i, x_m) = -(sum_i K_im x_i - x_m sum_i K_im) / h^2, beta_j =
    -(sqrt(M) / (M lambda_j)) sum_m U_mj T_m: O(M^2 k + M^3), no (M, M, k) array.
    """
    M = x.shape[0]
    sq = jnp.maximum(jnp.sum(x**2, 1)[:, None] + jnp.sum(x**2, 1)[None, :] - 2.0 * x @ x.T, 0.0)
    h2 = jnp.median(jnp.sqrt(sq)) ** 2
    K = jnp.exp(-0.5 * sq / h2)
    lam, U = jnp.linalg.eigh(K)
    lam, U = lam[::-1], U[:, ::-1]
    keep = (jnp.cumsum(lam) / jnp.sum(lam) <= threshold) | (jnp.arange(M) == 0)
    lam = jnp.where(keep, lam, 1.0)
    psi = math.sqrt(M) * (K @ U) / lam  # (M, J): psi_j at the samples
    T = -(K.T @ x - x * jnp.sum(K, axis=0)[:, None]) / h2  # (M, k)
    beta = -(math.sqrt(M) / M) * (U.T @ T) / lam[:, None] * keep[:, None]  # (J, k)
    return psi @ beta


def ssge_kl_surrogate(key, q, Phi_A, num_samples: int = SSGE_SAMPLES):
    """A function of q whose gradient estimates that of KL(q_A || p_A): samples f of q_A by
    reparameterization, the score difference grad log q_A(f) - grad log p_A(f) held fixed (SSGE for q_A,
    exact for p_A), contracted with f (the score-function term has expectation 0)."""
    k_d, k_v = jax.random.split(key)
    b, r = q.factors.shape
    eps = jax.random.normal(k_d, (num_samples, b))
    eta = jax.random.normal(k_v, (num_samples, r))
    w = q.mean[None] + eps * jnp.sqrt(q.diag)[None] + eta @ q.factors.T
    f = w @ Phi_A.T  # (S, |A|)
    _, C_p = measurement_cov(q, Phi_A)
    fs = jax.lax.stop_gradient(f)
    score_p = -jnp.linalg.solve(jax.lax.stop_gradient(C_p), fs.T).T
    diff = jax.lax.stop_gradient(ssge_score(fs) - score_p)
    return jnp.mean(jnp.sum(diff * f, axis=1))


def draw_measurement_set(key, X, lo, hi, num_measure: int):
    """|A|/2 training inputs ``X`` (without replacement) and |A|/2 uniform in the box ``[lo, hi]``."""
    half = num_measure // 2
    k1, k2 = jax.random.split(key)
    idx = jax.random.choice(k1, X.shape[0], (half,), replace=False)
    box = lo + (hi - lo) * jax.random.uniform(k2, (num_measure - half, X.shape[1]))
    return jnp.concatenate([X[idx], box])


def _from_params(params, frame):
    """The ELRG of the optimizers' parameters ``(u, log_diag, factors)``: mean ``c + R u`` in the frame
    ``(c, R)`` = (exact posterior mean, Cholesky factor of its covariance), where the exact ELBO's Hessian
    in ``u`` is the identity (a well-conditioned path for the optimizers; the objectives and families are
    unchanged)."""
    u, log_diag, V = params
    c, R = frame
    return kronvi.gaussian.ELRG(c + R @ u, log_diag, V)


def _to_params(q, frame):
    c, R = frame
    return (jax.scipy.linalg.solve_triangular(R, q.mean - c, lower=True), q.log_diag, q.factors)


@functools.partial(jax.jit, static_argnames="max_iter")
def _fixed_a(q0, frame, stats, s2, Phi_A, *, max_iter):
    """FixedA: L-BFGS on -(E log p(y|w) - KL(q_A || p_A)) / n for one fixed measurement set (``Phi_A``)."""

    def loss(params):
        q = _from_params(params, frame)
        return -(expected_loglik(q, stats, s2) - function_space_kl(q, Phi_A)) / stats.n

    params, info = kronvi.fitting.minimize_lbfgs(loss, _to_params(q0, frame), stats.n, max_iter=max_iter, tol=1e-9)
    return _from_params(params, frame), info


@functools.partial(jax.jit, static_argnames=("objective", "steps", "num_measure"))
def _stochastic(key, q0, frame, stats, s2, X, lo, hi, fmap, *, objective, steps, num_measure):
    """RandA or SSGE: Adam (step size 1e-2, cosine-decayed to 0) on a fresh measurement set every step."""
    opt = optax.adam(optax.cosine_decay_schedule(LR, steps))

    k_fixed = key  # fixed-a-adam: the A that fixed-a draws from the same key

    def loss(params, k):
        q = _from_params(params, frame)
        k_a, k_s = jax.random.split(k)
        Phi_A = fmap(
            draw_measurement_set(k_fixed if objective == "fixed-a-adam" else k_a, X, lo, hi, num_measure)
        )
        kl = ssge_kl_surrogate(k_s, q, Phi_A) if objective == "ssge" else function_space_kl(q, Phi_A)
        return -(expected_loglik(q, stats, s2) - kl) / stats.n

    def body(carry, k):
        params, state = carry
        g = jax.grad(loss)(params, k)
        updates, state = opt.update(g, state, params)
        return (optax.apply_updates(params, updates), state), None

    params0 = _to_params(q0, frame)
    (params, _), _ = jax.lax.scan(body, (params0, opt.init(params0)), jax.random.split(key, steps))
    return _from_params(params, frame)


# ----------------------------------------------------------------------------------------------------
# Metrics


def exact_predictive(prob: Problem):
    m_w, S_w = prob.post
    P = prob.Phi_test
    return P @ m_w, P @ S_w @ P.T


def metrics(prob: Problem, mean_f, cov_f, nlpd, kl_to_exact=None):
    """The record's metrics from a family's predictive mean and covariance of f* on the test inputs."""
    m_p, C_p = exact_predictive(prob)
    eye = prob.s2 * jnp.eye(len(m_p))
    kl_pred = float(kronvi.gaussian.gaussian_kl(mean_f, cov_f + eye, m_p, C_p + eye))
    sd_p = jnp.sqrt(jnp.diagonal(C_p) + prob.s2)
    return dict(
        kl_to_exact=None if kl_to_exact is None else float(kl_to_exact),
        kl_pred=kl_pred,
        mean_err=float(jnp.sqrt(jnp.mean(((mean_f - m_p) / sd_p) ** 2))),
        var_err=float(jnp.mean(jnp.abs(jnp.diagonal(cov_f) / jnp.diagonal(C_p) - 1.0))),
        nlpd=float(nlpd),
    )


def gaussian_nlpd(prob, mean_f, var_f):
    v = var_f + prob.s2
    return jnp.mean(0.5 * (jnp.log(2 * jnp.pi * v) + (prob.y_test - mean_f) ** 2 / v))


def gaussian_metrics(prob: Problem, mean_w, cov_w):
    """``(metrics, (mean_f, cov_f))`` of a Gaussian posterior over the weights."""
    P = prob.Phi_test
    mean_f, cov_f = P @ mean_w, P @ cov_w @ P.T
    kl = kronvi.gaussian.gaussian_kl(mean_w, cov_w, *prob.post)
    return metrics(prob, mean_f, cov_f, gaussian_nlpd(prob, mean_f, jnp.diagonal(cov_f)), kl), (mean_f, cov_f)


DENSITY_CHUNK = 64


def discrete_log_density(q, q_n, prior_w, prior_n, Phi, y):
    """kronvi's exact discrete predictive log density, in chunks of ``DENSITY_CHUNK`` points (the last one
    padded): one compile serves every dataset's test set."""
    N = Phi.shape[0]
    pad = -N % DENSITY_CHUNK
    Phi = jnp.concatenate([Phi, jnp.repeat(Phi[:1], pad, axis=0)])
    y = jnp.concatenate([y, jnp.repeat(y[:1], pad)])
    out = []
    for i in range(0, N + pad, DENSITY_CHUNK):
        sl = slice(i, i + DENSITY_CHUNK)
        out.append(kronvi.model.predictive_log_density(q, q_n, prior_w, prior_n, Phi[sl], y[sl])[0])
    return jnp.concatenate(out)[:N]


def discrete_metrics(prob: Problem, comps, weights, prior_w, prior_n, Phi_test):
    """``(metrics, (mean_f, cov_f))`` of a discrete posterior: ``comps`` a list of MeanField components
    with mixture ``weights``; moments from the grids, NLPD from kronvi's exact predictive density."""
    means, variances = [], []
    for c in comps:
        m, v = kronvi.model.grid_moments(c.probs, prior_w.values)
        means.append(Phi_test @ m)
        variances.append(v)
    means = jnp.stack(means)  # (r, N)
    weights = jnp.asarray(weights)
    mean_f = weights @ means
    cov_f = (Phi_test * (weights @ jnp.stack(variances))) @ Phi_test.T
    dev = means - mean_f[None]
    cov_f = cov_f + (dev.T * weights) @ dev
    q_n = kronvi.model.MeanField(prior_n.log_probs)
    lds = [discrete_log_density(c, q_n, prior_w, prior_n, Phi_test, prob.y_test) for c in comps]
    ld = jax.nn.logsumexp(jnp.log(weights)[:, None] + jnp.stack(lds), axis=0)
    return metrics(prob, mean_f, cov_f, -jnp.mean(ld)), (mean_f, cov_f)


# ----------------------------------------------------------------------------------------------------
# Runs


def _timed(fn):
    """``(result, seconds)`` of a second call of ``fn`` (the first compiles): for the library's fits,
    whose runs are short."""
    jax.block_until_ready(fn())
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t0


_COMPILED = {}


def _aot(jitted, *args, **static):
    """``(result, seconds)`` of one call of ``jitted`` compiled ahead of time (compile time excluded; one
    compile per function, static arguments and argument shapes)."""
    leaves, treedef = jax.tree.flatten(args)
    key = (
        jitted,
        tuple(sorted(static.items())),
        treedef,
        tuple((jnp.shape(x), jnp.result_type(x)) for x in leaves),
    )
    if key not in _COMPILED:
        _COMPILED[key] = jitted.lower(*args, **static).compile()
    compiled = _COMPILED[key]
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    return out, time.perf_counter() - t0


def fit_gaussian(key, prob: Problem, family: str, objective: str, *, steps: int, lbfgs_iter: int, cold=False):
    """Fits one Gaussian family with one objective: ``(mean_w, cov_w, seconds, extra)``."""
    rank, diagonal = family_shape(family, prob.b)
    k_start, k_fit = jax.random.split(key)
    q0 = start_point(k_start, prob, family, cold=cold)
    extra = dict(rank=rank, diagonal=diagonal)
    if objective == "exact" and family == "full":
        (m, S), secs = _timed(lambda: kronvi.gaussian.blr_posterior(prob.stats, 1.0, prob.s2))
        return m, S, secs, extra
    if objective == "exact" and family == "factorized":

        def fit():
            return kronvi.gaussian.fit_gaussian_mf(
                prob.stats, prior_scale=1.0, noise_variance=prob.s2, learn_noise=False
            )[0]

        q, secs = _timed(fit)
        return q.mean, jnp.diag(jnp.exp(2 * q.log_std)), secs, extra
    if objective == "exact":
        (q, info), secs = _timed(
            lambda: kronvi.gaussian.fit_elrg(
                k_fit, prob.stats, 1.0, prob.s2, rank=rank, diagonal=diagonal, max_iter=lbfgs_iter
            )
        )
        extra.update(iterations=int(info.num_iter), converged=bool(info.converged))
    elif objective == "local-reparam":
        batch = min(100, prob.X.shape[0])
        # a fresh optimizer per call: a used optax cosine schedule changes a closure value (int -> float),
        # which changes kronvi's optimizer key and would compile the second call again
        (q, _), secs = _timed(
            lambda: kronvi.gaussian.fit_elrg(
                k_fit, prob.stats, 1.0, prob.s2, rank=rank, diagonal=diagonal, objective="local-reparam",
                init=q0, data=(prob.Phi, prob.y), optimizer=optax.adam(optax.cosine_decay_schedule(LR, steps)),
                num_steps=steps, batch_size=batch,
            )
        )  # fmt: skip
        extra.update(steps=steps, batch_size=batch)
    elif objective == "fixed-a":
        Phi_A = prob.fmap(draw_measurement_set(k_fit, prob.X, prob.lo, prob.hi, prob.num_measure))
        (q, info), secs = _aot(_fixed_a, q0, prob.frame, prob.stats, prob.s2, Phi_A, max_iter=lbfgs_iter)
        extra.update(iterations=int(info.num_iter), converged=bool(info.converged), measure=prob.num_measure)
    else:  # rand-a, ssge, fixed-a-adam (fixed-a's objective and A, optimized as rand-a)
        q, secs = _aot(
            _stochastic, k_fit, q0, prob.frame, prob.stats, prob.s2, prob.X, prob.lo, prob.hi, prob.fmap, objective=objective,
            steps=steps, num_measure=prob.num_measure,
        )  # fmt: skip
        extra.update(steps=steps, measure=prob.num_measure)
    return q.mean, q.covariance(), secs, extra


def fit_direct(key, prob: Problem, family: str, cache: dict):
    """Fits one DIRECT family: ``(components, weights, prior_w, prior_n, Phi_test, seconds, extra)``."""
    prior_n = kronvi.model.noise_prior(prob.s2, levels=1, dtype=jnp.float64)
    if family == "direct-eigen":
        rotated, basis = kronvi.stats.eigenbasis(prob.stats)
        prior_w = eigen_posterior_grid(rotated, basis, jnp.asarray(1.0), prob.s2, levels=15, width=4.0)
        q, secs = _timed(lambda: kronvi.fitting.fit_regression(rotated, prior_w, prior_n, init="gaussian")[0])
        Phi_test = kronvi.stats.rotate_features(basis, prob.Phi_test)
        return [q], [1.0], prior_w, prior_n, Phi_test, secs, dict(levels=15, width_posterior_sd=4.0)
    prior_w = kronvi.model.gaussian_prior(prob.b, 1.0, levels=15, width=3.0, dtype=jnp.float64)
    if "mf" not in cache:
        cache["mf"] = _timed(lambda: _best_direct(prob.stats, prior_w, prior_n))
    (q, qn, elbo), secs = cache["mf"]
    extra = dict(levels=15, width_prior_sd=3.0, mf_elbo=elbo)
    if family == "direct-mf":
        return [q], [1.0], prior_w, prior_n, prob.Phi_test, secs, extra
    q0 = kronvi.mixtures.mixture_from_mean_field(key, q, 5, noise_scale=0.03)
    (mix, info), secs_mix = _timed(
        lambda: kronvi.mixtures.fit_mixture_bound(prob.stats, prior_w, prior_n, init=(q0, qn), max_iter=100)[::3]
    )
    extra.update(mix_bound=float(info.final_elbo), components=5, iterations=int(info.num_iter))
    comps = [kronvi.model.MeanField(lg) for lg in mix.logits]
    return comps, mix.weights, prior_w, prior_n, prob.Phi_test, secs + secs_mix, extra


def _best_direct(stats, prior_w, prior_n):
    """DIRECT mean field by CAVI from the prior and from kronvi.fitting.gaussian_start; the higher ELBO kept."""
    best = None
    for init in ("prior", "gaussian"):
        q, qn, info = kronvi.fitting.fit_regression(stats, prior_w, prior_n, init=init)
        elbo = float(info.final_elbo)
        if best is None or elbo > best[2]:
            best = (q, qn, elbo)
    return best


LOCAL_REPARAM_FAMILIES = ("elrg-10",)


def plan(args):
    """``[(family, objective)]`` of a run: the function-space objectives for the full and factorized
    families (the paper's comparison), exact for ELRG and local-reparam for ``LOCAL_REPARAM_FAMILIES``."""
    todo = []
    for family in args.families:
        if family in DIRECT_FAMILIES:
            continue
        for objective in args.objectives:
            if family.startswith("elrg") and objective not in ("exact", "local-reparam"):
                continue
            if objective == "local-reparam" and family not in LOCAL_REPARAM_FAMILIES:
                continue
            todo.append((family, objective))
    return todo + [(f, "exact") for f in args.families if f in DIRECT_FAMILIES]


def run_problem(prob: Problem, args, log, t_start):
    """Every planned fit on one problem: ``(records, curves)`` (curves: latent predictive mean and sd on
    the test inputs per fit, for the toy figure)."""
    key = jax.random.fold_in(jax.random.key(args.seed), sum(map(ord, prob.name)))
    base = dict(experiment=prob.experiment, dataset=prob.name, n=int(prob.X.shape[0]), b=prob.b,
                n_test=int(prob.y_test.shape[0]), noise_variance=prob.s2)  # fmt: skip
    m_p, C_p = exact_predictive(prob)
    records = [dict(base, family="exact", objective="closed-form", seconds=0.0,
                    **metrics(prob, m_p, C_p, gaussian_nlpd(prob, m_p, jnp.diagonal(C_p)), 0.0))]  # fmt: skip
    curves = {"exact/closed-form": (m_p, jnp.sqrt(jnp.diagonal(C_p)))}
    steps = args.toy_steps if prob.experiment == "toy" else args.steps
    todo = plan(args)
    cache = {}
    for i, (family, objective) in enumerate(todo):
        k = jax.random.fold_in(key, i)
        if family in DIRECT_FAMILIES:
            comps, weights, prior_w, prior_n, Phi_test, secs, extra = fit_direct(k, prob, family, cache)
            res, (mean_f, cov_f) = discrete_metrics(prob, comps, weights, prior_w, prior_n, Phi_test)
        else:
            m, S, secs, extra = fit_gaussian(
                k, prob, family, objective, steps=steps, lbfgs_iter=args.lbfgs_iter
            )
            res, (mean_f, cov_f) = gaussian_metrics(prob, m, S)
        curves[f"{family}/{objective}"] = (mean_f, jnp.sqrt(jnp.diagonal(cov_f)))
        records.append(dict(base, family=family, objective=objective, seconds=secs, **res, **extra))
        kl = "—" if res["kl_to_exact"] is None else f"{res['kl_to_exact']:.4g}"
        log(f"  [{prob.name} {i + 1}/{len(todo)}] {family:12s} {objective:13s} KL {kl:>9s}  pred KL "
            f"{res['kl_pred']:.4g}  NLPD {res['nlpd']:.4f}  fit {secs:.2f}s  | elapsed {time.perf_counter() - t_start:.0f}s")  # fmt: skip
    curves = {k: (np.asarray(m).tolist(), np.asarray(sd).tolist()) for k, (m, sd) in curves.items()}
    curves.update(x=np.asarray(prob.X_test[:, 0]).tolist(), x_train=np.asarray(prob.X[:, 0]).tolist(),
                  y_train=np.asarray(prob.y).tolist())  # fmt: skip
    return records, curves


# ----------------------------------------------------------------------------------------------------
# Rendering


def _fmt(x, digits=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:.3g}"
    if abs(x) < 1e-3:
        return f"{x:.1e}"
    return f"{x:.{digits}g}"


def _table(records, datasets, rows, field, digits=3):
    by = {(r["dataset"], r["family"], r["objective"]): r for r in records}
    lines = ["| family | objective | " + " | ".join(datasets) + " |", "|---|---|" + "---:|" * len(datasets)]
    for fam, obj in rows:
        cells = [_fmt(by.get((d, fam, obj), {}).get(field), digits) for d in datasets]
        if all(c == "—" for c in cells):
            continue
        lines.append(f"| {fam} | {obj} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(records, table_path: pathlib.Path, figure_path: pathlib.Path | None, toy_curves=None):
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    rows = list(dict.fromkeys((r["family"], r["objective"]) for r in records))
    gauss_rows = [fo for fo in rows if fo[0] not in DIRECT_FAMILIES]
    setup = {r["dataset"]: r for r in records}
    out = [
        "# How close is each posterior to the exact one? (Bayesian linear regression)",
        "",
        "Written by `python experiments/blr_benchmark.py --json experiments/results/blr_benchmark.json` (or from "
        "that JSON with `--render-only`); the protocol is in the script's docstring. "
        "One train/test split per dataset (UCI: fold 0), float64, the noise variance fixed. KL in nats.",
        "",
        "| dataset | n | b | test points | noise variance |",
        "|---|---:|---:|---:|---:|",
        *[
            f"| {d} | {setup[d]['n']} | {setup[d]['b']} | {setup[d]['n_test']} | {_fmt(setup[d]['noise_variance'])} |"
            for d in datasets
        ],  # fmt: skip
        "",
        "## KL(q || exact posterior) over the weights",
        "",
        _table(records, datasets, gauss_rows, "kl_to_exact"),
        "",
        "## KL of the joint predictive Gaussian of y* on the test inputs to the exact one",
        "",
        "DIRECT rows: the Gaussian with the discrete posterior's predictive mean and covariance (moment matched).",
        "",
        _table(records, datasets, rows, "kl_pred"),
        "",
        "## Test NLPD",
        "",
        _table(records, datasets, rows, "nlpd", digits=4),
        "",
        "## Predictive mean error (RMS, in exact predictive sds) / latent variance error (mean relative)",
        "",
        _table_str(records, datasets, rows),
        "",
        "## Fit seconds (a second, compiled call; 2 shared CPU cores)",
        "",
        _table(records, datasets, [fo for fo in rows if fo[0] != "exact"], "seconds"),
        "",
    ]
    kronvi.files.write_atomic(table_path, "\n".join(out))
    if figure_path is not None and toy_curves is not None:
        plot_toy(toy_curves, figure_path)


def _table_str(records, datasets, rows):
    by = {(r["dataset"], r["family"], r["objective"]): r for r in records}
    lines = ["| family | objective | " + " | ".join(datasets) + " |", "|---|---|" + "---:|" * len(datasets)]
    for fam, obj in rows:
        cells = []
        for d in datasets:
            r = by.get((d, fam, obj))
            cells.append("—" if r is None else f"{_fmt(r['mean_err'], 2)} / {_fmt(r['var_err'], 2)}")
        lines.append(f"| {fam} | {obj} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


TOY_PANELS = [
    ("full", "exact"), ("full", "fixed-a"), ("full", "rand-a"), ("full", "ssge"),
    ("factorized", "exact"), ("elrg-2", "exact"), ("direct-mf", "exact"), ("direct-mix5", "exact"),
]  # fmt: skip


def plot_toy(curves, path: pathlib.Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.asarray(curves["x"])
    m_ex, s_ex = (np.asarray(a) for a in curves["exact/closed-form"])
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True, sharey=True)
    for ax, (family, objective) in zip(axes.ravel(), TOY_PANELS, strict=True):
        if f"{family}/{objective}" not in curves:
            ax.set_title(f"{family}, {objective}: not run", fontsize=10)
            continue
        m, s = (np.asarray(a) for a in curves[f"{family}/{objective}"])
        ax.fill_between(x, m - 2 * s, m + 2 * s, color="C0", alpha=0.3, lw=0)
        ax.plot(x, m, color="C0", lw=1.5)
        ax.plot(x, m_ex - 2 * s_ex, "k--", lw=0.8)
        ax.plot(x, m_ex + 2 * s_ex, "k--", lw=0.8)
        ax.plot(x, m_ex, "k:", lw=0.8)
        ax.scatter(curves["x_train"], curves["y_train"], s=8, color="C3", zorder=3)
        ax.set_title(f"{family}, {objective}", fontsize=10)
        ax.set_ylim(-4, 4)
    fig.suptitle(
        "Toy (Burt et al. 2020, Fig. 1): latent predictive mean ± 2 sd (blue); exact posterior dashed"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------
# Driver


def parse_args(argv=None):
    p = study_cli.Parser(
        prog="blr_benchmark.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--json", required=True, help="output JSON list of records")
    p.add_argument("--table", help="markdown table (default: the JSON's path with .md)")
    p.add_argument("--figure", help="toy figure (default: the JSON's path with _toy.png); '' for none")
    p.add_argument(
        "--datasets", default="toy," + ",".join(UCI), help="comma list: toy and/or UCI folder names"
    )
    p.add_argument("--data-dir", default=str(DEFAULT_DATA))
    p.add_argument("--families", default=",".join(GAUSSIAN_FAMILIES + DIRECT_FAMILIES))
    p.add_argument("--objectives", default=",".join(OBJECTIVES))
    p.add_argument("--num-features", type=int, default=100, help="UCI: b (even)")
    p.add_argument("--steps", type=int, default=1000, help="Adam steps (UCI)")
    p.add_argument("--toy-steps", type=int, default=5000, help="Adam steps on the toy (the paper's 5000)")
    p.add_argument("--lbfgs-iter", type=int, default=1000, help="L-BFGS iterations (exact ELRG, FixedA)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--cold-start", action="store_true",
        help="start the iterative fits with mean 0 instead of the exact posterior mean (a diagnostic)",
    )  # fmt: skip
    p.add_argument("--render-only", action="store_true", help="re-render the table (and figure) from --json")
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    args = p.parse_args(argv)
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    args.objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    bad = [f for f in args.families if f not in GAUSSIAN_FAMILIES + DIRECT_FAMILIES]
    bad += [o for o in args.objectives if o not in OBJECTIVES]
    if bad:
        p.error(f"unknown families/objectives {bad}")
    if args.num_features < 2 or args.num_features % 2:
        p.error("--num-features must be an even number >= 2")
    out, table, figure, curves = output_paths(args)
    try:
        if args.render_only:  # the JSON and the curves are the inputs; the table and figure are derived
            derived = [("--table", table), ("--figure", figure)]
            study_cli.check_outputs(derived, inputs=[out, curves], overwrite=True)
        else:
            inputs = [
                pathlib.Path(args.data_dir) / d / f
                for d in args.datasets
                if d != "toy"
                for f in ("data.csv.gz", "test_mask.csv.gz")
            ]
            outputs = [("--json", out), ("--table", table), ("--figure", figure), ("the curves", curves)]
            study_cli.check_outputs(outputs, inputs=inputs, overwrite=args.overwrite)
    except (ValueError, OSError) as e:
        p.error(str(e))
    return args


def output_paths(args):
    """``(json, table, figure or None, toy curves)`` paths."""
    out = pathlib.Path(args.json)
    table = pathlib.Path(args.table) if args.table else out.with_suffix(".md")
    figure = None if args.figure == "" else pathlib.Path(args.figure or out.with_name(out.stem + "_toy.png"))
    return out, table, figure, out.with_name(out.stem + "_toy_curves.json")


def main(argv=None):
    """Runs the benchmark (or only renders it) in float64; importing the module changes no JAX setting."""
    args = parse_args(argv)
    with jax.enable_x64(True):
        return _main(args)


def _main(args):
    out, table, figure, curves_path = output_paths(args)
    if args.render_only:
        records = json.loads(out.read_text())
        curves = json.loads(curves_path.read_text()) if curves_path.exists() else None
        render(records, table, figure, curves)
        print(f"wrote {table}" + (f" and {figure}" if figure and curves else ""))
        return 0

    def log(msg):
        print(msg, flush=True)

    t0 = time.perf_counter()
    log(f"# blr benchmark: jax {jax.__version__} ({platform.machine()}, {os.cpu_count()} cores), load average "
        f"{os.getloadavg()}; datasets {args.datasets}")  # fmt: skip
    records, curves = [], None
    for i, name in enumerate(args.datasets):
        log(f"== [{i + 1}/{len(args.datasets)}] {name} ({time.perf_counter() - t0:.0f}s elapsed)")
        if name == "toy":
            prob = toy_problem(args.seed)
        else:
            prob = uci_problem(name, data_dir=args.data_dir, num_features=args.num_features, seed=args.seed)
        recs, prob_curves = run_problem(prob, args, log, t0)
        records.extend(recs)
        if name == "toy":
            curves = prob_curves
            kronvi.files.write_atomic(curves_path, json.dumps(curves))
        kronvi.files.write_atomic(out, json.dumps(records, indent=1))
    render(records, table, figure, curves)
    log(f"# total {time.perf_counter() - t0:.0f}s; wrote {out}, {table}" + (f", {figure}" if curves else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
