"""Tensor-core decode partials of every cache kind (attn_partials_<kind>_mma_* in
kernels_cuda/attention_mma.cu, built from the tile loaders of kv_tile.cuh) against the golden
model: bf16, turbo8/4/3/2, bf16 K with turbo V, tq4/3/2 (their only rung), and q8 through the
same body.

The cache is built by golden.KVCache.append and copied as stored into a gpu.KVCache, so both
sides read identical bytes. References: golden.attn_partials per row over the row's visible
tokens with the same n_splits (m, l, o), q rotated first where K is stored rotated, and
attn_combine of those (out), inverse-rotated where V is.

Tolerance, per kind, from what the kernel rounds (u16 = 2^-11 fp16, ub = 2^-8 bf16):
  * K operands are exact (int8, bf16, and turbo codes as the half-integers c - (2^N - 1)/2 in
    fp16; the scale multiplies an fp32 sum) except tq's: its table holds fp16(f C), f chosen so
    those round least (gpu.kvcache.tq_fp16_scale), and q carries 1/f in float32: each value is
    off by at most the table's own relative error (<= 1e-4, computed below) plus float32
    rounding, U_Q in the score bound below (tq's gamma multiplies the fp32 score, and V's gamma
    and 1/f go into P: P' = fp16(p 2^PS gamma / f)). q goes in as hi + lo:
    fp16 pairs carry ~22 bits (a float32-level error, inside REL as for q8), bf16 pairs (bf16 K)
    |q - hi - lo| <= ub^2 |q|, U_Q = ub^2. A score then moves by at most
    U_Q * sum_i |q_i k_i| * hd^-0.5 * log2(e) =: U_Q * sb. That moves m by <= U_Q sb and each
    weight 2^(s - m) by a relative <= 2 ln2 U_Q sb (s and m each), hence l and o by the same
    relative amount of l and of golden's |V| partials.
  * P.V: scaled V kinds round P = fp16(p 2^PS) and V' = fp16(code * d) once each: a term is off
    by <= 2 u16 + u16^2 relative (U_PV, as q8). bf16 V is exact and P goes in as bf16 hi + lo:
    <= ub^2 relative. So |o - o_ref| <= U_PV * (golden partials of |V|), and on out the same
    through the combine; a rotated V's error passes the orthonormal inverse WHT, which spreads an
    elementwise bound b to at most sum(b) / sqrt(hd) on every dim.
A lost or doubled token, a wrong code, nibble, scale or column moves the output by ~p_t |v_t|,
far over these bounds for the inputs here (scores of std ~1, a few hundred tokens or more).
"""

import numpy as np
import pytest
from gpu_checks import assert_partials_close
from test_gpu_attention import make_cache
from test_gpu_attention_mma import make_cfg, make_q, poisoned, selection

import qwenref.gpu.attention as gpu_attention
from qwenref import golden
from qwenref.gpu.kvcache import tq_fp16_scale
from qwenref.layout import side_kinds, tq_bits

pytestmark = pytest.mark.gpu

REL = 2e-5  # float32-level part (as v1): scores, l, the combine
U16, UB = 2.0**-11, 2.0**-8
LN2 = np.log(2.0)
KINDS = [k for k in golden.CACHE_KINDS if side_kinds(k) in gpu_attention.MMA_KINDS]


KINDS_V1 = [k for k in KINDS if side_kinds(k) not in gpu_attention.MMA_ONLY_PAIRS]


def tq_table_error(bits):
    """The largest relative error of the decode table's fp16(f C) against f C, plus float32's
    (f C and 1/f are float32 products)."""
    v = golden.tq_codebook(bits).astype(np.float32) * tq_fp16_scale(bits)
    err = np.abs(v.astype(np.float16).astype(np.float64) / v.astype(np.float64) - 1.0).max()
    return float(err) + 2.0**-22


def u_q(kind):
    k_side = side_kinds(kind)[0]
    if k_side.startswith("tq"):  # the same table value for every use of a code
        return tq_table_error(tq_bits(k_side))
    return UB * UB if k_side == "bf16" else 0.0


def u_pv(kind):
    return UB * UB if side_kinds(kind)[1] == "bf16" else 2 * U16 + U16 * U16


