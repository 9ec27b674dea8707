"""Tensor-core decode partials (attn_partials_q8_mma_n<NT8> in kernels_cuda/attention_mma.cu)
against the golden model, and the wrapper's choice between it and v1.

The cache is built by golden.KVCache.append (q8) and copied as stored into a gpu.KVCache, so both
sides read identical bytes. References: golden.attn_partials per row over the row's visible
tokens with the same n_splits (m, l, o), and attn_combine of those (out).

Tolerance. The kernel differs from float64 golden in two ways:
  * Scores: q is split into fp16 hi + lo (two MMAs, ~22 significant bits, pre-scaled by a power
    of two so neither overflows nor goes subnormal in a way that matters), K int8 is exact in
    fp16, products are exact and the sums are fp32: a float32-level error like v1's, covered by
    v1's REL = 2e-5 (relative to max(1, max|ref|) + |ref|) — and it moves m, l and o alike.
  * P.V: the weight p_t is rounded to fp16, and so is each dequantized value d_v[t, g] * code
    (two roundings, each of relative error <= u = 2^-11; the product of the two is exact in the
    MMA and summed in fp32). So each term p_t v_t carries a relative error <= 2u + u^2 = U_PV,
    and for each split and dim
        |o - o_ref| <= U_PV * sum_t 2^(s_t - m) |v_t|       (o_abs: golden partials of |V|)
    and on the combined output |out - out_ref| <= U_PV * sum_t p_t |v_t| (attn_combine of o_abs).
    This bound is computed per element from golden (factor 1.01 for its own float64 rounding)
    and added to the REL term. It is a worst case (all roundings in one direction); random
    roundings average to ~u * sqrt(sum p_t^2 v_t^2), far below it. A lost, doubled or misplaced
    token, a wrong head/column or group scale, or a masked token leaking into a row moves the
    output by ~p_t |v_t|, which is >> u * sum p |v| for these inputs (checked below).
"""

import numpy as np
import pytest
from gpu_checks import assert_partials_close

import qwenref
import qwenref.gpu.attention as gpu_attention
from qwenref import golden

pytestmark = pytest.mark.gpu

REL = 2e-5  # float32-level part (as v1): scores, l, the combine
U16 = 2.0**-11  # fp16 unit roundoff
U_PV = 2 * U16 + U16**2  # P = fp16(p) and V' = fp16(d_v * code): two roundings per term


def make_cfg(hd, n_rep, nkv=2):
    return qwenref.AttnConfig(
        hidden_size=64,
        num_attention_heads=n_rep * nkv,
        num_key_value_heads=nkv,
        head_dim=hd,
        intermediate_size=128,
    )


