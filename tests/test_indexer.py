"""golden.indexer: projection, queries and block keys against a direct float64 computation;
scoring; the selection rule's invariants (latest block kept, ties -> lower index, n_vis, causal,
dense until kblk blocks complete); update_block_keys across block boundaries."""

import math

import numpy as np
import pytest

from qwenref.golden.indexer import (
    block_keys,
    block_scores,
    indexer_project,
    indexer_queries,
    row_selection,
    select_blocks,
    update_block_keys,
    visible_tokens,
)


# ---- float64 references (independent of golden.norm / golden.rope) ----------------------------
def ref_rms_norm(x, w, eps):
    x = np.asarray(x, np.float64)
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x / rms * (1.0 + np.asarray(w, np.float64))


def ref_rope(x, positions, rd, theta):
    """Rotate-half on the first rd dims of the last axis; x [n, ..., d], positions [n]."""
    x = np.asarray(x, np.float64).copy()
    half = rd // 2
    ang = np.asarray(positions, np.float64)[:, None] * theta ** (-2.0 * np.arange(half) / rd)
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (half,)
    c, s = np.cos(ang).reshape(shape), np.sin(ang).reshape(shape)
    a, b = x[..., :half].copy(), x[..., half:rd].copy()
    x[..., :half], x[..., half:rd] = a * c - b * s, b * c + a * s
    return x


def ref_block_key(raw, j, R, w, rd, theta, eps):
    mean = raw[j * R : (j + 1) * R].astype(np.float64).mean(axis=0)
    return ref_rope(ref_rms_norm(mean, w, eps)[None], [j * R], rd, theta)[0]


# float32 RMSNorm (mean of squares over ihd values, rsqrt) and float32 outputs: a few ulps of
# values of size ~(1+|w|)·3; 1e-5 absolute is ~20 ulps at that size.
NORM_ATOL = 1e-5


