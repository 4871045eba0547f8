"""Brute-force references shared by the tests (float64 NumPy / JAX, by enumeration or from dense data).

``conftest.py`` holds fixtures only.
"""

import contextlib
import functools
import itertools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import monitoring
from scipy.special import logsumexp
from suite_flags import SUITE_XLA_FLAGS

import kronvi

# ---------------------------------------------------------------------------------------------------
# Tolerances and tiny problems
# ---------------------------------------------------------------------------------------------------


def tol(dtype, *, x32=2e-5, x64=1e-10):
    """Relative tolerance for comparing kronvi (in ``dtype``) against a float64 reference."""
    return x64 if np.dtype(dtype) == np.float64 else x32


def subprocess_env(*xla_flags, default_codegen=False, **variables):
    """The environment of a test's Python subprocess, on the CPU: this process's environment, whose
    ``XLA_FLAGS`` hold the suite's faster-compiling flags (``SUITE_XLA_FLAGS``), plus ``xla_flags`` and
    ``variables``. ``default_codegen=True`` leaves the suite's flags out: the subprocess compiles what a
    user's process compiles."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", **variables)
    inherited = os.environ.get("XLA_FLAGS", "").split()
    if default_codegen:
        inherited = [f for f in inherited if f not in SUITE_XLA_FLAGS]
    env["XLA_FLAGS"] = " ".join([*inherited, *xla_flags]).strip()
    return env


def run_python(*args, env, timeout=300):
    """Runs ``python *args`` (a script path or ``-c CODE``, then its arguments) in ``env`` and returns its
    standard output; a non-zero exit fails the test with the end of its standard error."""
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def enumerate_configs(b, m):
    """All m**b configurations in jnp.kron order (factor 0 slowest), shape (m**b, b)."""
    return np.array(list(itertools.product(range(m), repeat=b)), dtype=int).reshape(-1, b)


def brute_force_elbo(Phi, y, values, log_prior, q_w, noise_vals, log_prior_n, q_n):
    """ELBO by summing over every (weight configuration, noise level), straight from the data."""
    Phi, y = np.asarray(Phi, np.float64), np.asarray(y, np.float64)
    b, m = values.shape
    n = len(y)
    cfg = enumerate_configs(b, m)
    rows = np.arange(b)
    W = values[rows, cfg]  # (C, b)
    log_q = np.log(q_w)[rows, cfg].sum(-1)
    log_p = log_prior[rows, cfg].sum(-1)
    rss = ((y[None, :] - W @ Phi.T) ** 2).sum(-1)  # (C,)
    total = 0.0
    for s, qs, lps in zip(noise_vals, q_n, log_prior_n, strict=True):
        ll = -0.5 * n * np.log(2 * np.pi * s) - 0.5 * rss / s
        term = ll + log_p + lps - log_q - np.log(qs)
        total += qs * np.sum(np.exp(log_q) * term)
    return total


def random_problem(rng, *, n=7, b=3, m=3, ms=3, dtype=np.float64):
    """A tiny regression problem with its own grids, a random prior and a random q."""
    Phi = rng.normal(size=(n, b))
    y = Phi @ rng.normal(size=b) + 0.3 * rng.normal(size=n)
    values = np.sort(rng.normal(size=(b, m)), axis=-1)
    values[:, m // 2] = 0.0
    log_prior = np.log(rng.dirichlet(np.ones(m), size=b))
    q_logits = rng.normal(size=(b, m))
    noise_vals = np.sort(rng.uniform(0.05, 2.0, size=ms))[None]
    log_prior_n = np.log(rng.dirichlet(np.ones(ms)))[None]
    qn_logits = rng.normal(size=(1, ms))
    return dict(
        Phi=Phi.astype(dtype),
        y=y.astype(dtype),
        values=values,
        log_prior=log_prior,
        q_logits=q_logits,
        noise_vals=noise_vals,
        log_prior_n=log_prior_n,
        qn_logits=qn_logits,
    )


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------------------------------------------
# Compilation counting
# ---------------------------------------------------------------------------------------------------

_COMPILES = []  # one list per active count_compiles() block


def _on_event(name, *_, **__):
    if name == "/jax/core/compile/backend_compile_duration":
        for counter in _COMPILES:
            counter.append(name)


monitoring.register_event_duration_secs_listener(_on_event)


@contextlib.contextmanager
def count_compiles():
    """Counts XLA backend compilations inside the block, loads from the persistent cache (conftest.py)
    included, as JAX times both as one event: ``with count_compiles() as c: ...; len(c)``."""
    counter = []
    _COMPILES.append(counter)
    try:
        yield counter
    finally:
        _COMPILES.remove(counter)


# ---------------------------------------------------------------------------------------------------
# Mixtures: tiny problems and float64 references by enumeration of all m**b configurations
# ---------------------------------------------------------------------------------------------------


def log_softmax(x):
    return x - logsumexp(x, axis=-1, keepdims=True)


def mixture_problem(seed, *, b=3, m=3, ms=3, r=2, num_prior_components=None):
    """A tiny regression problem with a random ``r``-component mixture (and optionally a mixture prior)."""
    rng = np.random.default_rng(seed)
    p = random_problem(rng, b=b, m=m, ms=ms)
    p["mix_logits"] = rng.normal(size=(r, b, m))
    p["mix_wlogits"] = rng.normal(size=(r,))
    if num_prior_components:
        p["prior_mix_logp"] = np.log(rng.dirichlet(np.ones(m), size=(num_prior_components, b)))
        p["prior_mix_logw"] = np.log(rng.dirichlet(np.ones(num_prior_components)))
    return p


def mixture_model(p, dtype=np.float64, *, mixture_prior=False):
    """``(q, q_noise, prior_w, prior_noise, stats)`` of a :func:`mixture_problem` in ``dtype``."""
    if mixture_prior:
        prior_w = kronvi.mixtures.MixturePrior(
            jnp.asarray(p["values"], dtype), jnp.asarray(p["prior_mix_logp"], dtype),
            jnp.asarray(p["prior_mix_logw"], dtype),
        )  # fmt: skip
    else:
        prior_w = kronvi.model.DiscretePrior(
            jnp.asarray(p["values"], dtype), jnp.asarray(p["log_prior"], dtype)
        )
    prior_n = kronvi.model.DiscretePrior(
        jnp.asarray(p["noise_vals"], dtype), jnp.asarray(p["log_prior_n"], dtype)
    )
    q = kronvi.mixtures.Mixture(jnp.asarray(p["mix_logits"], dtype), jnp.asarray(p["mix_wlogits"], dtype))
    q_n = kronvi.model.MeanField(jnp.asarray(p["qn_logits"], dtype))
    stats = kronvi.stats.regression_stats(jnp.asarray(p["Phi"], dtype), jnp.asarray(p["y"], dtype))
    return q, q_n, prior_w, prior_n, stats


def ref_mixture_log_q(logits, wlogits):
    """log q(x) of a mixture at every configuration, (m**b,)."""
    r, b, m = logits.shape
    cfg = enumerate_configs(b, m)
    per_comp = log_softmax(logits)[:, np.arange(b), cfg].sum(-1)  # (r, C)
    return logsumexp(log_softmax(wlogits)[:, None] + per_comp, axis=0)


def ref_log_prior(p, mixture_prior=False):
    """log p(x) of the problem's (mixture) prior at every configuration, (m**b,)."""
    b, m = p["values"].shape
    cfg = enumerate_configs(b, m)
    if not mixture_prior:
        return log_softmax(p["log_prior"])[np.arange(b), cfg].sum(-1)
    per = log_softmax(p["prior_mix_logp"])[:, np.arange(b), cfg].sum(-1)
    return logsumexp(log_softmax(p["prior_mix_logw"])[:, None] + per, axis=0)


