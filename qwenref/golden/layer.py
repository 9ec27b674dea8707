"""layer — the Qwen3.5 full-attention decoder layer, one decode step for nb rows of one sequence.

    x ──input_layernorm──> h ──q_proj──> [q | gate] per head ──q_norm + RoPE──> q
                              ├─k_proj──> k ──k_norm + RoPE──┐
                              ├─v_proj──> v ─────────────────┴─> cache.append (quantized)
                              └─indexer.qk_proj──> (indexer q, raw key) ─> block keys, selection
    per row b: attention over the cache as stored (dense, or the indexer's visible tokens)
          ──> combine ──> inverse rotation (if V rotated) ──> * sigmoid(gate) ──o_proj──> + x = x1
    x1 ──post_attention_layernorm──> SwiGLU MLP ──> + x1 = y

Shape letters: nb rows, nh q heads, nkv kv heads, hd head_dim, H hidden.
The layer holds weights only; every per-sequence state lives in the KVCache.

A rotated cache side (turbo, tq) stores y = wht(s ⊙ x), s its sign pattern (cache.k_signs,
cache.v_signs: all +1 for turbo): q is rotated the same way before the scores,
wht(s ⊙ q)·wht(s ⊙ k) = q·k, and the output of rotated values is turned back as
s ⊙ wht(o), since s ⊙ wht(Σ p·wht(s ⊙ v)) = Σ p·v.
"""

import contextlib

import numpy as np

from .._args import check_finite, check_scales, f32_array, mark_checked, weight_array
from ..layout import Q8_GROUP, Q8_LIMIT
from ..weights import PROJECTIONS, check_layer_args, check_weights, weight_shapes
from .attention import decode_attention, output_gate
from .indexer import indexer_project, indexer_queries, row_selection, update_block_keys
from .kvcache import KVCache, q8_dequantize, q8_quantize_core
from .norm import add_rms_norm, rms_norm
from .rope import qk_norm_rope
from .wht import wht_signed

__all__ = ["linear", "silu", "mlp", "quantize_weight_q8", "FullAttentionLayer"]


# ---- stage functions ---------------------------------------------------------------------------
def _linear(x, w):
    return np.matmul(x, w.T)


def linear(x, w):
    """y = x @ w.T in float32. x [nb, in], w [out, in] (HF's nn.Linear layout) -> [nb, out]."""
    x = f32_array("x", x)
    if x.ndim < 1:
        raise ValueError(f"x must have at least one axis [..., in], got shape {x.shape}")
    w = weight_array("w", w)
    if x.shape[-1] != w.shape[1]:
        raise ValueError(
            f"w must be [out, {x.shape[-1]}] to match x's last axis, got x {x.shape}, w {w.shape}"
        )
    return _linear(x, w)


def _silu(x):
    return x / (np.float32(1) + np.exp(np.minimum(-x, np.float32(80))))


def silu(x):
    """x * sigmoid(x), written as x / (1 + exp(-x)) with exp clipped so it never overflows."""
    return _silu(f32_array("x", x))


def mlp(x, w_gate, w_up, w_down):
    """down(silu(gate(x)) * up(x)) — the dense SwiGLU MLP of Qwen3.5.

    x [..., H]; w_gate, w_up [I, H]; w_down [H, I]."""
    x = f32_array("x", x)
    if x.ndim < 1:
        raise ValueError(f"x must have at least one axis [..., H], got shape {x.shape}")
    w_gate = weight_array("w_gate", w_gate)
    w_up = weight_array("w_up", w_up)
    w_down = weight_array("w_down", w_down)
    if w_gate.shape[1] != x.shape[-1]:
        raise ValueError(
            f"w_gate must be [I, {x.shape[-1]}] to match x's last axis, got x "
            f"{x.shape}, w_gate {w_gate.shape}"
        )
    if w_up.shape != w_gate.shape:
        raise ValueError(f"w_up must have w_gate's shape {w_gate.shape}, got {w_up.shape}")
    if w_down.shape != w_gate.shape[::-1]:
        raise ValueError(
            f"w_down must have shape {w_gate.shape[::-1]} = [H, I], got {w_down.shape}"
        )
    return _linear(_silu(_linear(x, w_gate)) * _linear(x, w_up), w_down)