class FakeCache:
    """The indexer part of KVCache: idx_keys [max_t, ihd], blk_keys [max_t // R, ihd], len()."""

    def __init__(self, cfg, max_t):
        self.idx_keys = np.zeros((max_t, cfg.indexer_head_dim), np.float32)
        self.blk_keys = np.full(
            (max_t // cfg.indexer_compress_ratio, cfg.indexer_head_dim), np.nan, np.float32
        )
        self.n = 0

    def __len__(self):
        return self.n

    def append(self, index_k):
        self.idx_keys[self.n : self.n + len(index_k)] = index_k
        self.n += len(index_k)


def blocky_keys(rng, T, ihd, R):
    """Raw keys whose block means differ clearly (offset 0.5·j per block j), so using the wrong
    tokens for a block changes its key."""
    j = np.arange(T) // R
    return (rng.standard_normal((T, ihd)) + 0.5 * j[:, None] * np.linspace(-1, 1, ihd)).astype(
        np.float32
    )


# ---- projection, queries, block keys ---------------------------------------------------------
def test_indexer_project(rng, tiny_cfg):
    inh, ihd, H = tiny_cfg.indexer_n_heads, tiny_cfg.indexer_head_dim, tiny_cfg.hidden_size
    h = rng.standard_normal((3, H)).astype(np.float32)
    w = (rng.standard_normal(((inh + 1) * ihd, H)) / math.sqrt(H)).astype(np.float32)
    q_raw, k_raw = indexer_project(h, w, inh, ihd)
    assert q_raw.shape == (3, inh, ihd) and k_raw.shape == (3, ihd)
    assert q_raw.dtype == k_raw.dtype == np.float32
    y = h.astype(np.float64) @ w.astype(np.float64).T
    # float32 matmul over H = 64 terms of size ~1/8: error << 1e-5
    for i in range(inh):
        np.testing.assert_allclose(q_raw[:, i], y[:, i * ihd : (i + 1) * ihd], rtol=0, atol=1e-5)
    np.testing.assert_allclose(k_raw, y[:, inh * ihd :], rtol=0, atol=1e-5)


def test_indexer_queries(rng, tiny_cfg):
    c = tiny_cfg
    inh, ihd, rd = c.indexer_n_heads, c.indexer_head_dim, c.indexer_rotary_dim
    assert 0 < rd < ihd  # partial rotary is exercised
    pos = np.array([0, 3, 17, 1234])
    q_raw = (3.0 * rng.standard_normal((4, inh, ihd))).astype(np.float32)
    w = rng.uniform(-0.5, 0.5, ihd).astype(np.float32)
    q = indexer_queries(q_raw, w, pos, rd, c.rope_theta, c.rms_norm_eps)
    assert q.shape == (4, inh, ihd) and q.dtype == np.float32
    ref = ref_rope(ref_rms_norm(q_raw, w, c.rms_norm_eps), pos, rd, c.rope_theta)
    np.testing.assert_allclose(q, ref, rtol=0, atol=NORM_ATOL)


def test_block_keys_vs_float64(rng, tiny_cfg):
    c = tiny_cfg
    R, ihd, rd = c.indexer_compress_ratio, c.indexer_head_dim, c.indexer_rotary_dim
    raw = blocky_keys(rng, 45, ihd, R)  # 5 complete blocks + 5 tail
    w = rng.uniform(-0.5, 0.5, ihd).astype(np.float32)
    blocks = np.array([4, 0, 2, 1])  # any order
    got = block_keys(raw, blocks, R, w, rd, c.rope_theta, c.rms_norm_eps)
    assert got.shape == (4, ihd) and got.dtype == np.float32
    ref = np.stack([ref_block_key(raw, j, R, w, rd, c.rope_theta, c.rms_norm_eps) for j in blocks])
    np.testing.assert_allclose(got, ref, rtol=0, atol=NORM_ATOL)
    # the input can tell: position (j+1)R-1 instead of jR, or block j+1's tokens, fail clearly
    wrong_pos = ref_rope(
        ref_rms_norm(raw[32:40].mean(0), w, c.rms_norm_eps)[None], [39], rd, c.rope_theta
    )[0]
    assert np.abs(wrong_pos - ref[0]).max() > 100 * NORM_ATOL
    assert (
        np.abs(ref_block_key(raw, 3, R, w, rd, c.rope_theta, c.rms_norm_eps) - ref[0]).max()
        > 100 * NORM_ATOL
    )
    assert block_keys(raw, np.array([], np.int64), R, w, rd, c.rope_theta).shape == (0, ihd)


def test_update_block_keys_crossing_boundaries(rng, tiny_cfg):
    c = tiny_cfg
    R, ihd = c.indexer_compress_ratio, c.indexer_head_dim  # R = 8
    w = rng.uniform(-0.5, 0.5, ihd).astype(np.float32)
    cache = FakeCache(c, max_t=64)
    raw = blocky_keys(rng, 64, ihd, R)
    # (t0, t1) batches and the blocks completing in them: block j completes at (j+1)R - 1
    steps = [
        ((0, 5), []),
        ((5, 19), [0, 1]),
        ((19, 24), [2]),
        ((24, 25), []),
        ((25, 31), []),
        ((31, 32), [3]),
        ((32, 40), [4]),
        ((40, 64), [5, 6, 7]),
    ]
    done = []
    for (t0, t1), want in steps:
        cache.append(raw[t0:t1])
        got = update_block_keys(cache, w, c, t0, t1)
        assert got.tolist() == want, (t0, t1)
        for j in want:
            ref = ref_block_key(raw, j, R, w, c.indexer_rotary_dim, c.rope_theta, c.rms_norm_eps)
            np.testing.assert_allclose(cache.blk_keys[j], ref, rtol=0, atol=NORM_ATOL)
            np.testing.assert_array_equal(  # exactly golden.block_keys on the stored keys
                cache.blk_keys[j],
                block_keys(raw, [j], R, w, c.indexer_rotary_dim, c.rope_theta, c.rms_norm_eps)[0],
            )
        done += want
        # completed-before blocks were marked 7.0 last round: a rewrite would show
        assert np.isnan(cache.blk_keys[len(done) :]).all()  # not-yet-complete untouched
        assert (cache.blk_keys[: len(done) - len(want)] == 7.0).all()
        cache.blk_keys[: len(done)] = 7.0
    assert done == list(range(8))


def test_update_block_keys_real_cache(rng, tiny_cfg):
    """Same, on golden.KVCache (skipped while kvcache.py is still a stub)."""
    from qwenref.golden.kvcache import KVCache

    c = tiny_cfg
    try:
        cache = KVCache(c, max_t=64)
        k = rng.standard_normal((19, c.nkv, c.head_dim)).astype(np.float32)
        raw = blocky_keys(rng, 19, c.indexer_head_dim, c.indexer_compress_ratio)
        cache.append(k, k, index_k=raw)
    except NotImplementedError:
        pytest.skip("golden.KVCache not implemented yet")
    w = rng.uniform(-0.5, 0.5, c.indexer_head_dim).astype(np.float32)
    assert update_block_keys(cache, w, c, 0, 19).tolist() == [0, 1]
    np.testing.assert_array_equal(
        cache.blk_keys[:2],
        block_keys(
            raw,
            [0, 1],
            c.indexer_compress_ratio,
            w,
            c.indexer_rotary_dim,
            c.rope_theta,
            c.rms_norm_eps,
        ),
    )


# ---- scoring ---------------------------------------------------------------------------------
def test_block_scores(rng):
    inh, ihd, nc = 3, 32, 11
    q = rng.standard_normal((inh, ihd)).astype(np.float32)
    bk = rng.standard_normal((nc, ihd)).astype(np.float32)
    d = q.astype(np.float64) @ bk.astype(np.float64).T  # [inh, nc]
    assert (d < -1).any() and (d > 1).any()  # relu matters
    ref = np.maximum(d, 0).sum(0) / math.sqrt(ihd)
    assert np.abs(np.abs(d).sum(0) / math.sqrt(ihd) - ref).max() > 0.5
    got = block_scores(q, bk)
    assert got.shape == (nc,) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)  # float32 rounding only
    assert block_scores(q, bk[:0]).shape == (0,)


