"""Cost of the exact quadratic-network ELBO and its gradient against width and depth (issue 16).

Prints the median time of one jitted ELBO + gradient (over all P x m logits) from the statistics,
which never touch the data, next to the paper's operation count O(l m (b/l)^(4l)) for b = P weights
spread over l = max(1, L) hidden layers (Evans & Nair 2018, section 3.2 and appendix D). One hidden
layer uses the closed form (O(h d^4 + P m)); deeper networks the monomial expansion (O(T^2 P) for T
monomials of the output). The width sweep also times the expansion at small widths for comparison.

  python benchmarks/bench_bnn.py > benchmarks/results/bench_bnn_cpu.txt
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pathlib  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import kronvi  # noqa: E402
from kronvi import bnn  # noqa: E402
from kronvi.bnn._elbo import general_fit_terms, monomial_expansion  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import median_seconds as _median_seconds  # noqa: E402

M = 15  # grid levels
REPEATS = 30


def median_seconds(fn, *args):
    return _median_seconds(fn, *args, repeats=REPEATS)


def setup(sizes, n=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, sizes[0]))
    X[:, -1] = 1.0
    y = rng.normal(size=n)
    stats = bnn.bnn_stats(jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32), sizes)
    P = bnn.num_weights(sizes)
    pw = kronvi.model.gaussian_prior(P, 0.3, levels=M, dtype=jnp.float32)
    pn = kronvi.model.noise_prior(jnp.float32(0.1), levels=M)
    q, qn = bnn.bnn_init(jax.random.key(seed), pw, pn)
    return stats, pw, pn, q, qn


def elbo_grad(stats, pw, pn, qn):
    return jax.jit(
        jax.value_and_grad(lambda lw: bnn.bnn_elbo(stats, kronvi.model.MeanField._unchecked(lw), qn, pw, pn))
    )


def expansion_grad(stats, pw, sizes):
    def f(lw):
        sy, sff = general_fit_terms(jax.nn.softmax(lw, -1), pw.values, stats.yz, stats.zz, sizes)
        return sff - 2 * sy

    return jax.jit(jax.value_and_grad(f))


def paper_count(P, L):
    ell = max(1, L)
    return ell * M * (P / ell) ** (4 * ell)


def main():
    print(
        f"# bench_bnn: exact quadratic-network ELBO + gradient, float32, m = {M} levels, median of {REPEATS}"
    )
    print(f"# jax {jax.__version__}, {jax.devices()[0].platform}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores (shared)")  # fmt: skip
    print("\n## Width: one hidden layer, d = 8 inputs (7 + constant), layer_sizes (8, h, 1)")
    print(
        f"{'h':>4} {'P':>5} {'closed form ms':>15} {'expansion ms':>13} {'T monomials':>12} {'paper l*m*b^4':>14}"
    )
    for h in (5, 10, 20, 30, 50):
        sizes = (8, h, 1)
        stats, pw, pn, q, qn = setup(sizes)
        P = bnn.num_weights(sizes)
        t = median_seconds(elbo_grad(stats, pw, pn, qn), q.logits)
        if h <= 10:
            T = monomial_expansion(sizes)[0].shape[0]
            te = f"{1e3 * median_seconds(expansion_grad(stats, pw, sizes), q.logits):13.3f}"
        else:
            T, te = "-", f"{'-':>13}"
        print(f"{h:>4} {P:>5} {1e3 * t:15.3f} {te} {T!s:>12} {paper_count(P, 1):14.3g}", flush=True)
    print(
        "\n## Depth: width 2, d = 2 inputs (1 + constant), monomial expansion (expected fit terms + gradient);"
    )
    print("## L = 0 is linear regression")
    print(
        f"{'layer_sizes':>16} {'L':>2} {'P':>3} {'T monomials':>12} {'stats D':>8} {'ms':>10} {'paper':>10}"
    )
    for sizes in ((2, 1), (2, 2, 1), (2, 2, 2, 1), (2, 2, 2, 2, 1)):
        L = len(sizes) - 2
        stats, pw, pn, q, qn = setup(sizes)
        P = bnn.num_weights(sizes)
        T = monomial_expansion(sizes)[0].shape[0]
        t = median_seconds(expansion_grad(stats, pw, sizes), q.logits)  # the any-depth path at every depth
        print(f"{sizes!s:>16} {L:>2} {P:>3} {T:>12} {stats.yz.shape[0]:>8} {1e3 * t:10.3f} {paper_count(P, L):10.3g}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