class Ref:
    """golden per row over `lists[b]`: m, l, o, oa (partials of |V|) [nb, S, nh(, hd)], out and
    its elementwise bound out_b [nb, nh, hd], and sb [nb, nh] (the score bound's sum)."""

    def __init__(self, gc, kind, q, lists, S):
        T, hd = len(gc), gc.cfg.head_dim
        K, V = gc.keys(T), gc.values(T)
        n_rep = gc.cfg.n_rep
        self.kind, self.hd, self.v_rot = kind, hd, gc.v_rotated
        acc = {n: [] for n in ("m", "l", "o", "oa", "out", "outa", "sb")}
        for b, idx in enumerate(lists):
            qb = golden.wht_signed(q[b], gc.k_signs) if gc.k_rotated else q[b]
            m, l, o = golden.attn_partials(qb, K[:, idx], V[:, idx], S)
            _, _, oa = golden.attn_partials(qb, K[:, idx], np.abs(V[:, idx]), S)
            y, _ = golden.attn_combine(m, l, o)
            ya, _ = golden.attn_combine(m, l, oa)
            if gc.v_rotated:
                y = golden.wht_signed(y, gc.v_signs, inverse=True)
            qa = np.abs(qb.astype(np.float64)).reshape(gc.cfg.nkv, n_rep, hd)
            ka = np.abs(K[:, idx].astype(np.float64))
            sb = np.einsum("grd,gtd->grt", qa, ka).max(-1).reshape(-1)
            sb *= hd**-0.5 * np.log2(np.e)
            for n, x in zip(acc, (m, l, o, oa, y, ya, sb)):
                acc[n].append(x)
        for n, x in acc.items():
            setattr(self, n, np.stack(x))

    def check(self, cp, m, l, o, out):
        """m, l, o (any may be None) and out against the bounds of the module docstring."""
        uq, upv = u_q(self.kind), u_pv(self.kind)
        w = 2 * LN2 * uq * self.sb  # relative move of each weight from the q split [nb, nh]
        if m is not None:
            mb = np.broadcast_to((uq * self.sb)[:, None, :], self.m.shape)
            assert_partials_close(cp, m, self.m, "m", REL, mb)
            assert_partials_close(cp, l, self.l, "l", REL, w[:, None, :] * self.l)
            bound = (upv + w[:, None, :, None]) * self.oa
            assert_partials_close(cp, o, self.o, "o", REL, 1.01 * bound)
        bound = (upv + w[..., None]) * self.outa
        if self.v_rot:  # the inverse WHT spreads the bound over every dim
            bound = np.broadcast_to(bound.sum(-1, keepdims=True) / np.sqrt(self.hd), bound.shape)
        assert_partials_close(cp, out, self.out, "out", REL, 1.01 * bound)


