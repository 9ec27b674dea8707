"""GPU rope (kernels_cuda/rope.cu, rope_v0.cu): fused per-head q/k RMSNorm + partial RoPE with
float32 angles, against the golden model (float64 angles) and against the golden rotation fed
the kernel's float32 angles (which isolates the angle error from everything else). The
correctness tests run for every rung of RUNGS (qk_norm_rope: v0 one thread per head, v1 one warp
per head, v2 the pipelined kernels; head_norm_rope: v0, v1), each with its own norm tolerance
(norm_tol); the last tests check the rung plumbing on the CPU."""

import numpy as np
import pytest

from qwenref import golden
from qwenref.gpu.rope import DEFAULT_RUNG, RUNGS, head_norm_rope, qk_norm_rope, rung_kernel

gpu = pytest.mark.gpu

EPS32 = np.finfo(np.float32).eps  # 2**-23
POSITIONS = [0, 1, 4097, 123457, 199999]


def norm_tol(hd, impl="v1"):
    # per-head RMSNorm: the warp's sum of squares is <= 8 sequential adds per lane (hd <= 256)
    # + 5 shuffle levels, the golden's a pairwise sum; each is within (log2(hd) + 8) ulps of
    # exact (see test_gpu_norm.rel_tol), so GPU vs golden-normed within twice that, relative.
    # v0 sums the squares in one chain of hd fmas: <= (hd / 2) ulps relative, halved by the
    # sqrt, so it is within (hd / 4 + 8) ulps of exact (test_gpu_norm.rel_tol's v0 case), plus
    # the golden's own (log2(hd) + 8). (v2 does v1's float32 operations in v1's order.)
    golden_part = (np.log2(max(hd, 2)) + 8) * EPS32
    if impl == "v0":
        return (hd / 4 + 8) * EPS32 + golden_part
    return 2 * golden_part


def f32_angles(positions, rd, theta):
    """The kernel's angles: float32(p) * float32(golden inv_freq), one float32 product."""
    f32 = golden.rope_inv_freq(rd, theta).astype(np.float32)  # [half]
    return np.asarray(positions).astype(np.float32)[:, None] * f32[None, :]  # [nb, half] f32


def rotate(xn, ang, rd):
    """Golden's float64 rotate-half with given angles [nb, half]; xn [nb, heads, hd] float32."""
    half = rd // 2
    y = xn.astype(np.float64)
    c = np.cos(ang.astype(np.float64))[:, None, :]
    s = np.sin(ang.astype(np.float64))[:, None, :]
    a, b = y[..., :half].copy(), y[..., half:rd].copy()
    y[..., :half] = a * c - b * s
    y[..., half:rd] = b * c + a * s
    return y


def pair_mag(xn, rd):
    """|x_j| + |x_partner| on rotated dims, |x_j| on pass-through dims (the scale of the error)."""
    half = rd // 2
    m = np.abs(xn.astype(np.float64))
    pm = m.copy()
    pm[..., :half] = m[..., :half] + m[..., half:rd]
    pm[..., half:rd] = pm[..., :half]
    return pm


def check_head(y, xn, positions, rd, theta, impl="v1"):
    """y: GPU [nb, heads, hd]; xn: golden-normed input [nb, heads, hd] float32."""
    assert not np.isnan(y).any()  # all written
    hd, half = xn.shape[-1], rd // 2
    pm = pair_mag(xn, rd)
    tight = pm * (norm_tol(hd, impl) + 6 * EPS32)
    # 1) against the golden rotation fed the kernel's float32 angles: only norm-order ulps,
    #    sincosf's <= 2 ulps and the float32 rotation (~2 roundings) remain
    emul = rotate(xn, f32_angles(positions, rd, theta), rd) if rd else xn.astype(np.float64)
    assert np.all(np.abs(y - emul) <= tight)
    # 2) against the golden (float64 angles): float32 inv_freq and the float32 product each
    #    round by <= 2^-24 relative, so the angle is off by <= a * 2^-23 rad (a = p * inv_freq,
    #    exact), which moves a rotated value by <= a * 2^-23 * |pair| (1% margin); plus the
    #    golden's own float32 rounding
    g = golden.apply_rope(xn, np.asarray(positions), rd, theta)
    a = np.zeros(xn.shape[:1] + (1, hd))
    if rd:
        a_half = np.asarray(positions, np.float64)[:, None] * golden.rope_inv_freq(rd, theta)
        a[:, 0, :half] = a_half
        a[:, 0, half:rd] = a_half
    assert np.all(np.abs(y - g) <= tight + 1.01 * a * 2.0**-23 * pm + EPS32 * np.abs(g))
    return emul, g, tight


