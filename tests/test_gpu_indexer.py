"""GPU indexer (kernels_cuda/indexer.cu, indexer_select.cu) against the golden model: queries,
block keys, block scores, and the per-row top-k selection (ids, token lists, masks).

Tolerances: the kernels sum the block means and the scores in float64 and round once, and run
RoPE in float64, as golden does; they differ from golden only in summation order (~1e-16
relative before the float32 rounding) and in the RMSNorm mean of squares (float64 here, float32
pairwise in golden: a few float32 ulps of rstd; a numpy emulation of exactly that reaches ~2
ulps of the vector scale at worst). So norm/RoPE outputs get 16 ulps (ULPS = 16 * 2^-24,
relative, plus the same times the vector's scale for entries near 0), and scores 1 ulp.
Selection must match exactly on inputs whose score gaps exceed that by far (constructed with
gaps >= 1e-3 relative, and asserted), and on exact ties (identical block keys give identical
float32 scores on both sides: ties go to the lower index).

Rungs: every test of update_block_keys, block_scores and select_rows runs on each rung in
RUNGS (v0: kernels_cuda/indexer_v0.cu, v1: indexer.cu + indexer_select.cu) with the same
tolerances: v0 keeps v1's precision choices (float64 block mean, sum of squares, dot products,
head sum and RoPE, each rounded to float32 once), so it is held to the same 16 ulps / 1 ulp /
exact selection.
"""

import numpy as np
import pytest

import qwenref
from qwenref import golden
from qwenref.gpu.indexer import RUNGS

pytestmark = pytest.mark.gpu

ULPS = 16 * 2.0**-24


def idx_cfg(R=8, kblk=4, inh=2, ihd=32, hd=64):
    return qwenref.AttnConfig.tiny().replace(
        head_dim=hd,
        indexer_compress_ratio=R,
        indexer_budget=kblk * R,
        indexer_n_heads=inh,
        indexer_head_dim=ihd,
    )


def empty_caches(gpu, cfg, max_t, T):
    """A golden and a GPU cache of length T (K/V unused here) with zeroed indexer state."""
    gc = golden.KVCache(cfg, max_t=max_t, kind="f32")
    gc.length = T
    cache = gpu.KVCache(cfg, max_t=max_t, kind="f32")
    cache.length = T
    return gc, cache


def assert_close_ulps(cp, got, ref, what):
    got = cp.asnumpy(got)
    assert np.isfinite(got).all(), f"{what}: non-finite values (NaN poison left?)"
    scale = np.abs(ref).max(axis=-1, keepdims=True)
    err = np.abs(got - ref)
    tol = ULPS * (np.abs(ref) + scale)
    assert (err <= tol).all(), f"{what}: max err {err.max():.3g} (tol {tol.flat[err.argmax()]:.3g})"


def test_indexer_queries(cp, gpu, rng):
    """Positions up to 128k: golden's float64 angles are matched (float32 angles would be off
    by ~1e-2 rad there)."""
    nb, inh, ihd, rd = 3, 4, 128, 64
    q_raw = (rng.standard_normal((nb, inh, ihd)) * 3 + 0.5).astype(np.float32)
    q_raw[:, :, 7] *= 40.0  # an outlier channel
    w = (rng.standard_normal(ihd) * 0.2).astype(np.float32)
    pos = np.array([3, 1000, 131071], np.int32)
    ref = golden.indexer_queries(q_raw, w, pos, rd, 1e7, eps=1e-6)
    out = cp.full((nb, inh, ihd), np.nan, np.float32)
    got = gpu.indexer_queries(
        cp.asarray(q_raw), cp.asarray(w), cp.asarray(pos), rd, 1e7, eps=1e-6, out=out
    )
    assert got is out
    assert_close_ulps(cp, out, ref, "queries")


