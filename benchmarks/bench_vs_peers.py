"""kronvi's default regression pipeline against the tools a user would pick instead, in one run.

For fold 0 of each dataset (the shared UCI folds; yacht ships with kronvi):

- **kronvi**: `kronvi.pipeline.fit_direct` with the default `DirectConfig()` on the raw training rows (GP
  hyperparameters, features, eigenbasis, evidence, fit), then the exact predictive mean and the exact
  predictive log density of every test row (`kronvi.model.predictive_log_density`). Its stages come from the
  fit's own timings. "first call" is a fresh process (XLA compilation included); the other columns are
  warm repeats, after one untimed call in the same process.
- **BayesianRidge**: scikit-learn's `BayesianRidge()` (its defaults: intercept, evidence-optimal prior
  and noise) fitted on the very features kronvi built (float64; random Fourier features, or Nyström
  features from 4,000 training rows), predicting with `return_std`.
- **sklearn GP**: `GaussianProcessRegressor` with an ARD squared-exponential kernel plus white noise on
  the standardized inputs (n <= 5000 only; one timed fit, its default single optimizer start).
- **SVGP** (`--peers`, needs GPJax: the `peers` extra): GPJax's sparse variational GP, 1024 inducing points
  (a random subset of the standardized training rows), ARD RBF kernel and noise started at an exact GP's on
  1,000 random rows, Gaussian likelihood, the minibatch ELBO (512 rows) maximized by Adam(0.01) in float32
  until the per-row ELBO of a chunk of 250 steps gains less than 0.002 nats (at least 500, at most
  `--svgp-max-steps` steps), then one full-batch natural-gradient step of
  size 1 in float64 (the optimal q(u) for a Gaussian likelihood) and float64 predictions; once per dataset.
- **exact GP** (`--peers`, GPJax): exact GP regression (ARD RBF, float64) on a random subset of at most
  `--exact-gp-rows` (10,000) training rows, its hyperparameters by L-BFGS-B on 3,000 of them; once per
  dataset. (The sklearn GP row stays at n <= 5000: its optimizer's repeated O(n^3) fits are too slow beyond.)
  Without GPJax both rows print one line saying they are skipped.
- **NumPyro SVI**: Bayesian linear regression on the same features (w ~ N(0, sw^2), sw and the noise sd
  HalfNormal(1) on the standardized targets), mean-field normal guide (`AutoNormal`), Adam(0.01),
  `--svi-steps` steps on minibatches of 512 rows.

Classification (`--classifiers`, fold 0 of the shared binary sets): `kronvi.sklearn.DirectClassifier()` with
its defaults against `LogisticRegression()` and `LogisticRegressionCV` (raw standardized inputs, and the very
features kronvi fitted), with `predict_proba` seconds and test log loss (`bench_classifier.py`'s functions).

Everyone runs with the machine's defaults (no thread settings). Repeats are interleaved (kronvi,
BayesianRidge, NumPyro, kronvi, ...) and medians reported, with the load average before each dataset.
A synthetic 2,000,000-row set (11 inputs, `experiments/scale_2m.py`'s function) runs kronvi end to end
and compares the rate of its statistics pass with the float32 GEMM rate measured in the same run;
the peers cannot hold its `2e6 x 2000` feature matrix (32 GB in float64) and are not run there.

Run: python benchmarks/bench_vs_peers.py [--repeats 3] [--datasets yacht,concrete,energy,kin40k,protein]
[--peers svgp,exact-gp]
[--classifiers anes96_vote,breastcancer_wdbc,digits_parity,fair_affairs,kin40k_median]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
from kronvi import pipeline

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine, seconds  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "uci"


def load(name, data_dir):
    """`(X_train, y_train, X_test, y_test)` of fold 0, float64 NumPy arrays."""
    path = pathlib.Path(data_dir) / name
    X, y, mask = (
        kronvi.load_uci(path) if path.exists() else kronvi.load_demo() if name == "yacht" else (None,) * 3
    )
    if X is None:
        raise SystemExit(f"no data for {name!r} in {data_dir} (pass --data-dir)")
    test = np.asarray(mask)[:, 0].astype(bool)
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    return X[~test], y[~test], X[test], y[test]


def synthetic(n, n_test=4000, seed=0):
    """Smooth target of 5 of 11 inputs plus noise sd 0.1 (as experiments/scale_2m.py)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n + n_test, 11))
    f = (
        np.sin(1.5 * X[:, 0])
        + 0.5 * np.cos(X[:, 1] * X[:, 2])
        + 0.3 * X[:, 3] ** 2
        - 0.4 * np.tanh(2 * X[:, 4])
    )
    y = f + 0.1 * rng.standard_normal(n + n_test)
    return X[:n], y[:n], X[n:], y[n:]


