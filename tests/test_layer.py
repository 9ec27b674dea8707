"""The golden decoder layer against an independent float64 re-derivation, per the golden
modules' docstrings.

The reference below is written from the formulas (natural-exp softmax, no splits, no base 2,
float64 throughout), so it shares no code with qwenref.golden beyond the checkpoint weights.
"""

import numpy as np
import pytest

import qwenref
from qwenref import golden

F64_TOL = 2e-5  # float32 pipeline vs float64 truth, norm-wise: ~10 float32 ops deep, eps 6e-8


def _ref_rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * (1.0 + w)


def _ref_rope(x, pos, rd, theta):
    inv = theta ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)
    ang = pos[:, None] * inv[None]  # [nb, rd/2]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]  # broadcast over heads
    x = x.copy()
    a, b = x[..., : rd // 2].copy(), x[..., rd // 2 : rd].copy()
    x[..., : rd // 2], x[..., rd // 2 : rd] = a * cos - b * sin, b * cos + a * sin
    return x


def _ref_layer(cfg, w, xs, idx_per_row=None):
    """Prefill-style reference: all rows of xs attend causally to the K/V of rows <= them."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = xs.astype(np.float64)
    n, hd, eps = x.shape[0], cfg.head_dim, cfg.rms_norm_eps
    pos = np.arange(n, dtype=np.float64)
    h = _ref_rms(x, w["input_layernorm.weight"], eps)
    qg = (h @ w["self_attn.q_proj.weight"].T).reshape(n, cfg.nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:]
    k = (h @ w["self_attn.k_proj.weight"].T).reshape(n, cfg.nkv, hd)
    v = (h @ w["self_attn.v_proj.weight"].T).reshape(n, cfg.nkv, hd)
    q = _ref_rope(
        _ref_rms(q, w["self_attn.q_norm.weight"], eps), pos, cfg.rotary_dim, cfg.rope_theta
    )
    k = _ref_rope(
        _ref_rms(k, w["self_attn.k_norm.weight"], eps), pos, cfg.rotary_dim, cfg.rope_theta
    )
    out = np.empty((n, cfg.nh, hd))
    for t in range(n):
        idx = np.arange(t + 1) if idx_per_row is None else idx_per_row[t]
        for hh in range(cfg.nh):
            kv = hh // cfg.n_rep
            s = k[idx, kv] @ q[t, hh] / np.sqrt(hd)
            p = np.exp(s - s.max())
            out[t, hh] = (p / p.sum()) @ v[idx, kv]
    out = out / (1 + np.exp(-gate))
    x1 = x + out.reshape(n, -1) @ w["self_attn.o_proj.weight"].T
    h2 = _ref_rms(x1, w["post_attention_layernorm.weight"], eps)
    g, u = h2 @ w["mlp.gate_proj.weight"].T, h2 @ w["mlp.up_proj.weight"].T
    return x1 + ((g / (1 + np.exp(-g))) * u) @ w["mlp.down_proj.weight"].T


def _relerr(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def dense_setup(tmp_path_factory):
    cfg = qwenref.AttnConfig.tiny().replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )
    path = tmp_path_factory.mktemp("ckpt")
    qwenref.write_random_checkpoint(path, cfg, seed=1)
    ck = qwenref.load_checkpoint(path)
    return ck.config, ck.layer(ck.full_attention_layers[0])


def _inputs(cfg, n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, cfg.hidden_size)).astype(np.float32)


def test_prefill_then_decode_matches_float64_reference(dense_setup):
    cfg, w = dense_setup
    xs = _inputs(cfg, 45)  # 45: not a multiple of 32, crosses a chunk edge
    ref = _ref_layer(cfg, w, xs)
    layer = golden.FullAttentionLayer(cfg, w)
    cache = golden.KVCache(cfg, max_t=64, kind="f32")
    ys = [layer.forward(xs[:40], 0, cache)]
    for t in range(40, 45):  # decode one row at a time
        ys.append(layer.forward(xs[t : t + 1], len(cache), cache))
    ours = np.concatenate(ys)
    assert len(cache) == 45
    assert _relerr(ours, ref) < F64_TOL
    assert _relerr(ours[40:], ref[40:]) < F64_TOL


@pytest.mark.parametrize("n_splits", [1, 3, 64])
def test_split_count_does_not_change_the_answer(dense_setup, n_splits):
    cfg, w = dense_setup
    xs = _inputs(cfg, 37, seed=2)
    base = golden.FullAttentionLayer(cfg, w).forward(xs, 0, golden.KVCache(cfg, 64))
    split = golden.FullAttentionLayer(cfg, w, n_splits=n_splits).forward(
        xs, 0, golden.KVCache(cfg, 64)
    )
    assert _relerr(split, base) < 1e-6  # only float32 summation order differs


@pytest.mark.parametrize(
    "kind,tol",
    [
        ("bf16", 2e-2),
        ("q8", 2e-2),
        ("turbo8", 2e-2),
        ("turbo4", 0.2),
        ("turbo3", 0.4),
        ("turbo2", 0.8),
        ("bf16k-turbo4v", 0.2),
    ],
)
def test_quantized_caches_track_the_f32_cache(dense_setup, kind, tol):
    # Tolerances are loose bands per format (the notebooks measure the errors); they catch a
    # broken format (garbage, unrotated q against rotated K), not small regressions.
    cfg, w = dense_setup
    xs = _inputs(cfg, 40, seed=3)
    layer = golden.FullAttentionLayer(cfg, w)
    ref = layer.forward(xs, 0, golden.KVCache(cfg, 64, "f32"))
    out = layer.forward(xs, 0, golden.KVCache(cfg, 64, kind))
    attn_ref = ref - xs
    err = _relerr(out - xs, attn_ref)
    assert 0 < err < tol, err


def test_q8_weights_close_to_f32_weights(dense_setup):
    cfg, w = dense_setup
    xs = _inputs(cfg, 8, seed=4)
    a = golden.FullAttentionLayer(cfg, w).forward(xs, 0, golden.KVCache(cfg, 16))
    b = golden.FullAttentionLayer(cfg, w, weight_format="q8").forward(
        xs, 0, golden.KVCache(cfg, 16)
    )
    err = _relerr(b - xs, a - xs)
    assert 1e-5 < err < 3e-2  # Q8_0 weights: ~0.4% per weight, averaged down


def test_selective_rows_attend_to_their_visible_tokens(tmp_path):
    cfg = qwenref.AttnConfig.tiny()  # R = 8, kblk = 4: first selective row at t = 39
    qwenref.write_random_checkpoint(tmp_path, cfg, seed=5)
    ck = qwenref.load_checkpoint(tmp_path)
    w = ck.layer(ck.full_attention_layers[0])
    xs = _inputs(cfg, 52, seed=6)
    layer = golden.FullAttentionLayer(cfg, w)
    cache = golden.KVCache(cfg, 64)
    trace = {}
    y1 = layer.forward(xs[:37], 0, cache)
    y2 = layer.forward(xs[37:52], 37, cache, trace=trace)  # rows 37..51 cross blocks 4, 5, 6
    sels = trace["selections"]
    R, kblk = cfg.indexer_compress_ratio, cfg.kblk
    for b, (idx, _) in enumerate(sels):
        t = 37 + b
        if (t + 1) // R <= kblk:
            assert np.array_equal(idx, np.arange(t + 1)), t
        else:
            assert len(idx) == kblk * R + (t + 1) % R, t
    assert any(len(i) < 37 + b + 1 for b, (i, _) in enumerate(sels)), "no selective row reached"
    ref = _ref_layer(
        cfg, w, xs, idx_per_row=[np.arange(t + 1) for t in range(37)] + [s[0] for s in sels]
    )
    assert _relerr(np.concatenate([y1, y2]), ref) < F64_TOL


def test_sparse_v_zero_is_exact_and_threshold_moves_output(dense_setup):
    cfg, w = dense_setup
    xs = _inputs(cfg, 40, seed=7)
    exact = golden.FullAttentionLayer(cfg, w).forward(xs, 0, golden.KVCache(cfg, 64))
    same = golden.FullAttentionLayer(cfg, w, sparse_v=0.0).forward(xs, 0, golden.KVCache(cfg, 64))
    sparse = golden.FullAttentionLayer(cfg, w, sparse_v=0.05).forward(
        xs, 0, golden.KVCache(cfg, 64)
    )
    assert np.array_equal(exact, same)
    assert 0 < _relerr(sparse - xs, exact - xs) < 0.5


def test_bad_input_names_the_argument(dense_setup):
    cfg, w = dense_setup
    layer = golden.FullAttentionLayer(cfg, w)
    cache = golden.KVCache(cfg, 8)
    x = _inputs(cfg, 2)
    with pytest.raises(ValueError, match="base_pos"):
        layer.forward(x, 1, cache)
    with pytest.raises(TypeError, match="x"):
        layer.forward(x.astype(np.float64), 0, cache)
    with pytest.raises(ValueError, match="x"):
        layer.forward(x[:, :10].copy(), 0, cache)
    with pytest.raises(ValueError, match="weight_format"):
        golden.FullAttentionLayer(cfg, w, weight_format="int4")
    bad = dict(w)
    bad["self_attn.k_proj.weight"] = bad["self_attn.k_proj.weight"][:-1]
    with pytest.raises(ValueError, match="k_proj"):
        golden.FullAttentionLayer(cfg, bad)
    layer.forward(_inputs(cfg, 8), 0, cache)
    with pytest.raises(ValueError):  # past max_t
        layer.forward(x, 8, cache)
