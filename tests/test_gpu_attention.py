"""GPU decode attention (kernels_cuda/attention_v0.cu, attention_v1.cu, attention_combine.cu)
against the golden model, every cache kind, for the rungs v0 and v1 (impl=; the tensor-core rung
"mma" has its own file, test_gpu_attention_mma.py, and tolerance). Bad input to the calls:
test_gpu_attention_args.py.

The cache is built by golden.KVCache.append and copied as stored into a gpu.KVCache
(from_golden), so both sides read identical bytes. The reference for row b is golden's
attn_partials over the row's visible tokens (dense or gathered) with the same n_splits, then
attn_combine, then the inverse WHT for rotated V, then the gate.

Tolerance (one for every kind): golden sums in float64, the kernel in float32 in another order
(lanes, butterfly, warps, splits). The score error is about sqrt(hd)*2^-24*sum|q_i k_i|*c
(c = hd^-0.5*log2 e), and p, l, o inherit it relatively; dequantization is the same exact
float32 arithmetic on both sides, so kinds do not loosen it. A float32 numpy emulation of the
kernel's summation order on these very inputs stays below 2e-7 relative (all kinds, all CASES),
so REL = 2e-5 leaves ~100x margin, while a lost, doubled or misplaced token, a wrong head
mapping or a wrong scale moves the output by >= 1e-3 of its scale (inputs asserted below).

v0 gets REL_V0 = 5e-5: it runs the online softmax over all of a row's tokens in ONE float32 pass,
so l and o take one rounding per token (relative error ~sqrt(T) 2^-24 typical, T 2^-24 at
worst) and each literal WHT output is one sequential sum of hd terms. A float32 numpy emulation
of v0's order on these inputs stays below 1e-6 relative (all kinds, all CASES and T = 1000),
so 5e-5 leaves ~50x margin and still sits far below the 1e-3 a real bug costs.
"""

import numpy as np
import pytest
from gpu_checks import assert_partials_close

import qwenref
import qwenref.gpu.attention as gpu_attention
from qwenref import golden
from qwenref.layout import LADDER_KINDS

pytestmark = pytest.mark.gpu

REL = 2e-5  # v1
REL_V0 = 5e-5  # v0: one float32 pass over T tokens (module docstring)
# Every attention call here passes impl= one of these (the float32 rungs and their tolerances);
# impl=None would pick the tensor-core rung for q8 caches, which has its own file and bound.
IMPLS = [r for r in gpu_attention.RUNGS["attention"] if r != "mma"]  # ("v0", "split", "v1")


def rel(impl):
    return REL_V0 if impl == "v0" else REL


def make_cfg(hd, nh, nkv):
    """An attention-only config (no indexer) of the given head shape."""
    return qwenref.AttnConfig(
        hidden_size=64,
        num_attention_heads=nh,
        num_key_value_heads=nkv,
        head_dim=hd,
        intermediate_size=128,
    )


