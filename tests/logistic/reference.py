"""Brute-force references for DIRECT logistic regression: enumeration of every weight configuration."""

import itertools

import numpy as np
from scipy.special import expit


def configurations(probs, values):
    """Yields (probability, w) for every one of the m**b configurations (float64 NumPy)."""
    probs, values = np.asarray(probs, np.float64), np.asarray(values, np.float64)
    b, m = probs.shape
    for ks in itertools.product(range(m), repeat=b):
        idx = (np.arange(b), np.array(ks))
        yield np.prod(probs[idx]), values[idx]


def expected_loglik(probs, values, Phi, y):
    """Exact sum_i E_q log p(y_i | w), P(y=1|w) = sigmoid(Phi w)."""
    Phi, y = np.asarray(Phi, np.float64), np.asarray(y, np.float64)
    total = 0.0
    for p, w in configurations(probs, values):
        z = Phi @ w
        total += p * np.sum(y * z - np.logaddexp(0.0, z))
    return total


def predictive(probs, values, Phi):
    """Exact E_q sigmoid(Phi w), (N,): all configurations at once, a sigmoid that cannot overflow."""
    probs, values, Phi = (np.asarray(a, np.float64) for a in (probs, values, Phi))
    b, m = probs.shape
    idx = np.array(list(itertools.product(range(m), repeat=b))).reshape(-1, b)  # (C, b)
    rows = np.arange(b)
    weight = np.prod(probs[rows, idx], axis=1)  # (C,)
    return expit(Phi @ values[rows, idx].T) @ weight
