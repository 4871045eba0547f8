"""Quantized inference: sampling codes, bit packing, float and integer prediction from packed samples.

Every result is checked against a brute-force reference: empirical frequencies against the probability
vector, packing against a bit-by-bit Python packer, predictions against ``Phi @ values[codes].T`` in NumPy
float64, the integer path against its stated error bound and against a NumPy int64 re-implementation.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kronvi
from kronvi.quantize import _codes


@pytest.fixture(params=["float32", "float64"])
def precision(request):
    """Runs a test with x64 off (float32) and on (float64)."""
    x64 = request.param == "float64"
    with jax.enable_x64(x64):
        yield np.float64 if x64 else np.float32


def eps(dtype):
    return float(np.finfo(dtype).eps)


def rounding_slack(dtype, Phi, W, stepd):
    """Floating-point slack of the integer path: 64 eps sum_j |Phi_ij| (|w_sj| + |step_j d_sj|)."""
    return 64 * eps(dtype) * (np.abs(Phi) @ (np.abs(W) + np.abs(stepd)).T)


def affine_prior(rng, b, m, dtype, *, zero=True):
    """Evenly spaced grids with a different step and zero level per weight (base 0 unless ``zero=False``)."""
    step = rng.uniform(0.05, 2.0, size=b) * rng.choice([-1.0, 1.0], size=b)
    z = rng.integers(0, m, size=b)
    base = np.zeros(b) if zero else rng.normal(size=b)
    values = base[:, None] + step[:, None] * (np.arange(m)[None, :] - z[:, None])
    return kronvi.model.DiscretePrior(values.astype(dtype), rng.normal(size=(b, m)).astype(dtype))


# ----------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------


def test_sample_frequencies_match_mean_field(precision):
    rng = np.random.default_rng(0)
    b, m, S = 4, 5, 40_000
    logits = rng.normal(size=(b, m)) * 1.5
    q = kronvi.model.MeanField(logits.astype(precision))
    codes = kronvi.quantize.sample_codes(jax.random.key(1), q, S)
    assert codes.shape == (S, b) and codes.dtype == jnp.uint8
    freq = np.stack([np.bincount(np.asarray(codes[:, j]), minlength=m) for j in range(b)]) / S
    p = np.asarray(q.probs, np.float64)
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / S) + 1e-12)
    # Deterministic in the key, and weights drawn independently: pairwise joint = product of marginals.
    assert np.array_equal(codes, kronvi.quantize.sample_codes(jax.random.key(1), q, S))
    joint = (
        np.histogram2d(np.asarray(codes[:, 0]), np.asarray(codes[:, 1]), bins=[np.arange(m + 1)] * 2)[0] / S
    )
    outer = np.outer(p[0], p[1])
    assert np.all(np.abs(joint - outer) <= 5 * np.sqrt(outer * (1 - outer) / S) + 1e-12)


def test_sample_frequencies_match_mixture(precision):
    Mixture = kronvi.mixtures.Mixture
    rng = np.random.default_rng(1)
    r, b, m, S = 3, 2, 3, 20_000
    q = Mixture(rng.normal(size=(r, b, m)) * 2, rng.normal(size=r))
    codes = np.asarray(kronvi.quantize.sample_codes(jax.random.key(2), q, S))
    assert codes.shape == (S, b) and codes.dtype == np.uint8
    # Dense joint law sum_k alpha_k q_k1 (x) q_k2 over the m**2 configurations (correlated across weights).
    probs, alpha = np.asarray(q.probs, np.float64), np.asarray(q.weights, np.float64)
    dense = sum(alpha[k] * np.kron(probs[k, 0], probs[k, 1]) for k in range(r))
    freq = np.bincount(codes[:, 0].astype(int) * m + codes[:, 1], minlength=m * m) / S
    assert np.all(np.abs(freq - dense) <= 5 * np.sqrt(dense * (1 - dense) / S) + 1e-12)


def test_sample_codes_errors():
    q = kronvi.model.MeanField(jnp.zeros((2, 3)))
    with pytest.raises(TypeError, match="`q` must be a variational family"):
        kronvi.quantize.sample_codes(jax.random.key(0), jnp.zeros((2, 3)), 5)
    for bad in (0, 2.5, 3.0, True, "3"):  # one integer rule everywhere (kronvi._base.checks.check_int)
        with pytest.raises(ValueError, match="`num_samples` must be an int >= 1"):
            kronvi.quantize.sample_codes(jax.random.key(0), q, bad)
    assert kronvi.quantize.sample_codes(jax.random.key(0), q, np.int64(2)).shape == (2, 2)
    with pytest.raises(ValueError, match="m <= 256"):
        kronvi.quantize.sample_codes(jax.random.key(0), kronvi.model.MeanField(jnp.zeros((1, 257))), 2)


# ----------------------------------------------------------------------------------------------------
# Packing
# ----------------------------------------------------------------------------------------------------


def reference_pack(codes, bits):
    """Bit-by-bit packer: code j of a row at bit offset bits * j of the row's little-endian bit string."""
    S, b = codes.shape
    width = -(-b * bits // 8)
    out = np.zeros((S, width), np.uint8)
    for s in range(S):
        for j in range(b):
            for t in range(bits):
                if (int(codes[s, j]) >> t) & 1:
                    pos = j * bits + t
                    out[s, pos // 8] |= 1 << (pos % 8)
    return out


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 3, 8, 13])
def test_pack_unpack_round_trip(bits, b):
    rng = np.random.default_rng(bits * 100 + b)
    codes = rng.integers(0, 2**bits, size=(5, b)).astype(np.uint8)
    packed = kronvi.quantize.pack_codes(codes, bits=bits)
    assert packed.dtype == jnp.uint8 and packed.shape == (5, -(-b * bits // 8))
    np.testing.assert_array_equal(packed, reference_pack(codes, bits))
    back = kronvi.quantize.unpack_codes(packed, b, bits=bits)
    assert back.dtype == jnp.uint8
    np.testing.assert_array_equal(back, codes)
    # Any integer dtype, leading batch axes, and under jit.
    np.testing.assert_array_equal(kronvi.quantize.pack_codes(codes.astype(np.int32), bits=bits), packed)
    batched = np.stack([codes, codes[::-1]])
    np.testing.assert_array_equal(
        kronvi.quantize.unpack_codes(kronvi.quantize.pack_codes(batched, bits=bits), b, bits=bits), batched
    )
    jitted = jax.jit(
        lambda c: kronvi.quantize.unpack_codes(kronvi.quantize.pack_codes(c, bits=bits), b, bits=bits)
    )
    np.testing.assert_array_equal(jitted(jnp.asarray(codes)), codes)


def test_pack_two_codes_per_byte_at_4_bits():
    codes = np.array([[3, 12, 7]])
    assert kronvi.quantize.pack_codes(codes).tolist() == [[3 | (12 << 4), 7]]


def test_pack_unpack_errors():
    with pytest.raises(ValueError, match=r"`codes` must lie in \[0, 15\]"):
        kronvi.quantize.pack_codes(np.array([[16]]))
    with pytest.raises(ValueError, match=r"`codes` must lie in \[0, 3\]"):
        kronvi.quantize.pack_codes(np.array([[-1, 2]]), bits=2)
    with pytest.raises(TypeError, match="`codes` must be an integer array"):
        kronvi.quantize.pack_codes(np.array([[1.0]]))
    for bad in (3, 16, True, 4.0):
        with pytest.raises(ValueError, match="`bits` must be one of"):
            kronvi.quantize.pack_codes(np.array([[1]]), bits=bad)
    with pytest.raises(ValueError, match="num_weights >= 1"):
        kronvi.quantize.pack_codes(np.zeros((2, 0), int))
    with pytest.raises(ValueError, match="`packed` has 2 bytes per row but 5 codes of 4 bits need 3"):
        kronvi.quantize.unpack_codes(np.zeros((1, 2), np.uint8), 5)
    with pytest.raises(TypeError, match="`packed` must be a uint8 array"):
        kronvi.quantize.unpack_codes(np.zeros((1, 3), np.int32), 5)


# ----------------------------------------------------------------------------------------------------
# Float prediction
# ----------------------------------------------------------------------------------------------------


def dense_reference(Phi, prior, codes):
    values = np.asarray(prior.values, np.float64)
    W = values[np.arange(values.shape[0])[None, :], np.asarray(codes, int)]  # (S, b)
    return np.asarray(Phi, np.float64) @ W.T, W


@pytest.mark.parametrize("bits,m", [(4, 15), (2, 3), (8, 40), (1, 2)])
def test_float_prediction_is_phi_times_gathered_values(precision, bits, m):
    rng = np.random.default_rng(bits)
    b, S, N = 37, 6, 11
    prior = kronvi.model.DiscretePrior(rng.normal(size=(b, m)).astype(precision), np.zeros((b, m), precision))
    codes = rng.integers(0, m, size=(S, b))
    Phi = rng.normal(size=(N, b)).astype(precision)
    packed = kronvi.quantize.pack_codes(codes, bits=bits)
    pred = kronvi.quantize.predict_from_codes(packed, prior, Phi)
    ref, _ = dense_reference(Phi, prior, codes)
    assert pred.shape == (N, S) and pred.dtype == precision
    np.testing.assert_allclose(pred, ref, rtol=0, atol=8 * b * eps(precision) * np.abs(ref).max())
    np.testing.assert_array_equal(pred, kronvi.quantize.predict_from_codes(packed, prior, Phi, bits=bits))
    jitted = jax.jit(lambda p, P: kronvi.quantize.predict_from_codes(p, prior, P))
    np.testing.assert_allclose(jitted(packed, Phi), pred, rtol=1e-6 if precision == np.float32 else 1e-13)


def test_sample_mean_converges_to_exact_predictive_mean():
    rng = np.random.default_rng(3)
    b, N, S = 20, 7, 4_000
    prior = kronvi.model.gaussian_prior(b, 0.7)
    q = kronvi.model.MeanField(rng.normal(size=(b, 15)) * 2)
    Phi = rng.normal(size=(N, b)).astype(np.float32)
    packed = kronvi.quantize.pack_codes(kronvi.quantize.sample_codes(jax.random.key(0), q, S))
    preds = kronvi.quantize.predict_from_codes(packed, prior, Phi)
    pn = kronvi.model.noise_prior(1.0, levels=3)
    mean, _ = kronvi.model.predict_regression(q, kronvi.model.MeanField.from_prior(pn), prior, pn, Phi)
    p, v = np.asarray(q.probs, np.float64), np.asarray(prior.values, np.float64)
    var_w = (p * v**2).sum(1) - (p * v).sum(1) ** 2
    se = np.sqrt(Phi.astype(np.float64) ** 2 @ var_w / S)
    assert np.all(np.abs(np.asarray(preds).mean(1) - np.asarray(mean)) <= 5 * se)


def test_float_prediction_errors():
    prior = kronvi.model.gaussian_prior(5, 1.0)
    packed = kronvi.quantize.pack_codes(np.zeros((2, 5), int))
    Phi = np.zeros((3, 5))
    with pytest.raises(TypeError, match="`prior_w` must be a DiscretePrior"):
        kronvi.quantize.predict_from_codes(packed, np.zeros((5, 15)), Phi)
    with pytest.raises(ValueError, match="`Phi_new` has 4 features but the model has 5 weights"):
        kronvi.quantize.predict_from_codes(packed, prior, np.zeros((3, 4)))
    with pytest.raises(ValueError, match="`Phi_new` contains 3 NaN"):
        kronvi.quantize.predict_from_codes(packed, prior, np.where(np.eye(3, 5) > 0, np.nan, 0.0))
    with pytest.raises(TypeError, match="`packed` must be a uint8 array"):
        kronvi.quantize.predict_from_codes(np.zeros((2, 3), np.int8), prior, Phi)
    with pytest.raises(ValueError, match="matches no bit width"):
        kronvi.quantize.predict_from_codes(np.zeros((2, 4), np.uint8), prior, Phi)
    small = kronvi.model.gaussian_prior(5, 1.0, levels=3)
    with pytest.raises(ValueError, match="holds code 14 but `prior_w` has only 3 levels"):
        kronvi.quantize.predict_from_codes(kronvi.quantize.pack_codes(np.full((1, 5), 14)), small, Phi)
    with pytest.raises(ValueError, match="ambiguous"):  # 2 weights with 3 levels: 2 or 4 bits, both 1 byte
        kronvi.quantize.predict_from_codes(
            np.zeros((1, 1), np.uint8), kronvi.model.gaussian_prior(2, 1.0, levels=3), Phi[:, :2]
        )
    with pytest.raises(ValueError, match="cannot hold the 15 grid levels"):
        kronvi.quantize.predict_from_codes(packed, prior, Phi, bits=2)


# ----------------------------------------------------------------------------------------------------
# Integer prediction
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("zero", [True, False])
def test_integer_prediction_within_bound(precision, zero):
    rng = np.random.default_rng(4 + zero)
    b, m, S, N = 60, 15, 9, 25
    prior = affine_prior(rng, b, m, precision, zero=zero)
    zero_level = np.argmin(np.abs(np.asarray(prior.values, np.float64)), axis=1)
    codes = np.where(rng.random((S, b)) < 0.5, zero_level[None, :], rng.integers(0, m, size=(S, b)))
    Phi = (rng.normal(size=(N, b)) * rng.uniform(0.1, 3.0, size=(N, 1))).astype(precision)
    packed = kronvi.quantize.pack_codes(codes)
    isamp = kronvi.quantize.integer_samples(packed, prior)
    pred = kronvi.quantize.predict_integer(isamp, Phi)
    assert pred.shape == (N, S) and pred.dtype == precision
    np.testing.assert_array_equal(pred, kronvi.quantize.predict_from_codes(packed, prior, Phi, integer=True))
    ref, W = dense_reference(Phi, prior, codes)
    bound = np.asarray(kronvi.quantize.integer_error_bound(isamp, Phi), np.float64)
    values = np.asarray(prior.values, np.float64)
    step = (values[:, -1] - values[:, 0]) / (m - 1)
    stepd = (codes - zero_level) * step[None, :]
    err = np.abs(np.asarray(pred, np.float64) - ref)
    assert np.all(err <= bound + rounding_slack(precision, Phi, W, stepd))
    # The bound is the quantization error, not a vacuous number: int8 errors are ~1/255 of the range.
    assert err.max() > 1e-3 * bound.max()
    amax = np.max(np.abs(Phi * step[None, :]), axis=1)  # max_j |A_ij|
    l1 = np.abs(codes - zero_level).sum(1)
    assert np.all(
        bound <= (amax[:, None] * l1[None, :] / 255) * (1 + 1e-5) + 1e-5 * np.abs(Phi).sum(1)[:, None]
    )


def test_integer_path_is_the_stated_int8_formula():
    """predict_integer == NumPy int64 evaluation of the affine-quantized formula (exact int32 sums)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(5)
        b, m, S, N = 300, 15, 12, 1100  # N > 512: blocked kernel, last block overlapping
        prior = affine_prior(rng, b, m, np.float64, zero=False)
        codes = rng.integers(0, m, size=(S, b))
        Phi = rng.normal(size=(N, b)) * 10
        isamp = kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(codes), prior, prune=False)
        values = np.asarray(prior.values)
        z = np.argmin(np.abs(values), axis=1)
        step = (values[:, -1] - values[:, 0]) / (m - 1)
        base = values[np.arange(b), z]
        A = Phi * step
        lo, hi = np.minimum(A.min(1), 0), np.maximum(A.max(1), 0)
        s = (hi - lo) / 255
        zp = np.round(-128 - lo / s)
        q = np.clip(np.round(A / s[:, None]) + zp[:, None], -128, 127).astype(np.int64)
        d = (codes - z).astype(np.int64)
        acc = q @ d.T - zp[:, None].astype(np.int64) * d.sum(1)[None, :]
        assert np.abs(q).max() == 128 or np.abs(q).max() == 127  # the full int8 range is used
        ref = s[:, None] * acc + (Phi @ base)[:, None]
        np.testing.assert_allclose(kronvi.quantize.predict_integer(isamp, Phi), ref, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize(
    "N, k, S, ddtype", [(20, 50, 8, np.int8), (37, 300, 5, np.int8), (3, 1, 1, np.int8), (9, 70, 4, np.int16)]
)
def test_both_integer_kernels_are_exact(N, k, S, ddtype):
    """Each kernel on the backend that runs it, against NumPy int64: the CPU kernel (int8 or int16
    operands, int32 sums) on the CPU, the kernel of every other backend (operands widened to int32) on the
    default backend. (20, 50, 8) is the shape whose int8 product XLA got wrong on an H100 (jax 0.11.2:
    every sum doubled), which is why the CPU kernel runs on CPUs only."""
    rng = np.random.default_rng(N * k * S)
    dmax = 7 if ddtype == np.int8 else 199
    q = rng.integers(-128, 128, size=(N, k)).astype(np.int8)
    d = rng.integers(-dmax, dmax + 1, size=(S, k)).astype(ddtype)
    ref = q.astype(np.int64) @ d.astype(np.int64).T
    cpu, default = jax.devices("cpu")[0], jax.devices()[0]
    for kernel, device in ((_codes._int_products_narrow, cpu), (_codes._int_products_int32, default)):
        out = jax.jit(kernel)(jax.device_put(q, device), jax.device_put(d, device))
        assert out.dtype == jnp.int32
        np.testing.assert_array_equal(np.asarray(out, np.int64), ref)


@pytest.mark.parametrize(
    "platform, operands", [("cpu", "i8"), ("cuda", "i32"), ("rocm", "i32"), ("tpu", "i32")]
)
def test_integer_kernel_widens_to_int32_off_cpu(platform, operands):
    """The compiled integer product per backend (lowered here, on CPU): int8 operands on CPU only."""
    Phi, step = jnp.ones((20, 50), jnp.float32), jnp.ones(50, jnp.float32)
    deltas = jnp.ones((8, 50), jnp.int8)
    text = _codes._predict_kept.trace(Phi, step, deltas).lower(lowering_platforms=(platform,)).as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert len(dots) == 1, dots
    assert f"tensor<20x50x{operands}>, tensor<8x50x{operands}>" in dots[0], dots[0]


def test_pruning_changes_speed_not_results():
    rng = np.random.default_rng(6)
    b, m, S, N = 80, 15, 10, 12
    prior = kronvi.model.gaussian_prior(b, 0.5)
    codes = np.full((S, b), 7)
    live = rng.random(b) < 0.25  # 75% of weights are zero in every sample
    codes[:, live] = rng.integers(0, m, size=(S, int(live.sum())))
    Phi = rng.normal(size=(N, b)).astype(np.float32)
    packed = kronvi.quantize.pack_codes(codes)
    pruned, full = (
        kronvi.quantize.integer_samples(packed, prior),
        kronvi.quantize.integer_samples(packed, prior, prune=False),
    )
    assert full.deltas.shape == (S, b) and pruned.deltas.shape[1] == int((codes != 7).any(0).sum())
    assert pruned.deltas.dtype == jnp.int8 and pruned.base.shape == (0,)  # 0 is a level: no float offset
    np.testing.assert_array_equal(
        kronvi.quantize.predict_integer(pruned, Phi), kronvi.quantize.predict_integer(full, Phi)
    )
    # Features of the kept weights only (a deployment computes just those): same predictions.
    kept = Phi[:, np.asarray(pruned.index)]
    np.testing.assert_array_equal(
        kronvi.quantize.predict_integer(pruned, kept), kronvi.quantize.predict_integer(full, Phi)
    )
    np.testing.assert_array_equal(
        kronvi.quantize.integer_error_bound(pruned, Phi), kronvi.quantize.integer_error_bound(full, Phi)
    )
    # All weights at zero: predictions are exactly zero, nothing is kept.
    none = kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(np.full((S, b), 7)), prior)
    assert none.index.shape == (0,)
    np.testing.assert_array_equal(kronvi.quantize.predict_integer(none, Phi), np.zeros((N, S)))


def test_integer_path_jit_and_wide_grids():
    rng = np.random.default_rng(7)
    b, m, S, N = 30, 200, 4, 6  # m > 128: int16 offsets, 8-bit codes
    prior = affine_prior(rng, b, m, np.float32)
    codes = rng.integers(0, m, size=(S, b))
    Phi = rng.normal(size=(N, b)).astype(np.float32)
    isamp = kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(codes, bits=8), prior)
    assert isamp.deltas.dtype == jnp.int16
    pred = jax.jit(kronvi.quantize.predict_integer)(isamp, Phi)
    ref, W = dense_reference(Phi, prior, codes)
    stepd = (codes - np.argmin(np.abs(np.asarray(prior.values)), 1)) * np.asarray(isamp.step)[None]
    slack = rounding_slack(np.float32, Phi, W, stepd)
    assert np.all(
        np.abs(np.asarray(pred) - ref) <= np.asarray(kronvi.quantize.integer_error_bound(isamp, Phi)) + slack
    )


def test_integer_path_errors():
    rng = np.random.default_rng(8)
    values = np.sort(rng.normal(size=(4, 15)), axis=1)
    uneven = kronvi.model.DiscretePrior(values, np.zeros((4, 15)))
    packed = kronvi.quantize.pack_codes(np.zeros((2, 4), int))
    with pytest.raises(ValueError, match="not evenly spaced.*use integer=False"):
        kronvi.quantize.predict_from_codes(packed, uneven, np.zeros((3, 4)), integer=True)
    kronvi.quantize.predict_from_codes(packed, uneven, np.zeros((3, 4)))  # the float path takes any grid
    b = 34_000  # 255 * 255 * b >= 2**31: the int32 accumulator could overflow
    wide = kronvi.model.DiscretePrior(
        np.tile(np.arange(256.0, dtype=np.float32) - 255, (b, 1)), np.zeros((b, 256), np.float32)
    )
    codes = np.zeros((1, b), int)  # zero level 255: offsets of -255
    with pytest.raises(ValueError, match="overflow int32"):
        kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(codes, bits=8), wide)
    isamp = kronvi.quantize.integer_samples(packed, kronvi.model.gaussian_prior(4, 1.0))
    with pytest.raises(ValueError, match="`Phi_new` has 3 features but the model has 4 weights"):
        kronvi.quantize.predict_integer(isamp, np.zeros((2, 3)))
    grid = kronvi.model.DiscretePrior(
        np.tile(np.arange(15.0) + 0.5, (4, 1)), np.zeros((4, 15))
    )  # no zero level
    shifted = kronvi.quantize.integer_samples(kronvi.quantize.pack_codes(np.array([[1, 1, 0, 0]])), grid)
    assert shifted.index.tolist() == [0, 1] and shifted.base.shape == (4,)
    with pytest.raises(ValueError, match="must have all b features: some grids have a nonzero zero level"):
        kronvi.quantize.predict_integer(shifted, np.zeros((2, 2)))
    with pytest.raises(TypeError, match="`isamples` must be IntegerSamples"):
        kronvi.quantize.predict_integer(tuple(isamp), np.zeros((2, 4)))
    with pytest.raises(TypeError, match="int8 or int16"):
        kronvi.quantize.integer_error_bound(
            isamp._replace(deltas=isamp.deltas.astype(jnp.float32)), np.zeros((2, 4))
        )