@pytest.mark.parametrize("impl", RUNGS["update_block_keys"])
@pytest.mark.parametrize("R,ihd", [(8, 32), (5, 40), (3, 100)])
def test_update_block_keys(cp, gpu, rng, impl, R, ihd):
    """Two incremental updates cover blocks [0, 3) and [3, 9) (the first ends mid-block);
    nothing else is written. R 8 with ihd 32 (rotary 16 of 32), odd R with widths that are no
    multiple of 32."""
    cfg = idx_cfg(R=R, ihd=ihd)
    T, max_t = R * 9 + R - 1, R * 12 + 4
    raw = (rng.standard_normal((max_t, ihd)) + rng.standard_normal(ihd)).astype(np.float32)
    w = (rng.standard_normal(ihd) * 0.3).astype(np.float32)
    gc, cache = empty_caches(gpu, cfg, max_t, T)
    gc.idx_keys[:] = raw
    cache.idx_keys[...] = cp.asarray(raw)
    cache.blk_keys[...] = np.nan
    assert list(golden.update_block_keys(gc, w, cfg, 0, T)) == list(range(9))
    wd = cp.asarray(w)
    t_mid = 3 * R + R // 2
    assert list(gpu.update_block_keys(cache, wd, cfg, 0, t_mid, impl=impl)) == [0, 1, 2]
    assert list(gpu.update_block_keys(cache, wd, cfg, t_mid, T, impl=impl)) == list(range(3, 9))
    assert list(gpu.update_block_keys(cache, wd, cfg, T, T, impl=impl)) == []
    got = cp.asnumpy(cache.blk_keys)
    assert_close_ulps(cp, cache.blk_keys[:9], gc.blk_keys[:9], "block keys")
    assert np.isnan(got[9:]).all(), "blocks that did not complete were written"


