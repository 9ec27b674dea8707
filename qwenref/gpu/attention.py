"""attention on the GPU — split-T decode partials, LSE combine, inverse WHT and gate
(kernels_cuda/attention_v1.cu, attention_mma.cu, attention_combine.cu; attention_v0.cu).

Same meaning as qwenref.golden.attention, for a whole batch of rows over a gpu.KVCache: row b
sees t_len = base_pos + b + 1 tokens densely, or, where sel_n[b] > 0, the sel_n[b] tokens
sel_idx[b, :sel_n[b]]. Golden works in float64; the kernels in float32 (docs/tuning-log.md and
the .cu headers say where the sums differ).

Shape letters: nb rows, nh q heads, nkv kv heads, hd head_dim, S splits, W selection width.

    m, l, o = attn_partials(q, cache, base_pos)      # [nb, S, nh], [nb, S, nh], [nb, S, nh, hd]
    y, lse2 = attn_combine(m, l, o, inverse_wht=cache.v_rotated, gate=gate)
    y = decode_attention(q, cache, base_pos, gate=gate)   # the two above, one launch each

Row b's splits are golden's split_bounds(n_vis_b, S), so partials compare with
golden.attn_partials on the same row with the same n_splits.

Rungs (RUNGS["attention"], impl= on decode_attention): "v0" (kernels_cuda/attention_v0.cu), one
warp per (row, q head) over all its visible tokens in one pass, the golden formula written out,
one launch and no partials; "split", "v1" and "mma", the split-T partials below plus the
combine.

Three implementations of the partials (impl= on attn_partials / decode_attention): "split" (v0's
loop cut into splits, one warp each: only when asked), "mma", tensor cores, one CTA per (kv
head, split) for all rows — for every kind but f32 (MMA_KINDS), chosen by default with
head_dim 128/256, dense rows (or one selective row), no sparse V, nb * n_rep <= 32 and a kernel
whose shared memory the device allows — and "v1", float32 CUDA cores, for everything else (and
forced by impl="v1"). The tq kinds decode on mma alone: rows that do not fit one launch run in
groups that do (plan.rows), one partials launch each, then one combine. The mma path of the
scaled kinds rounds each weight p and each dequantized value to fp16, so its output differs from
golden by at most (2u + u^2) * sum_t p_t |v_t|, u = 2^-11 (tests/test_gpu_attention_mma.py and
tests/test_gpu_attention_mma_kinds.py derive the bounds); v1 and split stay at float32 rounding.

What a call launches is an AttentionPlan, decided before any launch and kept by nobody
(qwenref/gpu/attention_plan.py; its public names are importable from here too). plan() is the
one way to ask which kernel runs (gpu=False: all but the split count, without a GPU):

    p = plan(cache, nb, base_pos=base_pos)     # p.rung, p.kernel, p.n_splits, p.tol, p.why, ...
    y = decode_attention(q, cache, base_pos, plan=p)  # runs exactly p (graph capture reuses one)

Bad input: every call checks its arguments' types, dtypes, shapes, devices and ranges, the cache
and the plan before any launch, so a failed call writes nothing (out= and the partials buffers
stay as they were). Values on the GPU (q, gate, sel_idx, sel_n) are not read: see
docs/bad-input.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from .._args import int_arg as _int_arg
from .._args import sparse_arg as _sparse_arg
from ..layout import side_arrays, tq_bits
from ._runtime import check_array, cupy, kernel, out_array
from .attention_plan import (
    COMBINE_KERNEL,
    COMBINE_MODULE,
    DEFAULT_RUNG,
    HEAD_DIMS,
    IMPLS,
    KERNEL_MODULE,
    KIND_PAIRS,
    MMA_HEAD_DIMS,
    MMA_KINDS,
    MMA_MAX_COLS,
    MMA_ONLY_PAIRS,
    RUNGS,
    TOL_ATTN,
    TOL_ATTN_MMA,
    AttentionPlan,
    check_impl,
    check_plan_arg,
    fit_plan,
    mma_kernel_name,
    mma_smem_bytes,
    options_arg,
    plan,
    plan_kernel,
    plan_rung,
    rung_kernel,
    splits_arg,
)
from .attention_splits import (
    MAX_SPLITS,
    V1_NWARP,
    DeviceLimits,
    auto_n_splits,
    device_limits,
    mma_n_splits,
)
from .kvcache import tq_decode_table

# the calls, then the plan's public names (attention_plan, attention_splits), so one import
# serves callers of all three
__all__ = [
    "decode_attention",
    "attn_partials",
    "attn_combine",
    "check_merge_limit",
    "AttentionPlan",
    "plan",
    "plan_rung",
    "rung_kernel",
    "mma_kernel_name",
    "mma_smem_bytes",
    "auto_n_splits",
    "mma_n_splits",
    "DeviceLimits",
    "device_limits",
    "KIND_PAIRS",
    "HEAD_DIMS",
    "MAX_SPLITS",
    "IMPLS",
    "RUNGS",
    "DEFAULT_RUNG",
    "MMA_HEAD_DIMS",
    "MMA_KINDS",
    "MMA_MAX_COLS",
    "KERNEL_MODULE",
    "COMBINE_KERNEL",
    "COMBINE_MODULE",
    "TOL_ATTN",
    "TOL_ATTN_MMA",
]

LOG2E = 1.0 / math.log(2.0)
_COMBINE_NT = 256  # COMBINE_NT in attention_combine.cu (threads per combine CTA)
_V1_SMEM_LIMIT = 48 * 1024  # v1's warp-merge buffer is static shared memory
_NULL = np.uint64(0)  # CuPy passes None as 0xffffffff, not NULL


def _ptr(a):
    """a for a kernel argument, NULL for None."""
    return _NULL if a is None else a


# ---- the checks every call runs before a launch ----------------------------------------------
def _side_arrays(which, side, store, nkv, hd):
    """(data, scale or None, max_t) of one stored side, checked against its layout
    (layout.side_arrays: the data array first, then its scales, if any)."""
    if not isinstance(store, dict):
        raise TypeError(f"cache.{which}_store must be a dict of cupy arrays")
    want = side_arrays(side, nkv, 0, hd)  # max_t 0 stands in: it is read from the data
    missing = [name for name in want if name not in store]
    if missing:
        raise ValueError(f"cache.{which}_store lacks {missing[0]!r} for side kind {side!r}")
    arrays, max_t = [], None  # None matches any length, until data sets it
    for name, (shape, dtype) in want.items():
        a = check_array(
            f"cache.{which}_store[{name!r}]", store[name], dtype, (shape[0], max_t) + shape[2:]
        )
        max_t = a.shape[1]
        arrays.append(a)
    return arrays[0], (arrays[1] if len(arrays) > 1 else None), max_t


def check_merge_limit(cfg, name="cfg"):
    """ValueError (starting with `name`) when a kv head's q heads do not fit the v1 partials'
    shared-memory merge: n_rep * head_dim must stay within (48 KiB - 1 KiB) / (4 B * warps)."""
    if V1_NWARP * cfg.n_rep * cfg.head_dim * 4 + 1024 > _V1_SMEM_LIMIT:
        raise ValueError(
            f"{name}: n_rep * head_dim = {cfg.n_rep} * {cfg.head_dim} is too large for the "
            f"partials kernel's shared-memory merge (at most "
            f"{(_V1_SMEM_LIMIT - 1024) // (4 * V1_NWARP)})"
        )


def _check_cache(cache):
    """(k data, k scales, v data, v scales, max_t) of a gpu.KVCache, every array checked."""
    for a in ("cfg", "k_kind", "v_kind", "k_store", "v_store", "k_rotated", "v_rotated"):
        if not hasattr(cache, a):
            raise TypeError(
                f"cache must be a qwenref.gpu.KVCache (no attribute {a!r}), "
                f"got {type(cache).__name__}"
            )
    pair = (cache.k_kind, cache.v_kind)
    if pair not in KIND_PAIRS and pair not in MMA_ONLY_PAIRS:
        raise ValueError(
            f"cache kinds (k {pair[0]!r}, v {pair[1]!r}) have no kernel; "
            f"supported: {sorted(KIND_PAIRS) + sorted(MMA_ONLY_PAIRS)}"
        )
    cfg = cache.cfg
    if cfg.head_dim not in HEAD_DIMS:
        raise ValueError(f"cache.cfg.head_dim must be one of {HEAD_DIMS}, got {cfg.head_dim}")
    check_merge_limit(cfg, "cache")
    kd, ks, kt = _side_arrays("k", cache.k_kind, cache.k_store, cfg.nkv, cfg.head_dim)
    vd, vs, vt = _side_arrays("v", cache.v_kind, cache.v_store, cfg.nkv, cfg.head_dim)
    if kt != vt:
        raise ValueError(f"cache k and v stores hold {kt} and {vt} tokens (max_t must agree)")
    if not 0 <= len(cache) <= kt:
        raise ValueError(f"cache: len(cache) = {len(cache)} is outside its stores' 0..{kt}")
    return kd, ks, vd, vs, kt


def _check_rows(q, cache, base_pos, sel_idx, sel_n):
    """q and the selection of a call, and the rows' tokens stored (base_pos an int already):
    (nb, W or 0)."""
    cfg = cache.cfg
    check_array("q", q, np.float32, (None, cfg.nh, cfg.head_dim))
    nb = q.shape[0]
    if nb < 1:
        raise ValueError("q must hold at least one row")
    if base_pos + nb > len(cache):
        raise ValueError(
            f"base_pos + nb = {base_pos} + {nb} exceeds len(cache) = {len(cache)}: "
            f"row b sees tokens [0, base_pos + b] and they must be stored"
        )
    width = 0
    if sel_n is not None:
        check_array("sel_n", sel_n, np.int32, (nb,))
        check_array("sel_idx", sel_idx, np.int32, (nb, None))
        width = sel_idx.shape[1]
        if width < 1:
            raise ValueError(f"sel_idx must have at least one column, got shape {sel_idx.shape}")
    return nb, width


def _splits_of(n_splits, m_out, m_name, nb, nh):
    """The call's split count, checked: n_splits, else m_out's, else None (the plan picks)."""
    if n_splits is None and m_out is not None:
        check_array(m_name, m_out, np.float32, (nb, None, nh))
        n_splits = m_out.shape[1]
    return None if n_splits is None else splits_arg(n_splits)


class _Call(NamedTuple):
    """One decode-attention call, checked: its arrays and the plan it runs."""

    q: object
    kd: object
    ks: object
    vd: object
    vs: object
    max_t: int
    nb: int
    base_pos: int
    width: int
    sparse_v: float
    sel_idx: object
    sel_n: object
    n_splits: int | None  # the caller's (n_splits or the partials' m), before the plan's
    plan: AttentionPlan
    tq_bits: int  # a tq cache's code width (its codebook goes to the mma kernel), else 0
    cache: object  # its kind and shape give a row group's kernel (_group_plan)


def _check_call(
    q, cache, base_pos, n_splits, sparse_v, sel_idx, sel_n, m_out, m_name, impl, given, options
):
    """Every check attn_partials and decode_attention share, and the plan the call runs (given:
    the caller's plan=, or None; m_out / m_name: the partials' m buffer and the name the caller
    gave it). The plain Python arguments first (no GPU needed to refuse them), then the arrays,
    then what depends on their shapes."""
    check_impl(impl)
    check_plan_arg(given, impl)
    base_pos = _int_arg("base_pos", base_pos, 0)
    sparse_v = _sparse_arg(sparse_v)
    n_splits = None if n_splits is None else splits_arg(n_splits)
    options = options_arg(options)
    if (sel_idx is None) != (sel_n is None):
        raise ValueError("sel_idx and sel_n must be given together (or neither)")
    kd, ks, vd, vs, max_t = _check_cache(cache)
    nb, width = _check_rows(q, cache, base_pos, sel_idx, sel_n)
    n_splits = _splits_of(n_splits, m_out, m_name, nb, cache.cfg.nh)
    selective = sel_n is not None
    kw = dict(base_pos=base_pos, sparse_v=sparse_v, selective=selective, width=width)
    kw.update(n_splits=n_splits, options=options)
    p = plan(cache, nb, impl=impl, **kw) if given is None else fit_plan(given, cache, nb, **kw)
    args = (q, kd, ks, vd, vs, max_t, nb, base_pos, width, sparse_v, sel_idx, sel_n, n_splits)
    return _Call(*args, p, tq_bits(cache.k_kind) if cache.k_kind.startswith("tq") else 0, cache)


def _partials_out(names, bufs, nb, S, nh, hd):
    """The partials buffers (m, l, o), each checked when given, else allocated; o 16-byte
    aligned (the mma kernel writes it as float2, the combine reads it as float4)."""
    shapes = ((nb, S, nh), (nb, S, nh), (nb, S, nh, hd))
    m, l, o = (out_array(n, b, s, np.float32) for n, b, s in zip(names, bufs, shapes))
    if o.data.ptr % 16:
        raise ValueError(f"{names[2]} must be 16-byte aligned (the combine reads it as float4)")
    return m, l, o


# ---- launches (arguments checked) -----------------------------------------------------------
def _launch_partials(c, cfg, m, l, o):
    p, S = c.plan, c.plan.n_splits
    qscale = np.float32(cfg.head_dim**-0.5 * LOG2E)
    if p.rung == "mma":
        # the kernel reads q as float4: a contiguous view at an odd offset gets an aligned copy
        q = c.q if c.q.data.ptr % 16 == 0 else c.q.copy()
        codebook = _ptr(tq_decode_table(c.tq_bits) if c.tq_bits else None)
        kv = (c.kd, _ptr(c.ks), c.vd, _ptr(c.vs))
        for b0, b1 in _row_groups(c.nb, p.rows):  # row b0 of a group is the kernel's row 0
            gp = _group_plan(p, c.cache, b1 - b0)
            rows = (np.int32(c.max_t), np.int32(c.base_pos + b0), np.int32(b1 - b0))
            sel = (_rows_of(c.sel_idx, b0, b1), _rows_of(c.sel_n, b0, b1), np.int32(c.width))
            out = (m[b0:b1], l[b0:b1], o[b0:b1])
            args = (q[b0:b1], *kv, *rows, *sel, codebook, qscale, *out)
            plan_kernel(gp)((cfg.nkv, S), (gp.threads,), args, shared_mem=gp.smem)
        return
    kern = plan_kernel(p)
    kv = (c.kd, _ptr(c.ks), c.vd, _ptr(c.vs))
    rows = (np.int32(c.max_t), np.int32(c.base_pos))
    sel = (_ptr(c.sel_idx), _ptr(c.sel_n), np.int32(c.width))
    args = (c.q, *kv, *rows, *sel, qscale, np.float32(c.sparse_v), m, l, o)
    kern((c.nb, cfg.nkv, S), (p.threads,), args)


def _group_plan(p, cache, n):
    """The plan one launch of n rows runs under p (rows in groups: plan.rows): p itself, or for
    a last group of fewer rows the kernel and shared memory of n rows, so that every group runs
    as a call of its own rows would."""
    if p.rung != "mma" or p.rows is None or n == p.rows:
        return p
    hd, n_rep = cache.cfg.head_dim, cache.cfg.n_rep  # dense rows: selective ones go one a launch
    kernel = mma_kernel_name(n, n_rep, False, cache.kind)
    smem = mma_smem_bytes(hd, -(-n * n_rep // 8), p.options, cache.kind)
    return dataclasses.replace(p, kernel=kernel, smem=smem)


def _row_groups(nb, rows):
    """(b0, b1) of each partials launch: all nb rows at once (rows None), else `rows` at a time.
    Each group is a call of its own on contiguous views: q, the partials and the selection are
    row-major, so rows b0..b1 of each are one run at an offset of whole rows."""
    step = rows or nb
    return [(b0, min(b0 + step, nb)) for b0 in range(0, nb, step)]


def _rows_of(a, b0, b1):
    """Rows b0..b1 of an optional per-row array, for a kernel argument (NULL for None)."""
    return _NULL if a is None else a[b0:b1]


def _launch_v0(c, cfg, gate, out):
    """attention_v0_<K>_<V>: grid (nb, nh), one warp each, out written directly."""
    kv = (c.kd, _ptr(c.ks), c.vd, _ptr(c.vs))
    rows = (np.int32(cfg.nkv), np.int32(c.max_t), np.int32(c.base_pos))
    sel = (_ptr(c.sel_idx), _ptr(c.sel_n), np.int32(c.width))
    scale = np.float32(cfg.head_dim**-0.5 * LOG2E)
    args = (c.q, *kv, *rows, *sel, scale, np.float32(c.sparse_v), _ptr(gate), out)
    plan_kernel(c.plan)((c.nb, cfg.nh), (c.plan.threads,), args)


def _inverse_mode(cache):
    """attn_combine's inverse_wht for a cache's V: 0 unrotated, 1 the WHT, 2 a tq V (the WHT,
    then the signs of layout.tq_signs)."""
    if cache.v_kind.startswith("tq"):
        return 2
    return int(bool(cache.v_rotated))


def _launch_combine(m, l, o, inverse_wht, gate, out, lse_out):
    nb, S, nh, hd = o.shape
    # dims per CTA: the whole row for the inverse WHT, else chunks of 64 (32) over more SMs
    dc = hd if inverse_wht else (64 if hd % 64 == 0 else 32)
    kernel(COMBINE_MODULE, COMBINE_KERNEL)(
        (nh, nb, hd // dc),
        (_COMBINE_NT,),
        (
            m,
            l,
            o,
            np.int32(S),
            np.int32(hd),
            np.int32(dc),
            _ptr(gate),
            np.int32(int(inverse_wht)),
            out,
            _ptr(lse_out),
        ),
    )


# ---- partials --------------------------------------------------------------------------------
def attn_partials(
    q,
    cache,
    base_pos,
    n_splits=None,
    sparse_v=0.0,
    sel_idx=None,
    sel_n=None,
    *,
    m_out=None,
    l_out=None,
    o_out=None,
    impl=None,
    plan=None,
    options=(),
):
    """Per row b, split i and q head h over the row's visible tokens (base 2):
    s = q.k * hd**-0.5 * log2(e); m = max s; l = sum 2**(s - m); o = sum 2**(s - m) * v.

    q: cupy float32 [nb, nh, hd], unrotated (rotated by the WHT inside when cache.k_rotated).
    Row b: dense over t_len = base_pos + b + 1 tokens, or, when sel_n is given and sel_n[b] > 0,
    the tokens sel_idx[b, :sel_n[b]] (int32, ascending, each < t_len; sel_n is clipped to W).
    Splits: golden split_bounds(n_vis_b, S); S = n_splits, or m_out.shape[1] when m_out is given,
    or the plan's (auto_n_splits / mma_n_splits). sparse_v > 0 drops from o a subset of the
    tokens golden drops (attention_v1.cu's header states the bound). Returns (m [nb, S, nh]
    (-inf for empty splits), l [nb, S, nh], o [nb, S, nh, hd]), float32; m_out / l_out / o_out
    (o_out 16-byte aligned) are used when given (graph capture).
    impl: None picks the rung as plan() does ("mma" = tensor cores for every kind but f32, dense
    or nb 1, where the device has the shared memory, else "v1"); "v1" forces the CUDA-core
    kernel. The mma path rounds p * d_v to fp16 (attention_mma.cu says by how much). impl="v0"
    raises ValueError: v0 reads each row in one pass and has no partials (decode_attention(...,
    impl="v0")).
    plan: an AttentionPlan (plan()) to launch instead of building one: ValueError unless it is
    the plan this call would build with impl=plan.rung (its n_splits may differ from the
    automatic one; n_splits / m_out must then agree with it). options: extra NVRTC options for
    the partials kernel (tuning sweeps, docs/tuning-log.md), e.g. ("-DATTN_TT=2", "-DMMA_NW=8").
    """
    check_impl(impl)
    check_plan_arg(plan, impl)
    if impl == "v0" or (plan is not None and plan.rung == "v0"):
        raise ValueError(
            "impl='v0' has no partials (one pass per row, no splits): use "
            "decode_attention(..., impl='v0')"
        )
    c = _check_call(
        q, cache, base_pos, n_splits, sparse_v, sel_idx, sel_n, m_out, "m_out", impl, plan, options
    )
    cfg = cache.cfg
    names, bufs = ("m_out", "l_out", "o_out"), (m_out, l_out, o_out)
    m, l, o = _partials_out(names, bufs, c.nb, c.plan.n_splits, cfg.nh, cfg.head_dim)
    _launch_partials(c, cfg, m, l, o)
    return m, l, o


# ---- combine ---------------------------------------------------------------------------------
def _check_combine(m, l, o, inverse_wht, gate, out, lse_out):
    """attn_combine's arguments, checked; returns out (allocated when None)."""
    if not isinstance(inverse_wht, (bool, np.bool_)):
        raise TypeError(f"inverse_wht must be a bool, got {type(inverse_wht).__name__}")
    check_array("m", m, np.float32, ndim=3)
    nb, S, nh = m.shape
    check_array("l", l, np.float32, (nb, S, nh))
    check_array("o", o, np.float32, (nb, S, nh, None))
    hd = o.shape[3]
    if S < 1 or S > MAX_SPLITS:
        raise ValueError(f"m must hold 1..{MAX_SPLITS} splits, got shape {m.shape}")
    if hd % 32 or not 32 <= hd <= 1024:
        raise ValueError(f"o's head_dim must be a multiple of 32 in 32..1024, got {hd}")
    if inverse_wht and (hd < 16 or hd & (hd - 1)):
        raise ValueError(f"inverse_wht needs a power-of-two head_dim >= 16, got {hd}")
    if gate is not None:
        check_array("gate", gate, np.float32, (nb, nh, hd))
    if lse_out is not None:
        check_array("lse_out", lse_out, np.float32, (nb, nh))
    if o.data.ptr % 16:
        raise ValueError("o must be 16-byte aligned (the combine reads it as float4)")
    return out_array("out", out, (nb, nh, hd), np.float32)


