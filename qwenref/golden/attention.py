"""attention — split-T decode partials (base 2), LSE combine, sparse V and the output gate.

Shapes: q [nh, hd] for one row; k, v [nkv, T, hd] (already gathered for a selective row);
GQA: q head h reads kv head h // (nh // nkv).

Shape letters (einsum strings): H q heads (nh), G kv heads (nkv), R q heads per kv head
(n_rep = nh // nkv, so H = G·R with h = g·R + r), T tokens, D head_dim, S splits, W tokens per
split (a whole number of 32-token chunks; the last split is padded, trailing ones may be empty).

Precision: q, k, v are read as float32 and every sum (scores, l, o, the combine) is carried out
in float64; the public outputs (m, l, o, out, lse2) are rounded to float32 once, at the end.
Each split's (l, o) is accumulated relative to m *as rounded to float32*, so the float32 triple
(m, l, o) that a kernel or test sees is self-consistent: combining it loses nothing beyond the
float32 rounding of l and o themselves.
"""

import math

import numpy as np

from .._args import check_finite, f32_array, real_array
from .._args import int_arg as _int_arg
from .._args import sparse_arg as _sparse_arg

__all__ = [
    "default_n_splits",
    "split_bounds",
    "attn_partials",
    "attn_combine",
    "decode_attention",
    "output_gate",
]

CHUNK = 32  # split boundaries fall on multiples of 32 tokens (cherenkov's qwen4_exp)
MAX_DEFAULT_SPLITS = 64
LOG2E = 1.0 / math.log(2.0)  # log2(e): base-2 scores let kernels use exp2


# ---- argument checks (ValueError / TypeError naming the argument) ------------------------------


def _float_array(name, x, ndim):
    """x as a float32 array of ndim dims, every value finite."""
    return f32_array(name, x, ints=True, ndim=ndim)


def _check_qkv(q, k, v):
    q = _float_array("q", q, 2)  # [H, D]
    k = _float_array("k", k, 3)  # [G, T, D]
    v = _float_array("v", v, 3)  # [G, T, D]
    nh, hd = q.shape
    nkv, T, _ = k.shape
    if k.shape[2] != hd:
        raise ValueError(f"k head_dim {k.shape[2]} != q head_dim {hd} (q {q.shape}, k {k.shape})")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {k.shape}, got {v.shape}")
    if nkv < 1 or nh % nkv:
        raise ValueError(f"q heads ({nh}) must be a multiple of k's kv heads ({nkv})")
    if T < 1:
        raise ValueError(f"k must hold at least one token, got shape {k.shape}")
    return q, k, v


