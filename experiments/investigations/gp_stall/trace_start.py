"""Iteration by iteration, the GP's first (data-driven) start on all rows of a dataset's fold 0 (at most
1000): the gain in nats, the gradient norm, and the zoom line search's steps and errors, with
`optax.lbfgs` as `minimize_lbfgs` drives it, until the old stall rule (no gain beyond 10 eps |loss|)
ends it (docs/notes/2026-11-27-gp-stall.md).

Usage: python experiments/investigations/gp_stall/trace_start.py --datasets energy,kin40k
"""

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

from kronvi._inputs import gp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "benchmarks"))
from bench_vs_peers import DATA, load  # noqa: E402


def trace(X, y):
    m = X.shape[0]
    start = jax.tree.map(lambda a: a[0], gp._default_starts(4, X.shape[1], jnp.var(y), jnp.float32))
    bounds = gp._bounds(X, y, 1e-4 * jnp.var(y))[0]
    loss = jax.jit(lambda u: -gp._lml(gp._unpack(u, bounds), X, y) / m)
    opt = optax.lbfgs()
    update = jax.jit(lambda g, st, u, v: opt.update(g, st, u, value=v, grad=g, value_fn=loss))
    u = gp._pack(start, bounds)
    state = opt.init(u)
    value, grad = jax.value_and_grad(loss)(u)
    evaluations = 1
    for it in range(200):
        step, state = update(grad, state, u, value)
        u = optax.apply_updates(u, step)
        new, grad = optax.tree.get(state, "value"), optax.tree.get(state, "grad")
        steps = int(optax.tree.get(state, "num_linesearch_steps"))
        evaluations += steps
        errors = (
            float(optax.tree.get(state, "decrease_error")),
            float(optax.tree.get(state, "curvature_error")),
        )
        print(f"  {it:3d} log ML {-float(new) * m:10.3f} gain {float(value - new) * m:8.3f} "
              f"|g| {float(optax.tree.norm(grad)):.1e} search steps {steps:2d} "
              f"errors (decrease, curvature) {errors[0]:.1e} {errors[1]:.1e}", flush=True)  # fmt: skip
        if not float(value - new) > 10 * np.finfo(np.float32).eps * max(1.0, abs(float(new))):
            break
        value = new
    print(f"  stalled after {it + 1} iterations, {evaluations} evaluations")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="energy")
    args = ap.parse_args(argv)
    for name in args.datasets.split(","):
        Xtr, ytr, _, _ = load(name, str(DATA))
        X, y = (Xtr - Xtr.mean(0)) / Xtr.std(0), ytr - ytr.mean()
        if len(X) > 1000:
            idx = np.random.default_rng(0).choice(len(X), 1000, replace=False)
            X, y = X[idx], y[idx]
        print(f"{name}: {len(X)} rows")
        trace(jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32))


if __name__ == "__main__":
    main()
