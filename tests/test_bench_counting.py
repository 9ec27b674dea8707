"""The bench's byte counting (qwenref/bench/counting.py), on the CPU: what each kernel must move,
by hand and against the golden cache's own sizes and selections."""

import numpy as np
import pytest

import qwenref
from qwenref import golden
from qwenref.bench import counting
from qwenref.layout import CACHE_KINDS

# ---- byte counting ---------------------------------------------------------------------------


def test_kv_bytes_per_token_matches_golden_cache_for_every_kind():
    cfg = qwenref.AttnConfig.qwen35_27b().replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )
    for kind in CACHE_KINDS:
        got = counting.kv_bytes_per_token(kind, cfg.nkv, cfg.head_dim)
        assert got == golden.KVCache(cfg, max_t=1, kind=kind).nbytes_per_token(), kind
    # by hand for the 27B shape (4 kv heads x 256): q8 = 256 codes + 8 f16 scales per head side
    assert counting.kv_bytes_per_token("q8", 4, 256) == 4 * 2 * (256 + 16)
    assert counting.kv_bytes_per_token("turbo4", 4, 256) == 4 * 2 * 16 * (8 + 2)
    assert counting.kv_bytes_per_token("bf16k-turbo3v", 4, 256) == 4 * (512 + 16 * (6 + 2))


def test_bytes_of_elementwise_stages_by_hand():
    assert counting.bytes_norm(3, 10) == 4 * (2 * 30 + 10)
    assert counting.bytes_norm(3, 10, add=True) == 4 * (4 * 30 + 10)
    assert counting.bytes_wht(5, 256) == 2 * 4 * 5 * 256
    assert counting.bytes_q8_quantize(2, 64) == 2 * 64 * 4 + 2 * 64 + 2 * 2 * 2
    assert counting.bytes_turbo_quantize(1, 32, 3) == 32 * 4 + 2 * (6 + 2)
    # rope reads the q half only (the gate half is not touched by qk_norm_rope)
    assert counting.bytes_rope(2, 4, 2, 64) == 4 * (2 * 2 * 6 * 64 + 2 * 64 + 2)


def test_bytes_gemv_counts_weights_scales_and_activations():
    nb, n_in, n_out = 4, 5120, 1030
    want = n_out * n_in + n_out * (n_in // 32) * 2 + 4 * nb * n_in + 4 * nb * n_out
    assert counting.bytes_gemv_q8(nb, n_in, n_out) == want
    assert counting.bytes_linear(1, 64, 32, 4) == 64 * 32 * 4 + 4 * (64 + 32)
    assert counting.bytes_linear(1, 64, 32, 2) == 64 * 32 * 2 + 2 * (64 + 32)


@pytest.mark.parametrize("t", [0, 7, 38, 39, 40, 47, 48, 100])
def test_visible_tokens_count_agrees_with_golden_selection(tiny_cfg, rng, t):
    c = tiny_cfg
    R, kblk = c.indexer_compress_ratio, c.kblk
    nc = (t + 1) // R
    q = rng.standard_normal((c.indexer_n_heads, c.indexer_head_dim)).astype(np.float32)
    bkeys = rng.standard_normal((max(nc, 1), c.indexer_head_dim)).astype(np.float32)
    idx, _ = golden.row_selection(t, q, bkeys, R, kblk)
    assert counting.visible_tokens_count(t, R, kblk) == len(idx)
    assert counting.visible_tokens_count(t) == t + 1  # no indexer: dense


def test_bytes_attention_dense_reads_the_longest_row_once():
    per = counting.kv_bytes_per_token("q8", 4, 256)
    got = counting.bytes_attention(4, 24, 4, 256, "q8", base_pos=1000)
    assert got == 1004 * per + 4 * 4 * 24 * 256 * 2  # K/V once + q + out
    gated = counting.bytes_attention(4, 24, 4, 256, "q8", base_pos=1000, gate=True)
    assert gated - got == 4 * 4 * 24 * 256


def test_bytes_attention_selective_counts_the_selected_tokens():
    per = counting.kv_bytes_per_token("q8", 4, 256)
    R, kblk, base = 64, 32, 131071
    got = counting.bytes_attention(1, 24, 4, 256, "q8", base, R, kblk, selective=True)
    n = kblk * R + 0  # t + 1 = 131072: no tail
    assert got == n * (per + 4) + 4 * 24 * 256 * 2
    assert got < counting.bytes_attention(1, 24, 4, 256, "q8", base) / 50


def test_layer_stage_bytes_cover_the_stages_and_sum_to_total():
    from qwenref.gpu.layer import STAGES

    cfg = qwenref.AttnConfig.qwen35_27b()
    b = counting.layer_stage_bytes(cfg, 1, 32768, "q8", "q8")
    assert set(b) - {"total"} <= set(STAGES)
    assert {"qkv_proj", "attention", "select", "mlp_gate_up", "mlp_down"} <= set(b)
    assert b["total"] == sum(v for k, v in b.items() if k != "total")
    # the weights dominate a q8 decode step: ~1.06 bytes per parameter
    n_par = (2 * 24 * 256 + 2 * 4 * 256 + 9 * 128) * 5120 + 5120 * 6144 + 3 * 17408 * 5120
    assert 1.0 * n_par < b["total"] < 1.2 * n_par
    dense = cfg.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )
    bd = counting.layer_stage_bytes(dense, 1, 32768, "q8", "f32")
    assert "select" not in bd and "indexer_q" not in bd
    assert bd["qkv_proj"] == counting.bytes_linear(1, 5120, 2 * 24 * 256 + 2 * 4 * 256, 4)


def test_kv_bytes_per_token_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="int4"):
        counting.kv_bytes_per_token("int4", 4, 256)