def make_cache(gpu, cfg, kind, T, rng, max_t=None):
    """golden cache with T tokens of random K/V (a few outlier tokens, a per-head offset so the
    mean matters) and the same stored arrays on the GPU."""
    gc = golden.KVCache(cfg, max_t=max_t or T + 13, kind=kind)
    k = rng.standard_normal((T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    v = rng.standard_normal((T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    v += rng.standard_normal((1, cfg.nkv, cfg.head_dim)).astype(np.float32)
    k[rng.choice(T, size=min(T, 3), replace=False)] *= 2.0  # outliers: the max must move
    gc.append(k, v)
    cache = gpu.KVCache.from_golden(gc)
    assert len(cache) == T
    return gc, cache


def make_q(cfg, nb, rng, spread=1.0):
    """q such that scores s = q.k*hd^-0.5*log2 e have std ~spread (log2 units): neither flat
    nor one-hot."""
    return (rng.standard_normal((nb, cfg.nh, cfg.head_dim)) * spread / np.log2(np.e)).astype(
        np.float32
    )


def rows_visible(base_pos, nb, sel=None):
    """Row b's visible token list: arange(base_pos + b + 1), or sel[b] when given and not None."""
    return [
        np.arange(base_pos + b + 1) if sel is None or sel[b] is None else np.asarray(sel[b])
        for b in range(nb)
    ]


def reference(gc, q, vis, n_splits, sparse_v=0.0, gate=None):
    """golden per row -> (m [nb,S,nh], l, o [nb,S,nh,hd], out [nb,nh,hd])."""
    K, V = gc.keys(len(gc)), gc.values(len(gc))  # [nkv, T, hd] as stored
    ms, ls, os_, outs = [], [], [], []
    for b, idx in enumerate(vis):
        qb = golden.wht(q[b]) if gc.k_rotated else q[b]
        m, l, o = golden.attn_partials(qb, K[:, idx], V[:, idx], n_splits, sparse_v)
        y, _ = golden.attn_combine(m, l, o)
        if gc.v_rotated:
            y = golden.wht(y, inverse=True)
        if gate is not None:
            y = golden.output_gate(y, gate[b])
        ms.append(m), ls.append(l), os_.append(o), outs.append(y)
    return np.stack(ms), np.stack(ls), np.stack(os_), np.stack(outs)


def assert_close(cp, got, ref, what, rel=REL):
    """|got - ref| <= rel * (max(1, max|ref|) + |ref|) elementwise; -inf must match exactly."""
    assert_partials_close(cp, got, ref, what, rel)


def assert_meaningful(gc, q, vis):
    """The softmax of every row/head is neither flat nor one-hot, and the typical token weighs
    enough that losing it would show at REL."""
    K = gc.keys(len(gc)).astype(np.float64)
    n_rep = q.shape[1] // K.shape[0]
    for b, idx in enumerate(vis):
        qb = golden.wht(q[b]) if gc.k_rotated else q[b]
        s = np.einsum("gtd,grd->grt", K[:, idx], qb.reshape(K.shape[0], n_rep, -1))
        s = s.reshape(q.shape[1], -1) * q.shape[2] ** -0.5 * np.log2(np.e)
        p = np.exp2(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        assert p.max() < 0.98, "input too peaked: a one-hot softmax hides most bugs"
        if len(idx) > 4:
            assert np.median(p) > 10 * REL / len(idx), "input too flat"


def poisoned(cp, shape, dtype=np.float32):
    return cp.full(shape, np.nan, dtype=dtype)


# (name, hd, nh, nkv, T, nb, n_splits, gate): T < 32; T = 33 with a 1-token split; the 27B
# ratio (n_rep 6, hd 256) over several splits with a gate; n_splits > chunks (empty splits).
CASES = [
    ("T17-nb3-hd64", 64, 4, 2, 17, 3, None, False),
    ("T33-hd128-nrep4", 128, 4, 1, 33, 1, 2, False),
    ("T300-nb4-hd256-nrep6-gate", 256, 12, 2, 300, 4, 5, True),
    ("T70-hd128-empty-splits", 128, 4, 2, 70, 2, 8, False),
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", LADDER_KINDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_decode_matches_golden(cp, gpu, rng, kind, case, impl):
    _, hd, nh, nkv, T, nb, n_splits, with_gate = case
    cfg = make_cfg(hd, nh, nkv)
    gc, cache = make_cache(gpu, cfg, kind, T, rng)
    base_pos = T - nb  # the batch's last row sees all T
    q = make_q(cfg, nb, rng)
    gate = rng.standard_normal((nb, nh, hd)).astype(np.float32) * 2 if with_gate else None
    vis = rows_visible(base_pos, nb)
    assert_meaningful(gc, q, vis)

    qd = cp.asarray(q)
    p = gpu_attention.plan(cache, nb, base_pos=base_pos, impl=impl, n_splits=n_splits)
    assert (p.rung, p.tol) == (impl, gpu_attention.TOL_ATTN)
    if impl != "v0":  # split-T rungs: partials, then the combine
        S = p.n_splits  # n_splits, or the kernel's own (auto_n_splits)
        assert S == n_splits or n_splits is None
        m, l, o = (
            poisoned(cp, (nb, S, nh)),
            poisoned(cp, (nb, S, nh)),
            poisoned(cp, (nb, S, nh, hd)),
        )
        gpu.attn_partials(qd, cache, base_pos, n_splits, m_out=m, l_out=l, o_out=o, impl=impl)
        rm, rl, ro, rout = reference(gc, q, vis, S, gate=gate)
        if n_splits is not None and n_splits * 32 > T + 32:
            assert np.isneginf(rm).any(), "case meant to have empty splits has none"
        assert_close(cp, m, rm, "m")
        assert_close(cp, l, rl, "l")
        assert_close(cp, o, ro, "o")
    else:  # v0: no partials; golden's output is the same for any S
        with pytest.raises(ValueError, match="impl='v0' has no partials"):
            gpu.attn_partials(qd, cache, base_pos, n_splits, impl=impl)
        S = n_splits
        *_, rout = reference(gc, q, vis, S or golden.default_n_splits(T), gate=gate)

    out = poisoned(cp, (nb, nh, hd))
    gate_d = None if gate is None else cp.asarray(gate)
    got = gpu.decode_attention(qd, cache, base_pos, gate=gate_d, n_splits=S, out=out, impl=impl)
    assert got is out
    assert_close(cp, out, rout, "out", rel=rel(impl))
    # the same call given the plan runs the same kernel with the same splits: bit for bit (both
    # rungs are deterministic, test_deterministic)
    again = gpu.decode_attention(qd, cache, base_pos, gate=gate_d, plan=p)
    cp.testing.assert_array_equal(again, out)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["f32", "q8", "turbo4", "bf16k-turbo3v"])
def test_auto_splits_match_any_split_count(cp, gpu, rng, kind, impl):
    """n_splits=None (the kernel's own choice) gives golden's output with golden's default."""
    cfg = make_cfg(256, 12, 2)
    T, nb = 1000, 2
    gc, cache = make_cache(gpu, cfg, kind, T, rng)
    q = make_q(cfg, nb, rng)
    vis = rows_visible(T - nb, nb)
    *_, rout = reference(gc, q, vis, golden.default_n_splits(T))
    out = gpu.decode_attention(
        cp.asarray(q), cache, T - nb, out=poisoned(cp, (nb, 12, 256)), impl=impl
    )
    assert_close(cp, out, rout, "out", rel=rel(impl))


def random_selection(rng, t_len, n):
    """n distinct ascending tokens of [0, t_len) that include the row's own token t_len - 1."""
    rest = rng.choice(t_len - 1, size=n - 1, replace=False)
    return np.sort(np.append(rest, t_len - 1)).astype(np.int32)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["f32", "bf16", "q8", "turbo4", "turbo3", "bf16k-turbo2v"])
@pytest.mark.parametrize("hd,nh,nkv", [(64, 4, 2), (256, 12, 2)])
def test_selective_rows(cp, gpu, rng, kind, hd, nh, nkv, impl):
    """Mixed batch: dense rows (sel_n = 0) and gathered rows of odd lengths; entries past
    sel_n[b] hold garbage that must never be read."""
    cfg = make_cfg(hd, nh, nkv)
    T, nb, W = 260, 4, 120
    gc, cache = make_cache(gpu, cfg, kind, T, rng)
    base_pos = T - nb
    lists = [
        None,
        random_selection(rng, base_pos + 2, 97),
        random_selection(rng, base_pos + 3, 33),
        random_selection(rng, base_pos + 4, 1),
    ]
    sel_idx = np.full((nb, W), 10**9, np.int32)  # garbage past sel_n (out of range)
    sel_n = np.zeros(nb, np.int32)
    for b, lst in enumerate(lists):
        if lst is not None:
            sel_idx[b, : len(lst)] = lst
            sel_n[b] = len(lst)
    q = make_q(cfg, nb, rng)
    vis = rows_visible(base_pos, nb, lists)
    assert_meaningful(gc, q, vis[:3])
    for S in (1, 3):
        *_, rout = reference(gc, q, vis, S)
        out = gpu.decode_attention(
            cp.asarray(q),
            cache,
            base_pos,
            n_splits=S,
            sel_idx=cp.asarray(sel_idx),
            sel_n=cp.asarray(sel_n),
            out=poisoned(cp, (nb, nh, hd)),
            impl=impl,
        )
        assert_close(cp, out, rout, f"out (S={S})", rel=rel(impl))


def sparse_inputs(gpu, cfg, kind, rng, T):
    """Scores by construction (q = u, k = beta_t u + noise, so s_t = level_t + 12 in log2
    units): every 4th token is 'high' (level 0), so every warp tile starts with one and the
    kernel's running bound can drop the rest; 'low' tokens (level -9, p ~ 3e-5 < thr: golden
    drops them) all carry v = 1, so the dropped mass adds up coherently and is visible; three
    'medium' tokens (level -3, p ~ 2e-3, just above thr) carry |v| = 20, so wrongly dropping one
    costs ~0.04, far above the allowed bound (~6e-3)."""
    hd, nkv = cfg.head_dim, cfg.nkv
    u = rng.standard_normal((nkv, hd))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)  # [G, D]
    level = np.full(T, -9.0)
    level[::4] = 0.0
    medium = rng.choice(np.arange(2, T, 4), size=3, replace=False)
    level[medium] = -3.0
    beta = (level + 12.0) * hd**0.5 / np.log2(np.e)  # [T]
    k = beta[:, None, None] * u[None] + 0.01 * rng.standard_normal((T, nkv, hd))
    v = 0.5 * rng.standard_normal((T, nkv, hd))
    v[level == -9.0] = 1.0
    v[medium] = 20.0 * np.sign(rng.standard_normal((3, nkv, hd)))
    gc = golden.KVCache(cfg, max_t=T + 5, kind=kind)
    gc.append(k.astype(np.float32), v.astype(np.float32))
    q = np.repeat(u[:, None, :], cfg.n_rep, axis=1).reshape(1, cfg.nh, hd)  # [1, H, D]
    return gc, gpu.KVCache.from_golden(gc), q.astype(np.float32)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["f32", "q8", "turbo4"])
def test_sparse_v_drops_a_subset_of_golden(cp, gpu, rng, kind, impl):
    """The kernel drops token i (for one head) only when p_i < thr is proven by its running
    bound, so |gpu - golden_sparse| <= sum over golden's dropped tokens of p_i |v_i| (+ REL), and
    it does drop: the sparse output differs from the dense one. (v0's bound runs per token, not
    per warp tile: after the second high token it already drops the low ones.)"""
    cfg = make_cfg(128, 4, 2)
    T, thr = 256, 1e-3
    gc, cache, q = sparse_inputs(gpu, cfg, kind, rng, T)
    vis = rows_visible(T - 1, 1)
    K, V = gc.keys(T).astype(np.float64), gc.values(T).astype(np.float64)
    qb = golden.wht(q[0]) if gc.k_rotated else q[0]
    s = np.einsum("gtd,grd->grt", K, qb.reshape(cfg.nkv, cfg.n_rep, -1).astype(np.float64))
    s = s.reshape(cfg.nh, T) * cfg.head_dim**-0.5 * np.log2(np.e)
    p = np.exp2(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)  # [H, T]
    dropped = p < thr
    assert dropped.mean() > 0.5, "input meant to let golden drop most low tokens"
    assert ((p >= thr) & (p < 10 * thr)).sum() >= cfg.nh, (
        "input meant to hold tokens just above thr"
    )
    Vh = np.repeat(V, cfg.n_rep, axis=0)  # [H, T, D]
    if gc.v_rotated:  # the bound lives in output space
        Vh = golden.wht(Vh.astype(np.float32)).astype(np.float64)
    bound = np.einsum("ht,htd->hd", np.where(dropped, p, 0.0), np.abs(Vh))  # [H, D]
    assert bound.max() < 0.02, "bound too loose to catch a wrongly dropped medium token"

    qd = cp.asarray(q)
    for S in (1, 2):
        *_, ref_sparse = reference(gc, q, vis, S, sparse_v=thr)
        *_, ref_dense = reference(gc, q, vis, S)
        got = cp.asnumpy(
            gpu.decode_attention(qd, cache, T - 1, n_splits=S, sparse_v=thr, impl=impl)
        )
        dense = cp.asnumpy(gpu.decode_attention(qd, cache, T - 1, n_splits=S, impl=impl))
        assert_close(cp, cp.asarray(dense), ref_dense, "dense out", rel=rel(impl))
        scale = max(1.0, float(np.abs(ref_sparse).max()))
        err = np.abs(got[0] - ref_sparse[0])
        # 1.01: the bound itself is float64 over float32 inputs; REL: float32 sums as above
        assert (err <= bound * 1.01 + rel(impl) * scale).all(), (
            f"S={S}: sparse output off by {err.max():.3g}, more than golden's dropped mass allows"
        )
        # the coherent low-token mass is ~6e-3 per dim: dropping most of it shows by > 5e-4
        assert np.abs(got - dense).max() > 5e-4 * scale, "sparse_v dropped (almost) nothing"


# The combine kernel: CTAs over dim chunks dc (hd with inverse_wht, else 64, or 32 when
# hd % 64 != 0), and in a CTA of COMBINE_NT = 256 threads, ngrp = 1024 / dc groups of dc/4
# threads, each group taking every ngrp-th split, COMBINE_UNR = 8 loads at a time. The shapes
# cover one batch (S 5), several batches (S > 8 * ngrp: 300 at hd 256 with the WHT, 1000 at
# hd 64), 32-dim chunks (hd 96: 3 CTAs), one group (hd 1024 with the WHT) and S = 1.
@pytest.mark.parametrize(
    "hd,S", [(64, 5), (64, 1000), (96, 67), (256, 5), (256, 300), (1024, 40), (128, 1)]
)
def test_combine_lse_inverse_wht_gate(cp, gpu, rng, hd, S):
    """attn_combine alone: golden combine (+ lse2), then inverse WHT, then the gate; empty splits
    (m = -inf, l = 0) add nothing, even when their o holds NaN."""
    nb, nh = 3, 4
    m = (rng.standard_normal((nb, S, nh)) * 4).astype(np.float32)
    l = rng.uniform(1, 30, (nb, S, nh)).astype(np.float32)
    o = (rng.standard_normal((nb, S, nh, hd)) * 10).astype(np.float32)
    if S > 1:
        for e in {S - 1, S // 2}:  # empty splits, poisoned o
            m[:, e], l[:, e], o[:, e] = -np.inf, 0, np.nan
    gate = (rng.standard_normal((nb, nh, hd)) * 3).astype(np.float32)
    o_ref = np.nan_to_num(o, nan=0.0)  # golden: empty adds nothing
    for inverse in (False, True) if hd & (hd - 1) == 0 else (False,):
        ref = np.empty((nb, nh, hd), np.float32)
        ref_lse = np.empty((nb, nh), np.float32)
        for b in range(nb):
            y, ref_lse[b] = golden.attn_combine(m[b], l[b], o_ref[b])
            ref[b] = golden.output_gate(golden.wht(y, inverse=True) if inverse else y, gate[b])
        out, lse = gpu.attn_combine(
            cp.asarray(m),
            cp.asarray(l),
            cp.asarray(o),
            inverse_wht=inverse,
            gate=cp.asarray(gate),
            out=poisoned(cp, (nb, nh, hd)),
            lse_out=poisoned(cp, (nb, nh)),
        )
        assert_close(cp, out, ref, f"out (inverse_wht={inverse})")
        assert_close(cp, lse, ref_lse, "lse2")


@pytest.mark.parametrize("impl", IMPLS)
def test_real_cache_append_path(cp, gpu, rng, impl):
    """The same with a cache filled by gpu.KVCache.append (as the layer does) and read back by
    to_golden: attention reads what the GPU append stored."""
    cfg = make_cfg(128, 8, 2)
    cache = gpu.KVCache(cfg, max_t=96, kind="q8")
    for nb in (5, 40, 1, 20):
        k = rng.standard_normal((nb, cfg.nkv, 128)).astype(np.float32)
        v = rng.standard_normal((nb, cfg.nkv, 128)).astype(np.float32)
        cache.append(cp.asarray(k), cp.asarray(v))
    gc = cache.to_golden()
    T, nb = len(cache), 3
    q = make_q(cfg, nb, rng)
    *_, rout = reference(gc, q, rows_visible(T - nb, nb), 2)
    out = gpu.decode_attention(cp.asarray(q), cache, T - nb, n_splits=2, impl=impl)
    assert_close(cp, out, rout, "out", rel=rel(impl))


@pytest.mark.parametrize("impl", IMPLS)
def test_deterministic(cp, gpu, rng, impl):
    cfg = make_cfg(256, 12, 2)
    gc, cache = make_cache(gpu, cfg, "q8", 500, rng)
    qd = cp.asarray(make_q(cfg, 2, rng))
    a = cp.asnumpy(gpu.decode_attention(qd, cache, 498, sparse_v=1e-3, impl=impl))
    b = cp.asnumpy(gpu.decode_attention(qd, cache, 498, sparse_v=1e-3, impl=impl))
    assert np.array_equal(a, b)


def test_combine_rejects_misaligned_o(cp, gpu):
    """The combine reads o as float4: a contiguous view that starts 4 bytes into its buffer is
    refused with an error naming o, not read misaligned."""
    nb, S, nh, hd = 1, 2, 2, 64
    flat = cp.zeros(nb * S * nh * hd + 1, cp.float32)
    o = flat[1:].reshape(nb, S, nh, hd)
    m, l = cp.zeros((nb, S, nh), cp.float32), cp.ones((nb, S, nh), cp.float32)
    with pytest.raises(ValueError, match="o must be 16-byte aligned"):
        gpu.attn_combine(m, l, o)