def ref_mixture_terms(p, logits, wlogits, qn_logits, mixture_prior=False):
    """(expected log-likelihood, E_q log p(w), entropy of q_w, noise prior + noise entropy, q(x))."""
    Phi, y = np.asarray(p["Phi"], np.float64), np.asarray(p["y"], np.float64)
    b, m = p["values"].shape
    n = len(y)
    cfg = enumerate_configs(b, m)
    W = p["values"][np.arange(b), cfg]
    rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
    log_q = ref_mixture_log_q(logits, wlogits)
    qx = np.exp(log_q)
    s = p["noise_vals"][0]
    qs = softmax(qn_logits)[0]
    ll = -0.5 * n * np.log(2 * np.pi * s)[None] - 0.5 * rss[:, None] / s[None]  # (C, S)
    ell = np.sum(qx[:, None] * qs[None] * ll)
    e_log_p = np.sum(qx * ref_log_prior(p, mixture_prior))
    h = -np.sum(qx * log_q)
    noise = np.sum(qs * (log_softmax(p["log_prior_n"][0]) - np.log(qs)))
    return ell, e_log_p, h, noise, qx


def ref_mixture_elbo(p, logits, wlogits, qn_logits, mixture_prior=False):
    ell, elp, h, noise, _ = ref_mixture_terms(p, logits, wlogits, qn_logits, mixture_prior)
    return ell + elp + h + noise