# T, nb, S: one token; T = 33 (a 1-token split, empty splits for rows that see <= 32); rows
# whose split bounds differ (97, nb 2, S 3); many pipeline blocks per split with 1..4 rows
SHAPES = [(1, 1, 1), (33, 2, 3), (97, 2, 3), (1000, 3, 3), (5000, 1, 4), (5000, 4, 6)]
HEADS = [(256, 6), (128, 2)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hd,n_rep", HEADS, ids=[f"hd{h}-nrep{r}" for h, r in HEADS])
@pytest.mark.parametrize("T,nb,S", SHAPES, ids=[f"T{t}-nb{b}-S{s}" for t, b, s in SHAPES])
def test_mma_partials_match_golden(cp, gpu, rng, kind, hd, n_rep, T, nb, S):
    cfg = make_cfg(hd, n_rep)
    nh = cfg.nh
    gc, cache = make_cache(gpu, cfg, kind, T, rng)
    base_pos = T - nb
    q = make_q(cfg, nb, rng, head_scales=(T == 1000))
    ref = Ref(gc, kind, q, [np.arange(base_pos + b + 1) for b in range(nb)], S)

    p = gpu_attention.plan(cache, nb, base_pos=base_pos, n_splits=S, impl="mma")
    assert p.rung == "mma", f"the tensor-core path does not apply: {p.why}"
    assert (p.kernel, p.n_splits) == (gpu_attention.mma_kernel_name(nb, n_rep, False, kind), S)
    m, l, o = poisoned(cp, (nb, S, nh)), poisoned(cp, (nb, S, nh)), poisoned(cp, (nb, S, nh, hd))
    gpu.attn_partials(cp.asarray(q), cache, base_pos, m_out=m, l_out=l, o_out=o, plan=p)
    out = gpu.decode_attention(
        cp.asarray(q), cache, base_pos, out=poisoned(cp, (nb, nh, hd)), plan=p
    )
    ref.check(cp, m, l, o, out)
    # the call's own plan is p: same kernel and splits, same bits
    again = gpu.decode_attention(cp.asarray(q), cache, base_pos, n_splits=S, impl="mma")
    cp.testing.assert_array_equal(again, out)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hd,n_rep", HEADS, ids=[f"hd{h}-nrep{r}" for h, r in HEADS])
def test_mma_selective_row(cp, gpu, rng, kind, hd, n_rep):
    """One selective row through attn_partials_<kind>_mma_sel_n1: golden over the listed tokens
    (pipeline blocks straddling the gaps between kept blocks, a tail, several splits)."""
    cfg = make_cfg(hd, n_rep)
    T, S = 2000, 4
    gc, cache = make_cache(gpu, cfg, kind, T, rng)
    idx = selection(rng, T, 9, 48)
    q = make_q(cfg, 1, rng, head_scales=True)
    ref = Ref(gc, kind, q, [idx], S)
    si, sn = cp.asarray(idx[None].copy()), cp.asarray(np.array([len(idx)], np.int32))
    p = gpu_attention.plan(
        cache, 1, base_pos=T - 1, selective=True, width=len(idx), n_splits=S, impl="mma"
    )
    assert (p.rung, p.kernel) == ("mma", gpu_attention.mma_kernel_name(1, n_rep, True, kind))
    m, l, o = (poisoned(cp, s) for s in ((1, S, cfg.nh), (1, S, cfg.nh), (1, S, cfg.nh, hd)))
    gpu.attn_partials(
        cp.asarray(q), cache, T - 1, sel_idx=si, sel_n=sn, m_out=m, l_out=l, o_out=o, plan=p
    )
    out = gpu.decode_attention(cp.asarray(q), cache, T - 1, sel_idx=si, sel_n=sn, plan=p)
    ref.check(cp, m, l, o, out)


QUAD = ("-DMMA_TQ2_QUAD=1",)  # tq2's codes looked up four at a time (kv_tile_tq.cuh's TqTable)


@pytest.mark.parametrize("hd,n_rep", HEADS, ids=[f"hd{h}-nrep{r}" for h, r in HEADS])
@pytest.mark.parametrize("T,nb,S", SHAPES[3:], ids=[f"T{t}-nb{b}-S{s}" for t, b, s in SHAPES[3:]])
def test_tq2_quad_table_matches_golden(cp, gpu, rng, hd, n_rep, T, nb, S):
    """The quad lookups permute K's dims within a thread's k-indices and pair V's two tokens and
    two dims in one index: the same bounds as the pair table, at 1, 3 and 4 rows."""
    cfg = make_cfg(hd, n_rep)
    gc, cache = make_cache(gpu, cfg, "tq2", T, rng)
    base_pos = T - nb
    q = make_q(cfg, nb, rng, head_scales=True)
    ref = Ref(gc, "tq2", q, [np.arange(base_pos + b + 1) for b in range(nb)], S)
    p = gpu_attention.plan(cache, nb, base_pos=base_pos, n_splits=S, impl="mma", options=QUAD)
    assert p.rung == "mma" and "-DMMA_TQ2_QUAD=1" in p.options
    assert p.smem == gpu_attention.mma_smem_bytes(hd, -(-nb * n_rep // 8), QUAD, "tq2")
    nh = cfg.nh
    m, l, o = poisoned(cp, (nb, S, nh)), poisoned(cp, (nb, S, nh)), poisoned(cp, (nb, S, nh, hd))
    gpu.attn_partials(cp.asarray(q), cache, base_pos, m_out=m, l_out=l, o_out=o, plan=p)
    out = gpu.decode_attention(cp.asarray(q), cache, base_pos, plan=p)
    ref.check(cp, m, l, o, out)


@pytest.mark.parametrize("hd", [128, 256])
def test_tq2_quad_selective_row(cp, gpu, rng, hd):
    cfg = make_cfg(hd, 6)
    T, S = 2000, 4
    gc, cache = make_cache(gpu, cfg, "tq2", T, rng)
    idx = selection(rng, T, 9, 48)
    q = make_q(cfg, 1, rng, head_scales=True)
    ref = Ref(gc, "tq2", q, [idx], S)
    si, sn = cp.asarray(idx[None].copy()), cp.asarray(np.array([len(idx)], np.int32))
    p = gpu_attention.plan(
        cache,
        1,
        base_pos=T - 1,
        selective=True,
        width=len(idx),
        n_splits=S,
        impl="mma",
        options=QUAD,
    )
    out = gpu.decode_attention(cp.asarray(q), cache, T - 1, sel_idx=si, sel_n=sn, plan=p)
    ref.check(cp, None, None, None, out)


TQ = [k for k in KINDS if side_kinds(k) in gpu_attention.MMA_ONLY_PAIRS]


@pytest.mark.parametrize("kind", TQ)
def test_tq_rows_in_groups_match_golden(cp, gpu, rng, kind):
    """Rows beyond one mma launch (a tq cache has no other rung): 7 dense rows of 6 heads run as
    5 + 2, and 3 selective rows (one dense, two with their own lists) one at a time; each row
    against golden over its own tokens, and each group's rows are those of a call of its own."""
    cfg = make_cfg(256, 6)
    T, S = 3000, 3
    gc, cache = make_cache(gpu, cfg, kind, T, rng)
    nb = 7
    q = make_q(cfg, nb, rng, head_scales=True)
    p = gpu_attention.plan(cache, nb, base_pos=T - nb, n_splits=S)
    assert (p.rung, p.rows) == ("mma", 5)
    out = gpu.decode_attention(cp.asarray(q), cache, T - nb, out=poisoned(cp, q.shape), plan=p)
    Ref(gc, kind, q, [np.arange(T - nb + b + 1) for b in range(nb)], S).check(
        cp, None, None, None, out
    )
    tail = gpu.decode_attention(cp.asarray(q[5:]), cache, T - 2, n_splits=S)
    cp.testing.assert_array_equal(out[5:], tail)  # the second group is rows 5, 6 on their own

    lists = [np.arange(T - 2), selection(rng, T - 1, 7, 48), selection(rng, T, 9, 48)]
    width = max(len(x) for x in lists)
    si = np.zeros((3, width), np.int32)
    for b, x in enumerate(lists[1:], 1):
        si[b, : len(x)] = x
    sn = np.array([0] + [len(x) for x in lists[1:]], np.int32)  # row 0 dense
    q3 = make_q(cfg, 3, rng)
    ps = gpu_attention.plan(cache, 3, base_pos=T - 3, selective=True, width=width, n_splits=S)
    assert (ps.rung, ps.rows, ps.kernel) == ("mma", 1, f"attn_partials_{kind}_mma_sel_n1")
    args = dict(sel_idx=cp.asarray(si), sel_n=cp.asarray(sn), plan=ps)
    m, l, o = gpu.attn_partials(cp.asarray(q3), cache, T - 3, **args)
    out3 = gpu.decode_attention(cp.asarray(q3), cache, T - 3, **args)
    Ref(gc, kind, q3, lists, S).check(cp, m, l, o, out3)


@pytest.mark.parametrize("kind", KINDS_V1)
def test_mma_matches_v1_at_the_27b_shape(cp, gpu, rng, kind):
    """4 kv heads, n_rep 6, hd 256, 4 rows: the tensor-core and CUDA-core rungs agree within
    the mma bound, and both with golden."""
    cfg = make_cfg(256, 6, nkv=4)
    T, nb, S = 4000, 4, 9
    gc, cache = make_cache(gpu, cfg, kind, T, rng)
    q = make_q(cfg, nb, rng)
    ref = Ref(gc, kind, q, [np.arange(T - nb + b + 1) for b in range(nb)], S)
    qd = cp.asarray(q)
    a = gpu.decode_attention(qd, cache, T - nb, n_splits=S, impl="mma")
    b = gpu.decode_attention(qd, cache, T - nb, n_splits=S, impl="v1")
    ref.check(cp, None, None, None, a)
    ref.check(cp, None, None, None, b)
    assert not cp.array_equal(a, b)  # two kernels indeed (fp16 / bf16 operands vs float32)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hd", [128, 256])
def test_smem_layout_matches_kernel(cp, gpu, kind, hd):
    """The plans' dynamic shared memory (NT8 = 1..4) equals the kernel's own layout, per kind."""
    from qwenref.gpu._runtime import kernel

    gc = golden.KVCache(make_cfg(hd, 6), max_t=64, kind=kind)
    plans = [gpu_attention.plan_rung(gc, nb, impl="mma") for nb in (1, 2, 3, 5)]
    sfx = gpu_attention.MMA_KINDS[side_kinds(kind)]
    assert [p.kernel for p in plans] == [f"attn_partials_{sfx}_mma_n{n}" for n in (1, 2, 3, 4)]
    out = cp.zeros(4, np.int32)
    kernel("attention_mma", f"attn_mma_smem_bytes_{sfx}", plans[0].options)((1,), (1,), (out,))
    assert cp.asnumpy(out).tolist() == [p.smem for p in plans]
    if kind == "tq2":  # the quad table's layout too
        opts = plans[0].options + QUAD
        kernel("attention_mma", f"attn_mma_smem_bytes_{sfx}", opts)((1,), (1,), (out,))
        assert cp.asnumpy(out).tolist() == [
            gpu_attention.mma_smem_bytes(hd, n, QUAD, kind) for n in (1, 2, 3, 4)
        ]