def gaussian_nlpd(y, mean, var):
    return float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))


def run_kronvi(Xtr, ytr, Xte, yte, key=0, config=None):
    """The default pipeline (or `config`) end to end; seconds of each stage and the test metrics."""
    (model, timings, _), fit_s = seconds(pipeline.fit_direct, jax.random.key(key), Xtr, ytr, config)

    def predict():
        Phi = pipeline.fold_features(model, Xte)
        mean, _ = kronvi.model.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
        return Phi, np.asarray(mean, np.float64) + float(model.y_offset)

    (Phi, mean), predict_s = seconds(predict)
    yc = jnp.asarray(yte - float(model.y_offset), Phi.dtype)
    (ld, _), density_s = seconds(
        kronvi.model.predictive_log_density, model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi, yc
    )
    ld = np.asarray(ld)
    return dict(
        fit=fit_s, gp=timings.init_seconds, stats=timings.stats_seconds, cavi=timings.fit_seconds,
        predict=predict_s, density=density_s,
        rmse=float(np.sqrt(np.mean((mean - yte) ** 2))), nlpd=float(-np.mean(ld)),
    )  # fmt: skip


def same_features(Xtr, ytr, Xte, key=0):
    """The default recipe's features of the standardized inputs (float64), as the pipeline builds them: random
    Fourier features, or Nyström features from 4,000 training rows (`pipeline.default_feature_map`)."""
    config = pipeline.DirectConfig(
        recipe=pipeline.Features(noise_cv=()), feature_map=pipeline.default_feature_map(len(Xtr))
    )  # the default's GP step, key and map; uncentred (BayesianRidge fits its own intercept)
    fold = pipeline.prepare_fold(jax.random.key(key), Xtr, ytr, config)
    nystrom = isinstance(fold.features, kronvi.inputs.NystromFeatures)
    features = kronvi.inputs.nystrom_features if nystrom else kronvi.inputs.rff_features
    with jax.enable_x64(True):
        feats = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), fold.features)
        std = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), fold.standardizer)
        F = [np.asarray(features(feats, kronvi.inputs.standardize(std, jnp.asarray(X)))) for X in (Xtr, Xte)]
    return F


def run_bayesian_ridge(F, Ftest, ytr, yte):
    from sklearn.linear_model import BayesianRidge

    br, fit_s = seconds(BayesianRidge().fit, F, ytr)
    mean, sd = br.predict(Ftest, return_std=True)
    return dict(
        fit=fit_s, rmse=float(np.sqrt(np.mean((mean - yte) ** 2))), nlpd=gaussian_nlpd(yte, mean, sd**2),
        prior_scale=float(br.lambda_**-0.5), noise_variance=float(1.0 / br.alpha_),
    )  # fmt: skip


def run_sklearn_gp(Xtr, ytr, Xte, yte):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    d = Xtr.shape[1]
    kernel = C(1.0) * RBF(np.ones(d), length_scale_bounds=(1e-2, 1e3)) + WhiteKernel(0.1, (1e-6, 1e1))
    gp, fit_s = seconds(GaussianProcessRegressor(kernel, normalize_y=True).fit, (Xtr - mu) / sd, ytr)
    mean, std = gp.predict((Xte - mu) / sd, return_std=True)
    return dict(
        fit=fit_s, rmse=float(np.sqrt(np.mean((mean - yte) ** 2))), nlpd=gaussian_nlpd(yte, mean, std**2)
    )


