r"""Concrete inputs and targets prepared on the host, in float64 NumPy, before any cast to the working dtype.

A column of `1e6 + N(0, 1)` cast to float32 before standardizing loses its spread to float32's spacing
(0.0625 at 1e6), and targets far from zero lose theirs to a float32 offset. So the fit's input standardizer,
its target offset and its target unit are computed here in float64 (no XLA program to compile for each data
shape either), and new inputs are standardized in float64 before the cast.
"""

from __future__ import annotations

import numpy as np

from .data import Standardizer

__all__ = [
    "fit_standardizer_host",
    "standardize_host",
    "target_moments",
    "target_unit",
    "UNIT_RANGE",
]


def fit_standardizer_host(X: np.ndarray) -> Standardizer:
    """`kronvi.inputs.fit_standardizer`'s rule (moments of each column scaled by a power of two, scale 1 for
    constant columns) on float64 NumPy inputs `(n, d)`. Float64 NumPy arrays."""
    X = np.asarray(X, np.float64)
    top = np.max(np.abs(X), axis=0)
    unit = np.ldexp(1.0, np.frexp(np.where(top > 0, top, 1.0))[1])
    Z = X / unit
    mean = Z.mean(axis=0)
    std = np.sqrt(((Z - mean) ** 2).mean(axis=0))
    constant = ~(std > 100 * np.finfo(np.float64).eps * np.abs(mean))
    return Standardizer(mean * unit, np.where(constant, 1.0, std * unit))  # type: ignore[arg-type]  # NumPy fields


def standardize_host(standardizer: Standardizer, X: np.ndarray, dtype, name: str = "X") -> np.ndarray:
    """`(X - mean) / scale` computed in float64, then cast to `dtype`; `ValueError` naming `name` when the
    standardized values overflow `dtype` (inputs far outside the training rows' range)."""
    mean = np.asarray(standardizer.mean, np.float64)
    scale = np.asarray(standardizer.scale, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        Xs = (np.asarray(X, np.float64) - mean) / scale
    if Xs.size and not np.max(np.abs(Xs)) <= np.finfo(dtype).max:
        raise ValueError(
            f"`{name}` holds values too far from the training inputs: standardized, they overflow "
            f"{np.dtype(dtype)}"
        )
    return Xs.astype(dtype)


def target_moments(y: np.ndarray) -> tuple[np.float64, float]:
    r"""`(offset, unit)` of float64 targets: their mean, and the unit of the fit (`target_unit` of their standard
    deviation). Dividing by a power of two rounds nothing, so a fit to `(y - offset) / unit` is the fit to
    `y - offset` in other units, and its statistics cannot overflow whatever the units of `y`."""
    y = np.asarray(y, np.float64)
    offset = np.mean(y)
    top = float(np.max(np.abs(y - offset))) if y.size else 0.0
    box = np.ldexp(1.0, np.frexp(top)[1]) if top > 0 else 1.0  # no square overflows
    sd = float(np.std((y - offset) / box)) * box
    return np.float64(offset), target_unit(sd, offset)


UNIT_RANGE = (2.0**-16, 2.0**16)  # targets whose spread lies here are fitted in their own units


def target_unit(sd: float, offset: float) -> float:
    r"""The unit targets are fitted in: 1 when their spread $s = \max(\text{sd}, 10^{-12}|\text{offset}|)$
    (below $10^{-12}|\text{offset}|$ the spread is the rounding of a constant) lies in `UNIT_RANGE`, so
    that ordinary targets are fitted in their own units; else the power of two nearest $s$ (1 when $s$ is 0 or
    not finite)."""
    spread = max(float(sd), 1e-12 * abs(float(offset)))
    if not (spread > 0 and np.isfinite(spread)) or UNIT_RANGE[0] <= spread <= UNIT_RANGE[1]:
        return 1.0
    return float(np.ldexp(1.0, int(np.round(np.log2(spread)))))