def make_cache(gpu, cfg, T, rng):
    """golden q8 cache with T random tokens (outliers so the max moves, a per-head V offset so
    the mean matters) and the same stored arrays on the GPU."""
    gc = golden.KVCache(cfg, max_t=T + 13, kind="q8")
    k = rng.standard_normal((T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    v = rng.standard_normal((T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    v += rng.standard_normal((1, cfg.nkv, cfg.head_dim)).astype(np.float32)
    k[rng.choice(T, size=min(T, 3), replace=False)] *= 2.0
    gc.append(k, v)
    return gc, gpu.KVCache.from_golden(gc)


def make_q(cfg, nb, rng, spread=1.0, head_scales=False):
    """Scores with std ~spread (log2 units). head_scales: heads whose q differ by orders of
    magnitude (tiny, huge), so the per-CTA power-of-two pre-scale of q is exercised."""
    q = rng.standard_normal((nb, cfg.nh, cfg.head_dim)) * spread / np.log2(np.e)
    if head_scales:
        q[:, 0] *= 1e-3
        q[:, -1] *= 6.0
    return q.astype(np.float32)


def poisoned(cp, shape):
    return cp.full(shape, np.nan, dtype=np.float32)


def reference(gc, q, base_pos, S):
    """golden per row b (tokens [0, base_pos + b]): m, l, o, o_abs [nb, S, nh(, hd)] and out,
    out_abs [nb, nh, hd]; *_abs use |V| (the P.V rounding bound)."""
    T = len(gc)
    K, V = gc.keys(T), gc.values(T)
    res = [[] for _ in range(6)]
    for b in range(q.shape[0]):
        n = base_pos + b + 1
        m, l, o = golden.attn_partials(q[b], K[:, :n], V[:, :n], S)
        _, _, oa = golden.attn_partials(q[b], K[:, :n], np.abs(V[:, :n]), S)
        y, _ = golden.attn_combine(m, l, o)
        ya, _ = golden.attn_combine(m, l, oa)
        for lst, x in zip(res, (m, l, o, oa, y, ya)):
            lst.append(x)
    return [np.stack(x) for x in res]


def check(cp, got, ref, what, bound=None):
    """|got - ref| <= REL * (max(1, max|ref|) + |ref|) + 1.01 * U_PV * bound elementwise; -inf
    (empty split) must match exactly; every element written (NaN poison gone)."""
    extra = None if bound is None else 1.01 * U_PV * np.asarray(bound)
    return assert_partials_close(cp, got, ref, what, REL, extra)


# T, nb, S: T = 1 (one token), T < 32, T = 33 (a 1-token split, and empty splits for the rows
# that see <= 32), T = 97 with nb = 2 (rows see 96 / 97 tokens: 3 vs 4 chunks, so with S = 3 the
# rows' split bounds differ and the CTA covers the union), 1000, 5000 (many blocks per split).
SHAPES = [
    (1, 1, 1),
    (31, 1, 2),
    (31, 4, 2),
    (33, 1, 2),
    (33, 2, 3),
    (33, 3, 2),
    (33, 4, 2),
    (97, 2, 3),
    (1000, 1, 3),
    (1000, 2, 4),
    (1000, 3, 3),
    (1000, 4, 5),
    (5000, 1, 4),
    (5000, 2, 3),
    (5000, 3, 7),
    (5000, 4, 6),
]
HEADS = [(256, 6), (256, 2), (128, 6), (128, 2)]


@pytest.mark.parametrize("hd,n_rep", HEADS, ids=[f"hd{h}-nrep{r}" for h, r in HEADS])
@pytest.mark.parametrize("T,nb,S", SHAPES, ids=[f"T{t}-nb{b}-S{s}" for t, b, s in SHAPES])
def test_mma_partials_match_golden(cp, gpu, rng, hd, n_rep, T, nb, S):
    cfg = make_cfg(hd, n_rep)
    nh = cfg.nh
    gc, cache = make_cache(gpu, cfg, T, rng)
    base_pos = T - nb
    q = make_q(cfg, nb, rng, head_scales=(T == 1000))
    rm, rl, ro, roa, rout, routa = reference(gc, q, base_pos, S)
    if T > 32 and S > 1:
        assert np.isfinite(rm).sum() > nh, "case meant to span several splits"

    p = gpu_attention.plan(cache, nb, base_pos=base_pos, n_splits=S)
    assert p.rung == "mma", f"the tensor-core path does not apply: {p.why}"
    assert (p.kernel, p.n_splits, p.tol) == (
        gpu_attention.mma_kernel_name(nb, n_rep),
        S,
        gpu_attention.TOL_ATTN_MMA,
    )
    m, l, o = poisoned(cp, (nb, S, nh)), poisoned(cp, (nb, S, nh)), poisoned(cp, (nb, S, nh, hd))
    gpu.attn_partials(cp.asarray(q), cache, base_pos, m_out=m, l_out=l, o_out=o, plan=p)
    check(cp, m, rm, "m")
    check(cp, l, rl, "l")
    check(cp, o, ro, "o", bound=roa)

    out = poisoned(cp, (nb, nh, hd))
    got = gpu.decode_attention(cp.asarray(q), cache, base_pos, out=out, plan=p)
    assert got is out
    check(cp, out, rout, "out", bound=routa)
    # without a plan the call builds the same one (impl=None: mma here), so the same kernel
    # and splits give the same bits; v1 (float32 P.V) would differ in the low bits
    auto = gpu.decode_attention(cp.asarray(q), cache, base_pos, n_splits=S)
    cp.testing.assert_array_equal(auto, out)
    # What fails where: a lost or extra token moves l by p_t / l >= ~1e-4 of l here (far over
    # REL), a wrong V dim/group or column moves o by O(|v|) (far over u * sum p |v|).


@pytest.mark.parametrize("hd,n_rep", [(256, 6), (128, 2)])
@pytest.mark.parametrize("nb", [1, 4])
def test_mma_auto_splits(cp, gpu, rng, hd, n_rep, nb):
    """n_splits=None: the mma kernel's own split count gives golden's output (any split count
    combines to the same result up to rounding)."""
    cfg = make_cfg(hd, n_rep, nkv=4)
    T = 3000
    gc, cache = make_cache(gpu, cfg, T, rng)
    q = make_q(cfg, nb, rng)
    *_, rout, routa = reference(gc, q, T - nb, golden.default_n_splits(T))
    p = gpu_attention.plan(cache, nb, base_pos=T - nb)
    assert p.rung == "mma" and p.n_splits > 1  # the kernel's own count: several
    out = gpu.decode_attention(
        cp.asarray(q), cache, T - nb, out=poisoned(cp, (nb, cfg.nh, hd)), plan=p
    )
    check(cp, out, rout, "out", bound=routa)
    # n_splits=None without a plan: the call's own plan is p (same bits)
    cp.testing.assert_array_equal(gpu.decode_attention(cp.asarray(q), cache, T - nb), out)


def selection(rng, T, n_blocks, R):
    """An ascending token list like QSA's for the row that sees T tokens: n_blocks - 1 random
    whole blocks of R tokens among the complete blocks before the last, the last complete
    block, and the tail after it (T - nc * R tokens)."""
    nc = T // R
    picked = np.sort(rng.choice(nc - 1, size=n_blocks - 1, replace=False))
    blocks = np.append(picked, nc - 1)
    idx = (blocks[:, None] * R + np.arange(R)).ravel()
    return np.concatenate([idx, np.arange(nc * R, T)]).astype(np.int32)


# (T, R, blocks kept, W extra columns, S): one block + a 12-token tail (one split, a partial
# 64-token pipeline block), lists that span several splits and pipeline blocks, R = 16
# (pipeline blocks that straddle gaps; no tail), and sel_n larger than W (clipped to W).
SEL_CASES = [
    (300, 32, 1, 0, 1),
    (2000, 64, 8, 3, 4),
    (2000, 16, 40, 0, 7),
    (5000, 64, 31, 0, 33),
    (3000, 32, 12, 0, 5),
]


@pytest.mark.parametrize("hd,n_rep", [(256, 6), (128, 2)])
@pytest.mark.parametrize(
    "T,R,nbk,extra,S", SEL_CASES, ids=[f"T{c[0]}-R{c[1]}-k{c[2]}-S{c[4]}" for c in SEL_CASES]
)
def test_mma_selective_row(cp, gpu, rng, hd, n_rep, T, R, nbk, extra, S):
    """One selective row (nb = 1) through the tensor-core kernel: golden partials over the
    listed tokens, the same split count; v1 on the same list agrees."""
    cfg = make_cfg(hd, n_rep)
    nh = cfg.nh
    gc, cache = make_cache(gpu, cfg, T, rng)
    idx = selection(rng, T, nbk, R)
    sel_n = np.array([len(idx)], np.int32)
    if extra:  # `extra` more tokens listed and sel_n past W: the row sees all W
        more = np.setdiff1d(np.arange(T), idx)[:extra]
        idx = np.sort(np.concatenate([idx, more])).astype(np.int32)
        sel_n[0] = len(idx) + 5
    sel_idx = idx[None].copy()  # W = len(idx)
    q = make_q(cfg, 1, rng, head_scales=True)
    K, V = gc.keys(T)[:, idx], gc.values(T)[:, idx]
    rm, rl, ro = golden.attn_partials(q[0], K, V, S)
    _, _, roa = golden.attn_partials(q[0], K, np.abs(V), S)
    rout, _ = golden.attn_combine(rm, rl, ro)
    routa, _ = golden.attn_combine(rm, rl, roa)

    m, l, o = poisoned(cp, (1, S, nh)), poisoned(cp, (1, S, nh)), poisoned(cp, (1, S, nh, hd))
    si, sn = cp.asarray(sel_idx), cp.asarray(sel_n)
    p = gpu_attention.plan(
        cache, 1, base_pos=T - 1, selective=True, width=sel_idx.shape[1], n_splits=S
    )
    assert (p.rung, p.kernel) == ("mma", "attn_partials_q8_mma_sel_n1")
    gpu.attn_partials(
        cp.asarray(q), cache, T - 1, S, sel_idx=si, sel_n=sn, m_out=m, l_out=l, o_out=o, plan=p
    )
    check(cp, m, rm[None], "m")
    check(cp, l, rl[None], "l")
    check(cp, o, ro[None], "o", bound=roa[None])
    out = gpu.decode_attention(cp.asarray(q), cache, T - 1, sel_idx=si, sel_n=sn, plan=p)
    check(cp, out, rout[None], "out", bound=routa[None])
    pv = gpu_attention.plan(
        cache, 1, base_pos=T - 1, selective=True, width=sel_idx.shape[1], n_splits=S, impl="v1"
    )
    assert (pv.rung, pv.kernel, pv.tol) == ("v1", "attn_partials_q8_q8", gpu_attention.TOL_ATTN)
    v1 = gpu.decode_attention(cp.asarray(q), cache, T - 1, sel_idx=si, sel_n=sn, plan=pv)
    check(cp, out, cp.asnumpy(v1), "mma vs v1", bound=routa[None])


def test_selective_rows_with_own_lists_stay_apart(cp, gpu, rng):
    """Two selective rows of 2 heads fit one 8-column tile, but each reads its own token list:
    they must not share a tile's K/V (the bug a layer test caught at fd56de4). Each row is
    checked against golden over its own list."""
    cfg, T, S = make_cfg(128, 2), 900, 4
    gc, cache = make_cache(gpu, cfg, T, rng)
    lists = [selection(rng, T - 1, 5, 32), selection(rng, T, 9, 32)]  # row b sees T - 1 + b
    W = max(map(len, lists))
    sel_idx = np.full((2, W), -1, np.int32)
    for b, idx in enumerate(lists):
        sel_idx[b, : len(idx)] = idx
    sel_n = np.array([len(i) for i in lists], np.int32)
    q = make_q(cfg, 2, rng)
    out = gpu.decode_attention(
        cp.asarray(q),
        cache,
        T - 2,
        n_splits=S,
        sel_idx=cp.asarray(sel_idx),
        sel_n=cp.asarray(sel_n),
        out=poisoned(cp, (2, cfg.nh, 128)),
    )
    for b, idx in enumerate(lists):
        K, V = gc.keys(T)[:, idx], gc.values(T)[:, idx]
        rm, rl, ro = golden.attn_partials(q[b], K, V, S)
        _, _, roa = golden.attn_partials(q[b], K, np.abs(V), S)
        rout, _ = golden.attn_combine(rm, rl, ro)
        routa, _ = golden.attn_combine(rm, rl, roa)
        check(cp, out[b : b + 1], rout[None], f"row {b}", bound=routa[None])


def test_mma_selective_row_dense_fallback(cp, gpu, rng):
    """sel_n[0] = 0 means a dense row (all base_pos + 1 tokens), on the mma path too."""
    cfg = make_cfg(256, 6)
    T = 700
    gc, cache = make_cache(gpu, cfg, T, rng)
    q = make_q(cfg, 1, rng)
    *_, rout, routa = reference(gc, q, T - 1, 3)
    sel_idx = cp.full((1, 64), -1, cp.int32)
    p = gpu_attention.plan(cache, 1, base_pos=T - 1, selective=True, width=64, n_splits=3)
    assert p.rung == "mma"
    out = gpu.decode_attention(
        cp.asarray(q), cache, T - 1, sel_idx=sel_idx, sel_n=cp.zeros(1, cp.int32), plan=p
    )
    check(cp, out, rout, "out", bound=routa)


def test_mma_matches_v1(cp, gpu, rng):
    """The two implementations agree on the 27B head shape (4 kv heads, n_rep 6, hd 256)."""
    cfg = make_cfg(256, 6, nkv=4)
    T, nb = 4000, 4
    gc, cache = make_cache(gpu, cfg, T, rng)
    qd = cp.asarray(make_q(cfg, nb, rng))
    a = cp.asnumpy(gpu.decode_attention(qd, cache, T - nb, n_splits=9, impl="mma"))
    b = cp.asnumpy(gpu.decode_attention(qd, cache, T - nb, n_splits=9, impl="v1"))
    *_, rout, routa = reference(gc, cp.asnumpy(qd), T - nb, 9)
    assert np.abs(a - b).max() <= 1.01 * U_PV * routa.max() + 4 * REL * max(1, np.abs(b).max())


def test_mma_misaligned_q_view(cp, gpu, rng):
    """The kernel reads q as float4: a C-contiguous view at a 4-byte offset gives the same
    output, bit for bit, as an aligned q (the wrapper copies it)."""
    cfg = make_cfg(256, 6)
    T, nb = 700, 2
    _, cache = make_cache(gpu, cfg, T, rng)
    q = cp.asarray(make_q(cfg, nb, rng))
    flat = cp.empty(q.size + 1, cp.float32)
    qv = flat[1:].reshape(q.shape)
    qv[...] = q
    assert qv.flags.c_contiguous and qv.data.ptr % 16
    p = gpu_attention.plan(cache, nb, base_pos=T - nb, n_splits=5)
    assert p.rung == "mma"
    a = gpu.decode_attention(q, cache, T - nb, plan=p)
    b = gpu.decode_attention(qv, cache, T - nb, plan=p)
    cp.testing.assert_array_equal(a, b)


def test_impl_choice(cp, gpu, rng):
    """mma exactly where it applies (q8/q8, hd 128/256, dense or one selective row, no sparse V,
    nb*n_rep <= 32);
    impl='v1' forces v1; impl='mma' where it does not apply is an error."""
    cfg = make_cfg(128, 6)
    gc, cache = make_cache(gpu, cfg, 200, rng)
    q = cp.asarray(make_q(cfg, 6, rng))  # 6 rows * 6 = 36 columns > 32

    def run(qq, c=cache, base=150, sel_idx=None, sel_n=None, **kw):
        """The plan's rung, after checking the call runs it: given the plan, and building its
        own (the same kernel and splits give the same bits; mma and v1 differ in low bits)."""
        width = 0 if sel_idx is None else sel_idx.shape[1]
        p = gpu_attention.plan(
            c, len(qq), base_pos=base, selective=sel_n is not None, width=width, n_splits=2, **kw
        )
        a = gpu.decode_attention(qq, c, base, sel_idx=sel_idx, sel_n=sel_n, plan=p, **kw)
        b = gpu.decode_attention(qq, c, base, n_splits=2, sel_idx=sel_idx, sel_n=sel_n, **kw)
        cp.testing.assert_array_equal(a, b)
        return p.rung

    assert run(q[:5]) == "mma"  # 30 columns
    assert run(q) == "v1"
    assert run(q[:2], impl="v1") == "v1"
    assert run(q[:2], sparse_v=1e-3) == "v1"
    sel_idx = cp.asarray(np.tile(np.arange(8, dtype=np.int32), (2, 1)))
    assert run(q[:2], sel_idx=sel_idx, sel_n=cp.asarray(np.array([0, 8], np.int32))) == "v1"
    assert run(q[:1], sel_idx=sel_idx[:1], sel_n=cp.asarray(np.array([8], np.int32))) == "mma"
    with pytest.raises(ValueError, match="impl"):
        run(q, impl="mma")
    with pytest.raises(ValueError, match="impl"):
        gpu.decode_attention(q, cache, 150, n_splits=2, impl="mma")
    with pytest.raises(ValueError, match="impl"):
        run(q[:2], impl="fast")
    # the mma rung and v1 are told apart by their bits: the check inside run() has teeth
    mma = gpu.decode_attention(q[:2], cache, 150, n_splits=2)
    v1 = gpu.decode_attention(q[:2], cache, 150, n_splits=2, impl="v1")
    assert not cp.array_equal(mma, v1)
    gc2 = golden.KVCache(cfg, max_t=64, kind="f32")
    gc2.append(np.ones((40, cfg.nkv, 128), np.float32), np.ones((40, cfg.nkv, 128), np.float32))
    cache2 = gpu.KVCache.from_golden(gc2)
    assert run(q[:1], c=cache2, base=10) == "v1"
    with pytest.raises(ValueError, match="impl"):
        gpu.decode_attention(q[:1], cache2, 10, impl="mma")


@pytest.mark.parametrize("tuned", [False, True], ids=["default", "tuned"])
@pytest.mark.parametrize("hd", [128, 256])
def test_smem_layout_matches_kernel(cp, gpu, hd, tuned):
    """The plans' dynamic shared-memory sizes (NT8 = 1..4: nb = 1, 2, 3, 5 rows of 6 heads)
    equal the kernel's own layout, under tuning options too (they reach the plan as
    arguments, not module state)."""
    from qwenref.gpu._runtime import kernel

    # MMA_NW must divide hd / 32 (attention_mma.cu's rule), so 8 warps only at hd 256
    options = (("-DMMA_NSTAGE=3",) + (("-DMMA_NW=8",) if hd == 256 else ())) if tuned else ()
    gc = golden.KVCache(make_cfg(hd, 6), max_t=64, kind="q8")
    plans = [gpu_attention.plan_rung(gc, nb, options=options) for nb in (1, 2, 3, 5)]
    assert [p.kernel for p in plans] == [f"attn_partials_q8_mma_n{n}" for n in (1, 2, 3, 4)]
    assert plans[0].threads == (256 if tuned and hd == 256 else 128)
    assert len({p.options for p in plans}) == 1  # one module holds all four
    out = cp.zeros(4, np.int32)
    kernel("attention_mma", "attn_mma_smem_bytes_q8", plans[0].options)((1,), (1,), (out,))
    assert cp.asnumpy(out).tolist() == [p.smem for p in plans]


def test_plan_must_fit_the_call(cp, gpu, rng):
    """A plan given to a call is checked against the plan the call would build with its rung:
    another row count, selective rows, sparse V, another cache kind, other options or another
    split count are refused before any launch; a plan without a split count gets one."""
    cfg = make_cfg(256, 6)
    T = 300
    gc, cache = make_cache(gpu, cfg, T, rng)
    q = cp.asarray(make_q(cfg, 4, rng))
    p1 = gpu_attention.plan(cache, 1, base_pos=T - 1, n_splits=3)
    with pytest.raises(ValueError, match="plan does not fit this call: plan.kernel"):
        gpu.decode_attention(q, cache, T - 4, plan=p1)  # nb 4: n3 kernel
    sel_idx, sel_n = cp.zeros((1, 8), cp.int32), cp.ones(1, cp.int32)
    with pytest.raises(ValueError, match="plan.kernel"):  # needs sel_n1
        gpu.decode_attention(q[:1], cache, T - 1, sel_idx=sel_idx, sel_n=sel_n, plan=p1)
    with pytest.raises(ValueError, match="impl='mma' does not apply"):
        gpu.decode_attention(q[:1], cache, T - 1, sparse_v=1e-3, plan=p1)
    with pytest.raises(ValueError, match="contradicts plan.n_splits"):
        gpu.decode_attention(q[:1], cache, T - 1, n_splits=4, plan=p1)
    with pytest.raises(ValueError, match="contradicts plan.n_splits"):
        gpu.attn_partials(q[:1], cache, T - 1, m_out=cp.empty((1, 4, cfg.nh), cp.float32), plan=p1)
    with pytest.raises(ValueError, match="plan.options"):
        gpu.decode_attention(q[:1], cache, T - 1, plan=p1, options=("-DMMA_NSTAGE=3",))
    gc2 = golden.KVCache(cfg, max_t=T, kind="bf16")
    kv = rng.standard_normal((2, T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    gc2.append(kv[0], kv[1])
    bf16 = gpu.KVCache.from_golden(gc2)
    pv = gpu_attention.plan(cache, 1, base_pos=T - 1, n_splits=3, impl="v1")
    with pytest.raises(ValueError, match="plan.kernel"):  # q8 kernel
        gpu.decode_attention(q[:1], bf16, T - 1, plan=pv)
    # a GPU-free plan (no split count) is completed by the call: the kernel's own count
    out = gpu.decode_attention(q[:1], cache, T - 1, plan=gpu_attention.plan_rung(cache, 1))
    auto = gpu.decode_attention(q[:1], cache, T - 1)
    cp.testing.assert_array_equal(out, auto)


OPTIN_SM86 = 101376  # the shared memory one block may opt into on sm_86 / sm_89 (99 KiB)


@pytest.mark.parametrize("nb", [4, 5])
def test_fallback_where_shared_memory_is_short(cp, gpu, rng, nb):
    """Planned for a device whose blocks may have 99 KiB (max_smem), hd 256 with four column
    tiles (nb 5 of n_rep 6: 108,688 B) runs v1 instead, says why, and still matches golden at
    v1's float32 tolerance (bit for bit v1's own call); three tiles (nb 4: 98,160 B) stay on
    the tensor cores. On this device (max_smem None) the mma rung runs wherever it fits."""
    cfg = make_cfg(256, 6)
    T, S = 900, 4
    gc, cache = make_cache(gpu, cfg, T, rng)
    q = make_q(cfg, nb, rng)
    qd = cp.asarray(q)
    need = gpu_attention.mma_smem_bytes(256, -(-nb * 6 // 8))
    here = gpu_attention.device_limits().smem_per_block_optin
    assert gpu_attention.plan(cache, nb, base_pos=T - nb).rung == ("mma" if need <= here else "v1")

    p = gpu_attention.plan(cache, nb, base_pos=T - nb, n_splits=S, max_smem=OPTIN_SM86)
    *_, rout, routa = reference(gc, q, T - nb, S)
    out = gpu.decode_attention(qd, cache, T - nb, out=poisoned(cp, (nb, cfg.nh, 256)), plan=p)
    if need <= OPTIN_SM86:
        assert (p.rung, p.why) == ("mma", None)
        check(cp, out, rout, "out", bound=routa)
        return
    assert (p.rung, p.kernel, p.tol) == ("v1", "attn_partials_q8_q8", gpu_attention.TOL_ATTN)
    assert f"{need} B of shared memory" in p.why
    check(cp, out, rout, "out")  # float32 all through: no P.V rounding term
    v1 = gpu.decode_attention(qd, cache, T - nb, n_splits=S, impl="v1")
    cp.testing.assert_array_equal(out, v1)
    with pytest.raises(ValueError, match="impl='mma' does not apply: the mma kernel needs"):
        gpu_attention.plan(cache, nb, base_pos=T - nb, impl="mma", max_smem=OPTIN_SM86)


def test_device_limits_feed_the_split_counts(cp, gpu, rng):
    """device_limits reads the device's attributes, and the automatic split counts are the ones
    its limits give (on an H200: 66 splits at 32k tokens for 4 kv heads, docs/design)."""
    from qwenref.gpu.attention_plan import plan_kernel

    lim = gpu_attention.device_limits()
    attrs = cp.cuda.Device().attributes
    assert lim.sm_count == attrs["MultiProcessorCount"]
    assert lim.smem_per_block_optin == attrs["MaxSharedMemoryPerBlockOptin"]
    assert 48 * 1024 <= lim.smem_per_block_optin <= lim.smem_per_sm
    assert lim.threads_per_sm >= 1024 and lim.regs_per_sm >= 65536
    cfg = make_cfg(256, 6, nkv=4)
    _, cache = make_cache(gpu, cfg, 64, rng)
    p = gpu_attention.plan_rung(cache, 1)
    kern = plan_kernel(p)
    S = gpu_attention.mma_n_splits(kern, p.smem, p.threads, 32768, 4)
    assert S == gpu_attention.mma_n_splits(kern, p.smem, p.threads, 32768, 4, limits=lim)
    if (lim.sm_count, lim.smem_per_sm, lim.regs_per_sm) == (132, 233472, 65536):  # an H200
        assert S == 66
