"""layer — the Qwen3.5 full-attention decoder layer, one decode step for nb rows of one sequence.

    x ──input_layernorm──> h ──q_proj──> [q | gate] per head ──q_norm + RoPE──> q
                              ├─k_proj──> k ──k_norm + RoPE──┐
                              ├─v_proj──> v ─────────────────┴─> cache.append (quantized)
                              └─indexer.qk_proj──> (indexer q, raw key) ─> block keys, selection
    per row b: attention over the cache as stored (dense, or the indexer's visible tokens)
          ──> combine ──> inverse WHT (if V rotated) ──> * sigmoid(gate) ──o_proj──> + x = x1
    x1 ──post_attention_layernorm──> SwiGLU MLP ──> + x1 = y

Shape letters: nb rows, nh q heads, nkv kv heads, hd head_dim, H hidden.
The layer holds weights only; every per-sequence state lives in the KVCache.
"""
import warnings

import numpy as np

from ..checkpoint import expected_shapes
from .attention import decode_attention, output_gate
from .indexer import indexer_project, indexer_queries, row_selection, update_block_keys
from .kvcache import q8_dequantize, q8_quantize
from .norm import add_rms_norm, rms_norm
from .rope import qk_norm_rope
from .wht import wht

__all__ = ["linear", "silu", "mlp", "quantize_weight_q8", "FullAttentionLayer"]

_PROJ = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
         "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
         "mlp.down_proj.weight", "self_attn.indexer.qk_proj.weight")
_MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


# ---- checks shared with qwenref.gpu.layer ------------------------------------------------------
def _check_layer_args(weight_format, sparse_v, n_splits):
    if weight_format not in ("f32", "q8"):
        raise ValueError(f"weight_format must be 'f32' or 'q8', got {weight_format!r}")
    if not 0.0 <= float(sparse_v) < 1.0:
        raise ValueError(f"sparse_v must be in [0, 1), got {sparse_v!r}")
    if n_splits is not None and (isinstance(n_splits, bool) or
                                 not isinstance(n_splits, (int, np.integer)) or n_splits < 1):
        raise ValueError(f"n_splits must be None or a positive int, got {n_splits!r}")


def _check_weights(c, w, weight_format):
    """Missing weights or config-mismatched shapes -> ValueError naming the weight; a q8 layer
    needs every projection's input dim to be a multiple of 32. -> has_mlp (warns when not)."""
    for name, shape in expected_shapes(c, has_mlp=False).items():    # the MLP is optional
        if name not in w:
            raise ValueError(f"w: missing weight {name!r}")
        if tuple(np.shape(w[name])) != shape:
            raise ValueError(f"w[{name!r}] has shape {np.shape(w[name])}, config says {shape}")
    if weight_format == "q8":
        for name in _PROJ:
            if name in w and np.shape(w[name])[-1] % 32:
                raise ValueError(f"w[{name!r}]: input dim {np.shape(w[name])[-1]} is not a "
                                 f"multiple of 32, so it cannot be Q8_0-quantized")
    has_mlp = all(k in w for k in _MLP)
    if not has_mlp:
        warnings.warn("FullAttentionLayer: no dense MLP weights (MoE checkpoint?): running "
                      "attention only, y = x + attention(x)", stacklevel=3)
    return has_mlp


def linear(x, w):
    """y = x @ w.T in float32. x [nb, in], w [out, in] (HF's nn.Linear layout) -> [nb, out]."""
    return np.matmul(np.asarray(x, np.float32), np.asarray(w, np.float32).T)


def silu(x):
    """x * sigmoid(x), written as x / (1 + exp(-x)) with exp clipped so it never overflows."""
    x = np.asarray(x, np.float32)
    return x / (np.float32(1) + np.exp(np.minimum(-x, np.float32(80))))


def mlp(x, w_gate, w_up, w_down):
    """down(silu(gate(x)) * up(x)) — the dense SwiGLU MLP of Qwen3.5."""
    return linear(silu(linear(x, w_gate)) * linear(x, w_up), w_down)


def quantize_weight_q8(w):
    """A projection's weight as the q8 layer runs it: each row Q8_0-quantized along the input
    dim (groups of 32), dequantized to float32. Returns (dequantized w, q, d)."""
    q, d = q8_quantize(np.asarray(w, np.float32))
    return q8_dequantize(q, d), q, d