def run_numpyro(F, Ftest, ytr, yte, steps, key=0):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    mu, scale = ytr.mean(), ytr.std()
    F32, y32 = jnp.asarray(F, jnp.float32), jnp.asarray((ytr - mu) / scale, jnp.float32)
    n, b = F32.shape

    def model(Phi, y):
        sw = numpyro.sample("sw", dist.HalfNormal(1.0))
        s = numpyro.sample("s", dist.HalfNormal(1.0))
        w = numpyro.sample("w", dist.Normal(0.0, sw).expand([b]).to_event(1))
        with numpyro.plate("rows", n, subsample_size=min(512, n)) as idx:
            numpyro.sample("y", dist.Normal(Phi[idx] @ w, s), obs=y[idx])

    guide = AutoNormal(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    result, fit_s = seconds(svi.run, jax.random.key(key), steps, F32, y32, progress_bar=False)
    params = result.params
    loc, sc = params["w_auto_loc"], params["w_auto_scale"]
    s = guide.median(params)["s"]
    Ft = jnp.asarray(Ftest, jnp.float32)
    mean = np.asarray(Ft @ loc) * scale + mu
    var = (np.asarray((Ft**2) @ sc**2) + float(s) ** 2) * scale**2
    return dict(
        fit=fit_s, rmse=float(np.sqrt(np.mean((mean - yte) ** 2))), nlpd=gaussian_nlpd(yte, mean, var)
    )


def gpjax_missing():
    """`None` when GPJax imports, else the line to print: the SVGP and exact GP rows need the `peers` extra."""
    try:
        import gpjax  # noqa: F401
    except ImportError as e:
        return f"skipped: gpjax is not importable ({e}); pip install 'kronvi[peers]' for the SVGP and exact GP rows"
    return None


def _standardize(Xtr, ytr, Xte):
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.where(sd == 0, 1.0, sd)
    return (Xtr - mu) / sd, (Xte - mu) / sd, float(ytr.mean()), float(ytr.std())


def _to_float64(tree):
    """Every floating leaf of an equinox module (a GPJax model) as float64; call under `jax.enable_x64`."""
    return jax.tree.map(lambda a: a.astype(jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def _predict_chunks(predict, Xte, chunk=500):
    """Marginal means and variances of a GPJax predictive, `chunk` test rows at a time (no N x N matrix)."""
    means, variances = [], []
    for i in range(0, len(Xte), chunk):
        dist = predict(Xte[i : i + chunk])
        means.append(np.asarray(dist.mean, np.float64))
        variances.append(np.asarray(dist.variance, np.float64))
    return np.concatenate(means), np.concatenate(variances)


def run_svgp(
    Xtr, ytr, Xte, yte, *, num_inducing=1024, batch_size=512, learning_rate=0.01, chunk_steps=250,
    min_steps=500, max_steps=2000, tol=2e-3, init_rows=1000, start_optimal=True, key=0, log=None,
):  # fmt: skip
    """GPJax's sparse variational GP (Hensman et al. 2013): an ARD RBF kernel, a Gaussian likelihood and a
    whitened variational Gaussian over `num_inducing` inducing inputs, a random subset of the standardized
    training rows; the kernel and the noise start at an exact GP's (`_exact_gp_hyper`) on `init_rows` random
    rows (0: lengthscales 1, variance 1, noise sd 0.5), and with `start_optimal` q(u) starts at its optimum
    for them (the full-batch natural step below); the ELBO on minibatches of `batch_size` rows
    (`gpjax.objectives.elbo`) is maximized by `optax.adam(learning_rate)` over the kernel, the noise, the
    inducing inputs and q(u), in float32. `log`: `None` or a function of one line, called after each chunk.

    Training runs in chunks of `chunk_steps` steps and stops at the first chunk, past `min_steps`, whose mean
    per-row negative ELBO is within `tol` nats of the previous chunk's (a plateau), or at `max_steps`. Then one
    full-batch natural-gradient step of size 1 in float64 (`gpjax.fit_natgrads`; for a Gaussian likelihood it
    lands on the optimal q(u) for the trained kernel and inducing inputs) and float64 predictions: the mean
    and the variance of a new target (the noise included), in the targets' units.

    Returns the seconds of all of it (`fit`), test RMSE and NLPD, the steps, the per-chunk trace of the
    per-row negative ELBO, and the full-batch per-row negative ELBO before and after the q(u) step.
    """
    with warnings.catch_warnings():  # GPJax's Dataset warns that float32 may be unstable: it is float32 on purpose
        warnings.filterwarnings("ignore", message=".*is not of type float64", category=UserWarning)
        return _svgp(Xtr, ytr, Xte, yte, num_inducing, batch_size, learning_rate, chunk_steps, min_steps, max_steps,
                     tol, init_rows, start_optimal, key, log)  # fmt: skip


def _exact_gp_hyper(X, y, max_iters):
    """GPJax's exact GP (ARD RBF, Gaussian likelihood, zero mean, float64) with its kernel and noise at a
    maximum of the log marginal likelihood of `(X, y)` (`gpjax.fit_scipy`, L-BFGS-B); call under
    `jax.enable_x64`."""
    import gpjax as gpx

    prior = gpx.gps.Prior(
        mean_function=gpx.mean_functions.Zero(),
        kernel=gpx.kernels.RBF(lengthscale=jnp.ones(X.shape[1]), variance=1.0),
    )
    posterior = prior * gpx.likelihoods.Gaussian(obs_stddev=jnp.asarray(0.5))
    posterior, _ = gpx.fit_scipy(
        model=posterior, objective=lambda m, data: -gpx.objectives.conjugate_mll(m, data),
        train_data=gpx.Dataset(X=jnp.asarray(X), y=jnp.asarray(y)[:, None]), max_iters=max_iters, verbose=False,
    )  # fmt: skip
    return posterior


def _optimal_q(q, X, y, loss):
    """`(q with the optimal q(u), loss before, loss after)`: one full-batch natural-gradient step of size 1 on
    `(X, y)` in float64 (`gpjax.fit_natgrads`; exact for a Gaussian likelihood); call under `jax.enable_x64`."""
    import gpjax as gpx
    import optax as ox

    q64 = _to_float64(q)
    full = gpx.Dataset(X=jnp.asarray(X), y=jnp.asarray(y)[:, None])
    before = float(loss(q64, full))
    q64, _ = gpx.fit_natgrads(
        model=q64, objective=loss, train_data=full, optim=ox.set_to_zero(), natgrad_lr=1.0, num_iters=1,
        batch_size=-1, verbose=False,
    )  # fmt: skip
    return q64, before, float(loss(q64, full))


def _svgp(
    Xtr, ytr, Xte, yte, num_inducing, batch_size, learning_rate, chunk_steps, min_steps, max_steps, tol, init_rows,
    start_optimal, key, log,
):  # fmt: skip
    import equinox as eqx
    import gpjax as gpx
    import optax as ox
    from gpjax.fit import get_batch

    t0 = time.perf_counter()
    Xs, Xts, ym, ys = _standardize(Xtr, ytr, Xte)
    n, d = Xs.shape
    data = gpx.Dataset(X=jnp.asarray(Xs, jnp.float32), y=jnp.asarray((ytr - ym) / ys, jnp.float32)[:, None])
    rng = np.random.default_rng(key)
    Z = jnp.asarray(Xs[rng.choice(n, min(num_inducing, n), replace=False)], jnp.float32)
    lengthscale, variance, noise_sd = np.ones(d), 1.0, 0.5
    if init_rows:  # the kernel and noise start at an exact GP's on a random subset (float64)
        rows = rng.choice(n, min(init_rows, n), replace=False)
        with jax.enable_x64(True):
            start = _exact_gp_hyper(Xs[rows], (ytr[rows] - ym) / ys, max_iters=200)
            lengthscale, variance, noise_sd = (
                np.asarray(gpx.parameters.val(p), np.float64)
                for p in (start.prior.kernel.lengthscale, start.prior.kernel.variance, start.likelihood.obs_stddev)
            )
    kernel = gpx.kernels.RBF(lengthscale=jnp.asarray(lengthscale, jnp.float32), variance=jnp.asarray(variance, jnp.float32))
    prior = gpx.gps.Prior(mean_function=gpx.mean_functions.Zero(), kernel=kernel, jitter=1e-4)
    likelihood = gpx.likelihoods.Gaussian(obs_stddev=jnp.asarray(noise_sd, jnp.float32))
    q = gpx.variational_families.WhitenedVariationalGaussian(model=prior * likelihood, inducing_inputs=Z)
    optim = ox.adam(learning_rate)

    def loss(model, batch):
        return -gpx.objectives.elbo(model, batch) / n

    @eqx.filter_jit
    def train(model, opt_state, keys):
        def step(carry, k):
            model, opt_state = carry
            value, grads = eqx.filter_value_and_grad(loss)(model, get_batch(data, batch_size, k))
            updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
            return (eqx.apply_updates(model, updates), opt_state), value

        return jax.lax.scan(step, (model, opt_state), keys)

    if start_optimal:  # q(u) starts at its optimum for the starting kernel and inducing inputs
        with jax.enable_x64(True):
            q64, _, start_elbo = _optimal_q(q, Xs, (ytr - ym) / ys, loss)
            q = jax.tree.map(lambda a: a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a, q64)
        if log:
            log(f"SVGP start: full-batch per-row ELBO {-start_elbo:.4f} at the optimal q(u), "
                f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    opt_state = optim.init(eqx.filter(q, eqx.is_array))
    keys = jax.random.split(jax.random.key(key), max_steps)
    trace: list[float] = []
    steps = 0
    while steps < max_steps:
        (q, opt_state), values = train(q, opt_state, keys[steps : steps + chunk_steps])
        steps += chunk_steps
        trace.append(float(np.mean(np.asarray(values))))
        if log:
            log(f"SVGP step {steps}: mean per-row ELBO of the last {chunk_steps} steps {-trace[-1]:.4f}, "
                f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
        if not np.isfinite(trace[-1]):
            raise FloatingPointError(f"SVGP ELBO not finite after {steps} steps (trace {trace})")
        if steps >= min_steps and len(trace) > 1 and trace[-2] - trace[-1] < tol:
            break
    with jax.enable_x64(True):
        q64, before, after = _optimal_q(q, Xs, (ytr - ym) / ys, loss)
        conditioned = q64.condition(None)
        mean, var_f = _predict_chunks(lambda t: conditioned(t, covariance="diagonal"), jnp.asarray(Xts))
        noise = float(np.asarray(gpx.parameters.val(q64.model.likelihood.obs_stddev))) ** 2
    fit_s = time.perf_counter() - t0
    mean, var = mean * ys + ym, (var_f + noise) * ys**2
    return dict(
        fit=fit_s, rmse=float(np.sqrt(np.mean((mean - yte) ** 2))), nlpd=gaussian_nlpd(yte, mean, var),
        steps=steps, trace=trace, full_elbo_before=-before, full_elbo_after=-after, noise_sd=noise**0.5 * ys,
        num_inducing=int(Z.shape[0]), init_rows=int(min(init_rows, n)), chunk_steps=chunk_steps,
        start_optimal=bool(start_optimal),
    )  # fmt: skip


def run_exact_gp(Xtr, ytr, Xte, yte, *, max_rows=10_000, fit_rows=3000, max_iters=200, key=0):
    """GPJax's exact GP regression (ARD RBF kernel, Gaussian likelihood, standardized inputs and targets, in
    float64) on a random subset of at most `max_rows` training rows: the kernel and noise maximize the log
    marginal likelihood (`gpjax.fit_scipy`, L-BFGS-B, at most `max_iters` iterations) of the first `fit_rows`
    of that subset, then the predictive conditions on the whole subset. Returns seconds, RMSE and NLPD (a new
    target's variance, the noise included) in the targets' units, and the rows used."""
    import gpjax as gpx

    t0 = time.perf_counter()
    Xs, Xts, ym, ys = _standardize(Xtr, ytr, Xte)
    rows = np.random.default_rng(key).permutation(len(Xs))[:max_rows]
    with jax.enable_x64(True):
        X, y = jnp.asarray(Xs[rows]), jnp.asarray((ytr[rows] - ym) / ys)[:, None]
        posterior = _exact_gp_hyper(X[:fit_rows], y[:fit_rows, 0], max_iters)
        train = gpx.Dataset(X=X, y=y)
        conditioned = posterior.condition(train)  # one Cholesky factor of the subset's Gram matrix
        mean, var_f = _predict_chunks(lambda t: conditioned(t, covariance="diagonal"), jnp.asarray(Xts), chunk=1000)
        noise = float(np.asarray(gpx.parameters.val(posterior.likelihood.obs_stddev))) ** 2
    fit_s = time.perf_counter() - t0
    mean, var = mean * ys + ym, (var_f + noise) * ys**2
    return dict(
        fit=fit_s, rmse=float(np.sqrt(np.mean((mean - yte) ** 2))), nlpd=gaussian_nlpd(yte, mean, var),
        rows=len(rows), fit_rows=min(fit_rows, len(rows)),
    )  # fmt: skip


def gemm_rate():
    """The machine's float32 GEMM rate (GFLOP/s): the faster of the host BLAS and XLA, best of 5."""
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(4096, 2000)).astype(np.float32), rng.normal(size=(4096, 2000)).astype(np.float32)
    flops = 2 * 4096 * 2000 * 2000
    best = {}
    xla = jax.jit(lambda a, b: jnp.matmul(a.T, b, precision="highest"))
    Aj, Bj = jnp.asarray(A), jnp.asarray(B)
    for name, fn in [("host BLAS", lambda: A.T @ B), ("XLA", lambda: xla(Aj, Bj))]:
        fn()
        best[name] = flops / min(seconds(fn)[1] for _ in range(5)) / 1e9
    return best


def first_call(name, data_dir, n_synthetic):
    """The first call of this process: kronvi's end to end seconds with compilation."""
    data = synthetic(n_synthetic) if name == "synthetic" else load(name, data_dir)
    out = run_kronvi(*data)
    print(json.dumps(out))


def run_logistic(Xtr, ytr, Xte, yte):
    """scikit-learn's `LogisticRegression()` (its defaults, C = 1) on the standardized raw inputs."""
    import bench_classifier
    from sklearn.linear_model import LogisticRegression

    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    t0 = time.perf_counter()
    clf = LogisticRegression(max_iter=2000).fit((Xtr - mu) / sd, ytr)
    t1 = time.perf_counter()
    p = clf.predict_proba((Xte - mu) / sd)[:, 1]
    t2 = time.perf_counter()
    return dict(fit=t1 - t0, predict=t2 - t1, logloss=bench_classifier.log_loss(p, yte))


def classifier_rows(names, data_dir, repeats):
    """Interleaved warm repeats of kronvi's default classifier and scikit-learn's, fold 0 of each set; prints
    each repeat and returns the medians per dataset."""
    import bench_classifier as bc

    rows = []
    for name in names:
        Xtr, ytr, Xte, yte = bc.load(name, data_dir)
        mu, sd = Xtr.mean(0), Xtr.std(0)
        sd[sd == 0] = 1.0
        print(f"\n== {name} (classification): {len(Xtr)} training rows, {len(Xte)} test rows, "
              f"{Xtr.shape[1]} inputs; {load_average()}", flush=True)  # fmt: skip
        t0 = time.perf_counter()
        bc.run_kronvi(Xtr, ytr, Xte, yte)  # untimed for the medians: this process's compilations
        first = time.perf_counter() - t0
        runs: dict[str, list] = {"kronvi": [], "LogisticRegression": [], "LRCV raw": [], "LRCV features": []}
        for r in range(repeats):
            clf, k = bc.run_kronvi(Xtr, ytr, Xte, yte)
            runs["kronvi"].append(k)
            runs["LogisticRegression"].append(run_logistic(Xtr, ytr, Xte, yte))
            runs["LRCV raw"].append(bc.run_lrcv((Xtr - mu) / sd, ytr, (Xte - mu) / sd, yte))
            F, Ft = (np.asarray(clf.models_[0].design(a), np.float64) for a in (Xtr, Xte))
            runs["LRCV features"].append(bc.run_lrcv(F, ytr, Ft, yte))
            print(f"  repeat {r + 1}/{repeats}: " + ", ".join(
                f"{k_} {v[-1]['fit']:.3f} s (log loss {v[-1]['logloss']:.4f})" for k_, v in runs.items()), flush=True)  # fmt: skip
        med = {k_: {f: statistics.median(x[f] for x in v) for f in ("fit", "predict", "logloss")}
               for k_, v in runs.items()}  # fmt: skip
        rows.append(dict(name=name, n=len(Xtr), n_test=len(Xte), first=first, **med))
    return rows


def print_classifier_table(rows):
    print("\n## Classification, fold 0: fit and predict_proba seconds (warm medians), test log loss\n")
    print("| dataset (train / test) | kronvi fit | kronvi first call (fit + predict) | kronvi predict_proba "
          "| LogisticRegression fit | LRCV raw fit | LRCV features fit | kronvi log loss | LogisticRegression "
          "| LRCV raw | LRCV features | kronvi / LRCV features time |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        k, lr, raw, feat = r["kronvi"], r["LogisticRegression"], r["LRCV raw"], r["LRCV features"]
        print(f"| {r['name']} ({r['n']} / {r['n_test']}) | {fmt(k['fit'])} | {fmt(r['first'])} | "
              f"{fmt(k['predict'])} | {fmt(lr['fit'])} | {fmt(raw['fit'])} | {fmt(feat['fit'])} | "
              f"{k['logloss']:.4f} | {lr['logloss']:.4f} | {raw['logloss']:.4f} | {feat['logloss']:.4f} | "
              f"{k['fit'] / feat['fit']:.2f} |")  # fmt: skip


def fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:.0f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="yacht,concrete,energy,kin40k,protein")
    ap.add_argument("--data-dir", default=str(DATA))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--svi-steps", type=int, default=5000)
    ap.add_argument("--synthetic-rows", type=int, default=2_000_000, help="0: skip the synthetic set")
    ap.add_argument("--gp-max-rows", type=int, default=5000)
    ap.add_argument("--peers", default="svgp,exact-gp", help="GPJax peers, once per dataset ('' skips them)")
    ap.add_argument("--svgp-inducing", type=int, default=1024)
    ap.add_argument("--svgp-max-steps", type=int, default=2000)
    ap.add_argument("--exact-gp-rows", type=int, default=10_000, help="the exact GP's random training subset")
    ap.add_argument(
        "--classifiers", default="anes96_vote,breastcancer_wdbc,digits_parity,fair_affairs,kin40k_median",
        help="binary datasets for the classifier rows ('' skips them)",
    )  # fmt: skip
    ap.add_argument("--classifier-data-dir", default=str(DATA.parent / "classification"))
    ap.add_argument("--no-first-call", action="store_true", help="skip the fresh-process first calls")
    ap.add_argument("--first-call", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--gp-float64", action="store_true",
        help="also time kronvi with DirectConfig(gp_precision='float64') in the same interleaved repeats",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.first_call:
        return first_call(args.first_call, args.data_dir, args.synthetic_rows)

    print(machine())
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; {load_average()}")
    peers = [p for p in args.peers.split(",") if p]
    if any(p not in ("svgp", "exact-gp") for p in peers):
        ap.error(f"--peers must name svgp and/or exact-gp, got {args.peers!r}")
    if peers and gpjax_missing():
        print(f"SVGP and exact GP rows: {gpjax_missing()}", flush=True)
        peers = []
    rows = []
    for name in [d for d in args.datasets.split(",") if d]:
        Xtr, ytr, Xte, yte = load(name, args.data_dir)
        print(f"\n== {name}: {len(Xtr)} training rows, {len(Xte)} test rows, {Xtr.shape[1]} inputs; {load_average()}",
              flush=True)  # fmt: skip
        first = None
        if not args.no_first_call:
            cmd = [sys.executable, __file__, "--first-call", name, "--data-dir", args.data_dir]
            res = subprocess.run(cmd, capture_output=True, text=True)
            first = json.loads(res.stdout.strip().splitlines()[-1])["fit"] if res.returncode == 0 else None
            print(f"  kronvi first call (fresh process): fit {fmt(first)} s", flush=True)
        F, Ft = same_features(Xtr, ytr, Xte)
        run_kronvi(Xtr, ytr, Xte, yte)  # untimed: this process's compilations for these shapes
        runs = {"kronvi": [], "BayesianRidge": [], "NumPyro SVI": []}
        gp64 = pipeline.DirectConfig(gp=pipeline.GPOptions(precision="float64"))
        if args.gp_float64:
            run_kronvi(Xtr, ytr, Xte, yte, config=gp64)  # untimed, as above
            runs["kronvi GP float64"] = []
        for r in range(args.repeats):
            runs["kronvi"].append(run_kronvi(Xtr, ytr, Xte, yte))
            if args.gp_float64:
                runs["kronvi GP float64"].append(run_kronvi(Xtr, ytr, Xte, yte, config=gp64))
            runs["BayesianRidge"].append(run_bayesian_ridge(F, Ft, ytr, yte))
            runs["NumPyro SVI"].append(run_numpyro(F, Ft, ytr, yte, args.svi_steps))
            print(f"  repeat {r + 1}/{args.repeats}: " + ", ".join(
                f"{k} {v[-1]['fit']:.2f} s (RMSE {v[-1]['rmse']:.4g})" for k, v in runs.items()), flush=True)  # fmt: skip
        gp = run_sklearn_gp(Xtr, ytr, Xte, yte) if len(Xtr) <= args.gp_max_rows else None
        if gp:
            print(f"  sklearn GP: fit {gp['fit']:.2f} s, RMSE {gp['rmse']:.4g}", flush=True)
        svgp = exact = None
        if "svgp" in peers:
            svgp = run_svgp(Xtr, ytr, Xte, yte, num_inducing=args.svgp_inducing, max_steps=args.svgp_max_steps)
            print(f"  SVGP ({svgp['num_inducing']} inducing points, {svgp['steps']} steps): fit {svgp['fit']:.1f} s, "
                  f"RMSE {svgp['rmse']:.4g}, NLPD {svgp['nlpd']:.3f}; per-row ELBO per {svgp['chunk_steps']} steps "
                  f"{[round(-v, 4) for v in svgp['trace']]}", flush=True)  # fmt: skip
        if "exact-gp" in peers:
            exact = run_exact_gp(Xtr, ytr, Xte, yte, max_rows=args.exact_gp_rows)
            print(f"  exact GP (GPJax, {exact['rows']} rows): fit {exact['fit']:.1f} s, RMSE {exact['rmse']:.4g}, "
                  f"NLPD {exact['nlpd']:.3f}", flush=True)  # fmt: skip
        med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in runs.items()}
        rows.append(dict(name=name, n=len(Xtr), first=first, gp=gp, svgp=svgp, exact=exact, **med))

    print("\n## Fit seconds (warm medians) and test accuracy, fold 0\n")
    print(
        "| dataset (n) | kronvi fit | its GP / stats / CAVI | kronvi first call | kronvi density of the test rows "
        "| BayesianRidge fit | NumPyro SVI fit | sklearn GP fit | kronvi / BayesianRidge time |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        k, br, sv = r["kronvi"], r["BayesianRidge"], r["NumPyro SVI"]
        print(f"| {r['name']} ({r['n']}) | {fmt(k['fit'])} | {fmt(k['gp'], 2)} / {fmt(k['stats'], 2)} / "
              f"{fmt(k['cavi'], 2)} | {fmt(r['first'])} | {fmt(k['density'])} | {fmt(br['fit'])} | {fmt(sv['fit'])} | "
              f"{fmt(r['gp']['fit'] if r['gp'] else None)} | {k['fit'] / br['fit']:.2f} |")  # fmt: skip
    print(
        "\n| dataset | kronvi RMSE / NLPD | BayesianRidge RMSE / NLPD | NumPyro SVI RMSE / NLPD | sklearn GP RMSE / NLPD "
        "| SVGP RMSE / NLPD (fit s) | exact GP, GPJax RMSE / NLPD (fit s) "
        "| kronvi / BayesianRidge RMSE | kronvi - BayesianRidge NLPD |"
    )
    print("|---|---|---|---|---|---|---|---:|---:|")
    for r in rows:
        k, br, sv = r["kronvi"], r["BayesianRidge"], r["NumPyro SVI"]
        g, svgp, exact = (
            "—" if x is None else f"{x['rmse']:.4g} / {x['nlpd']:.3f}" + (f" ({fmt(x['fit'])})" if i else "")
            for i, x in enumerate((r["gp"], r["svgp"], r["exact"]))
        )
        print(f"| {r['name']} | {k['rmse']:.4g} / {k['nlpd']:.3f} | {br['rmse']:.4g} / {br['nlpd']:.3f} | "
              f"{sv['rmse']:.4g} / {sv['nlpd']:.3f} | {g} | {svgp} | {exact} | {k['rmse'] / br['rmse']:.3f} | "
              f"{k['nlpd'] - br['nlpd']:+.3f} |")  # fmt: skip

    if args.gp_float64:
        print("\n## kronvi with DirectConfig(gp_precision='float64') (the GP likelihood in float64), same repeats\n")
        print("| dataset (n) | kronvi fit: default / GP float64 | GP seconds: default / GP float64 "
              "| GP float64 / BayesianRidge time | RMSE / NLPD with GP float64 | NLPD minus BayesianRidge's |")  # fmt: skip
        print("|---|---|---|---:|---|---:|")
        for r in rows:
            k, k64, br = r["kronvi"], r["kronvi GP float64"], r["BayesianRidge"]
            print(f"| {r['name']} ({r['n']}) | {fmt(k['fit'])} / {fmt(k64['fit'])} | {fmt(k['gp'], 2)} / "
                  f"{fmt(k64['gp'], 2)} | {k64['fit'] / br['fit']:.2f} | {k64['rmse']:.4g} / {k64['nlpd']:.3f} | "
                  f"{k64['nlpd'] - br['nlpd']:+.3f} |")  # fmt: skip

    names = [c for c in args.classifiers.split(",") if c]
    if names:
        print_classifier_table(classifier_rows(names, args.classifier_data_dir, args.repeats))

    if args.synthetic_rows:
        n = args.synthetic_rows
        print(
            f"\n## Synthetic, {n:,} training rows, 4,000 test rows, 11 inputs; {load_average()}\n", flush=True
        )
        rates = gemm_rate()
        first = None
        if not args.no_first_call:
            cmd = [sys.executable, __file__, "--first-call", "synthetic", "--synthetic-rows", str(n)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            first = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else None
        # untimed: the compilations (same chunk, GP and b x b shapes; the default map of n rows)
        warm = pipeline.DirectConfig(feature_map=pipeline.default_feature_map(n))
        run_kronvi(*synthetic(min(n, 20_000)), config=warm)
        k = run_kronvi(*synthetic(n))
        b = 2 * pipeline.default_num_frequencies(n)
        stats_rate = 2 * n * b * b / k["stats"] / 1e9
        gemm = max(rates.values())
        print("measured float32 GEMM rate: " + ", ".join(f"{k_} {v:.0f} GFLOP/s" for k_, v in rates.items()))
        print(f"kronvi end to end (warm): fit {k['fit']:.1f} s (GP {k['gp']:.1f}, statistics and eigenbasis "
              f"{k['stats']:.1f}, CAVI {k['cavi']:.2f}), density of 4,000 test rows {k['density']:.1f} s; "
              f"RMSE {k['rmse']:.4f} (noise sd 0.1), NLPD {k['nlpd']:.3f}")  # fmt: skip
        if first:
            print(f"kronvi first call (fresh process): fit {first['fit']:.1f} s")
        print(f"statistics pass (features, Phi^T Phi, Phi^T y, eigenbasis) as 2 n b^2 flops: {stats_rate:.0f} "
              f"GFLOP/s = {stats_rate / gemm:.0%} of the float32 GEMM rate")  # fmt: skip
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