def jnp_mixture_elbo(p, mixture_prior=False):
    """Differentiable float64 enumeration ELBO in (logits, weight_logits, noise_logits)."""
    b, m = p["values"].shape
    cfg = enumerate_configs(b, m)
    W = p["values"][np.arange(b), cfg]
    Phi, y = np.asarray(p["Phi"], np.float64), np.asarray(p["y"], np.float64)
    rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
    log_p = ref_log_prior(p, mixture_prior)
    s = p["noise_vals"][0]
    lpn = log_softmax(p["log_prior_n"][0])
    n = len(y)

    def f(logits, wlogits, qn_logits):
        per_comp = jnp.sum(jax.nn.log_softmax(logits)[:, np.arange(b), cfg], -1)
        log_q = jax.nn.logsumexp(jax.nn.log_softmax(wlogits)[:, None] + per_comp, axis=0)
        lqs = jax.nn.log_softmax(qn_logits)[0]
        ll = -0.5 * n * jnp.log(2 * jnp.pi * s)[None] - 0.5 * rss[:, None] / s[None]
        term = ll + log_p[:, None] - log_q[:, None] + (lpn - lqs)[None]
        return jnp.sum(jnp.exp(log_q)[:, None] * jnp.exp(lqs)[None] * term)

    return f


def bimodal_problem():
    """Two nearly identical features: the posterior puts ~0.6 / 0.4 on w = (1, 0, 0) and (0, 1, 0).

    Returns ``(p, stats, prior_w, prior_noise, log_evidence, q0)`` with ``q0`` a two-component mixture
    whose components lean (weakly) toward one mode each.
    """
    rng = np.random.default_rng(0)
    n = 40
    z = rng.normal(size=(n, 1))
    Phi = np.concatenate([z + 0.01 * rng.normal(size=(n, 1)), z + 0.01 * rng.normal(size=(n, 1)),
                          rng.normal(size=(n, 1))], 1)  # fmt: skip
    y = Phi[:, 0] + 0.3 * rng.normal(size=n)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi), jnp.asarray(y))
    prior_w = kronvi.model.gaussian_prior(3, 1.0, levels=3, width=1.0)
    prior_n = kronvi.model.noise_prior(0.09, levels=5)
    p = dict(Phi=Phi, y=y, values=np.asarray(prior_w.values), log_prior=np.asarray(prior_w.log_probs),
             noise_vals=np.asarray(prior_n.values), log_prior_n=np.asarray(prior_n.log_probs))  # fmt: skip
    # log evidence by enumeration over weights and noise
    cfg = enumerate_configs(3, 3)
    W = p["values"][np.arange(3), cfg]
    rss = ((y[None] - W @ Phi.T) ** 2).sum(-1)
    s = p["noise_vals"][0]
    joint = (-0.5 * n * np.log(2 * np.pi * s)[None] - 0.5 * rss[:, None] / s[None]
             + ref_log_prior(p)[:, None] + p["log_prior_n"][0][None])  # fmt: skip
    L = np.zeros((2, 3, 3))
    L[0, 0, 2] = L[0, 1, 1] = L[1, 0, 1] = L[1, 1, 2] = L[:, 2, 1] = 1.0
    return p, stats, prior_w, prior_n, logsumexp(joint), kronvi.mixtures.Mixture(L, np.zeros(2))


# ---------------------------------------------------------------------------------------------------
# Gaussian baselines: dense float64 references
# ---------------------------------------------------------------------------------------------------


def gaussian_problem(dtype, *, n=60, b=4, seed=0, noise=0.3):
    """``(stats, Phi, y)`` of a random linear regression problem (statistics in ``dtype``)."""
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, b))
    y = Phi @ rng.normal(size=b) + noise * rng.normal(size=n)
    stats = kronvi.stats.regression_stats(jnp.asarray(Phi, dtype), jnp.asarray(y, dtype))
    return stats, Phi, y


def dense_gaussian_elbo(Phi, y, mean, std, s2, sw):
    """ELBO straight from the data in float64: E||y - Phi w||^2 from the dense matrices, Gaussian KL."""
    n = len(y)
    rss = np.sum((y - Phi @ mean) ** 2) + np.sum((Phi**2) @ std**2)
    ell = -0.5 * n * np.log(2 * np.pi * s2) - 0.5 * rss / s2
    kl = 0.5 * np.sum((std**2 + mean**2) / sw**2 - 1 - np.log(std**2 / sw**2))
    return ell - kl