def quantize_weight_q8(w):
    """A projection's weight as the q8 layer runs it: each row Q8_0-quantized along the input
    dim (groups of 32), dequantized to float32. Returns (dequantized w, q, d)."""
    w = f32_array("w", w)
    if w.ndim < 1 or w.shape[-1] % Q8_GROUP:
        raise ValueError(
            f"w's last axis (the input dim) must be a multiple of {Q8_GROUP}, got shape {w.shape}"
        )
    q, d = q8_quantize_core(w)
    check_scales("w", d, Q8_LIMIT)
    return q8_dequantize(q, d), q, d


@contextlib.contextmanager
def _all_or_nothing(cache, nb, name):
    """Run a step that appends nb rows to cache: if anything in it fails, put the cache back
    as it was. The arguments were checked before, so a ValueError here comes from a value
    the step computed (float32 overflow): it is reported against `name`, the step's input."""
    restore = cache.savepoint(nb)
    try:
        # every stage checks its inputs and the step checks y: an overflow is reported below
        # as a ValueError, so numpy's overflow warnings would only repeat it
        with np.errstate(over="ignore", invalid="ignore"):
            yield
    except BaseException as e:
        restore()
        if isinstance(e, ValueError):
            # an enclosing step (forward around attention) re-reports the stage's own message
            detail = getattr(e, "detail", str(e))
            err = ValueError(
                f"{name}: a value computed from {name} is out of range ({detail}); "
                f"the cache is unchanged"
            )
            err.detail = detail
            raise err from e
        raise


