"""GPU tq-b (kernels_cuda/kvcache.cu kv_append_tq_n<n>, tq_dequantize_f32; kvcache_v0.cu
tq_append_v0) against the golden quantizer (qwenref/golden/tq.py).

The codes are compared BIT-EXACTLY, and the float16 scales γ too: the kernels compute golden's
float64 sums (in another order, which moves a stored value only within ~2^-52 relative of a
rounding boundary: never on these inputs). As for turbo, the cache's rotation is float32
butterflies (golden: float64), so the stored codes are compared with the golden quantizer
applied to the kernel's own rotation (gpu_checks.wht_f32 of s ⊙ x, s = layout.tq_signs), and
against the golden cache through the dequantized values.

Inputs that a wrong kernel fails on: rows whose golden u (the unit-rms values the codebook
sees) is placed exactly on the centre midpoint 0 (a tie: golden takes the lower code) and on
the float32 values just below and just above every other midpoint (which has one bit more than
float32), so a >= for golden's >, a threshold rounded the wrong way, a codebook off by an ulp or
a norm rounded to float32 changes codes; and Gaussian rows with outlier channels over twelve
decades of scale, many of them, for the packing and the scales.
"""

import numpy as np
import pytest
from gpu_checks import wht_f32
from test_gpu_kvcache import assert_bits_equal, poison_stores

import qwenref
from qwenref import golden
from qwenref.golden.tq import tq_quantize_core
from qwenref.gpu import kvcache as gpu_kv
from qwenref.gpu._runtime import kernel_source, resident_blocks
from qwenref.layout import TQ_KINDS, side_arrays, tq_bits, tq_signs

gpu = pytest.mark.gpu
BITS = (4, 3, 2, 1)
IMPLS = gpu_kv.RUNGS["tq_append"]
WIDTHS = (16, 64, 128, 256, 1024)


def _u(y):
    """golden's u = float32(y · sqrt(n) / ‖y‖) of one row (tq_quantize_core's arithmetic)."""
    y64 = y.astype(np.float64)
    return (y64 * (np.sqrt(y.size) / np.sqrt(np.dot(y64, y64)))).astype(np.float32)


def row_with_u(rng, n, at, targets):
    """float32 [n] whose golden u at the positions `at` is exactly the float32 targets: the
    targets stored as they are, Gaussian values elsewhere scaled so that ‖y‖² = n up to a
    relative ~1e-12 (a small last value takes up the float32 rounding of the others), so the
    scale sqrt(n) / ‖y‖ is 1 within ~1e-12 and float32(t · scale) = t for every target."""
    y = rng.standard_normal(n)
    free = np.setdiff1d(np.arange(n), at)
    bal, free = free[-1], free[:-1]
    room = n - float(np.dot(targets.astype(np.float64), targets))  # > 0: few targets
    y[free] *= np.sqrt(room * (1 - 1e-4) / np.dot(y[free], y[free]))
    y = y.astype(np.float32)
    y[at] = targets
    y64 = y.astype(np.float64)
    y[bal] = np.sqrt(n - (np.dot(y64, y64) - y64[bal] ** 2))
    assert (_u(y)[at] == targets).all()
    return y