# ---- splits ------------------------------------------------------------------------------------
def default_n_splits(t_len):
    """cherenkov's qwen4_exp heuristic: chunks = ceil(t_len / 32);
    clamp(ceil(chunks / 3), 1, 64)."""
    t_len = _int_arg("t_len", t_len, 0)
    chunks = -(-t_len // CHUNK)
    return min(max(-(-chunks // 3), 1), MAX_DEFAULT_SPLITS)


def _split_width(t_len, n_splits):
    """Tokens per split, W = per * 32 with per = ceil(ceil(t_len / 32) / n_splits) (>= 32)."""
    chunks = -(-t_len // CHUNK)
    return max(-(-chunks // n_splits), 1) * CHUNK


def split_bounds(t_len, n_splits):
    """Contiguous ranges in whole chunks of 32: per = ceil(ceil(t_len/32) / n_splits) chunks;
    bounds[i] = min(t_len, i * per * 32). int64 [n_splits + 1]; trailing splits may be empty."""
    t_len = _int_arg("t_len", t_len, 0)
    n_splits = _int_arg("n_splits", n_splits, 1)
    W = _split_width(t_len, n_splits)
    return np.minimum(np.arange(n_splits + 1, dtype=np.int64) * W, t_len)


# ---- partials and combine ----------------------------------------------------------------------
def _scores2(q, k):
    """s[h, t] = q_h . k_{h // R, t} * hd**-0.5 * log2(e), float64 [H, T]."""
    nh, hd = q.shape
    nkv = k.shape[0]
    qg = q.astype(np.float64).reshape(nkv, nh // nkv, hd)  # [G, R, D]
    s = np.einsum("grd,gtd->grt", qg, k.astype(np.float64))  # [G, R, T]
    return s.reshape(nh, -1) * (hd**-0.5 * LOG2E)  # [H, T]


def _sparse_keep(s, threshold):
    """keep[h, t] = p[h, t] >= threshold, p the row's exact softmax (global max and sum)."""
    e = np.exp2(s - s.max(axis=-1, keepdims=True))  # [H, T]
    p = e / e.sum(axis=-1, keepdims=True)
    return p >= threshold


def attn_partials(q, k, v, n_splits, sparse_v=0.0):
    """Per split and q head: s = q.k * hd**-0.5 * log2(e); m = max s; l = sum 2**(s - m);
    o = sum 2**(s - m) * v (over tokens with normalized p >= sparse_v when sparse_v > 0).

    Returns (m float32 [S, nh] (-inf for empty splits), l float32 [S, nh], o float32 [S, nh, hd]).

    Sparse V: p_i = 2**s_i / sum_j 2**s_j over the whole row (all T tokens, computed exactly in
    float64 before splitting); tokens with p_i < sparse_v leave o only — l keeps them, so the
    combined output is sum_{p_i >= thr} p_i v_i with the full softmax denominator.
    Splits are those of split_bounds(T, n_splits); float64 inside, float32 out.
    """
    q, k, v = _check_qkv(q, k, v)
    n_splits = _int_arg("n_splits", n_splits, 1)
    sparse_v = _sparse_arg(sparse_v)
    return _partials(q, k, v, n_splits, sparse_v)


def _partials(q, k, v, n_splits, sparse_v):
    """attn_partials on checked arguments. o is float32: a split's sum of p·v past float32's
    range rounds to inf (|v| near 1e38 / W), which decode_attention refuses."""
    nh, hd = q.shape
    nkv, T, _ = k.shape
    S, W = n_splits, _split_width(T, n_splits)  # S·W >= T: pad, then one reshape

    s = _scores2(q, k)  # [H, T]
    s_pad = np.full((nh, S * W), -np.inf)
    s_pad[:, :T] = s
    s_pad = s_pad.reshape(nh, S, W)  # [H, S, W]

    m = s_pad.max(axis=-1).astype(np.float32)  # [H, S], -inf if empty
    m_ref = np.where(np.isfinite(m), m, 0.0).astype(np.float64)  # no (-inf) - (-inf)
    e = np.exp2(s_pad - m_ref[..., None])  # [H, S, W], pad -> 0
    l = e.sum(axis=-1)  # [H, S]

    if sparse_v > 0.0:
        keep = np.zeros((nh, S * W), bool)
        keep[:, :T] = _sparse_keep(s, sparse_v)
        e = np.where(keep.reshape(nh, S, W), e, 0.0)  # numerator only

    v_pad = np.zeros((nkv, S * W, hd))
    v_pad[:, :T] = v
    e = e.reshape(nkv, nh // nkv, S, W)  # [G, R, S, W]
    o = np.einsum("grsw,gswd->sgrd", e, v_pad.reshape(nkv, S, W, hd))  # [S, G, R, D]

    with np.errstate(over="ignore"):
        return (
            np.ascontiguousarray(m.T),  # [S, H]
            np.ascontiguousarray(l.T, dtype=np.float32),  # [S, H]
            o.reshape(S, nh, hd).astype(np.float32),
        )  # [S, H, D]


def attn_combine(m, l, o):
    """M = max m_i; L = sum 2**(m_i - M) l_i; out = sum 2**(m_i - M) o_i / L.

    Returns (out float32 [nh, hd], lse2 float32 [nh] = M + log2 L). Empty splits add nothing.

    Empty splits (m = -inf, l = 0, o = 0) get weight 2**(-inf) = 0, never (-inf) - (-inf). A
    head whose splits are all empty (L = 0) gets out = 0 and lse2 = -inf. float64 inside.
    m may hold -inf (an empty split), never NaN or +inf; l must be finite and >= 0 (a sum of
    exponentials); o finite.
    """
    m = real_array("m", m, ndim=2)
    if m.shape[0] < 1:
        raise ValueError(f"m must hold at least one split, got shape {m.shape}")
    m = m.astype(np.float64)
    if np.isnan(m).any() or (m == np.inf).any():
        raise ValueError("m must be finite or -inf (an empty split): it holds NaN or +inf")
    check_finite("m", m[m != -np.inf])  # within float32's range
    l = real_array("l", l)
    if l.shape != m.shape:
        raise ValueError(f"l must have m's shape {m.shape}, got {l.shape}")
    l = check_finite("l", l.astype(np.float64))
    if (l < 0).any():
        raise ValueError("l must be >= 0 (a sum of exponentials)")
    o = real_array("o", o)
    if o.ndim != 3 or o.shape[:2] != m.shape:
        raise ValueError(f"o must have shape [S, nh, hd] = {m.shape + ('hd',)}, got {o.shape}")
    o = check_finite("o", o.astype(np.float64))
    return _combine(m, l, o)


def _combine(m, l, o):
    """attn_combine on checked float64 arguments."""
    M = m.max(axis=0)  # [H]
    w = np.exp2(m - np.where(np.isfinite(M), M, 0.0))  # [S, H], empty -> 0
    L = (w * l).sum(axis=0)  # [H]
    num = np.einsum("sh,shd->hd", w, o)  # [H, D]
    has = L > 0
    L_safe = np.where(has, L, 1.0)
    out = num / L_safe[:, None]
    lse2 = np.where(has, M + np.log2(L_safe), -np.inf)
    return out.astype(np.float32), lse2.astype(np.float32)


def decode_attention(q, k, v, n_splits=None, sparse_v=0.0):
    """attn_combine(attn_partials(...))[0]; n_splits=None -> default_n_splits(T).

    q [nh, hd], k, v [nkv, T, hd] -> float32 [nh, hd].
    """
    q, k, v = _check_qkv(q, k, v)
    n_splits = (
        default_n_splits(k.shape[1]) if n_splits is None else _int_arg("n_splits", n_splits, 1)
    )
    sparse_v = _sparse_arg(sparse_v)
    m, l, o = _partials(q, k, v, n_splits, sparse_v)
    if not np.isfinite(o).all():
        raise ValueError("v: a split's sum of p·v overflows float32 (|v| is too large)")
    return _combine(m.astype(np.float64), l.astype(np.float64), o.astype(np.float64))[0]


def output_gate(o, gate):
    """o * sigmoid(gate), float32.

    sigmoid(g) = 1 / (1 + e**-|g|) for g >= 0 and e**-|g| / (1 + e**-|g|) for g < 0: the
    exponent is never positive, so no overflow for any |gate|. Computed in float64.
    """
    o = real_array("o", o)
    gate = real_array("gate", gate)
    if o.shape != gate.shape:
        raise ValueError(f"gate must have o's shape {o.shape}, got {gate.shape}")
    check_finite("o", o)
    check_finite("gate", gate)
    g = gate.astype(np.float64)
    z = np.exp(-np.abs(g))  # in (0, 1]
    sig = np.where(g >= 0, 1.0 / (1.0 + z), z / (1.0 + z))
    return (o.astype(np.float64) * sig).astype(np.float32)