class FullAttentionLayer:
    """FullAttentionLayer(cfg, w, sparse_v=0.0, n_splits=None, weight_format="f32").

    w: LayerWeights (float32 arrays under HF names relative to the layer: qwenref.weights
    lists them and checks them). weight_format "q8"
    replaces every projection by its Q8_0 round trip. sparse_v and n_splits go to
    golden.decode_attention. MoE checkpoints carry no dense MLP: the layer then runs attention
    only (y = x + attention(x)) and says so once with a warning.

    Bad input never changes state: the constructor checks cfg and every weight (names, shapes,
    finite values), forward/attention check every argument before the cache is touched, and a
    step that fails later (float32 overflow in a computed value) puts the cache back as it was.
    """

    def __init__(self, cfg, w, sparse_v=0.0, n_splits=None, weight_format="f32"):
        check_layer_args(weight_format, sparse_v, n_splits)
        self.has_mlp = check_weights(cfg, w, weight_format)
        self.cfg, self.sparse_v, self.n_splits = cfg, float(sparse_v), n_splits
        self.weight_format = weight_format
        self.w = {}
        for name in weight_shapes(cfg, self.has_mlp):
            arr = np.asarray(w[name], np.float32)
            if weight_format == "q8" and name in PROJECTIONS:
                arr = quantize_weight_q8(arr)[0]
            # the layer's own read-only view, checked above: the per-step stage calls on it
            # skip the finiteness scan (a NaN written later into the caller's array is still
            # caught, in the first value computed from it, and the step is undone)
            arr = arr.view()
            arr.flags.writeable = False
            mark_checked(arr)
            self.w[name] = arr

    # ---- the step ---------------------------------------------------------------------------
    def forward(self, x, base_pos, cache, trace=None):
        """x float32 [nb, H] at positions base_pos .. base_pos+nb-1 -> y float32 [nb, H].

        Appends the nb rows' K/V (and indexer keys) to `cache`, then row b attends to the cache
        as stored over t_len = base_pos + b + 1 tokens. `trace`, if a dict, receives the
        intermediates (h, q, k, v, gate, selections, attn, ...) for notebooks and GPU tests.
        """
        x = self._check_step("x", x, base_pos, cache, trace)
        tr = {}  # goes to `trace` only on success
        with _all_or_nothing(cache, x.shape[0], "x"):
            h = rms_norm(x, self.w["input_layernorm.weight"], self.cfg.rms_norm_eps)
            attn = self.attention(h, base_pos, cache, tr)
            hn, x1 = add_rms_norm(
                attn, x, self.w["post_attention_layernorm.weight"], self.cfg.rms_norm_eps
            )
            y = x1
            if self.has_mlp:
                y = x1 + mlp(
                    hn,
                    self.w["mlp.gate_proj.weight"],
                    self.w["mlp.up_proj.weight"],
                    self.w["mlp.down_proj.weight"],
                )
            check_finite("y", y)
        if trace is not None:
            trace.update(tr, h=h, attn_out=attn, x1=x1, h2=hn, y=y)
        return y

    def attention(self, h, base_pos, cache, trace=None):
        """The attention block on the normed hidden h [nb, H]: projections through o_proj."""
        h = self._check_step("h", h, base_pos, cache, trace)
        c, w = self.cfg, self.w
        nb, hd = h.shape[0], c.head_dim
        with _all_or_nothing(cache, nb, "h"):
            pos = base_pos + np.arange(nb)
            qg = linear(h, w["self_attn.q_proj.weight"]).reshape(nb, c.nh, 2 * hd)
            k = linear(h, w["self_attn.k_proj.weight"]).reshape(nb, c.nkv, hd)
            v = linear(h, w["self_attn.v_proj.weight"]).reshape(nb, c.nkv, hd)
            q, k = qk_norm_rope(
                qg,
                k,
                w["self_attn.q_norm.weight"],
                w["self_attn.k_norm.weight"],
                pos,
                c.rotary_dim,
                c.rope_theta,
                c.rms_norm_eps,
            )
            gate = qg[..., hd:]

            index_k = iq = None
            if c.has_indexer:
                iq_raw, index_k = indexer_project(
                    h, w["self_attn.indexer.qk_proj.weight"], c.indexer_n_heads, c.indexer_head_dim
                )
                iq = indexer_queries(
                    iq_raw,
                    w["self_attn.indexer.q_norm.weight"],
                    pos,
                    c.indexer_rotary_dim,
                    c.rope_theta,
                    c.rms_norm_eps,
                )
            cache.append(k, v, index_k=index_k)
            if c.has_indexer:
                update_block_keys(
                    cache, w["self_attn.indexer.k_norm.weight"], c, base_pos, base_pos + nb
                )

            keys, values = cache.keys(base_pos + nb), cache.values(base_pos + nb)  # [nkv, T, hd]
            # (H(s⊙q))·(H(s⊙k)) = q·k
            q_att = wht_signed(q, cache.k_signs) if cache.k_rotated else q
            out = np.empty((nb, c.nh, hd), np.float32)
            selections = []
            for b in range(nb):  # rows differ in length and selection
                t = base_pos + b
                if c.has_indexer:
                    idx, mask = row_selection(
                        t, iq[b], cache.blk_keys, c.indexer_compress_ratio, c.kblk
                    )
                else:
                    idx, mask = np.arange(t + 1), None
                selections.append((idx, mask))
                o = decode_attention(
                    q_att[b], keys[:, idx], values[:, idx], self.n_splits, self.sparse_v
                )
                if cache.v_rotated:
                    o = wht_signed(o, cache.v_signs, inverse=True)  # s⊙H Σ p·H(s⊙v) = Σ p·v
                out[b] = output_gate(o, gate[b])
            attn = linear(out.reshape(nb, c.nh * hd), w["self_attn.o_proj.weight"])
            check_finite("attn", attn)
        if trace is not None:
            trace.update(
                qg=qg,
                q=q,
                k=k,
                v=v,
                gate=gate,
                index_q=iq,
                index_k=index_k,
                selections=selections,
                attn_heads=out,
            )
        return attn

    def _check_step(self, name, x, base_pos, cache, trace):
        """forward's and attention's arguments, all checked before the cache is touched; `name`
        is the input's name as the caller spelled it ("x" or "h")."""
        c = self.cfg
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
        if x.ndim != 2 or x.shape[1] != c.hidden_size or x.shape[0] < 1:
            raise ValueError(f"{name} must have shape [nb, {c.hidden_size}], got {x.shape}")
        if x.dtype != np.float32:
            raise TypeError(f"{name} must be float32, got {x.dtype}")
        check_finite(name, x)
        if isinstance(base_pos, (bool, np.bool_)) or not isinstance(base_pos, (int, np.integer)):
            raise TypeError(f"base_pos must be an int, got {type(base_pos).__name__}")
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a golden KVCache, got {type(cache).__name__}")
        if cache.cfg != c:
            raise ValueError("cache was built for a different AttnConfig than this layer")
        if base_pos != len(cache):
            raise ValueError(f"base_pos ({base_pos}) must equal len(cache) ({len(cache)})")
        if len(cache) + x.shape[0] > cache.max_t:
            raise ValueError(
                f"{name}: {x.shape[0]} rows after the {len(cache)} stored exceed "
                f"the cache's max_t={cache.max_t}"
            )
        if trace is not None and not isinstance(trace, dict):
            raise TypeError(f"trace must be None or a dict, got {type(trace).__name__}")
        return x