class FullAttentionLayer:
    """FullAttentionLayer(cfg, w, sparse_v=0.0, n_splits=None, weight_format="f32").

    w: LayerWeights (float32 arrays under HF names relative to the layer). weight_format "q8"
    replaces every projection by its Q8_0 round trip. sparse_v and n_splits go to
    golden.decode_attention. MoE checkpoints carry no dense MLP: the layer then runs attention
    only (y = x + attention(x)) and says so once with a warning.
    """

    def __init__(self, cfg, w, sparse_v=0.0, n_splits=None, weight_format="f32"):
        _check_layer_args(weight_format, sparse_v, n_splits)
        self.cfg, self.sparse_v, self.n_splits = cfg, float(sparse_v), n_splits
        self.weight_format = weight_format
        self.has_mlp = _check_weights(cfg, w, weight_format)
        self.w = {}
        for name, arr in w.items():
            arr = np.asarray(arr, np.float32)
            if weight_format == "q8" and name in _PROJ:
                arr = quantize_weight_q8(arr)[0]
            self.w[name] = arr

    # ---- the step ---------------------------------------------------------------------------
    def forward(self, x, base_pos, cache, trace=None):
        """x float32 [nb, H] at positions base_pos .. base_pos+nb-1 -> y float32 [nb, H].

        Appends the nb rows' K/V (and indexer keys) to `cache`, then row b attends to the cache
        as stored over t_len = base_pos + b + 1 tokens. `trace`, if a dict, receives the
        intermediates (h, q, k, v, gate, selections, attn, ...) for notebooks and GPU tests.
        """
        x = self._check_input(x, base_pos, cache)
        h = rms_norm(x, self.w["input_layernorm.weight"], self.cfg.rms_norm_eps)
        attn = self.attention(h, base_pos, cache, trace)
        hn, x1 = add_rms_norm(attn, x, self.w["post_attention_layernorm.weight"],
                              self.cfg.rms_norm_eps)
        if not self.has_mlp:
            return x1
        y = x1 + mlp(hn, self.w["mlp.gate_proj.weight"], self.w["mlp.up_proj.weight"],
                     self.w["mlp.down_proj.weight"])
        if trace is not None:
            trace.update(h=h, attn_out=attn, x1=x1, h2=hn, y=y)
        return y

    def attention(self, h, base_pos, cache, trace=None):
        """The attention block on the normed hidden h [nb, H]: projections through o_proj."""
        c, w = self.cfg, self.w
        nb, hd = h.shape[0], c.head_dim
        pos = base_pos + np.arange(nb)
        qg = linear(h, w["self_attn.q_proj.weight"]).reshape(nb, c.nh, 2 * hd)
        k = linear(h, w["self_attn.k_proj.weight"]).reshape(nb, c.nkv, hd)
        v = linear(h, w["self_attn.v_proj.weight"]).reshape(nb, c.nkv, hd)
        q, k = qk_norm_rope(qg, k, w["self_attn.q_norm.weight"], w["self_attn.k_norm.weight"],
                            pos, c.rotary_dim, c.rope_theta, c.rms_norm_eps)
        gate = qg[..., hd:]

        index_k = iq = None
        if c.has_indexer:
            iq_raw, index_k = indexer_project(h, w["self_attn.indexer.qk_proj.weight"],
                                              c.indexer_n_heads, c.indexer_head_dim)
            iq = indexer_queries(iq_raw, w["self_attn.indexer.q_norm.weight"], pos,
                                 c.indexer_rotary_dim, c.rope_theta, c.rms_norm_eps)
        cache.append(k, v, index_k=index_k)
        if c.has_indexer:
            update_block_keys(cache, w["self_attn.indexer.k_norm.weight"], c, base_pos,
                              base_pos + nb)

        keys, values = cache.keys(base_pos + nb), cache.values(base_pos + nb)  # [nkv, T, hd]
        q_att = wht(q) if cache.k_rotated else q        # (Hq)·(Hk) = q·k
        out = np.empty((nb, c.nh, hd), np.float32)
        selections = []
        for b in range(nb):                               # rows differ in length and selection
            t = base_pos + b
            if c.has_indexer:
                idx, mask = row_selection(t, iq[b], cache.blk_keys, c.indexer_compress_ratio,
                                          c.kblk)
            else:
                idx, mask = np.arange(t + 1), None
            selections.append((idx, mask))
            o = decode_attention(q_att[b], keys[:, idx], values[:, idx], self.n_splits,
                                 self.sparse_v)
            if cache.v_rotated:
                o = wht(o, inverse=True)                  # Σ p·Hv = H Σ p·v
            out[b] = output_gate(o, gate[b])
        attn = linear(out.reshape(nb, c.nh * hd), w["self_attn.o_proj.weight"])
        if trace is not None:
            trace.update(qg=qg, q=q, k=k, v=v, gate=gate, index_q=iq, index_k=index_k,
                         selections=selections, attn_heads=out)
        return attn

    def _check_input(self, x, base_pos, cache):
        c = self.cfg
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a numpy array, got {type(x).__name__}")
        if x.ndim != 2 or x.shape[1] != c.hidden_size or x.shape[0] < 1:
            raise ValueError(f"x must have shape [nb, {c.hidden_size}], got {x.shape}")
        if x.dtype != np.float32:
            raise TypeError(f"x must be float32, got {x.dtype}")
        if not isinstance(base_pos, (int, np.integer)) or base_pos != len(cache):
            raise ValueError(f"base_pos ({base_pos}) must equal len(cache) ({len(cache)})")
        if cache.cfg != c:
            raise ValueError("cache was built for a different AttnConfig than this layer")
        return x
