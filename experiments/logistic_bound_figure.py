"""The DIRECT paper's Figure 2 redrawn, and the expected-log-likelihood bounds against the exact value.

Left: the exact log-likelihood of one row, log sigmoid(x) as a function of the margin x = s z (s = 2y - 1), and
the paper's two first-order expansions (appendix B): -exp(-x) (the one Theorem 2 uses, tight for correctly
classified rows, x > 0) and x - exp(x) (tight for x < 0). Both lie below the exact curve everywhere.

Right: the expectation under a discrete q. One weight on the 15 levels of kronvi.model.gaussian_prior(1, 2,
width=3) (-6 to 6), one row with Phi = 1 and y = 1, so the margin is x = w, and q the discretized N(mu, 1) on
those levels for mu on the x axis; the exact E_q log sigmoid(x) by enumeration against kronvi.logistic.logistic_loglik_bound with bound "theorem2",
"jensen" and "tilted".

Usage:
  python experiments/logistic_bound_figure.py --out experiments/results/classification_figure2.png
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import kronvi
import kronvi.logistic as kl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/results/classification_figure2.png")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jax.config.update("jax_enable_x64", True)
    x = np.linspace(-4, 4, 401)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    ax.plot(x, -np.logaddexp(0, -x), "k", lw=2, label=r"exact $\log\sigma(x)$")
    ax.plot(x, -np.exp(-x), "C0--", label=r"$-e^{-x}$ (Theorem 2)")
    ax.plot(x, x - np.exp(x), "C1--", label=r"$x - e^{x}$ (other expansion)")
    ax.set_ylim(-6, 0.5)
    ax.set_xlabel(r"margin $x = s\,\Phi w$")
    ax.set_title("Figure 2 redrawn: first-order expansions")
    ax.legend(loc="lower right")

    prior = kronvi.model.gaussian_prior(1, 2.0, levels=15, width=3.0, dtype=jnp.float64)
    grid = np.asarray(prior.values[0])
    mus = np.linspace(-4, 4, 81)
    Phi, y = jnp.ones((1, 1)), jnp.ones(1)
    rows = {b: [] for b in ("exact",) + kl.BOUNDS}
    for mu in mus:
        logits = jnp.asarray(-0.5 * (grid - mu) ** 2)[None]
        q = kronvi.model.MeanField(logits)
        p = np.asarray(q.probs[0])
        rows["exact"].append(float(np.sum(p * -np.logaddexp(0, -grid))))
        for b in kl.BOUNDS:
            rows[b].append(float(kl.logistic_loglik_bound(Phi, y, q, prior, bound=b)))
    ax = axes[1]
    ax.plot(mus, rows["exact"], "k", lw=2, label=r"exact $E_q\log\sigma(x)$")
    styles = {"theorem2": "C0--", "jensen": "C2-.", "tilted": "C3:"}
    for b in kl.BOUNDS:
        ax.plot(mus, rows[b], styles[b], lw=1.8, label=f'bound="{b}"')
    ax.set_ylim(-8, 0.5)
    ax.set_xlabel(r"mean margin $\mu$ (q = discretized $N(\mu, 1)$ on 15 levels)")
    ax.set_title("Expected log-likelihood: bounds vs exact")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    gaps = {b: np.array(rows["exact"]) - np.array(rows[b]) for b in kl.BOUNDS}
    for mu_show in (-3.0, -1.0, 0.0, 1.0, 3.0):
        i = int(np.argmin(np.abs(mus - mu_show)))
        print(
            f"mu={mus[i]:+.1f}  exact {rows['exact'][i]:.4f}  gaps: "
            + "  ".join(f"{b} {gaps[b][i]:.4f}" for b in kl.BOUNDS)
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