def assert_inv_freq_rounds_cleanly(rd, theta):
    # the kernel rounds CUDA's double pow (<= 2 ulps) to float32; the emulation rounds numpy's.
    # They agree unless a value lies within a few double ulps of a float32 rounding midpoint:
    # check it does not, so the tight comparison above is fair.
    if rd == 0:
        return
    f = golden.rope_inv_freq(rd, theta)
    f32 = f.astype(np.float32).astype(np.float64)
    lo = np.nextafter(f.astype(np.float32), np.float32(0)).astype(np.float64)
    hi = np.nextafter(f.astype(np.float32), np.float32(np.inf)).astype(np.float64)
    dist = np.minimum(np.abs(f - (f32 + lo) / 2), np.abs(f - (f32 + hi) / 2))
    assert np.all(dist > 16 * np.spacing(f))


def make_inputs(rng, nb, nh, nkv, hd):
    q = rng.standard_normal((nb, nh, hd)).astype(np.float32)
    q[:, 0] *= 30.0  # heads at different scales
    q[..., hd // 5] *= 20.0  # an outlier dim
    qg = np.concatenate([q, np.full_like(q, 1e30)], axis=-1)  # gate half: poison if read
    k = rng.standard_normal((nb, nkv, hd)).astype(np.float32)
    k[:, -1] *= 1e-2
    qw = (0.3 * rng.standard_normal(hd)).astype(np.float32)
    kw = (0.3 * rng.standard_normal(hd)).astype(np.float32)
    return q, qg, k, qw, kw


CASES = [  # nb, nh, nkv, hd, rd, theta
    (1, 4, 2, 128, 32, 1e7),
    (3, 6, 2, 256, 64, 1e7),
    (5, 3, 1, 64, 16, 1e4),
    (2, 2, 2, 128, 128, 1e4),  # full rotary
    (4, 2, 1, 18, 6, 1e4),  # hd % 4 != 0: scalar loads
    (2, 3, 1, 256, 0, 1e7),  # rd = 0: plain per-head norm
]


@gpu
@pytest.mark.parametrize("impl", RUNGS["qk_norm_rope"])
@pytest.mark.parametrize("nb,nh,nkv,hd,rd,theta", CASES)
def test_qk_norm_rope(cp, rng, nb, nh, nkv, hd, rd, theta, impl):
    assert_inv_freq_rounds_cleanly(rd, theta)
    q, qg, k, qw, kw = make_inputs(rng, nb, nh, nkv, hd)
    pos = np.array(POSITIONS[len(POSITIONS) - nb :], np.int32)
    q_out = cp.full((nb, nh, hd), np.nan, cp.float32)
    k_out = cp.full((nb, nkv, hd), np.nan, cp.float32)
    yq, yk = qk_norm_rope(
        cp.asarray(qg),
        cp.asarray(k),
        cp.asarray(qw),
        cp.asarray(kw),
        cp.asarray(pos),
        rd,
        theta,
        eps=1e-6,
        q_out=q_out,
        k_out=k_out,
        impl=impl,
    )
    assert yq is q_out and yk is k_out
    qn = golden.rms_norm(q, qw, 1e-6)
    kn = golden.rms_norm(k, kw, 1e-6)
    check_head(cp.asnumpy(yq), qn, pos, rd, theta, impl)
    check_head(cp.asnumpy(yk), kn, pos, rd, theta, impl)
    # the golden function itself, end to end (same check as above, via its public entry)
    gq, gk = golden.qk_norm_rope(qg, k, qw, kw, pos, rd, theta)
    assert np.array_equal(gq, golden.apply_rope(qn, pos, rd, theta))
    assert np.array_equal(gk, golden.apply_rope(kn, pos, rd, theta))


@gpu
@pytest.mark.parametrize("impl", RUNGS["qk_norm_rope"])
def test_qk_norm_rope_many_heads(cp, rng, impl):
    # 64 rows x (3 + 1) heads = 256 heads: v0's 128-thread blocks twice over, v2's items spread
    # over several warps and blocks
    nb, nh, nkv, hd, rd, theta = 64, 3, 1, 128, 32, 1e7
    q, qg, k, qw, kw = make_inputs(rng, nb, nh, nkv, hd)
    pos = rng.integers(0, 200000, nb).astype(np.int32)
    q_out = cp.full((nb, nh, hd), np.nan, cp.float32)
    k_out = cp.full((nb, nkv, hd), np.nan, cp.float32)
    qk_norm_rope(
        cp.asarray(qg),
        cp.asarray(k),
        cp.asarray(qw),
        cp.asarray(kw),
        cp.asarray(pos),
        rd,
        theta,
        q_out=q_out,
        k_out=k_out,
        impl=impl,
    )
    check_head(cp.asnumpy(q_out), golden.rms_norm(q, qw, 1e-6), pos, rd, theta, impl)
    check_head(cp.asnumpy(k_out), golden.rms_norm(k, kw, 1e-6), pos, rd, theta, impl)


@gpu
@pytest.mark.parametrize("hd,rd", [(128, 32), (256, 64), (18, 6)])  # 18: v2 launches v1's
def test_qk_norm_rope_v1_v2_same_bits(cp, rng, hd, rd):
    # the pipelined kernels do v1's float32 operations in v1's order (rope.cu)
    nb, nh, nkv = 3, 4, 2
    _, qg, k, qw, kw = make_inputs(rng, nb, nh, nkv, hd)
    args = (
        cp.asarray(qg),
        cp.asarray(k),
        cp.asarray(qw),
        cp.asarray(kw),
        cp.asarray(np.array([3, 4097, 199999], np.int32)),
        rd,
        1e7,
    )
    y1 = [cp.asnumpy(a) for a in qk_norm_rope(*args, impl="v1")]
    y2 = [cp.asnumpy(a) for a in qk_norm_rope(*args, impl="v2")]
    assert all(np.array_equal(a, b) for a, b in zip(y1, y2))


@gpu
def test_float32_angle_error_is_visible_at_large_positions(cp, rng):
    # the input is meaningful: at p ~ 2e5 the float32 angles move the result by far more than
    # the tight tolerance, so check 1) in check_head does distinguish float32 from float64 angles
    nb, nh, nkv, hd, rd, theta = 1, 2, 1, 256, 64, 1e7
    q, qg, k, qw, kw = make_inputs(rng, nb, nh, nkv, hd)
    pos = np.array([199999], np.int32)
    yq, _ = qk_norm_rope(
        cp.asarray(qg), cp.asarray(k), cp.asarray(qw), cp.asarray(kw), cp.asarray(pos), rd, theta
    )
    emul, g, tight = check_head(cp.asnumpy(yq), golden.rms_norm(q, qw, 1e-6), pos, rd, theta)
    assert np.any(np.abs(emul - g) > 10 * tight)


@gpu
@pytest.mark.parametrize("impl", RUNGS["head_norm_rope"])
@pytest.mark.parametrize("hd,rd", [(128, 32), (64, 64), (36, 0), (18, 6)])  # 18: unaligned heads
def test_head_norm_rope_strided_view(cp, rng, hd, rd, impl):
    # the indexer's layout: qk_proj output [nb, (inh + 1) * ihd], queries = first inh heads
    nb, inh, theta = 3, 4, 1e7
    buf = rng.standard_normal((nb, inh + 1, hd)).astype(np.float32)
    buf[:, inh] = 1e30  # the shared key: poison if read
    w = (0.3 * rng.standard_normal(hd)).astype(np.float32)
    pos = np.array([7, 64, 150001], np.int32)
    x = cp.asarray(buf)[:, :inh]  # view, row stride (inh+1)*hd
    assert not x.flags.c_contiguous
    out = cp.full((nb, inh, hd), np.nan, cp.float32)
    y = head_norm_rope(x, cp.asarray(w), cp.asarray(pos), rd, theta, out=out, impl=impl)
    assert y is out
    check_head(cp.asnumpy(y), golden.rms_norm(buf[:, :inh], w, 1e-6), pos, rd, theta, impl)


@gpu
@pytest.mark.parametrize("impl", RUNGS["head_norm_rope"])
def test_head_norm_rope_single_head_rows(cp, rng, impl):
    # block keys: one head per row, positions j * R
    nblk, ihd, rd, R = 37, 128, 32, 64
    x = rng.standard_normal((nblk, 1, ihd)).astype(np.float32)
    w = (0.3 * rng.standard_normal(ihd)).astype(np.float32)
    pos = (np.arange(nblk) * R).astype(np.int32)
    y = head_norm_rope(cp.asarray(x), cp.asarray(w), cp.asarray(pos), rd, 1e7, impl=impl)
    check_head(cp.asnumpy(y), golden.rms_norm(x, w, 1e-6), pos, rd, 1e7, impl)


@gpu
@pytest.mark.parametrize("impl", RUNGS["qk_norm_rope"])
def test_head_norm_rope_equals_qk_norm_rope_q(cp, rng, impl):
    # the q|gate layout read through the generic kernel gives the same bits as the fused one
    # (v0: both v0 kernels share one device function; v1, v2: head_norm_rope's v1)
    nb, nh, nkv, hd, rd = 3, 4, 2, 128, 32
    q, qg, k, qw, kw = make_inputs(rng, nb, nh, nkv, hd)
    pos = cp.asarray(np.array([5, 999, 65536], np.int32))
    qgd = cp.asarray(qg)
    yq, _ = qk_norm_rope(
        qgd, cp.asarray(k), cp.asarray(qw), cp.asarray(kw), pos, rd, 1e7, impl=impl
    )
    y = head_norm_rope(
        qgd[:, :, :hd], cp.asarray(qw), pos, rd, 1e7, impl="v0" if impl == "v0" else "v1"
    )
    assert np.array_equal(cp.asnumpy(y), cp.asnumpy(yq))


@gpu
def test_rope_bad_inputs(cp):
    nb, nh, nkv, hd = 2, 4, 2, 64
    qg = cp.zeros((nb, nh, 2 * hd), cp.float32)
    k = cp.zeros((nb, nkv, hd), cp.float32)
    w = cp.zeros(hd, cp.float32)
    pos = cp.zeros(nb, cp.int32)

    def call(**kw):
        args = dict(qg=qg, k=k, q_weight=w, k_weight=w, positions=pos, rotary_dim=16, theta=1e4)
        args.update(kw)
        return qk_norm_rope(**args)

    call()  # the baseline is valid
    with pytest.raises(ValueError, match=r"^qg\b"):
        call(qg=cp.zeros((nb, nh * 2 * hd), cp.float32))
    with pytest.raises(ValueError, match=r"^qg\b"):
        call(qg=cp.zeros((nb, nh, 2 * hd + 2), cp.float32))
    with pytest.raises(TypeError, match=r"^qg\b"):
        call(qg=np.zeros((nb, nh, 2 * hd), np.float32))
    with pytest.raises(ValueError, match=r"^k\b"):
        call(k=cp.zeros((nb + 1, nkv, hd), cp.float32))
    with pytest.raises(ValueError, match=r"^k\b"):
        call(k=cp.zeros((nb, hd, nkv), cp.float32).transpose(0, 2, 1))  # not contiguous
    with pytest.raises(TypeError, match=r"^k\b"):
        call(k=k.astype(cp.float16))
    with pytest.raises(ValueError, match=r"^q_weight\b"):
        call(q_weight=cp.zeros(hd + 1, cp.float32))
    with pytest.raises(TypeError, match=r"^k_weight\b"):
        call(k_weight=w.astype(cp.float64))
    with pytest.raises(TypeError, match=r"^positions\b"):
        call(positions=pos.astype(cp.int64))
    with pytest.raises(ValueError, match=r"^positions\b"):
        call(positions=cp.zeros(nb + 1, cp.int32))
    with pytest.raises(ValueError, match=r"^rotary_dim\b"):
        call(rotary_dim=15)
    with pytest.raises(ValueError, match=r"^rotary_dim\b"):
        call(rotary_dim=hd + 2)
    with pytest.raises(TypeError, match=r"^rotary_dim\b"):
        call(rotary_dim=16.0)
    with pytest.raises(ValueError, match=r"^theta\b"):
        call(theta=0.0)
    with pytest.raises(ValueError, match=r"^q_out\b"):
        call(q_out=cp.zeros((nb, nh, 2 * hd), cp.float32))
    with pytest.raises(ValueError, match=r"^k_out\b"):
        call(k_out=cp.zeros((nb, nkv + 1, hd), cp.float32))
    x = cp.zeros((nb, 3, hd), cp.float32)
    with pytest.raises(ValueError, match=r"^x\b"):
        head_norm_rope(x[:, :, ::2], w[: hd // 2], pos, 16, 1e4)  # last axis strided
    with pytest.raises(ValueError, match=r"^x\b"):
        head_norm_rope(x.reshape(nb, 3 * hd), w, pos, 16, 1e4)
    with pytest.raises(TypeError, match=r"^x\b"):
        head_norm_rope(cp.asnumpy(x), w, pos, 16, 1e4)
    with pytest.raises(ValueError, match=r"^weight\b"):
        head_norm_rope(x, w[:-1], pos, 16, 1e4)
    for impl in ("v0", "v1", "v2"):  # every rung checks the same way
        with pytest.raises(ValueError, match=r"^rotary_dim\b"):
            call(rotary_dim=15, impl=impl)
        with pytest.raises(ValueError, match=r"^k_out\b"):
            call(k_out=cp.zeros((nb, nkv + 1, hd), cp.float32), impl=impl)
    with pytest.raises(ValueError, match=r"^weight\b"):
        head_norm_rope(x, w[:-1], pos, 16, 1e4, impl="v0")


# ---- rung plumbing (CPU: impl is checked before anything touches CuPy) ----------------------


@pytest.mark.parametrize("bad", ["bogus", "V2", "", 2, ["v0"]])
def test_bad_impl_is_rejected_before_any_gpu_work(bad):
    nb, nh, nkv, hd = 2, 4, 2, 64  # host arrays: never reached
    qg = np.zeros((nb, nh, 2 * hd), np.float32)
    k = np.zeros((nb, nkv, hd), np.float32)
    w = np.zeros(hd, np.float32)
    pos = np.zeros(nb, np.int32)
    with pytest.raises(ValueError, match=r"^impl\b"):
        qk_norm_rope(qg, k, w, w, pos, 16, 1e4, impl=bad)
    with pytest.raises(ValueError, match=r"^impl\b"):
        head_norm_rope(k, w, pos, 16, 1e4, impl=bad)
    with pytest.raises(ValueError, match=r"^impl\b"):
        rung_kernel("qk_norm_rope", bad, head_dim=hd)
    with pytest.raises(ValueError, match=r"^impl\b"):
        head_norm_rope(k, w, pos, 16, 1e4, impl="v2")  # head_norm_rope has no v2


def test_rungs_and_kernel_names():
    assert RUNGS == {"qk_norm_rope": ("v0", "v1", "v2"), "head_norm_rope": ("v0", "v1")}
    assert DEFAULT_RUNG == {"qk_norm_rope": "v2", "head_norm_rope": "v1"}
    assert rung_kernel("qk_norm_rope", "v0", head_dim=256) == "qk_norm_rope_v0"
    assert rung_kernel("qk_norm_rope", "v1", head_dim=256) == "qk_norm_rope"
    # v2 (the default): the pipelined kernel for the head size, v1's kernel where it cannot run
    for hd, name in [
        (64, "pipe_v1"),
        (128, "pipe_v1"),
        (256, "pipe_v2"),
        (384, "pipe_v4"),
        (512, "pipe_v4"),
    ]:
        assert rung_kernel("qk_norm_rope", head_dim=hd) == f"qk_norm_rope_{name}"
        assert rung_kernel("qk_norm_rope", "v2", hd=hd) == f"qk_norm_rope_{name}"
    assert rung_kernel("qk_norm_rope", "v2", head_dim=18) == "qk_norm_rope"
    assert rung_kernel("qk_norm_rope", "v2", head_dim=640) == "qk_norm_rope"
    assert rung_kernel("qk_norm_rope", "v2", head_dim=256, aligned=False) == "qk_norm_rope"
    assert (
        rung_kernel("qk_norm_rope", "v2", head_dim=256, nb=2**30, nh=2, nkv=1) == "qk_norm_rope"
    )  # items past 32-bit indexing
    with pytest.raises(ValueError, match=r"^head_dim\b"):
        rung_kernel("qk_norm_rope")  # v2's kernel depends on head_dim
    assert rung_kernel("head_norm_rope", "v0") == "head_norm_rope_v0"
    assert rung_kernel("head_norm_rope") == "head_norm_rope"
