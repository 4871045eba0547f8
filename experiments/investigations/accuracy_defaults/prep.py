"""Fold-0 features for issue 19, following the README recipe exactly (float32 GP init, key(0) GP,
key(1) RFF, 1000 frequencies -> b = 2000), cached as float64 statistics + test features.

usage: python prep.py DATASET [DATASET ...]
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import kronvi

DATA = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "shared", "data", "uci"
)
OUT = os.environ.get("KRONVI_ACCURACY_CACHE", "/tmp/kronvi_accuracy_cache")


def prep(name, fold=0, num_freq=1000):
    X, y, mask = kronvi.load_uci(os.path.join(DATA, name))
    te = mask[:, fold].astype(bool)
    Xtr, ytr, Xte, yte = X[~te], y[~te], X[te], y[te]
    t0 = time.perf_counter()
    std = kronvi.fit_standardizer(jnp.asarray(Xtr, jnp.float32))
    Xs = kronvi.standardize(std, jnp.asarray(Xtr, jnp.float32))
    Xts = kronvi.standardize(std, jnp.asarray(Xte, jnp.float32))
    y_off = float(np.mean(ytr))
    yc = ytr - y_off
    hyper, info = kronvi.fit_gp_hyperparameters(jax.random.key(0), Xs, jnp.asarray(yc, jnp.float32))
    feats = kronvi.rff_init(jax.random.key(1), hyper.lengthscales, num_freq)
    t_gp = time.perf_counter() - t0
    W = np.asarray(feats.frequencies, np.float64)

    def phi(Xs_):
        Z = np.asarray(Xs_, np.float64) @ W
        return np.concatenate([np.cos(Z), np.sin(Z)], 1) / np.sqrt(num_freq)

    Ptr = phi(Xs)
    PtP = Ptr.T @ Ptr
    Pty = Ptr.T @ yc
    np.savez(
        os.path.join(OUT, f"{name}_f{fold}.npz"),
        n=len(yc),
        yty=float(yc @ yc),
        Phity=Pty,
        PhitPhi=PtP,
        Phi_te=phi(Xts),
        y_te=yte - y_off,
        signal_variance=float(hyper.signal_variance),
        noise_variance=float(hyper.noise_variance),
        lengthscales=np.asarray(hyper.lengthscales),
        gp_degenerate=bool(info.degenerate),
        gp_seconds=t_gp,
        y_std=float(np.std(ytr)),
    )
    print(
        f"{name}: n_tr={len(yc)} n_te={te.sum()} s2_f={float(hyper.signal_variance):.4g} "
        f"s2_n={float(hyper.noise_variance):.4g} gp {t_gp:.1f}s total {time.perf_counter() - t0:.1f}s",
        flush=True,
    )


if __name__ == "__main__":
    for name in sys.argv[1:]:
        prep(name)