@pytest.mark.parametrize("impl", RUNGS["update_block_keys"])
def test_update_block_keys_far_positions(cp, gpu, rng, impl):
    """Blocks at positions near 128k with theta 1e7 and a full-width rotary (64 of 96 dims):
    golden's float64 angles are matched (float32 angles would be off by ~1e-2 rad there). An
    update of 200 blocks spans two CTAs of the v0 kernel."""
    R, ihd = 64, 96
    cfg = idx_cfg(R=R, ihd=ihd).replace(partial_rotary_factor=1.0, rope_theta=1e7)
    assert cfg.indexer_rotary_dim == 64
    max_t = 2048 * R + 5
    t0, t1 = max_t - 200 * R - 5, max_t - 3
    raw = np.zeros((max_t, ihd), np.float32)
    raw[t0 - R :] = rng.standard_normal((max_t - t0 + R, ihd)) * 2 + rng.standard_normal(ihd)
    w = (rng.standard_normal(ihd) * 0.3).astype(np.float32)
    _, cache = empty_caches(gpu, cfg, max_t, max_t)
    cache.idx_keys[...] = cp.asarray(raw)
    cache.blk_keys[...] = np.nan
    blocks = gpu.update_block_keys(cache, cp.asarray(w), cfg, t0, t1, impl=impl)
    assert list(blocks) == list(range(t0 // R, t1 // R)) and len(blocks) == 200
    ref = golden.block_keys(
        raw, blocks, R, w, cfg.indexer_rotary_dim, cfg.rope_theta, cfg.rms_norm_eps
    )
    assert_close_ulps(cp, cache.blk_keys[blocks[0] : blocks[-1] + 1], ref, "block keys")
    got = cp.asnumpy(cache.blk_keys)
    assert np.isnan(got[: blocks[0]]).all() and np.isnan(got[blocks[-1] + 1 :]).all(), (
        "blocks outside [t0 // R, t1 // R) were written"
    )


@pytest.mark.parametrize("impl", RUNGS["block_scores"])
@pytest.mark.parametrize(
    "inh,ihd", [(3, 32), (8, 128), (12, 40), (1, 512), (17, 96), (4, 64), (9, 256)]
)
def test_block_scores(cp, gpu, rng, inh, ihd, impl):
    """Rows crossing a block boundary; past a row's complete blocks the score is -inf. Head
    counts below, at and past the kernel's group of 8 (12, 17: a partial second / third group),
    the chunked layout (ihd 64, 128, 256, 512) and any other width (32, 40, 96)."""
    cfg = idx_cfg(R=8, inh=inh, ihd=ihd)
    T, max_t, nb = 8 * 6 + 1, 80, 3  # rows t = 46, 47, 48: nc 5, 6, 6
    gc, cache = empty_caches(gpu, cfg, max_t, T)
    bk = rng.standard_normal((max_t // 8, ihd)).astype(np.float32)
    cache.blk_keys[...] = cp.asarray(bk)
    q = rng.standard_normal((nb, inh, ihd)).astype(np.float32)
    base_pos = T - nb
    out = gpu.block_scores(
        cp.asarray(q), cache, base_pos, out=cp.full((nb, max_t // 8), np.nan, np.float32), impl=impl
    )
    got = cp.asnumpy(out)
    for b in range(nb):
        nc = (base_pos + b + 1) // 8
        ref = golden.block_scores(q[b], bk[:nc])
        d = q[b] @ bk[:nc].T  # [inh, nc]
        if inh > 1:
            assert (d < 0).any() and (d > 0).any(), "input meant to make relu matter"
        # both sides: float64 sums rounded once -> equal up to one float32 ulp
        assert np.abs(got[b, :nc] - ref).max() <= 2.0**-23 * np.abs(ref).max(), f"row {b}"
        assert np.isneginf(got[b, nc:]).all()


def designed_scores_cache(cp, gpu, cfg, max_t, T, nb, rng, ties=None, zeros=()):
    """Block keys and queries whose scores are c_j * const with c_j = 1.01^perm_j (relative gaps
    ~1%), plus tiny noise; `ties` = block ids given identical keys, `zeros` = block ids whose
    dot with every query head is negative (score exactly 0)."""
    R, ihd, inh = cfg.indexer_compress_ratio, cfg.indexer_head_dim, cfg.indexer_n_heads
    nblk = max_t // R
    e = rng.standard_normal(ihd)
    e /= np.linalg.norm(e)
    c = 1.01 ** rng.permutation(nblk)
    bk = c[:, None] * e[None] + 1e-6 * rng.standard_normal((nblk, ihd))
    if ties is not None:
        bk[list(ties)] = bk[ties[0]]
    for j in zeros:
        bk[j] = -bk[j]
    q = rng.uniform(0.5, 2.0, (nb, inh, 1)) * e + 1e-6 * rng.standard_normal((nb, inh, ihd))
    bk, q = bk.astype(np.float32), q.astype(np.float32)
    _, cache = empty_caches(gpu, cfg, max_t, T)
    cache.blk_keys[...] = cp.asarray(bk)
    return cache, bk, q


def check_selection(cp, got, q, bk, base_pos, cfg, min_gap=1e-3):
    sel_idx, sel_n, mask = (cp.asnumpy(a) for a in got)
    R, kblk = cfg.indexer_compress_ratio, cfg.kblk
    nb = q.shape[0]
    assert sel_idx.shape == (nb, kblk * R + R) and mask.shape == (nb, bk.shape[0])
    for b in range(nb):
        t = base_pos + b
        nc = (t + 1) // R
        idx_ref, mask_ref = golden.row_selection(t, q[b], bk, R, kblk)
        assert (mask[b, nc:] == 0).all(), f"row {b}: mask set past the complete blocks"
        assert (mask[b, :nc] == mask_ref).all(), f"row {b}: block mask differs from golden"
        if nc <= kblk:
            assert sel_n[b] == 0 and (sel_idx[b] == -1).all(), f"row {b} (nc={nc}) must be dense"
            continue
        if min_gap:
            s = np.sort(golden.block_scores(q[b], bk[: nc - 1]).astype(np.float64))
            gap = np.min(np.diff(s) / s[1:])
            assert gap >= min_gap, f"row {b}: score gap {gap:.2g} too small for a meaningful test"
        n = sel_n[b]
        assert n == len(idx_ref), f"row {b}: sel_n {n} != {len(idx_ref)}"
        assert (sel_idx[b, :n] == idx_ref).all(), f"row {b}: token list differs from golden"
        assert (sel_idx[b, n:] == -1).all(), f"row {b}: entries past sel_n must be -1"


def poisoned_outputs(cp, nb, cfg, nblk):
    W = cfg.kblk * cfg.indexer_compress_ratio + cfg.indexer_compress_ratio
    return dict(
        sel_idx_out=cp.full((nb, W), 12345, cp.int32),
        sel_n_out=cp.full((nb,), 777, cp.int32),
        mask_out=cp.full((nb, nblk), 7, cp.uint8),
        scores_out=cp.full((nb, nblk), np.nan, cp.float32),
    )


def check_scores_out(cp, scores, q, bk, base_pos, R):
    """select_rows' scores_out: golden's scores (1 ulp) on the complete blocks, -inf after."""
    s = cp.asnumpy(scores)
    for b in range(q.shape[0]):
        nc = (base_pos + b + 1) // R
        assert np.isneginf(s[b, nc:]).all(), f"row {b}: scores past the complete blocks"
        if nc:
            ref = golden.block_scores(q[b], bk[:nc])
            assert np.abs(s[b, :nc] - ref).max() <= 2.0**-23 * np.abs(ref).max(), f"row {b}"


@pytest.mark.parametrize("impl", RUNGS["select"])
def test_select_first_selective_row(cp, gpu, rng, impl):
    """kblk = 4, R = 8: rows t = 37, 38 (nc = 4: dense, the last dense one is t+1 = 39), t = 39
    (t+1 = 40 = (kblk+1)*R: the first selective row, no tail) and t = 40 (tail of 1)."""
    cfg = idx_cfg(R=8, kblk=4)
    max_t, nb, base_pos = 64, 4, 37
    cache, bk, q = designed_scores_cache(cp, gpu, cfg, max_t, base_pos + nb, nb, rng)
    outs = poisoned_outputs(cp, nb, cfg, max_t // 8)
    got = gpu.select_rows(cp.asarray(q), cache, base_pos, cfg, impl=impl, **outs)
    assert got[0] is outs["sel_idx_out"] and got[1] is outs["sel_n_out"]
    assert got[2] is outs["mask_out"]
    check_selection(cp, got, q, bk, base_pos, cfg)
    check_scores_out(cp, outs["scores_out"], q, bk, base_pos, 8)
    assert cp.asnumpy(got[1]).tolist() == [0, 0, 32, 33]


@pytest.mark.parametrize("impl", RUNGS["select"])
def test_select_rows_without_complete_blocks(cp, gpu, rng, impl):
    """The first rows of a sequence: t = 0 .. 6 have no complete block (nc = 0), t = 7 has one;
    all dense: sel_n 0, sel_idx all -1, mask 0 (and 1 for t = 7's block), scores -inf."""
    cfg = idx_cfg(R=8, kblk=4)
    max_t, nb, base_pos = 64, 8, 0
    cache, bk, q = designed_scores_cache(cp, gpu, cfg, max_t, nb, nb, rng)
    outs = poisoned_outputs(cp, nb, cfg, max_t // 8)
    got = gpu.select_rows(cp.asarray(q), cache, base_pos, cfg, impl=impl, **outs)
    check_selection(cp, got, q, bk, base_pos, cfg)
    check_scores_out(cp, outs["scores_out"], q, bk, base_pos, 8)
    assert (cp.asnumpy(got[1]) == 0).all()
    assert cp.asnumpy(got[2]).sum(axis=1).tolist() == [0] * 7 + [1]


@pytest.mark.parametrize("impl", RUNGS["select"])
@pytest.mark.parametrize("n_slots,kblk", [(1100, 32), (8192, 300)])
def test_select_many_blocks(cp, gpu, rng, n_slots, kblk, impl):
    """kblk = 32 over 1100 block slots (the kernel's ITEMS 8 instance, last warp partly empty:
    the fast path) and kblk = 300 over the most the kernel takes (8192 = 32 per thread: the
    radix select), rows crossing a block boundary."""
    cfg = idx_cfg(R=8, kblk=kblk, inh=4, ihd=64)
    max_t, nb = 8 * n_slots, 3
    base_pos = max_t - nb  # t = max_t - 3 .. max_t - 1: the last row completes a block
    cache, bk, q = designed_scores_cache(cp, gpu, cfg, max_t, max_t, nb, rng)
    got = gpu.select_rows(
        cp.asarray(q), cache, base_pos, cfg, impl=impl, **poisoned_outputs(cp, nb, cfg, max_t // 8)
    )
    check_selection(cp, got, q, bk, base_pos, cfg)


@pytest.mark.parametrize("impl", RUNGS["select"])
@pytest.mark.parametrize("zeros", [False, True])
def test_select_exact_ties_go_to_the_lower_index(cp, gpu, rng, zeros, impl):
    """Identical block keys (or scores exactly 0 after relu) straddling the selection boundary:
    the lower indices win, as in golden's stable sort."""
    cfg = idx_cfg(R=8, kblk=4)
    max_t, nb = 8 * 40, 2
    base_pos = 8 * 20 - 1  # nc = 20, 20: 19 candidates, keep 3
    if zeros:
        # every candidate but 1 scores exactly 0: the 2 zero-slots go to the lowest indices
        others = [j for j in range(19) if j != 11]
        cache, bk, q = designed_scores_cache(
            cp, gpu, cfg, max_t, base_pos + nb, nb, rng, zeros=others
        )
    else:
        cache, bk, q = designed_scores_cache(cp, gpu, cfg, max_t, base_pos + nb, nb, rng)
        s = golden.block_scores(q[0], bk[:19])
        order = np.argsort(-s, kind="stable")
        tie = sorted(order[1:6].tolist())  # ranks 2..6 tie: 2 of 5 kept
        bk[tie] = bk[tie[0]]
        cache.blk_keys[...] = cp.asarray(bk)
    got = gpu.select_rows(
        cp.asarray(q), cache, base_pos, cfg, impl=impl, **poisoned_outputs(cp, nb, cfg, max_t // 8)
    )
    check_selection(cp, got, q, bk, base_pos, cfg, min_gap=0)
    for b in range(nb):
        s = golden.block_scores(q[b], bk[:19])
        kept = np.flatnonzero(cp.asnumpy(got[2])[b, :19])
        boundary = np.sort(s)[::-1][2]  # the 3rd best candidate score
        assert (s == boundary).sum() > 1, "input meant to tie at the selection boundary"
        assert (s[kept] >= boundary).all()


@pytest.mark.parametrize("impl", RUNGS["select"])
def test_selection_drives_attention(cp, gpu, rng, impl):
    """select_rows' lists fed to decode_attention: equal to golden attention over golden's
    row_selection tokens (dense rows included)."""
    cfg = idx_cfg(R=8, kblk=4)
    T, nb = 44, 5  # t = 39..43: first selective is 39
    gc = golden.KVCache(cfg, max_t=64, kind="q8")
    k = rng.standard_normal((T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    v = rng.standard_normal((T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    gc.append(k, v, index_k=rng.standard_normal((T, 32)).astype(np.float32))
    cache = gpu.KVCache.from_golden(gc)
    base_pos = T - nb - 1  # t = 38 (dense) .. 42
    _, bk, qi = designed_scores_cache(cp, gpu, cfg, 64, T, nb, rng)
    cache.blk_keys[...] = cp.asarray(bk)
    sel_idx, sel_n, _ = gpu.select_rows(cp.asarray(qi), cache, base_pos, cfg, impl=impl)
    q = (rng.standard_normal((nb, cfg.nh, cfg.head_dim)) * 0.7).astype(np.float32)
    out = cp.asnumpy(
        gpu.decode_attention(
            cp.asarray(q), cache, base_pos, n_splits=2, sel_idx=sel_idx, sel_n=sel_n
        )
    )
    K, V = gc.keys(T), gc.values(T)
    assert (cp.asnumpy(sel_n) == 0).any() and (cp.asnumpy(sel_n) > 0).any()
    for b in range(nb):
        idx, _ = golden.row_selection(base_pos + b, qi[b], bk, 8, 4)
        ref = golden.decode_attention(q[b], K[:, idx], V[:, idx], n_splits=2)
        # float32 kernel sums vs golden float64: see tests/test_gpu_attention.py (REL = 2e-5)
        scale = max(1.0, float(np.abs(ref).max()))
        assert np.abs(out[b] - ref).max() <= 2e-5 * (scale + np.abs(ref)).max(), f"row {b}"


@pytest.mark.parametrize("impl", RUNGS["select"])
@pytest.mark.parametrize("kind", ["rand", "ties_at_boundary", "all_equal", "ascending", "denormal"])
@pytest.mark.parametrize(
    "nblk,kblk", [(2048, 32), (2049, 64), (8192, 129), (8192, 130), (400, 100), (1000, 40), (37, 1)]
)
def test_select_kernel_on_given_scores(cp, gpu, rng, kind, nblk, kblk, impl):
    """The selection kernel launched on score rows given directly (-inf past nc, as block_scores
    writes): exact against golden on each of v1's paths: the group-maximum filter (rand,
    ascending, denormal), its fallback to the radix select when the filter keeps > 512 candidates
    (a 30% tie group at the boundary, all equal) and K = kblk - 1 > 128 (kblk 130); kernels of
    every Q (2, 4, 8) and ITEMS 2 to 32, one with fewer items per thread than groups (400, 100:
    ITEMS 2, Q 8); kblk 1 keeps only the latest block (K = 0). Every rung gets the same rows."""
    from qwenref.gpu.indexer import _launch_select

    R, nb = 8, 3
    base_pos = nblk * R - nb  # rows t = nblk*R - 3 .. - 1
    S = np.full((nb, nblk), -np.inf, np.float32)
    for b in range(nb):
        nc = (base_pos + b + 1) // R
        v = {
            "rand": lambda: rng.standard_normal(nc),
            "ties_at_boundary": lambda: np.where(
                rng.random(nc) < 0.3, 3.0, rng.standard_normal(nc)
            ),
            "all_equal": lambda: np.zeros(nc),
            "ascending": lambda: np.arange(nc, dtype=np.float64),
            # below 2^-126 (and +-0.0): ordered by their bits, not by flushed arithmetic
            "denormal": lambda: rng.standard_normal(nc) * 1e-41,
        }[kind]()
        S[b, :nc] = v
    W = kblk * R + R
    out = (
        cp.full((nb, W), 12345, cp.int32),
        cp.full((nb,), 777, cp.int32),
        cp.full((nb, nblk), 7, cp.uint8),
    )
    _launch_select(impl, cp.asarray(S), nb, nblk, base_pos, R, kblk, *out)
    sel_idx, sel_n, mask = (cp.asnumpy(a) for a in out)
    for b in range(nb):
        t = base_pos + b
        nc = (t + 1) // R
        idx, m = golden.visible_tokens(t, golden.select_blocks(S[b, :nc], kblk), R)
        assert sel_n[b] == len(idx), f"row {b}"
        assert (sel_idx[b, : len(idx)] == idx).all() and (sel_idx[b, len(idx) :] == -1).all(), (
            f"row {b}: token list differs from golden"
        )
        assert (mask[b, :nc] == m).all() and (mask[b, nc:] == 0).all(), f"row {b}: mask"


@pytest.mark.parametrize("impl", [None, *RUNGS["select"]])
def test_argument_checks(cp, gpu, rng, impl):
    cfg = idx_cfg()
    _, cache = empty_caches(gpu, cfg, 64, 20)
    q = cp.zeros((2, 2, 32), cp.float32)
    with pytest.raises(ValueError, match="base_pos"):
        gpu.select_rows(q, cache, 19, cfg, impl=impl)
    with pytest.raises(ValueError, match="base_pos"):  # more blocks than rows
        gpu.select_rows(
            q, cache, 18, cfg.replace(indexer_compress_ratio=1, indexer_budget=4), impl=impl
        )
    with pytest.raises(ValueError, match="q"):
        gpu.block_scores(cp.zeros((2, 2, 16), cp.float32), cache, 0, impl=impl)
    with pytest.raises(ValueError, match="indexer"):
        gpu.select_rows(
            q,
            cache,
            0,
            cfg.replace(
                indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
            ),
            impl=impl,
        )
    with pytest.raises(ValueError, match="t1"):
        gpu.update_block_keys(cache, cp.zeros(32, cp.float32), cfg, 10, 5, impl=impl)
    with pytest.raises(ValueError, match="t1"):
        gpu.update_block_keys(cache, cp.zeros(32, cp.float32), cfg, 0, 21, impl=impl)
    with pytest.raises(ValueError, match="impl"):
        gpu.select_rows(q, cache, 0, cfg, impl="bogus")
    with pytest.raises(ValueError, match="impl"):
        gpu.block_scores(q, cache, 0, impl="v2")
    with pytest.raises(ValueError, match="impl"):
        gpu.update_block_keys(cache, cp.zeros(32, cp.float32), cfg, 0, 8, impl="V0")
    with pytest.raises(TypeError, match="positions"):
        gpu.indexer_queries(q, cp.zeros(32, cp.float32), cp.zeros(2, cp.int64), 16, 1e4)
    with pytest.raises(ValueError, match="rotary_dim"):
        gpu.indexer_queries(q, cp.zeros(32, cp.float32), cp.zeros(2, cp.int32), 33, 1e4)
