"""Bytes each kernel must move, counted from the shapes: each input read once, each output
written once (the `bytes` of a bench run; gbps = bytes / time). Pure arithmetic, no GPU.

The KV layouts (golden/kvcache.py's module docstring), bytes per token per kv head per side:
f32 4·hd, bf16 2·hd, q8 hd int8 codes + hd/32 float16 scales, turboN hd/16 groups of 2·N bytes
of codes + one float16 scale, tqB hd·B/8 bytes of codes + one float16 scale. Cache kinds name
one side kind for K and V ("q8"), or a bf16 K side with a turbo V side ("bf16k-turbo4v").
"""

from __future__ import annotations

__all__ = [
    "side_bytes_per_head",
    "kv_bytes_per_token",
    "bytes_norm",
    "bytes_rope",
    "bytes_wht",
    "bytes_q8_quantize",
    "bytes_turbo_quantize",
    "bytes_append",
    "visible_tokens_count",
    "bytes_attention",
    "bytes_block_scores",
    "bytes_select",
    "bytes_gemv_q8",
    "bytes_linear",
    "layer_stage_bytes",
]


def side_bytes_per_head(side, hd):
    """Stored bytes of one token's K (or V) for one kv head, scales included."""
    if side == "f32":
        return 4 * hd
    if side == "bf16":
        return 2 * hd
    if side == "q8":
        return hd + 2 * (hd // 32)
    if side.startswith("turbo") and side[len("turbo") :].isdigit():
        return (hd // 16) * (2 * int(side[len("turbo") :]) + 2)
    if side.startswith("tq") and side[len("tq") :].isdigit():
        return hd * int(side[len("tq") :]) // 8 + 2
    raise ValueError(f"unknown cache side kind {side!r}")


def kv_bytes_per_token(kind, nkv, hd):
    """Bytes of stored K+V for one token, all kv heads, scales included (golden layout)."""
    if kind.startswith("bf16k-") and kind.endswith("v"):
        k, v = "bf16", kind[len("bf16k-") : -1]
    else:
        k = v = kind
    return nkv * (side_bytes_per_head(k, hd) + side_bytes_per_head(v, hd))


def bytes_norm(rows, n, add=False):
    """rms_norm: x read, weight read, y written; add_rms_norm also reads the residual and
    writes the sum."""
    return 4 * (rows * n * (4 if add else 2) + n)


def bytes_rope(nb, nh, nkv, hd):
    """qk_norm_rope: the q half of qg and k read, q and k written, two norm weights,
    positions."""
    return 4 * (2 * nb * (nh + nkv) * hd + 2 * hd + nb)


def bytes_wht(rows, n):
    return 4 * 2 * rows * n


def bytes_q8_quantize(rows, n):
    """f32 in, int8 codes + one f16 scale per 32 out."""
    return rows * n * 5 + rows * (n // 32) * 2


def bytes_turbo_quantize(rows, n, bits):
    """f32 in, 2·bits bytes of codes + one f16 scale per 16 out."""
    return rows * n * 4 + rows * (n // 16) * (2 * bits + 2)


def bytes_append(nb, nkv, hd, kind, ihd=0):
    """KVCache.append: k and v read as f32, stored K/V written, raw indexer keys copied."""
    return nb * (2 * nkv * hd * 4 + kv_bytes_per_token(kind, nkv, hd) + 2 * ihd * 4)


def visible_tokens_count(t, R=0, kblk=0):
    """Tokens the row at position t attends to: t + 1 dense, kblk·R + tail when selective."""
    if not R or (t + 1) // R <= kblk:
        return t + 1
    return kblk * R + (t + 1) - ((t + 1) // R) * R


def bytes_attention(nb, nh, nkv, hd, kind, base_pos, R=0, kblk=0, gate=False, selective=False):
    """decode_attention: the stored K/V of the tokens read (dense rows share one pass over the
    longest row's tokens; selective rows are counted row by row, an upper bound when rows pick
    the same blocks, plus their int32 indices), q read, gate read, output written."""
    per_tok = kv_bytes_per_token(kind, nkv, hd)
    rows = [base_pos + b for b in range(nb)]
    if selective:
        n_tok = sum(visible_tokens_count(t, R, kblk) for t in rows)
        kv = n_tok * (per_tok + 4)
    else:
        kv = (rows[-1] + 1) * per_tok
    return kv + 4 * nb * nh * hd * (3 if gate else 2)


def bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks):
    """block_scores: block keys read once, queries read, [nb, max_blocks] scores written."""
    return 4 * (n_blocks * ihd + nb * inh * ihd + nb * max_blocks)


def bytes_select(nb, inh, ihd, n_blocks, max_blocks, R, kblk):
    """select_rows: scoring plus sel_idx [nb, kblk·R + R], sel_n [nb], block mask written."""
    return (
        bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks)
        - 4 * nb * max_blocks
        + 4 * nb * (kblk * R + R)
        + 4 * nb
        + nb * max_blocks
    )


def bytes_gemv_q8(nb, n_in, n_out):
    """int8 weights + one f16 scale per 32, x read, y written."""
    return n_out * n_in + n_out * (n_in // 32) * 2 + 4 * nb * (n_in + n_out)


def bytes_linear(nb, n_in, n_out, wbytes=4):
    """A dense projection with wbytes-byte weights (4 f32, 2 bf16) and activations."""
    return n_out * n_in * wbytes + wbytes * nb * (n_in + n_out)


def layer_stage_bytes(cfg, nb, base_pos, kind, weight_format="q8", has_mlp=True):
    """Bytes each stage of one decode step must move (gpu.layer.STAGES keys, plus "total")."""
    c = cfg
    H, hd, I = c.hidden_size, c.head_dim, c.intermediate_size
    inh, ihd, R, kblk = c.indexer_n_heads, c.indexer_head_dim, c.indexer_compress_ratio, c.kblk
    n_proj = 2 * c.nh * hd + 2 * c.nkv * hd + ((inh + 1) * ihd if c.has_indexer else 0)

    def proj(n_in, n_out):
        return (
            bytes_gemv_q8(nb, n_in, n_out)
            if weight_format == "q8"
            else bytes_linear(nb, n_in, n_out, 4)
        )

    selective = c.has_indexer and (base_pos + nb) // R > kblk
    b = {
        "input_norm": bytes_norm(nb, H),
        "qkv_proj": proj(H, n_proj),
        "qk_norm_rope": bytes_rope(nb, c.nh, c.nkv, hd) + 2 * 4 * nb * c.nh * hd,  # + gate copy
        "kv_append": bytes_append(nb, c.nkv, hd, kind, ihd if c.has_indexer else 0),
        "attention": bytes_attention(
            nb, c.nh, c.nkv, hd, kind, base_pos, R, kblk, gate=True, selective=selective
        ),
        "o_proj": proj(c.nh * hd, H),
        "post_norm": bytes_norm(nb, H, add=True),
    }
    if c.has_indexer:
        n_blocks = (base_pos + nb) // R
        b["indexer_q"] = 4 * 2 * nb * inh * ihd + 4 * ihd
        done = (base_pos + nb) // R - base_pos // R  # blocks completing this step
        b["block_keys"] = done * (R * ihd * 4 + ihd * 4)
        if selective:
            b["select"] = bytes_select(nb, inh, ihd, n_blocks, n_blocks, R, kblk)
    if has_mlp:
        if weight_format == "q8":
            b["mlp_gate_up"] = bytes_gemv_q8(nb, H, 2 * I) - 4 * nb * I  # writes act, not g|u
            b["mlp_down"] = bytes_gemv_q8(nb, I, H) + 4 * nb * H  # + residual read
        else:
            b["mlp_gate_up"] = bytes_linear(nb, H, 2 * I) + 4 * nb * 3 * I  # + swiglu pass
            b["mlp_down"] = bytes_linear(nb, I, H) + 4 * nb * 3 * H  # + residual add
    b["total"] = sum(b.values())
    return b