def attn_combine(m, l, o, inverse_wht=False, gate=None, out=None, lse_out=None):
    """Per row and q head: M = max m_i; L = sum 2**(m_i - M) l_i; out = sum 2**(m_i - M) o_i / L;
    then the inverse WHT over hd when inverse_wht (V rotated); then out * sigmoid(gate).

    m, l: cupy float32 [nb, S, nh]; o: [nb, S, nh, hd] (16-byte aligned); gate: optional
    [nb, nh, hd]. Returns (out [nb, nh, hd], lse2 [nb, nh] = M + log2 L), float32, written into
    out / lse_out when given. Empty splits add nothing.
    """
    out = _check_combine(m, l, o, inverse_wht, gate, out, lse_out)
    if lse_out is None:
        lse_out = cupy().empty(m.shape[::2], np.float32)
    _launch_combine(m, l, o, inverse_wht, gate, out, lse_out)
    return out, lse_out


# ---- the whole decode attention -------------------------------------------------------------
def decode_attention(
    q,
    cache,
    base_pos,
    gate=None,
    n_splits=None,
    sparse_v=0.0,
    sel_idx=None,
    sel_n=None,
    out=None,
    *,
    partials=None,
    impl=None,
    plan=None,
    options=(),
):
    """Split-T decode attention of nb rows: attn_partials -> combine -> inverse WHT (when
    cache.v_rotated) -> * sigmoid(gate) (when gate is given). Two launches for all rows.

    q: cupy float32 [nb, nh, hd] (unrotated); gate: optional float32 [nb, nh, hd]; partials:
    optional (m, l, o) buffers for attn_partials (graph capture: no allocation inside).
    impl: None (choose as plan() does: "mma" for every kind but f32 at hd 128/256 with nb * n_rep
    <= 32, dense or nb 1, where the device has the kernel's shared memory, else "v1"), "v1" or "mma"
    (attn_partials), or "v0": one launch of attention_v0_<K>_<V>, a warp per (row, q head)
    over all its visible tokens (n_splits and the partials buffers are checked as for v1, then
    unused). plan: an AttentionPlan (plan()) to run as is, checked to fit the call
    (attn_partials says how); options: extra NVRTC options for the rung's kernel.
    Returns out float32 [nb, nh, hd].
    """
    check_impl(impl)
    check_plan_arg(plan, impl)
    if partials is not None and (not isinstance(partials, (tuple, list)) or len(partials) != 3):
        raise TypeError("partials must be a tuple (m, l, o) of cupy float32 buffers")
    bufs = (None, None, None) if partials is None else tuple(partials)
    m_out, m_name = bufs[0], "partials[0]"
    c = _check_call(
        q, cache, base_pos, n_splits, sparse_v, sel_idx, sel_n, m_out, m_name, impl, plan, options
    )
    cfg = cache.cfg
    nb, nh, hd = c.nb, cfg.nh, cfg.head_dim
    if gate is not None:
        check_array("gate", gate, np.float32, (nb, nh, hd))
    names = ("partials[0]", "partials[1]", "partials[2]")
    S = c.plan.n_splits if c.plan.rung != "v0" else c.n_splits
    if c.plan.rung == "v0" and partials is not None:  # checked as for v1, then unused
        _partials_out(names, bufs, nb, S, nh, hd)
    out = out_array("out", out, (nb, nh, hd), np.float32)
    if c.plan.rung == "v0":
        _launch_v0(c, cfg, gate, out)
        return out
    m, l, o = _partials_out(names, bufs, nb, S, nh, hd)
    _launch_partials(c, cfg, m, l, o)
    _launch_combine(m, l, o, _inverse_mode(cache), gate, out, None)
    return out
