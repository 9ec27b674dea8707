"""rope: partial rotate-half RoPE, q/gate split and the fused per-head q/k norm + RoPE."""

import numpy as np
import pytest

import qwenref
from qwenref.golden import (
    apply_rope,
    qk_norm_rope,
    rms_norm,
    rope_cos_sin,
    rope_inv_freq,
    split_q_gate,
)

EPS32 = np.finfo(np.float32).eps  # 2**-23


def ref_rope(x, positions, rd, theta):
    """float64 reference written as complex rotation: z_i = x_i + j·x_{i+rd/2} times e^{j·p·f_i}."""
    x = x.astype(np.float64)
    half = rd // 2
    f = np.exp(-(2.0 * np.arange(half) / rd) * np.log(theta))  # theta^(-2i/rd)
    ang = np.asarray(positions, np.float64).reshape((-1,) + (1,) * (x.ndim - 1)) * f
    z = (x[..., :half] + 1j * x[..., half:rd]) * np.exp(1j * ang)
    out = x.copy()
    out[..., :half], out[..., half:rd] = z.real, z.imag
    return out


def assert_rope_close(y, ref, x):
    # The golden rotates in float64 and rounds once to float32; the reference is float64.
    # Per element: half a float32 ulp of the value (rtol 2**-24, using 2**-23 for the rounding of
    # the reference's different evaluation order near half-way points) plus ~1e-15 of the pair's
    # magnitude for the two float64 evaluations differing (atol relative to max |x|).
    assert y.dtype == np.float32 and y.shape == ref.shape
    tol = EPS32 * np.abs(ref) + 1e-12 * np.abs(x).max()
    assert np.all(np.abs(y - ref) <= tol)


def test_inv_freq_and_cos_sin():
    f = rope_inv_freq(16, 1e7)
    assert f.dtype == np.float64 and f.shape == (8,)
    ref = np.array([1e7 ** (-2 * i / 16) for i in range(8)])
    np.testing.assert_allclose(f, ref, rtol=1e-14, atol=0)  # float64 pow vs python pow
    pos = np.array([0, 1, 7, 123456], np.int32)
    cos, sin = rope_cos_sin(pos, 16, 1e7)
    assert cos.shape == sin.shape == (4, 8) and cos.dtype == np.float64
    # angles up to 1.2e5 rad: float64 angle error ~1e-11, so 1e-9 is generous but far below the
    # ~1e-2 a float32 angle would be off by
    np.testing.assert_allclose(cos, np.cos(pos[:, None] * ref), rtol=0, atol=1e-9)
    np.testing.assert_allclose(sin, np.sin(pos[:, None] * ref), rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    "hd,rd,theta", [(64, 16, 1e4), (64, 64, 1e7), (256, 64, 1e7), (40, 10, 500.0)]
)
def test_apply_rope_matches_float64(rng, hd, rd, theta):
    nb, nh = 5, 3
    x = rng.standard_normal((nb, nh, hd)).astype(np.float32)
    x[:, :, 1] *= 30.0  # outlier in a rotated channel
    pos = np.array([0, 1, 31, 4097, 262143], np.int64)  # includes a large position
    y = apply_rope(x, pos, rd, theta)
    ref = ref_rope(x, pos, rd, theta)
    assert_rope_close(y, ref, x)
    assert np.array_equal(y[..., rd:], x[..., rd:])  # pass-through dims untouched, bit-exact
    assert np.array_equal(y[0], x[0])  # position 0 is the identity
    # the rotation did something on every nonzero position
    assert np.abs(y[1:, :, :rd] - x[1:, :, :rd]).max() > 1e-2


def test_apply_rope_any_middle_axes(rng):
    x = rng.standard_normal((4, 2, 3, 32)).astype(np.float32)
    pos = np.array([5, 6, 7, 1000])
    y = apply_rope(x, pos, 8, 1e4)
    assert_rope_close(y, ref_rope(x, pos, 8, 1e4), x)
    y2 = apply_rope(x.reshape(4, 6, 32), pos, 8, 1e4)
    assert np.array_equal(y.reshape(4, 6, 32), y2)


def dot64(a, b):
    return float(a[0].astype(np.float64) @ b[0].astype(np.float64))


@pytest.mark.parametrize("rd", [16, 64])
def test_relative_position_property(rng, rd):
    """<rope(q, p+s), rope(k, p'+s)> = <rope(q, p), rope(k, p')> for any shift s: float64 angles
    keep this to float32 rounding even at s ~ 1e6 (float32 angles would be off by ~0.06 rad)."""
    hd, theta = 64, 1e7
    q = rng.standard_normal((1, hd)).astype(np.float32)
    k = rng.standard_normal((1, hd)).astype(np.float32)
    # the output rounding is <= 2**-24 relative per element on both sides; the dot of float32
    # values in float64 adds nothing, so
    # |difference| <= 4 * 2**-24 * sum |q_i| |k_i| <= 2**-22 |q||k|
    tol = 2.0**-22 * np.linalg.norm(q) * np.linalg.norm(k)
    for p, p2 in [(3, 0), (100, 37), (0, 900)]:
        base = dot64(apply_rope(q, [p], rd, theta), apply_rope(k, [p2], rd, theta))
        for s in (1, 4096, 1_000_003, 3_000_000):
            shifted = dot64(apply_rope(q, [p + s], rd, theta), apply_rope(k, [p2 + s], rd, theta))
            assert abs(shifted - base) <= tol, (p, p2, s, shifted - base)