# ---- selection -------------------------------------------------------------------------------
def test_select_keeps_latest_even_when_lowest():
    scores = np.array([5.0, 9.0, 1.0, 7.0, 3.0, 8.0, -2.0], np.float32)  # latest is the minimum
    assert select_blocks(scores, 3).tolist() == [1, 5, 6]
    assert select_blocks(scores, 1).tolist() == [6]  # kblk 1: the latest only
    assert select_blocks(scores, 7).tolist() == list(range(7))


@pytest.mark.parametrize("nc, kblk", [(5, 4), (9, 4), (40, 4), (40, 17), (100, 32)])
def test_select_true_top(rng, nc, kblk):
    for _ in range(20):
        scores = (rng.permutation(nc) * 0.5 + 1.0).astype(np.float32)  # gaps of 0.5: no ties
        if rng.random() < 0.5:
            scores[-1] = scores.min() - 1.0  # half the time the latest is the lowest
        got = select_blocks(scores, kblk)
        assert got.dtype == np.int64 and got.shape == (kblk,)
        assert (np.diff(got) > 0).all() and got[-1] == nc - 1
        others = got[:-1]
        best = sorted(range(nc - 1), key=lambda j: -scores[j])[: kblk - 1]
        assert sorted(best) == others.tolist()
        if kblk > 1:  # every kept other beats every dropped other
            dropped = np.setdiff1d(np.arange(nc - 1), others)
            assert dropped.size == 0 or scores[others].min() > scores[dropped].max()


def test_select_exact_ties_lower_index():
    assert select_blocks(np.zeros(10, np.float32), 4).tolist() == [0, 1, 2, 9]
    assert select_blocks(np.array([5, 3, 5, 3, 5, 1], np.float32), 3).tolist() == [0, 2, 5]
    assert select_blocks(np.array([1, 2, 2, 2, 0], np.float32), 3).tolist() == [1, 2, 4]
    # relu makes many zero scores; 0.0 and -0.0 are the same score
    s = np.array([-0.0, 0.0, -0.0, 1.0, 0.0, 0.0], np.float32)
    assert select_blocks(s, 3).tolist() == [0, 3, 5]
    s = np.array([0.0, -0.0, 0.0, 1.0, -0.0, 0.0], np.float32)
    assert select_blocks(s, 4).tolist() == [0, 1, 3, 5]
    # a tie with the latest block does not matter: it is kept anyway, not counted twice
    assert select_blocks(np.array([2, 1, 2, 2], np.float32), 3).tolist() == [0, 2, 3]