# ---------------------------------------------------------------------------------------------------
# Kronecker algebra on factors (Evans & Nair 2018, Propositions 1-3): references for the library's
# closed forms (kronvi._base.kron holds what the ELBOs use). Factors `(b, m)`; dense vectors in `jnp.kron`
# order; a sum of R Kronecker products as `(R, b, m)`.
# ---------------------------------------------------------------------------------------------------


def kron_dense(factors):
    r"""Dense $\bigotimes_j a_j$ of factors `(b, m)` (length `m**b`)."""
    return functools.reduce(jnp.kron, list(factors))


def kron_sum_dense(factors):
    r"""Dense Kronecker sum $\bigoplus_j s_j$ of factors `(b, m)`."""
    b, m = factors.shape
    ones = jnp.ones((m,), factors.dtype)
    out = 0.0
    for j in range(b):
        out = out + kron_dense(jnp.stack([factors[i] if i == j else ones for i in range(b)]))
    return out


def kron_inner(a, b):
    r"""Prop. 1: $\langle \bigotimes_j a_j, \bigotimes_j b_j \rangle = \prod_j \langle a_j, b_j\rangle$.

    Args:
      a, b: factors `(..., b, m)`.

    """
    return jnp.prod(jnp.sum(a * b, axis=-1), axis=-1)


def kron_log_inner(a, b):
    r"""$\log \langle \bigotimes_j a_j, \bigotimes_j b_j\rangle = \sum_j \log\langle a_j, b_j\rangle$,
    for nonnegative factors (the log-space form used for products over many weights)."""
    return jnp.sum(jnp.log(jnp.sum(a * b, axis=-1)), axis=-1)


def kron_log(factors):
    r"""Prop. 2: the element-wise log of $\bigotimes_j a_j$ is the Kronecker sum
    $\bigoplus_j \log a_j$; returns its factors `log(a)` (positive `a`)."""
    return jnp.log(factors)


def kron_mul(a, b):
    r"""Element-wise product of Kronecker products: $(\bigotimes a_j) \circ (\bigotimes b_j) =
    \bigotimes (a_j \circ b_j)$ (mixed-product property); returns the factors."""
    return a * b


def kron_sum_inner(s, a):
    r"""Prop. 3: $\langle \bigoplus_j s_j, \bigotimes_j a_j\rangle = \sum_j \langle s_j, a_j\rangle
    \prod_{i \neq j} \langle 1, a_i\rangle$.

    For normalized distributions ($\langle 1, a_i\rangle = 1$) this is the expectation
    $\sum_j E_{a_j}[s_j]$, which is how $E_q[\log p]$ and $E_q[\log q]$ of factorized
    distributions cost $O(bm)$. Computed without division, so zero factors are fine.

    Args:
      s: Kronecker-sum factors `(..., b, m)`.
      a: Kronecker-product factors `(..., b, m)`.
    """
    dots = jnp.sum(s * a, axis=-1)  # (..., b)
    totals = jnp.sum(a, axis=-1)  # (..., b)
    # prod_{i != j} totals_i via exclusive prefix and suffix products.
    ones = jnp.ones_like(totals[..., :1])
    prefix = jnp.cumprod(jnp.concatenate([ones, totals[..., :-1]], axis=-1), axis=-1)
    suffix = jnp.flip(
        jnp.cumprod(jnp.concatenate([ones, jnp.flip(totals, -1)[..., :-1]], axis=-1), axis=-1), -1
    )
    return jnp.sum(dots * prefix * suffix, axis=-1)


def kron_sum_mul_kron(s, a):
    r"""Element-wise $(\bigoplus_j s_j) \circ (\bigotimes_j a_j)$, a sum of `b` Kronecker
    products: returns factors `(b, b, m)` where term `j` has factor `s_j a_j` at `j` and `a_i`
    elsewhere."""
    b = a.shape[-2]
    eye = jnp.eye(b, dtype=bool)[..., None]
    return jnp.where(eye, (s * a)[..., None, :, :], a[..., None, :, :])


def kron_sum_of_products_dense(terms):
    r"""Dense $\sum_r \bigotimes_j a^{(r)}_j$ of terms `(R, b, m)`."""
    return sum(kron_dense(t) for t in terms)


def kron_sum_of_products_inner(A, B):
    r"""$\langle \sum_r \bigotimes_j a^{(r)}_j, \sum_s \bigotimes_j b^{(s)}_j\rangle =
    \sum_{r,s} \prod_j \langle a^{(r)}_j, b^{(s)}_j\rangle$ for terms `A (R, b, m)`, `B (S, b, m)`,
    in $O(RSbm)$."""
    return jnp.sum(jax.vmap(lambda a: jax.vmap(lambda bb: kron_inner(a, bb))(B))(A))