def test_rotary_dim_from_config():
    cfg = qwenref.AttnConfig.tiny()
    assert cfg.rotary_dim == int(cfg.head_dim * cfg.partial_rotary_factor) == 16
    cfg2 = cfg.replace(head_dim=256, partial_rotary_factor=0.25)
    assert cfg2.rotary_dim == 64


def test_split_q_gate(rng):
    qg = rng.standard_normal((3, 4, 2 * 24)).astype(np.float32)
    q, gate = split_q_gate(qg)
    assert q.shape == gate.shape == (3, 4, 24) and q.dtype == gate.dtype == np.float32
    assert np.array_equal(q, qg[..., :24]) and np.array_equal(gate, qg[..., 24:])
    q[...] = 0  # copies, not views
    assert np.abs(qg[..., :24]).max() > 0


def test_qk_norm_rope_matches_float64(rng, tiny_cfg):
    cfg = tiny_cfg
    nb, hd, rd = 3, cfg.head_dim, cfg.rotary_dim
    qg = rng.standard_normal((nb, cfg.nh, 2 * hd)).astype(np.float32)
    qg[:, :, 2] *= 40.0  # outlier channel in q
    qg[:, :, hd:] *= 1e3  # huge gate half: must not leak into q
    k = rng.standard_normal((nb, cfg.nkv, hd)).astype(np.float32) * 5
    qw = (0.3 * rng.standard_normal(hd)).astype(np.float32)
    kw = (0.3 * rng.standard_normal(hd)).astype(np.float32)
    pos = np.array([7, 8, 5000], np.int32)
    q_out, k_out = qk_norm_rope(qg, k, qw, kw, pos, rd, cfg.rope_theta, eps=cfg.rms_norm_eps)
    assert q_out.shape == (nb, cfg.nh, hd) and k_out.shape == (nb, cfg.nkv, hd)

    def ref(x, w):
        x64 = x.astype(np.float64)
        n = x64 / np.sqrt(np.mean(x64**2, -1, keepdims=True) + cfg.rms_norm_eps) * (1 + w)
        return ref_rope(n, pos, rd, cfg.rope_theta)

    # the float32 norm contributes (log2(hd) + 8) ulps relative per element (see test_norm),
    # the rope rounding one more; the pair mixing means the bound is relative to the pair's
    # magnitude, so use the row's max |value|.
    for got, want in ((q_out, ref(qg[..., :hd], qw)), (k_out, ref(k, kw))):
        scale = np.abs(want).max(axis=-1, keepdims=True)
        assert np.all(np.abs(got - want) <= (np.log2(hd) + 10) * EPS32 * scale)
    # same as composing the golden pieces
    assert np.array_equal(
        q_out, apply_rope(rms_norm(qg[..., :hd], qw, cfg.rms_norm_eps), pos, rd, cfg.rope_theta)
    )


def test_rope_bad_inputs():
    x = np.ones((2, 3, 16), np.float32)
    pos = np.array([0, 1])
    with pytest.raises(ValueError, match="rotary_dim"):
        apply_rope(x, pos, 7, 1e4)
    with pytest.raises(ValueError, match="rotary_dim"):
        apply_rope(x, pos, 18, 1e4)
    with pytest.raises(TypeError, match="rotary_dim"):
        rope_inv_freq(8.0, 1e4)
    with pytest.raises(ValueError, match="theta"):
        rope_inv_freq(8, 0.0)
    with pytest.raises(ValueError, match="positions"):
        apply_rope(x, np.array([0, 1, 2]), 8, 1e4)
    with pytest.raises(TypeError, match="positions"):
        apply_rope(x, np.array([0.0, 1.0]), 8, 1e4)
    with pytest.raises(ValueError, match="positions"):
        apply_rope(x, np.array([0, -1]), 8, 1e4)
    with pytest.raises(TypeError, match="x"):
        apply_rope(x.astype(np.int32), pos, 8, 1e4)
    with pytest.raises(ValueError, match="qg"):
        split_q_gate(np.ones((2, 3, 15), np.float32))
    qg, k, w = (
        np.ones((2, 3, 32), np.float32),
        np.ones((2, 1, 16), np.float32),
        np.zeros(16, np.float32),
    )
    with pytest.raises(ValueError, match="qg"):
        qk_norm_rope(qg[..., :30], k, w, w, pos, 8, 1e4)
    with pytest.raises(ValueError, match="k"):
        qk_norm_rope(qg, k[:, 0], w, w, pos, 8, 1e4)
    with pytest.raises(ValueError, match="q_weight"):
        qk_norm_rope(qg, k, w[:8], w, pos, 8, 1e4)
    with pytest.raises(ValueError, match="k_weight"):
        qk_norm_rope(qg, k, w, w[:8], pos, 8, 1e4)
