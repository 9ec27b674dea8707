"""golden.attention: split-T partials, LSE combine, sparse V and the output gate, checked
against an independent float64 softmax (natural exp, GQA by np.repeat)."""

import math
import warnings

import numpy as np
import pytest
import scipy.special

from qwenref.golden.attention import (
    attn_combine,
    attn_partials,
    decode_attention,
    default_n_splits,
    output_gate,
    split_bounds,
)

LOG2E = 1.0 / math.log(2.0)


# ---- the independent reference ---------------------------------------------------------------
def softmax_ref(q, k, v, threshold=0.0):
    """float64 softmax attention, natural exp, GQA by repeating kv heads.

    Returns (out [nh, hd], p [nh, T], lse2 [nh] = log2 sum_t 2**(s_t log2 e)). With threshold,
    the numerator keeps only tokens with p >= threshold; the denominator keeps all.
    """
    nh, hd = q.shape
    n_rep = nh // k.shape[0]
    kk = np.repeat(k.astype(np.float64), n_rep, axis=0)  # [nh, T, hd]: head h -> h // n_rep
    vv = np.repeat(v.astype(np.float64), n_rep, axis=0)
    s = np.einsum("hd,htd->ht", q.astype(np.float64), kk) / math.sqrt(hd)
    smax = s.max(axis=-1, keepdims=True)
    e = np.exp(s - smax)
    z = e.sum(axis=-1, keepdims=True)
    p = e / z
    pn = np.where(p >= threshold, p, 0.0) if threshold > 0 else p
    out = np.einsum("ht,htd->hd", pn, vv)
    lse2 = (smax[:, 0] + np.log(z[:, 0])) * LOG2E
    return out, p, lse2


