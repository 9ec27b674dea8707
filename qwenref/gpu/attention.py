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
one launch and no partials; "v1" and "mma", the split-T partials below plus the combine.

Two implementations of the partials (impl= on attn_partials / decode_attention): "mma", tensor
cores, one CTA per (kv head, split) for all rows — chosen by default for q8/q8 caches with
head_dim 128/256, dense rows (or one selective row), no sparse V and nb * n_rep <= 32 — and
"v1", float32 CUDA cores, for everything else (and forced by impl="v1"). The mma path rounds
each weight p and each dequantized value code * d_v to fp16, so its output differs from golden
by at most (2u + u^2) * sum_t p_t |v_t|, u = 2^-11 (tests/test_gpu_attention_mma.py derives
it); v1 stays at float32 rounding.

What a call launches is an AttentionPlan, decided before any launch and kept by nobody:

    p = plan(cache, nb, base_pos=base_pos)     # p.rung, p.kernel, p.n_splits, p.tol, p.why, ...
    y = decode_attention(q, cache, base_pos, plan=p)  # runs exactly p (graph capture reuses one)

plan_rung(cache, nb, ...) is its GPU-free part (everything but the split count); choose_impl and
rung_kernel read it. Tuning options (extra NVRTC -D's) are the options= argument of each call.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .._args import int_arg as _int_arg
from .._args import sparse_arg as _sparse_arg
from ..layout import side_arrays, side_kinds
from ._runtime import check_array, cupy, kernel, out_array

__all__ = [
    "decode_attention",
    "attn_partials",
    "attn_combine",
    "auto_n_splits",
    "mma_n_splits",
    "mma_kernel_name",
    "choose_impl",
    "rung_kernel",
    "AttentionPlan",
    "plan",
    "plan_rung",
    "KIND_PAIRS",
    "HEAD_DIMS",
    "MAX_SPLITS",
    "IMPLS",
    "RUNGS",
    "DEFAULT_RUNG",
    "TOL_ATTN",
    "TOL_ATTN_MMA",
]

# (k side, v side) -> kernel suffix; the kernels are attn_partials_<suffix>
KIND_PAIRS = {
    ("f32", "f32"): "f32_f32",
    ("bf16", "bf16"): "bf16_bf16",
    ("q8", "q8"): "q8_q8",
    ("turbo8", "turbo8"): "turbo8_turbo8",
    ("turbo4", "turbo4"): "turbo4_turbo4",
    ("turbo3", "turbo3"): "turbo3_turbo3",
    ("turbo2", "turbo2"): "turbo2_turbo2",
    ("bf16", "turbo4"): "bf16_turbo4",
    ("bf16", "turbo3"): "bf16_turbo3",
    ("bf16", "turbo2"): "bf16_turbo2",
}
HEAD_DIMS = (64, 128, 256)
MAX_SPLITS = 1024  # the combine keeps one weight per split in shared memory
CHUNK = 32  # split bounds are whole 32-token chunks (golden)
LOG2E = 1.0 / math.log(2.0)
_NWARP = 4  # ATTN_NWARP in attention_v1.cu (threads per partials CTA = 128)
_COMBINE_NT = 256  # COMBINE_NT in attention_combine.cu (threads per combine CTA)
_DEFAULT_SHAPE = (256, 6)  # attention.cuh's ATTN_HD, ATTN_NREP defaults: no -D options
_SMEM_LIMIT = 48 * 1024  # the warp-merge buffer is static shared memory
_NULL = np.uint64(0)  # CuPy passes None as 0xffffffff, not NULL

IMPLS = ("v0", "v1", "mma")  # impl= values (None = choose_impl); v0 has no partials
# The family's rungs in teaching order, and the default: None = chosen per call by choose_impl
# ("mma" where it applies, else "v1"); v0 is never chosen, only asked for.
RUNGS = {"attention": IMPLS}
DEFAULT_RUNG = {"attention": None}
MMA_HEAD_DIMS = (128, 256)  # attn_partials_q8_mma_n<NT8>: q8/q8, no sparse V, dense / nb 1
MMA_MAX_COLS = 32  # nb * n_rep columns: NT8 = ceil(cols / 8) <= 4
_COMBINE = "attn_combine"  # the combine kernel after v1 / mma partials
# the kernels_cuda module (NVRTC compiles each alone) of each rung's kernel, and the combine's;
# a plan's options go to its rung's module, the combine's module takes none
_MODULE = {"v0": "attention_v0", "v1": "attention_v1", "mma": "attention_mma"}
_COMBINE_MODULE = "attention_combine"

# Norm-wise relative error against golden (||gpu - golden|| / ||golden||) that each rung's
# precision implies; an AttentionPlan carries its rung's (the bench checks against plan.tol).
TOL_ATTN = 1e-4  # v0 / v1: same stored codes, float32 exp2 and sums over up to 128k
# tokens in another order (error grows ~sqrt(terms)·eps per split sum)
TOL_ATTN_MMA = 1e-3  # mma rounds each p and each code·d_v to fp16: a term is off by
# <= 2u + u^2 ~ 9.8e-4 relative (u = 2^-11), the norm-wise worst case
# (attention on one token puts it all on that token's V row); measured 2e-4


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


def _check_cache(cache):
    for a in ("cfg", "k_kind", "v_kind", "k_store", "v_store", "k_rotated", "v_rotated"):
        if not hasattr(cache, a):
            raise TypeError(
                f"cache must be a qwenref.gpu.KVCache (no attribute {a!r}), "
                f"got {type(cache).__name__}"
            )
    pair = (cache.k_kind, cache.v_kind)
    if pair not in KIND_PAIRS:
        raise ValueError(
            f"cache kinds (k {pair[0]!r}, v {pair[1]!r}) have no kernel; "
            f"supported: {sorted(KIND_PAIRS)}"
        )
    cfg = cache.cfg
    if cfg.head_dim not in HEAD_DIMS:
        raise ValueError(f"cache.cfg.head_dim must be one of {HEAD_DIMS}, got {cfg.head_dim}")
    if _NWARP * cfg.n_rep * cfg.head_dim * 4 + 1024 > _SMEM_LIMIT:
        raise ValueError(
            f"n_rep * head_dim = {cfg.n_rep} * {cfg.head_dim} is too large for the "
            f"partials kernel's shared-memory merge (at most "
            f"{(_SMEM_LIMIT - 1024) // (4 * _NWARP)})"
        )
    kd, ks, kt = _side_arrays("k", cache.k_kind, cache.k_store, cfg.nkv, cfg.head_dim)
    vd, vs, vt = _side_arrays("v", cache.v_kind, cache.v_store, cfg.nkv, cfg.head_dim)
    if kt != vt:
        raise ValueError(f"cache k and v stores hold {kt} and {vt} tokens (max_t must agree)")
    return kd, ks, vd, vs, kt


def _check_rows(q, cache, base_pos, sel_idx, sel_n):
    """Common checks of attn_partials / decode_attention; returns (nb, W or 0)."""
    cfg = cache.cfg
    check_array("q", q, np.float32, (None, cfg.nh, cfg.head_dim))
    nb = q.shape[0]
    if nb < 1:
        raise ValueError("q must hold at least one row")
    base_pos = _int_arg("base_pos", base_pos, 0)
    if base_pos + nb > len(cache):
        raise ValueError(
            f"base_pos + nb = {base_pos} + {nb} exceeds len(cache) = {len(cache)}: "
            f"row b sees tokens [0, base_pos + b] and they must be stored"
        )
    if (sel_idx is None) != (sel_n is None):
        raise ValueError("sel_idx and sel_n must be given together (or neither)")
    width = 0
    if sel_n is not None:
        check_array("sel_n", sel_n, np.int32, (nb,))
        check_array("sel_idx", sel_idx, np.int32, (nb, None))
        width = sel_idx.shape[1]
        if width < 1:
            raise ValueError(f"sel_idx must have at least one column, got shape {sel_idx.shape}")
    return nb, base_pos, width


def _shape_options(hd, n_rep):
    """-D options of the partials' compile-time shape (attention.cuh; none for its
    defaults)."""
    return () if (hd, n_rep) == _DEFAULT_SHAPE else (f"-DATTN_HD={hd}", f"-DATTN_NREP={n_rep}")


def _v0_options(hd):
    """-D options of attention_v0.cu's head_dim (its default is 256)."""
    return () if hd == 256 else (f"-DATTN_V0_HD={hd}",)


def _options_arg(options):
    """options= as a tuple of str; a bare string is refused (it would be read char by char)."""
    if isinstance(options, (str, bytes)) or not isinstance(options, (tuple, list)):
        raise TypeError(f"options must be a tuple of NVRTC option strings, got {options!r}")
    for o in options:
        if not isinstance(o, str):
            raise TypeError(f"options must hold strings, got {type(o).__name__} {o!r}")
    return tuple(options)


def _opt_value(options, name, default):
    """The int that -D<name>=<int> sets among options (the last one, as the compiler reads
    them), else default."""
    for o in reversed(options):
        if o.startswith(f"-D{name}="):
            return int(o.split("=", 1)[1])
    return default


def _splits_arg(n_splits):
    n_splits = _int_arg("n_splits", n_splits, 1)
    if n_splits > MAX_SPLITS:
        raise ValueError(f"n_splits must be <= {MAX_SPLITS}, got {n_splits}")
    return n_splits


def _splits_of(n_splits, m_out, nb, nh):
    """The call's split count, checked: n_splits, else m_out's, else None (the plan picks)."""
    if n_splits is None and m_out is not None:
        check_array("m_out", m_out, np.float32, (nb, None, nh))
        n_splits = m_out.shape[1]
    return None if n_splits is None else _splits_arg(n_splits)


# ---- split count -------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _sm_count(device_id):
    return int(cupy().cuda.Device(device_id).attributes["MultiProcessorCount"])


def auto_n_splits(kern, n_vis_max, nkv, nb, nwarp=_NWARP):
    """Enough CTAs for one full wave: n_SM * (CTAs per SM the kernel's registers allow) CTAs,
    S = ceil(that / (nkv * nb)), clamped to [1, min(chunks of the longest row, MAX_SPLITS)].
    nwarp: warps per CTA (ATTN_NWARP)."""
    n_sm = _sm_count(cupy().cuda.Device().id)
    try:
        regs = int(kern.num_regs)
    except AttributeError:  # older CuPy: the attribute dict
        regs = int(kern.attributes.get("num_regs", 255))
    regs = max(regs, 1)
    regs_per_warp = -(-regs * 32 // 256) * 256  # allocation unit: 256 per warp
    warps = min(65536 // regs_per_warp, 64)
    per_sm = max(warps // nwarp, 1)
    chunks = max(-(-n_vis_max // CHUNK), 1)
    s = -(-n_sm * per_sm // (nkv * nb))
    return max(1, min(s, chunks, MAX_SPLITS))


# ---- the tensor-core (mma) kernel -------------------------------------------------------------
def _mma_nw(hd, nt8, options=()):
    """Warps per CTA of attn_partials_q8_mma_n<nt8>: mirrors mma_attn::Cfg (attention_mma.cu)."""
    return _opt_value(options, "MMA_NW", 0) or 4


def _mma_nst(hd, nt8, options=()):
    """Pipeline stages of attn_partials_q8_mma_n<nt8>: mirrors mma_attn::Cfg
    (attention_mma.cu)."""
    return _opt_value(options, "MMA_NSTAGE", 0) or 2


def _mma_smem_bytes(hd, nt8, options=()):
    """Dynamic shared memory of attn_partials_q8_mma_n<nt8>: mirrors mma_attn::Lay in
    attention_mma.cu (test_gpu_attention_mma checks it against the kernel's own
    attn_mma_smem_bytes)."""
    nw, nst = _mma_nw(hd, nt8, options), _mma_nst(hd, nt8, options)
    bt, ng, nch, ncol = 16 * nw, hd // 32, hd // 16, 8 * nt8
    pst = 8 * (nt8 if nt8 % 2 else nt8 + 1)
    return (
        2 * nst * bt * hd
        + 2 * nst * bt * ng * 2
        + nch * nt8 * 32 * 16
        + bt * pst * 2
        + 2 * ncol * nw * 4
        + ncol * 4
        + nw * 4
    )


def mma_kernel_name(nb, n_rep, selective=False):
    """The mma partials kernel for nb rows of n_rep heads: attn_partials_q8_mma_n<NT8> for dense
    rows, NT8 = ceil(nb * n_rep / 8); attn_partials_q8_mma_sel_n1 when the (single) row may be
    selective. The selective path is a compile-time flag in attention_mma.cu, so dense rows
    never pay for it."""
    nt8 = -(-nb * n_rep // 8)
    if selective:
        if nb != 1 or nt8 != 1:
            raise ValueError(
                f"the selective mma kernel takes one row of <= 8 heads, got nb={nb}, n_rep={n_rep}"
            )
        return "attn_partials_q8_mma_sel_n1"
    return f"attn_partials_q8_mma_n{nt8}"


def mma_n_splits(kern, smem, threads, n_vis_max, nkv):
    """Splits for the mma kernel (one CTA per (kv head, split), all rows inside): enough CTAs
    for one full wave, n_SM * (CTAs per SM that shared memory and registers allow), clamped to
    [1, min(tiles of the longest row, MAX_SPLITS)] (a tile: the threads // 2 tokens one pipeline
    stage loads)."""
    n_sm = _sm_count(cupy().cuda.Device().id)
    try:
        regs = int(kern.num_regs)
    except AttributeError:
        regs = int(kern.attributes.get("num_regs", 255))
    regs_per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = 65536 // (regs_per_warp * threads // 32)
    by_smem = (228 * 1024) // (smem + 1024)
    per_sm = max(1, min(by_regs, by_smem, 64 * 32 // threads))
    # at most one split per tile of 16 * warps tokens (one 64-token block at 4 warps): a split
    # of less than a tile still pays a whole tile's prologue, and doubles the combine's reads
    # (QSA's 2112-token row: 33 splits instead of 66, decode 10.4 -> 9.6 us in one run)
    tiles = max(-(-n_vis_max // (threads // 2)), 1)
    s = -(-n_sm * per_sm // nkv)
    return max(1, min(s, tiles, MAX_SPLITS))


# ---- the plan: which kernel, how many splits, what tolerance ------------------------------------
@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """What one decode-attention call launches, decided on the host before any launch.

    rung      "v0" | "v1" | "mma" (RUNGS["attention"])
    kernel    the partials kernel (attn_partials_<K>_<V>, attn_partials_q8_mma_n<NT8> or
              attn_partials_q8_mma_sel_n1), or attention_v0_<K>_<V> (v0: the whole decode)
    combine   the kernel that combines the partials ("attn_combine"); None for v0
    n_splits  S, splits per row; None for v0 (no partials) and in plan_rung's GPU-free plan
    threads   threads per CTA of `kernel`
    smem      dynamic shared memory per CTA of `kernel`, bytes (0: v0 / v1 use static only)
    options   the NVRTC options `kernel` compiles with: its shape -D's, then the caller's
    tol       norm-wise relative error against golden that the rung's precision implies:
              TOL_ATTN_MMA for mma (fp16 P.V), TOL_ATTN for v0 / v1 (float32)
    why       why a faster rung did not apply, or that impl= asked for this one; None for mma
    """

    rung: str
    kernel: str
    combine: str | None
    n_splits: int | None
    threads: int
    smem: int
    options: tuple
    tol: float
    why: str | None = None


def _check_impl(impl):
    if impl not in (None,) + IMPLS:
        raise ValueError(f"impl must be None or one of {IMPLS}, got {impl!r}")


def _rung(k_kind, v_kind, hd, n_rep, nb, sparse_v, selective, impl):
    """(rung, why): impl when given (ValueError where mma does not apply), else "mma" where it
    applies, else "v1" and the first reason it does not."""
    if impl in ("v0", "v1"):
        return impl, f"impl={impl!r} asked for"
    why = None
    if (k_kind, v_kind) != ("q8", "q8"):
        why = f"cache kinds ({k_kind}, {v_kind}) are not q8/q8"
    elif hd not in MMA_HEAD_DIMS:
        why = f"head_dim {hd} not in {MMA_HEAD_DIMS}"
    elif nb * n_rep > MMA_MAX_COLS:
        why = f"nb * n_rep = {nb * n_rep} > {MMA_MAX_COLS}"
    elif selective and (nb != 1 or n_rep > 8):
        # each selective row reads its own token list, so rows cannot share one tile's K/V
        why = "selective rows (sel_n given) take the mma kernel only for nb = 1, n_rep <= 8"
    elif sparse_v > 0.0:
        why = "sparse_v > 0 uses v1"
    if why is None:
        return "mma", None
    if impl == "mma":
        raise ValueError(f"impl='mma' does not apply: {why}")
    return "v1", why


def _plan_shape(
    k_kind, v_kind, hd, n_rep, nb, *, sparse_v=0.0, selective=False, impl=None, options=()
):
    """The GPU-free plan of a call on this shape (n_splits None): plan_rung without a cache."""
    _check_impl(impl)
    nb = _int_arg("nb", nb, 1)
    sparse_v = _sparse_arg(sparse_v)
    options = _options_arg(options)
    pair = KIND_PAIRS.get((k_kind, v_kind))
    if pair is None:
        raise ValueError(
            f"cache kinds (k {k_kind!r}, v {v_kind!r}) have no kernel; "
            f"supported: {sorted(KIND_PAIRS)}"
        )
    rung, why = _rung(k_kind, v_kind, hd, n_rep, nb, sparse_v, bool(selective), impl)
    if rung == "v0":  # one warp per (row, q head)
        return AttentionPlan(
            "v0",
            "attention_v0_" + pair,
            None,
            None,
            32,
            0,
            _v0_options(hd) + options,
            TOL_ATTN,
            why,
        )
    opts = _shape_options(hd, n_rep) + options
    if rung == "v1":
        return AttentionPlan(
            "v1",
            "attn_partials_" + pair,
            _COMBINE,
            None,
            32 * _opt_value(opts, "ATTN_NWARP", _NWARP),
            0,
            opts,
            TOL_ATTN,
            why,
        )
    nt8 = -(-nb * n_rep // 8)
    return AttentionPlan(
        "mma",
        mma_kernel_name(nb, n_rep, selective),
        _COMBINE,
        None,
        32 * _mma_nw(hd, nt8, opts),
        _mma_smem_bytes(hd, nt8, opts),
        opts,
        TOL_ATTN_MMA,
        None,
    )


def plan_rung(cache, nb, *, sparse_v=0.0, selective=False, impl=None, options=()):
    """Everything of plan() that needs no GPU: the rung, its kernels, threads, shared memory,
    options, tol and why; n_splits stays None (attn_partials / decode_attention resolve it
    when given such a plan). cache: anything with cfg, k_kind, v_kind (a golden KVCache too).
    selective: rows may be selective (sel_n given). impl: None (mma where it applies, else v1),
    or "v0" / "v1" / "mma" (ValueError where mma does not apply)."""
    cfg = cache.cfg
    return _plan_shape(
        cache.k_kind,
        cache.v_kind,
        cfg.head_dim,
        cfg.n_rep,
        nb,
        sparse_v=sparse_v,
        selective=selective,
        impl=impl,
        options=options,
    )


def _plan_kernel(p):
    """The compiled kernel of plan p (NVRTC on first use; _runtime.module caches it)."""
    kern = kernel(_MODULE[p.rung], p.kernel, p.options)
    if p.rung == "v0":
        return kern
    if p.smem > 48 * 1024 and getattr(kern, "max_dynamic_shared_size_bytes", 0) < p.smem:
        kern.max_dynamic_shared_size_bytes = p.smem  # opt in above the 48 KB default
    return kern


def _resolve_splits(p, cache, nb, base_pos, selective, width, n_splits):
    """p with its split count: n_splits when given, else the kernel's own (GPU: registers and
    SMs) for rows that end at base_pos + nb (None: at len(cache)), or at most `width` tokens
    when selective (width 0: unknown, the dense bound)."""
    if p.rung == "v0":
        return p
    if n_splits is None:
        if base_pos is None:
            base_pos = max(len(cache) - nb, 0)
        n_vis_max = base_pos + nb
        if selective and width > 0:
            n_vis_max = min(n_vis_max, width)
        kern, nkv = _plan_kernel(p), cache.cfg.nkv
        n_splits = (
            mma_n_splits(kern, p.smem, p.threads, n_vis_max, nkv)
            if p.rung == "mma"
            else auto_n_splits(kern, n_vis_max, nkv, nb, nwarp=p.threads // 32)
        )
    return dataclasses.replace(p, n_splits=n_splits)


def plan(
    cache,
    nb,
    *,
    base_pos=None,
    sparse_v=0.0,
    selective=False,
    width=0,
    impl=None,
    n_splits=None,
    options=(),
):
    """The AttentionPlan of decode_attention / attn_partials on nb rows of `cache` (arguments
    as there): rung (impl=None: "mma" where it applies, else "v1" and why), kernels, threads,
    shared memory, NVRTC options (the shape's, then `options`), tol, and n_splits — the given
    one, or the kernel's own for rows at base_pos .. base_pos + nb - 1 (None: the cache's last
    nb tokens), each seeing at most `width` tokens when selective. Only that automatic split
    count needs the GPU (the kernel's registers, the SM count); plan_rung is the rest."""
    p = plan_rung(cache, nb, sparse_v=sparse_v, selective=selective, impl=impl, options=options)
    if base_pos is not None:
        base_pos = _int_arg("base_pos", base_pos, 0)
    width = _int_arg("width", width, 0)
    n_splits = None if n_splits is None else _splits_arg(n_splits)
    return _resolve_splits(p, cache, nb, base_pos, bool(selective), width, n_splits)


_PLAN_FIELDS_CHECKED = ("rung", "kernel", "combine", "threads", "smem", "options", "tol")


def _check_plan_arg(plan, impl):
    """GPU-free checks of plan= (run before any other check of a call)."""
    if plan is None:
        return
    if not isinstance(plan, AttentionPlan):
        raise TypeError(
            f"plan must be an AttentionPlan (gpu.attention.plan), got {type(plan).__name__}"
        )
    if impl is not None and impl != plan.rung:
        raise ValueError(f"impl={impl!r} contradicts plan.rung={plan.rung!r}: give one")


def _call_plan(given, cache, nb, base_pos, sparse_v, selective, width, impl, n_splits, options):
    """The plan a call runs: a fresh one, or `given` once it is checked to fit the call (the
    plan the call would build with impl=given.rung, up to why and the split count), so a
    reused plan never launches a kernel built for another shape."""
    if given is None:
        p = plan_rung(cache, nb, sparse_v=sparse_v, selective=selective, impl=impl, options=options)
        return _resolve_splits(p, cache, nb, base_pos, selective, width, n_splits)
    cfg = cache.cfg
    shape = (
        _v0_options(cfg.head_dim) if given.rung == "v0" else _shape_options(cfg.head_dim, cfg.n_rep)
    )
    extra = tuple(given.options[len(shape) :])
    if tuple(given.options[: len(shape)]) != shape or (options and _options_arg(options) != extra):
        raise ValueError(
            f"plan.options {given.options} do not fit this call (shape options "
            f"{shape}, options={tuple(options)})"
        )
    try:
        want = plan_rung(
            cache, nb, sparse_v=sparse_v, selective=selective, impl=given.rung, options=extra
        )
    except ValueError as e:
        raise ValueError(f"plan does not fit this call: {e}") from None
    bad = [f for f in _PLAN_FIELDS_CHECKED if getattr(want, f) != getattr(given, f)]
    if bad:
        raise ValueError(
            "plan does not fit this call: "
            + "; ".join(
                f"plan.{f} = {getattr(given, f)!r}, the call needs {getattr(want, f)!r}"
                for f in bad
            )
        )
    if given.rung == "v0":
        return given
    if given.n_splits is None:
        return _resolve_splits(given, cache, nb, base_pos, selective, width, n_splits)
    if n_splits is not None and n_splits != given.n_splits:
        raise ValueError(
            f"n_splits (or m_out's) = {n_splits} contradicts plan.n_splits = {given.n_splits}"
        )
    _splits_arg(given.n_splits)
    return given


def choose_impl(cache, nb, sparse_v=0.0, sel_n=None, impl=None):
    """plan_rung(...).rung: "mma" (tensor cores) for q8/q8 caches with hd 128/256, no sparse V,
    nb * n_rep <= 32, and dense rows or a single selective row (sel_n given, nb = 1,
    n_rep <= 8: its token list is read through sel_idx); "v1" otherwise. impl="v0" / "v1"
    force that rung; impl="mma" raises ValueError where the mma kernel does not apply."""
    return plan_rung(cache, nb, sparse_v=sparse_v, selective=sel_n is not None, impl=impl).rung


def rung_kernel(
    family, impl=None, *, kind="q8", nb=1, n_rep=6, hd=256, selective=False, sparse_v=0.0
):
    """The kernel a rung of `family` launches for this shape, by name (for the bench's records):
    v0 "attention_v0_<K>_<V>" (the whole decode, one launch); v1 "attn_partials_<K>_<V>" and
    mma "attn_partials_q8_mma_n<NT8>" / "attn_partials_q8_mma_sel_n1" (the partials; attn_combine
    follows both). impl=None: choose_impl's choice. kind: a cache kind (layout.CACHE_KINDS);
    defaults: one row of the Qwen3.5-27B shape (n_rep 6, hd 256). The plan's kernel field."""
    if family not in RUNGS:
        raise ValueError(f"family must be one of {tuple(RUNGS)}, got {family!r}")
    k_kind, v_kind = side_kinds(kind)
    return _plan_shape(
        k_kind, v_kind, hd, n_rep, nb, sparse_v=sparse_v, selective=selective, impl=impl
    ).kernel


# ---- partials ----------------------------------------------------------------------------
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
    are used when given (graph capture).
    impl: None picks the rung as plan_rung does ("mma" = tensor cores for q8/q8 dense or nb 1,
    else "v1"); "v1" forces the CUDA-core kernel. The mma path rounds p * d_v to fp16
    (attention_mma.cu says by how much). impl="v0" raises ValueError: v0 reads each row in one
    pass and has no partials (decode_attention(..., impl="v0")).
    plan: an AttentionPlan (plan()) to launch instead of building one: ValueError unless it is
    the plan this call would build with impl=plan.rung (its n_splits may differ from the
    automatic one; n_splits / m_out must then agree with it). options: extra NVRTC options for
    the partials kernel (tuning sweeps, docs/tuning-log.md), e.g. ("-DATTN_TT=2", "-DMMA_NW=8").
    """
    _check_impl(impl)
    _check_plan_arg(plan, impl)
    if impl == "v0" or (plan is not None and plan.rung == "v0"):
        raise ValueError(
            "impl='v0' has no partials (one pass per row, no splits): use "
            "decode_attention(..., impl='v0')"
        )
    kd, ks, vd, vs, max_t = _check_cache(cache)
    nb, base_pos, width = _check_rows(q, cache, base_pos, sel_idx, sel_n)
    sparse_v = _sparse_arg(sparse_v)
    cfg = cache.cfg
    nh, nkv, hd = cfg.nh, cfg.nkv, cfg.head_dim
    n_splits = _splits_of(n_splits, m_out, nb, nh)
    p = _call_plan(
        plan, cache, nb, base_pos, sparse_v, sel_n is not None, width, impl, n_splits, options
    )
    kern, S = _plan_kernel(p), p.n_splits
    m = out_array("m_out", m_out, (nb, S, nh), np.float32)
    l = out_array("l_out", l_out, (nb, S, nh), np.float32)
    o = out_array("o_out", o_out, (nb, S, nh, hd), np.float32)
    qscale = np.float32(hd**-0.5 * LOG2E)
    if p.rung == "mma":
        if q.data.ptr % 16:  # the kernel reads q as float4: a contiguous view at an odd
            q = q.copy()  # offset gets an aligned copy (nb * nh * hd floats)
        kern(
            (nkv, S),
            (p.threads,),
            (
                q,
                kd,
                ks,
                vd,
                vs,
                np.int32(max_t),
                np.int32(base_pos),
                np.int32(nb),
                sel_idx if sel_idx is not None else _NULL,
                sel_n if sel_n is not None else _NULL,
                np.int32(width),
                qscale,
                m,
                l,
                o,
            ),
            shared_mem=p.smem,
        )
        return m, l, o
    kern(
        (nb, nkv, S),
        (p.threads,),
        (
            q,
            kd,
            ks if ks is not None else _NULL,
            vd,
            vs if vs is not None else _NULL,
            np.int32(max_t),
            np.int32(base_pos),
            sel_idx if sel_idx is not None else _NULL,
            sel_n if sel_n is not None else _NULL,
            np.int32(width),
            qscale,
            np.float32(sparse_v),
            m,
            l,
            o,
        ),
    )
    return m, l, o


# ---- combine -----------------------------------------------------------------------------
def _combine(m, l, o, inverse_wht, gate, out, lse_out):
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
    out = out_array("out", out, (nb, nh, hd), np.float32)
    if lse_out is not None:
        check_array("lse_out", lse_out, np.float32, (nb, nh))
    if o.data.ptr % 16:
        raise ValueError("o must be 16-byte aligned (the combine reads it as float4)")
    # dims per CTA: the whole row for the inverse WHT, else chunks of 64 (32) over more SMs
    dc = hd if inverse_wht else (64 if hd % 64 == 0 else 32)
    kernel(_COMBINE_MODULE, _COMBINE)(
        (nh, nb, hd // dc),
        (_COMBINE_NT,),
        (
            m,
            l,
            o,
            np.int32(S),
            np.int32(hd),
            np.int32(dc),
            gate if gate is not None else _NULL,
            np.int32(bool(inverse_wht)),
            out,
            lse_out if lse_out is not None else _NULL,
        ),
    )
    return out


def attn_combine(m, l, o, inverse_wht=False, gate=None, out=None, lse_out=None):
    """Per row and q head: M = max m_i; L = sum 2**(m_i - M) l_i; out = sum 2**(m_i - M) o_i / L;
    then the inverse WHT over hd when inverse_wht (V rotated); then out * sigmoid(gate).

    m, l: cupy float32 [nb, S, nh]; o: [nb, S, nh, hd]; gate: optional [nb, nh, hd].
    Returns (out [nb, nh, hd], lse2 [nb, nh] = M + log2 L), float32. Empty splits add nothing.
    """
    if lse_out is None:
        check_array("m", m, np.float32, ndim=3)
        lse_out = cupy().empty(m.shape[::2], np.float32)
    out = _combine(m, l, o, inverse_wht, gate, out, lse_out)
    return out, lse_out


# ---- the whole decode attention -------------------------------------------------------------
def _decode_v0(
    q, cache, base_pos, gate, n_splits, sparse_v, sel_idx, sel_n, out, m_out, plan, options
):
    """impl="v0": attention_v0_<K>_<V>, grid (nb, nh), one warp each, out written directly.
    n_splits (or m_out's) gets attn_partials' checks, so both rungs refuse the same calls."""
    kd, ks, vd, vs, max_t = _check_cache(cache)
    nb, base_pos, width = _check_rows(q, cache, base_pos, sel_idx, sel_n)
    sparse_v = _sparse_arg(sparse_v)
    cfg = cache.cfg
    nh, nkv, hd = cfg.nh, cfg.nkv, cfg.head_dim
    n_splits = _splits_of(n_splits, m_out, nb, nh)
    p = _call_plan(
        plan, cache, nb, base_pos, sparse_v, sel_n is not None, width, "v0", n_splits, options
    )
    out = out_array("out", out, (nb, nh, hd), np.float32)
    _plan_kernel(p)(
        (nb, nh),
        (p.threads,),
        (
            q,
            kd,
            ks if ks is not None else _NULL,
            vd,
            vs if vs is not None else _NULL,
            np.int32(nkv),
            np.int32(max_t),
            np.int32(base_pos),
            sel_idx if sel_idx is not None else _NULL,
            sel_n if sel_n is not None else _NULL,
            np.int32(width),
            np.float32(hd**-0.5 * LOG2E),
            np.float32(sparse_v),
            gate if gate is not None else _NULL,
            out,
        ),
    )
    return out


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
    impl: None (choose: "mma" for q8/q8 hd 128/256 with nb * n_rep <= 32, dense or nb 1, else
    "v1"), "v1" or "mma" (attn_partials), or "v0": one launch of attention_v0_<K>_<V>, a warp per
    (row, q head) over all its visible tokens (n_splits is checked as for v1, then unused, and
    so are the partials buffers). plan: an AttentionPlan (plan()) to run as is, checked to fit
    the call (attn_partials says how); options: extra NVRTC options for the rung's kernel.
    Returns out float32 [nb, nh, hd].
    """
    _check_impl(impl)
    _check_plan_arg(plan, impl)
    _check_cache(cache)
    nb, _, _ = _check_rows(q, cache, base_pos, sel_idx, sel_n)
    cfg = cache.cfg
    if gate is not None:
        check_array("gate", gate, np.float32, (nb, cfg.nh, cfg.head_dim))
    if out is not None:
        check_array("out", out, np.float32, (nb, cfg.nh, cfg.head_dim))
    m_out = l_out = o_out = None
    if partials is not None:
        if not isinstance(partials, (tuple, list)) or len(partials) != 3:
            raise TypeError("partials must be a tuple (m, l, o) of cupy float32 buffers")
        m_out, l_out, o_out = partials
    if impl == "v0" or (plan is not None and plan.rung == "v0"):
        return _decode_v0(
            q, cache, base_pos, gate, n_splits, sparse_v, sel_idx, sel_n, out, m_out, plan, options
        )
    m, l, o = attn_partials(
        q,
        cache,
        base_pos,
        n_splits,
        sparse_v,
        sel_idx,
        sel_n,
        m_out=m_out,
        l_out=l_out,
        o_out=o_out,
        impl=impl,
        plan=plan,
        options=options,
    )
    return _combine(m, l, o, bool(cache.v_rotated), gate, out, None)