def test_visible_tokens_examples():
    idx, mask = visible_tokens(45, np.array([4, 0, 2]), 8)  # nc = 5, tail 40..45
    want = list(range(0, 8)) + list(range(16, 24)) + list(range(32, 46))
    assert idx.dtype == np.int64 and idx.tolist() == want and len(idx) == 3 * 8 + 6
    assert mask.dtype == bool and mask.tolist() == [True, False, True, False, True]
    idx, mask = visible_tokens(47, np.array([1, 5]), 8)  # t+1 = 48: no tail
    assert idx.tolist() == list(range(8, 16)) + list(range(40, 48))
    assert mask.tolist() == [False, True, False, False, False, True]


def test_row_selection_invariants(rng, tiny_cfg):
    c = tiny_cfg
    R, kblk, inh, ihd = c.indexer_compress_ratio, c.kblk, c.indexer_n_heads, c.indexer_head_dim
    assert (R, kblk) == (8, 4)
    T = R * (kblk + 8) + 5
    bkeys = rng.standard_normal((T // R, ihd)).astype(np.float32)
    first_selective = (kblk + 1) * R - 1  # t + 1 = (kblk + 1) R
    n_sel = 0
    for t in range(T):
        q = rng.standard_normal((inh, ihd)).astype(np.float32)
        idx, mask = row_selection(t, q, bkeys, R, kblk)
        nc, tail = (t + 1) // R, t + 1 - ((t + 1) // R) * R
        assert idx.dtype == np.int64 and mask.dtype == bool and mask.shape == (nc,)
        assert (np.diff(idx) > 0).all()  # ascending, unique
        assert idx[0] >= 0 and idx[-1] == t  # causal; own token seen
        assert (t >= first_selective) == (nc > kblk)
        if nc <= kblk:
            assert idx.tolist() == list(range(t + 1)) and mask.all()
            continue
        n_sel += 1
        assert len(idx) == kblk * R + tail
        assert mask.sum() == kblk and mask[nc - 1]
        blocks = np.flatnonzero(mask)
        assert blocks.tolist() == select_blocks(block_scores(q, bkeys[:nc]), kblk).tolist()
        in_blocks = idx[idx < nc * R]
        assert in_blocks.tolist() == (blocks[:, None] * R + np.arange(R)).ravel().tolist()
        assert idx[idx >= nc * R].tolist() == list(range(nc * R, t + 1))
    assert n_sel == T - first_selective


def test_first_selective_row(rng, tiny_cfg):
    R, kblk, inh, ihd = 8, 4, 2, 32
    bkeys = rng.standard_normal((8, ihd)).astype(np.float32)
    q = rng.standard_normal((inh, ihd)).astype(np.float32)
    t = (kblk + 1) * R - 1  # 39: 5 complete blocks
    idx, mask = row_selection(t - 1, q, bkeys, R, kblk)  # 38: 4 complete -> dense
    assert idx.tolist() == list(range(t)) and mask.tolist() == [True] * kblk
    idx, mask = row_selection(t, q, bkeys, R, kblk)
    assert len(idx) == kblk * R and mask.sum() == kblk and len(mask) == kblk + 1


def test_row_selection_picks_true_top(rng):
    """bkey_j = c_j·u and q_h = u: score_j = inh·c_j·|u|²/sqrt(ihd); gaps of 2/sqrt(32) ≈ 0.35
    between blocks, far above float32 rounding (~1e-6): the top-c blocks must be chosen."""
    R, kblk, inh, ihd, nc = 8, 4, 2, 32, 12
    u = rng.standard_normal(ihd)
    u /= np.linalg.norm(u)
    c = rng.permutation(nc).astype(np.float64) + 1.0
    c[-1] = 0.5  # latest: the lowest score
    bkeys = (c[:, None] * u).astype(np.float32)
    q = np.tile(u, (inh, 1)).astype(np.float32)
    t = nc * R + 3
    idx, mask = row_selection(t, q, bkeys, R, kblk)
    want = sorted(np.argsort(-c[:-1])[: kblk - 1].tolist() + [nc - 1])
    assert np.flatnonzero(mask).tolist() == want
    assert len(idx) == kblk * R + 4


# ---- bad input -------------------------------------------------------------------------------
def _cfg_no_indexer(cfg):
    return cfg.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda c: select_blocks(np.zeros(5), 0), ValueError, "kblk"),
        (lambda c: select_blocks(np.zeros(5), 2.0), TypeError, "kblk"),
        (lambda c: select_blocks(np.zeros((5, 1)), 2), ValueError, "scores"),
        (lambda c: select_blocks(np.zeros(3), 4), ValueError, "scores"),
        (lambda c: select_blocks(np.array([0.0, np.nan, 1.0]), 2), ValueError, "scores"),
        (lambda c: visible_tokens(45, np.array([5]), 8), ValueError, "blocks"),
        (lambda c: visible_tokens(45, np.array([-1]), 8), ValueError, "blocks"),
        (lambda c: visible_tokens(45, np.array([1, 1]), 8), ValueError, "blocks"),
        (lambda c: visible_tokens(45, np.array([1.0]), 8), TypeError, "blocks"),
        (lambda c: visible_tokens(-1, np.array([], np.int64), 8), ValueError, "t"),
        (lambda c: visible_tokens(45, np.array([1]), 0), ValueError, "R"),
        (
            lambda c: row_selection(50, np.zeros((2, 32)), np.zeros((5, 32)), 8, 4),
            ValueError,
            "bkeys",
        ),
        (lambda c: row_selection(50, np.zeros(32), np.zeros((8, 32)), 8, 4), ValueError, "q"),
        (
            lambda c: row_selection(50, np.zeros((2, 32)), np.zeros((8, 32)), 8, 0),
            ValueError,
            "kblk",
        ),
        (lambda c: block_scores(np.zeros((2, 32)), np.zeros((8, 16))), ValueError, "bkeys"),
        (lambda c: block_scores(np.zeros(32), np.zeros((8, 32))), ValueError, "q"),
        (
            lambda c: indexer_project(np.zeros((2, 64)), np.zeros((95, 64)), 2, 32),
            ValueError,
            "w_qk",
        ),
        (lambda c: indexer_project(np.zeros(64), np.zeros((96, 64)), 2, 32), ValueError, "h"),
        (
            lambda c: indexer_queries(np.zeros((2, 2, 32)), np.zeros(16), [0, 1], 16, 1e4),
            ValueError,
            "q_norm_w",
        ),
        (
            lambda c: indexer_queries(np.zeros((2, 2, 32)), np.zeros(32), [0, 1, 2], 16, 1e4),
            ValueError,
            "positions",
        ),
        (
            lambda c: indexer_queries(np.zeros((2, 2, 32)), np.zeros(32), [0, 1], 15, 1e4),
            ValueError,
            "rotary_dim",
        ),
        (
            lambda c: indexer_queries(np.zeros((2, 32)), np.zeros(32), [0, 1], 16, 1e4),
            ValueError,
            "q_raw",
        ),
        (
            lambda c: block_keys(np.zeros((20, 32)), np.array([2]), 8, np.zeros(32), 16, 1e4),
            ValueError,
            "blocks",
        ),
        (lambda c: update_block_keys(FakeCache(c, 64), np.zeros(32), c, 0, 8), ValueError, "t1"),
        (lambda c: update_block_keys(FakeCache(c, 64), np.zeros(32), c, 3, 2), ValueError, "t1"),
        (
            lambda c: update_block_keys(FakeCache(c, 64), np.zeros(32), _cfg_no_indexer(c), 0, 0),
            ValueError,
            "indexer",
        ),
    ],
)
def test_bad_input(tiny_cfg, call, exc, match):
    with pytest.raises(exc, match=match):
        call(tiny_cfg)