def make_qkv(rng, nh, nkv, T, hd):
    """Random q/k/v with a few outlier keys (so the softmax is peaked, not flat) and a per-token
    offset on v (so a token or head mix-up changes the output)."""
    q = (2.0 * rng.standard_normal((nh, hd))).astype(np.float32)
    k = rng.standard_normal((nkv, T, hd)).astype(np.float32)
    out_idx = rng.choice(T, max(1, T // 50), replace=False)
    k[:, out_idx] *= 4.0
    ramp = np.linspace(-2, 2, T)[None, :, None]
    v = (rng.standard_normal((nkv, T, hd)) + ramp).astype(np.float32)
    return q, k, v


def make_moderate(rng, nh, nkv, T, hd):
    """No outliers, scores with std ~1.5 (natural units): p spans a few decades in every head,
    so a threshold near the median drops a visible share of the mass in each."""
    q = (1.5 * rng.standard_normal((nh, hd))).astype(np.float32)
    k = rng.standard_normal((nkv, T, hd)).astype(np.float32)
    ramp = np.linspace(-2, 2, T)[None, :, None]
    v = (rng.standard_normal((nkv, T, hd)) + ramp).astype(np.float32)
    return q, k, v


def out_atol(v):
    # float64 inside; the float32 roundings of m, l, o and of out each cost <= 2**-24 relative,
    # bounded by max|v|: 1e-6·max|v| leaves ~5x margin.
    return 1e-6 * float(np.abs(v).max())


# lse2 is float32 of a float64 value |lse2| < 64: half an ulp <= 4e-6 -> rtol 1e-6 plus atol 1e-6.
LSE_TOL = dict(rtol=1e-6, atol=1e-6)

GQA = [(4, 2, 64), (6, 2, 32), (8, 1, 128)]  # (nh, nkv, hd): n_rep 2, 3 (h//3 != h%2), 8


# ---- splits ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "t_len, want",
    [
        (0, 1),
        (1, 1),
        (32, 1),
        (96, 1),
        (97, 2),
        (192, 2),
        (193, 3),
        (6144, 64),
        (6145, 64),
        (10**6, 64),
    ],
)
def test_default_n_splits(t_len, want):
    chunks = math.ceil(t_len / 32)
    assert want == min(max(math.ceil(chunks / 3), 1), 64)  # the table itself is the rule
    assert default_n_splits(t_len) == want


@pytest.mark.parametrize(
    "t_len, n_splits, want",
    [
        (100, 2, [0, 64, 100]),  # 4 chunks, 2 per split
        (100, 3, [0, 64, 100, 100]),  # per = ceil(4/3) = 2: the last split is empty
        (33, 5, [0, 32, 33, 33, 33, 33]),  # more splits than chunks: trailing empties
        (5, 1, [0, 5]),
        (1000, 7, [0, 160, 320, 480, 640, 800, 960, 1000]),  # per = ceil(32/7) = 5 chunks
    ],
)
def test_split_bounds_examples(t_len, n_splits, want):
    b = split_bounds(t_len, n_splits)
    assert b.dtype == np.int64 and b.tolist() == want


@pytest.mark.parametrize("t_len", [1, 31, 32, 33, 95, 100, 1000, 4097])
def test_split_bounds_properties(t_len):
    chunks = math.ceil(t_len / 32)
    for n in range(1, 71):
        b = split_bounds(t_len, n)
        per = math.ceil(chunks / n)
        assert b.shape == (n + 1,) and b[0] == 0 and b[-1] == t_len
        assert (np.diff(b) >= 0).all() and (np.diff(b) <= per * 32).all()
        assert all(x % 32 == 0 for x in b[:-1] if x < t_len)  # whole chunks except the end
        empty = np.diff(b) == 0
        assert not empty[:-1][~empty[1:]].any()  # empties only trail


# ---- partials and combine --------------------------------------------------------------------
@pytest.mark.parametrize("nh, nkv, hd", GQA)
@pytest.mark.parametrize("T", [1, 5, 31, 32, 33, 64, 95, 97, 1000])
def test_decode_matches_softmax(rng, nh, nkv, hd, T):
    q, k, v = make_qkv(rng, nh, nkv, T, hd)
    ref, p, _ = softmax_ref(q, k, v)
    if T >= 32:
        assert p.max(axis=-1).min() > 3.0 / T  # input meaningful: not flat
    out = decode_attention(q, k, v)
    assert out.dtype == np.float32 and out.shape == (nh, hd)
    np.testing.assert_allclose(out, ref, rtol=0, atol=out_atol(v))
    # GQA is h // n_rep: the h % nkv mapping would give a clearly different answer
    if nkv > 1:
        wrong = np.concatenate(
            [
                softmax_ref(q[h : h + 1], k[h % nkv : h % nkv + 1], v[h % nkv : h % nkv + 1])[0]
                for h in range(nh)
            ]
        )
        assert np.abs(wrong - ref).max() > 100 * out_atol(v)


def test_default_splits_used(rng):
    q, k, v = make_qkv(rng, 4, 2, 1000, 64)
    assert default_n_splits(1000) == 11
    np.testing.assert_array_equal(decode_attention(q, k, v), decode_attention(q, k, v, 11))


@pytest.mark.parametrize("T, n_splits", [(100, 3), (33, 2), (33, 5), (1000, 7), (20, 4)])
def test_partials_match_definition(rng, T, n_splits):
    """m, l, o of each split against a per-split float64 loop over split_bounds' ranges."""
    nh, nkv, hd = 6, 2, 32
    q, k, v = make_qkv(rng, nh, nkv, T, hd)
    m, l, o = attn_partials(q, k, v, n_splits)
    assert (m.shape, l.shape, o.shape) == ((n_splits, nh), (n_splits, nh), (n_splits, nh, hd))
    assert m.dtype == l.dtype == o.dtype == np.float32
    b = split_bounds(T, n_splits)
    kk = np.repeat(k.astype(np.float64), nh // nkv, axis=0)
    vv = np.repeat(v.astype(np.float64), nh // nkv, axis=0)
    s = np.einsum("hd,htd->ht", q.astype(np.float64), kk) * hd**-0.5 * LOG2E
    for i in range(n_splits):
        lo, hi = b[i], b[i + 1]
        if lo == hi:  # empty split: exact values
            assert (m[i] == -np.inf).all() and (l[i] == 0).all() and (o[i] == 0).all()
            continue
        m_ref = s[:, lo:hi].max(axis=-1)
        # float32 rounding of the max (|m| < 64 -> < 4e-6 absolute)
        np.testing.assert_allclose(m[i], m_ref, rtol=1e-7, atol=0)
        # l, o are defined relative to m as stored (float32), so use that m here
        e = np.exp2(s[:, lo:hi] - m[i].astype(np.float64)[:, None])
        # float32 rounding of l, o: 2**-24 relative, plus a margin
        np.testing.assert_allclose(l[i], e.sum(-1), rtol=2e-7, atol=0)
        # |o| <= l·max|v|; float32 rounding of o costs 2**-24 of that, plus a margin
        np.testing.assert_allclose(
            o[i],
            np.einsum("ht,htd->hd", e, vv[:, lo:hi]),
            rtol=0,
            atol=2e-7 * e.sum(-1).max() * np.abs(v).max(),
        )


@pytest.mark.parametrize("T", [33, 100, 1000])
def test_combine_equals_one_softmax_any_n_splits(rng, T):
    nh, nkv, hd = 4, 2, 64
    q, k, v = make_qkv(rng, nh, nkv, T, hd)
    ref, _, lse_ref = softmax_ref(q, k, v)
    saw_empty = False
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        for n in range(1, 71):
            m, l, o = attn_partials(q, k, v, n)
            empty = np.isneginf(m[:, 0])
            saw_empty |= bool(empty.any())
            assert (l[empty] == 0).all() and (o[empty] == 0).all()
            out, lse2 = attn_combine(m, l, o)
            assert np.isfinite(out).all() and np.isfinite(lse2).all()
            np.testing.assert_allclose(out, ref, rtol=0, atol=out_atol(v), err_msg=f"n={n}")
            np.testing.assert_allclose(lse2, lse_ref, **LSE_TOL, err_msg=f"n={n}")
    assert saw_empty  # n_splits > chunks happened


def test_lse2_is_log2_sum_exp2(rng):
    nh, nkv, hd, T = 4, 2, 64, 200
    q, k, v = make_qkv(rng, nh, nkv, T, hd)
    kk = np.repeat(k.astype(np.float64), 2, axis=0)
    s2 = np.einsum("hd,htd->ht", q.astype(np.float64), kk) * hd**-0.5 * LOG2E
    direct = np.log2(np.exp2(s2).sum(-1))  # no max trick: |s2| is small
    assert np.isfinite(direct).all() and np.abs(direct).max() > 1  # meaningful, not ~0
    for n in (1, 3, 9, 64):
        _, lse2 = attn_combine(*attn_partials(q, k, v, n))
        np.testing.assert_allclose(lse2, direct, **LSE_TOL)


def test_combine_all_empty_head_is_zero_not_nan():
    m = np.full((3, 2), -np.inf, np.float32)
    m[1, 0] = 1.5  # head 0 has one non-empty split
    l = np.zeros((3, 2), np.float32)
    l[1, 0] = 2.0
    o = np.zeros((3, 2, 4), np.float32)
    o[1, 0] = [2.0, 4.0, -2.0, 0.0]
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        out, lse2 = attn_combine(m, l, o)
    np.testing.assert_array_equal(out, [[1.0, 2.0, -1.0, 0.0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(lse2, [1.5 + 1.0, -np.inf])


def test_combine_weights_by_max(rng):
    """Two hand-made splits with very different maxima: the weights are 2**(m_i - M)."""
    m = np.array([[10.0], [-5.0]], np.float32)
    l = np.array([[3.0], [7.0]], np.float32)
    o = np.array([[[3.0, 6.0]], [[7.0, -14.0]]], np.float32)
    out, lse2 = attn_combine(m, l, o)
    w = 2.0**-15
    L = 3.0 + w * 7.0
    np.testing.assert_allclose(out[0], [(3.0 + 7.0 * w) / L, (6.0 - 14.0 * w) / L], rtol=1e-7)
    np.testing.assert_allclose(lse2, [10.0 + math.log2(L)], rtol=1e-7)


# ---- sparse V --------------------------------------------------------------------------------
def gap_threshold(p):
    """A threshold in the widest gap between sorted p values within the middle 60%, so no
    token sits near it (float64 vs base-2 rounding cannot flip a decision). Returns (thr, ratio)."""
    ps = np.sort(p.ravel())
    lo, hi = int(0.2 * ps.size), int(0.8 * ps.size)
    ratios = ps[lo + 1 : hi] / ps[lo : hi - 1]
    i = lo + int(np.argmax(ratios))
    return math.sqrt(ps[i] * ps[i + 1]), float(ratios.max())


@pytest.mark.parametrize("n_splits", [1, 2, 5, None])
def test_sparse_v_drops_exactly_small_p(rng, n_splits):
    """v one-hot per token (T <= hd), so out[h, t] is token t's numerator term: it must be
    exactly 0 for p < thr and p (unnormalized by the kept mass) otherwise."""
    nh, nkv, hd, T = 4, 2, 64, 60
    q, k, _ = make_moderate(rng, nh, nkv, T, hd)
    v = np.zeros((nkv, T, hd), np.float32)
    v[:, np.arange(T), np.arange(T)] = 1.0
    _, p, _ = softmax_ref(q, k, v)
    thr, ratio = gap_threshold(p)
    assert ratio > 1.001  # nobody within 0.05% of thr
    keep = p >= thr
    assert keep.sum() > 10 and (~keep).sum() > 10  # both sides populated
    out = decode_attention(q, k, v, n_splits, sparse_v=thr)
    np.testing.assert_array_equal(out[:, :T] != 0, keep)
    assert (out[:, T:] == 0).all()
    # kept terms are p itself (denominator counts dropped tokens too): float32 rounding only
    np.testing.assert_allclose(out[:, :T], np.where(keep, p, 0), rtol=1e-6, atol=0)
    assert (p * ~keep).sum(axis=1).max() > 1e-3  # renormalizing by kept mass would show


@pytest.mark.parametrize("n_splits", [None, 7, 70])
def test_sparse_v_matches_definition(rng, n_splits):
    nh, nkv, hd, T = 4, 2, 64, 1000
    q, k, v = make_moderate(rng, nh, nkv, T, hd)
    exact, p, _ = softmax_ref(q, k, v)
    thr, ratio = gap_threshold(p)
    assert ratio > 1.0001
    ref, _, _ = softmax_ref(q, k, v, threshold=thr)
    assert (p < thr).sum() > 100  # many tokens dropped...
    assert np.abs(ref - exact).max() > 100 * out_atol(v)  # ...and that is visible
    out = decode_attention(q, k, v, n_splits, sparse_v=thr)
    np.testing.assert_allclose(out, ref, rtol=0, atol=out_atol(v))


def test_sparse_v_keeps_denominator_and_zero_is_exact(rng):
    q, k, v = make_qkv(rng, 4, 2, 64, 300)
    m0, l0, o0 = attn_partials(q, k, v, 3)
    m1, l1, o1 = attn_partials(q, k, v, 3, sparse_v=1e-3)
    np.testing.assert_array_equal(m0, m1)
    np.testing.assert_array_equal(l0, l1)  # denominator untouched
    assert not np.array_equal(o0, o1)  # numerator did change
    exact = decode_attention(q, k, v)
    np.testing.assert_array_equal(decode_attention(q, k, v, sparse_v=0.0), exact)
    np.testing.assert_array_equal(decode_attention(q, k, v, sparse_v=1e-300), exact)  # none < thr
    np.testing.assert_allclose(exact, softmax_ref(q, k, v)[0], rtol=0, atol=out_atol(v))


# ---- output gate -----------------------------------------------------------------------------
def test_output_gate_large_gates(rng):
    g = np.array([-1e4, -100.0, -30.0, -1.0, 0.0, 1.0, 30.0, 100.0, 1e4], np.float32)
    gate = np.tile(g, (3, 1))
    o = rng.standard_normal(gate.shape).astype(np.float32) * 10
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        y = output_gate(o, gate)
    assert y.dtype == np.float32 and np.isfinite(y).all()
    ref = o.astype(np.float64) * scipy.special.expit(gate.astype(np.float64))
    # float32 rounding of the product; tiny results (gate -100) may be float32 subnormals
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-44)
    np.testing.assert_array_equal(y[:, -1], o[:, -1])  # sigmoid(1e4) == 1
    np.testing.assert_array_equal(y[:, 0], 0)  # sigmoid(-1e4) == 0
    np.testing.assert_allclose(y[:, 4], o[:, 4] / 2, rtol=1e-7)


# ---- bad input -------------------------------------------------------------------------------
def _qkv():
    return (
        np.zeros((4, 8), np.float32),
        np.zeros((2, 5, 8), np.float32),
        np.zeros((2, 5, 8), np.float32),
    )


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda q, k, v: decode_attention(q[0], k, v), ValueError, "q"),
        (lambda q, k, v: decode_attention(q[:, :4], k, v), ValueError, "head_dim"),
        (lambda q, k, v: decode_attention(q[:3], k, v), ValueError, "multiple"),
        (lambda q, k, v: decode_attention(q, k, v[:, :4]), ValueError, "v"),
        (lambda q, k, v: decode_attention(q, k[:, :0], v[:, :0]), ValueError, "k"),
        (lambda q, k, v: decode_attention(q, k, v, n_splits=0), ValueError, "n_splits"),
        (lambda q, k, v: decode_attention(q, k, v, n_splits=1.5), TypeError, "n_splits"),
        (lambda q, k, v: decode_attention(q, k, v, sparse_v=-0.1), ValueError, "sparse_v"),
        (lambda q, k, v: decode_attention(q, k, v, sparse_v=1.0), ValueError, "sparse_v"),
        (lambda q, k, v: decode_attention(q, k, v, sparse_v=float("nan")), ValueError, "sparse_v"),
        (lambda q, k, v: decode_attention(q.astype(complex), k, v), TypeError, "q"),
        (lambda q, k, v: decode_attention(np.full_like(q, np.nan), k, v), ValueError, "q"),
        (
            lambda q, k, v: attn_combine(np.zeros((2, 4)), np.zeros((2, 3)), np.zeros((2, 4, 8))),
            ValueError,
            "l",
        ),
        (
            lambda q, k, v: attn_combine(np.zeros((2, 4)), np.zeros((2, 4)), np.zeros((3, 4, 8))),
            ValueError,
            "o",
        ),
        (
            lambda q, k, v: attn_combine(
                np.full((2, 4), np.nan), np.zeros((2, 4)), np.zeros((2, 4, 8))
            ),
            ValueError,
            "m",
        ),
        (lambda q, k, v: split_bounds(10, 0), ValueError, "n_splits"),
        (lambda q, k, v: split_bounds(-1, 2), ValueError, "t_len"),
        (lambda q, k, v: default_n_splits(3.0), TypeError, "t_len"),
        (lambda q, k, v: output_gate(q, q[:, :4]), ValueError, "gate"),
    ],
)
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call(*_qkv())