def near_midpoint_rows(rng, n, bits, rows=8):
    """Rows whose u (golden's unit-rms values) holds 0 (the centre midpoint: a tie, which goes
    to the lower code) and, for every other midpoint (C_j + C_{j+1}) / 2, the float32 just
    below it and the one just above it (the midpoint itself has one bit more than float32), as
    many as fit (n >= 64: all of them, over the rows)."""
    cb = golden.tq_codebook(bits).astype(np.float64)
    mids = (cb[:-1] + cb[1:]) / 2
    lo = mids.astype(np.float32)
    lo = np.where(lo > mids, np.nextafter(lo, np.float32(-np.inf)), lo)
    hi = np.nextafter(lo, np.float32(np.inf))
    want = np.unique(np.concatenate([lo[mids != 0], hi[mids != 0], [np.float32(0)]]))
    per = max(1, min(len(want), n // 8))  # their squares stay well below n
    out, seen = [], set()
    for r in range(rows):
        take = np.roll(want, -r * per)[:per]
        out.append(row_with_u(rng, n, rng.choice(n, per, replace=False), take))
        seen |= set(take.tolist())
    if n >= 64:
        assert seen == set(want.tolist())
    return np.stack(out)


def outlier_rows(rng, rows, n):
    """Gaussian rows, a few channels 20x larger, scales spread over 1e-3..1e3."""
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[:, rng.choice(n, max(1, n // 32), replace=False)] *= 20
    return (x * np.exp(rng.uniform(-7, 7, (rows, 1)))).astype(np.float32)


def golden_rotated(x):
    """What the cache's kernels quantize: float32 WHT of s ⊙ x (the sign flip is exact)."""
    return wht_f32(x * tq_signs(x.shape[-1]))


# ---- the standalone quantizer ----------------------------------------------------------------
@gpu
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("n", WIDTHS)
def test_tq_quantize_bit_exact(cp, rng, bits, n):
    if n * bits % 8:
        pytest.skip("codes of a row must be whole bytes")
    y = np.concatenate([near_midpoint_rows(rng, n, bits), outlier_rows(rng, 2000, n)])
    y[3] = 0.0  # ‖y‖ = 0: γ 0, codes 2^(bits-1)
    codes, gamma = gpu_kv.tq_quantize(cp.asarray(y), bits)
    rc, rg = tq_quantize_core(y, bits)
    assert_bits_equal(cp.asnumpy(codes), rc, "codes")
    assert_bits_equal(cp.asnumpy(gamma), rg, "gamma")
    # the designed rows reach the midpoints: the centre tie and codes on both sides of each
    u = golden.tq_dequantize(rc[:8], np.ones(8, np.float16), bits)
    assert (golden.tq_codebook(bits)[[(1 << bits) // 2 - 1]] == u).any()


@gpu
@pytest.mark.parametrize("bits", (4, 3, 2))
def test_tq_dequantize_exact(cp, rng, bits):
    y = outlier_rows(rng, 300, 256)
    rc, rg = tq_quantize_core(y, bits)
    got = gpu_kv.tq_dequantize(cp.asarray(rc), cp.asarray(rg), bits)
    assert_bits_equal(cp.asnumpy(got), golden.tq_dequantize(rc, rg, bits))


# ---- the cache's append --------------------------------------------------------------------
def _cfg(hd, nkv=2):
    return qwenref.AttnConfig(
        hidden_size=64,
        num_attention_heads=2 * nkv,
        num_key_value_heads=nkv,
        head_dim=hd,
        intermediate_size=64,
    )


@gpu
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", TQ_KINDS)
@pytest.mark.parametrize("hd", (64, 128, 256))
def test_kvcache_tq_append_matches_golden(cp, rng, kind, hd, impl):
    cfg = _cfg(hd)
    bits = tq_bits(kind)
    cache = gpu_kv.KVCache(cfg, max_t=24, kind=kind)
    ref = golden.KVCache(cfg, max_t=24, kind=kind)
    ks, vs = [], []
    for nb in (3, 1, 7):  # three appends at successive positions
        k = outlier_rows(rng, nb * cfg.nkv, hd).reshape(nb, cfg.nkv, hd)
        v = outlier_rows(rng, nb * cfg.nkv, hd).reshape(nb, cfg.nkv, hd)
        cache.append(cp.asarray(k), cp.asarray(v), impl=impl)
        ref.append(k, v)
        ks.append(k)
        vs.append(v)
    t = len(cache)
    for side, xs in (("k_store", ks), ("v_store", vs)):
        x = np.concatenate(xs).transpose(1, 0, 2)  # [nkv, t, hd]
        rc, rg = tq_quantize_core(golden_rotated(x), bits)
        got = {a: cp.asnumpy(b)[:, :t] for a, b in getattr(cache, side).items()}
        assert_bits_equal(got["codes"], rc, f"{side} codes ({impl})")
        assert_bits_equal(got["gamma"], rg, f"{side} gamma ({impl})")
    # against the golden cache (float64 rotation): the dequantized rows agree within one code
    # step (the largest gap of the codebook) times the row's γ, or a γ's float16 ulp
    mine = cache.to_golden()
    gap = np.diff(golden.tq_codebook(bits)).max()
    for a, b, st in (
        (mine.keys(t), ref.keys(t), ref.k_store),
        (mine.values(t), ref.values(t), ref.v_store),
    ):
        g = st["gamma"][:, :t, None].astype(np.float32)
        assert (np.abs(a - b) <= gap * g * 1.001 + 1e-30).all()


@gpu
@pytest.mark.parametrize("hd", (128, 256))
def test_kvcache_tq_append_more_rows_than_a_wave(cp, rng, hd):
    """The append's grid stops at one wave of resident blocks and its warps stride over the
    rest: with 4x more row groups than the grid has warps, every row is still coded."""
    cfg = _cfg(hd, nkv=4)
    kern = gpu_kv._tq_append_kernel(hd)
    wave = resident_blocks(kern, 128)  # blocks of 4 warps
    nb = -(-4 * 4 * wave * gpu_kv._tq_rows_per_warp(hd) // (2 * cfg.nkv))  # K and V rows
    assert gpu_kv._tq_grid(hd, 2 * nb * cfg.nkv) == (wave,)
    cache = gpu_kv.KVCache(cfg, max_t=nb, kind="tq2")
    k = outlier_rows(rng, nb * cfg.nkv, hd).reshape(nb, cfg.nkv, hd)
    v = outlier_rows(rng, nb * cfg.nkv, hd).reshape(nb, cfg.nkv, hd)
    cache.append(cp.asarray(k), cp.asarray(v), impl="v1")
    for side, x in (("k_store", k), ("v_store", v)):
        rc, rg = tq_quantize_core(golden_rotated(x.transpose(1, 0, 2)), 2)
        got = {a: cp.asnumpy(b) for a, b in getattr(cache, side).items()}
        assert_bits_equal(got["codes"], rc, f"{side} codes")
        assert_bits_equal(got["gamma"], rg, f"{side} gamma")


@gpu
@pytest.mark.parametrize("impl", IMPLS)
def test_kvcache_tq_append_writes_only_its_rows(cp, rng, impl):
    cfg = _cfg(128, nkv=3)
    cache = gpu_kv.KVCache(cfg, max_t=16, kind="tq3")
    before = poison_stores(cp, cache)
    cache.length = 3  # three tokens "already stored"
    k = outlier_rows(rng, 5 * 3, 128).reshape(5, 3, 128)
    cache.append(cp.asarray(k), cp.asarray(k), impl=impl)
    for s, store in (("k", cache.k_store), ("v", cache.v_store)):
        for name, a in store.items():
            a, was = cp.asnumpy(a), before[(s, name)]
            keep = np.ones(a.shape[:2], bool)
            keep[:, 3:8] = False
            assert_bits_equal(a[keep], was[keep], f"{s} {name} outside rows 3..7")
            # every written (head, token) changed: a γ is finite (the poison is NaN), a row of
            # codes differs from the poison in some byte
            new, old = a[~keep].reshape(-1, a[~keep].size // max(1, (~keep).sum())), was[~keep]
            changed = (
                np.isfinite(new[:, 0])
                if name == "gamma"
                else (new != old.reshape(new.shape)).any(1)
            )
            assert changed.all(), f"{s} {name}: a row not written"


def test_tq_append_rungs_name_their_kernels():
    assert IMPLS == ("v0", "v1")
    assert gpu_kv.rung_kernel("tq_append", "v0") == "tq_append_v0"
    assert gpu_kv.rung_kernel("tq_append", "v1", head_dim=256) == "kv_append_tq_n256"
    with pytest.raises(ValueError, match="^head_dim"):
        gpu_kv.rung_kernel("tq_append", "v1", head_dim=8)
    assert "void tq_append_v0(" in kernel_source("kvcache_v0")
    assert "KV_APPEND_TQ(256)" in kernel_source("kvcache_tq")


def test_tq_layout_matches_the_cache_arrays():
    arrays = side_arrays("tq3", 2, 5, 128)
    assert arrays["codes"] == ((2, 5, 48), np.uint8)
    assert arrays["gamma"] == ((2, 5), np.float16)
