"""attention_plan — what a decode-attention call launches: the rung, its kernels, the split
count and the tolerance, decided on the host before any launch (qwenref.gpu.attention runs it,
and its public names are importable from there too). plan() is the one way to ask:

    p = plan(cache, nb, base_pos=base_pos)   # p.rung, p.kernel, p.n_splits, p.tol, p.why, ...
    p = plan(cache, nb, gpu=False)           # the same without the split count: no GPU at all

plan_rung(cache, nb, ...) is plan(cache, nb, gpu=False, ...), and rung_kernel(family, impl,
**shape) its kernel's name for a shape alone (the bench's records, as every stage module's).

Rungs (RUNGS["attention"], impl=): "v0" (kernels_cuda/attention_v0.cu, one warp per (row, q
head), one pass, no partials), "split" (attention_split.cu: v0's loop cut into split-T partials,
one warp per (row, kv head, split), n_rep * head_dim / 32 <= 64), "v1" (attention_v1.cu: float32
split-T partials on CUDA cores with prefetched tiles, a reduce-scatter and a warp merge,
every cache kind pair but tq) and "mma" (attention_mma.cu: partials on tensor cores for every
kind but f32, one module per kind: MMA_KINDS; the only rung of the tq kinds, MMA_ONLY_PAIRS).
impl=None takes "mma" where it applies and "v1" otherwise, and says why in p.why; "v0" and
"split" run when asked. A tq pair runs mma where the rows fit it, else in row groups that do
(p.rows: a prefill, or selective rows one at a time), and is refused where neither applies.

Shared memory. The mma kernels keep K/V stages, scales, q and P in one dynamic shared-memory
layout (mma_smem_bytes: 34 KB for turbo2 at hd 128 to 160 KB for bf16 at hd 256). A block may
opt into at most cudaDevAttrMaxSharedMemoryPerBlockOptin bytes (sm_80 163 KiB, sm_86 / sm_89 99
KiB, sm_90 227 KiB), so where a kernel needs more (bf16 at hd 256, or q8 with nb * n_rep > 24,
on sm_86 / sm_89), the plan takes v1 and says so. plan() asks the device for the limit
(max_smem=None) when the mma rung is in question; with gpu=False, max_smem None is not checked,
so the plan stays GPU-free.

The split count, the one part of a plan that needs the GPU beside the device's limit, fills one
wave of CTAs (qwenref/gpu/attention_splits.py: auto_n_splits for v1, mma_n_splits).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from .._args import bool_arg as _bool_arg
from .._args import int_arg as _int_arg
from .._args import sparse_arg as _sparse_arg
from ..layout import side_kinds, tq_bits, turbo_bits
from ._runtime import kernel
from .attention_splits import MAX_SPLITS, V1_NWARP, auto_n_splits, device_limits, mma_n_splits
from .rungs import defaults_of, family, rungs_of

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
_DEFAULT_SHAPE = (256, 6)  # attention.cuh's ATTN_HD, ATTN_NREP defaults: no -D options

# The family's rungs in teaching order and its default, views of the rung table
# (qwenref/gpu/rungs.py): the default is None, chosen per call by plan() ("mma" where it
# applies, else "v1"); v0 is never chosen, only asked for.
RUNGS = rungs_of("attention")
DEFAULT_RUNG = defaults_of("attention")
IMPLS = RUNGS["attention"]  # impl= values (None: plan() picks); v0 has no partials
SPLIT_MAX_REGS = 64  # attention_split.cu: NREP * HD / 32 q values (and as many o) per lane
MMA_HEAD_DIMS = (128, 256)  # attn_partials_<kind>_mma_n<NT8>: no sparse V, dense / nb 1
MMA_MAX_COLS = 32  # nb * n_rep columns: NT8 = ceil(cols / 8) <= 4
# (k side, v side) -> the mma kernels' <kind> (attention_mma.cu's ATTN_PARTIALS_MMA_KIND list):
# a symmetric pair by its side kind, bf16 K with turbo V as in KIND_PAIRS; f32 has none
# tq-b caches decode on the mma rung alone (kv_tile_tq.cuh's codebook loaders): no v0, split or v1
MMA_ONLY_PAIRS = {("tq4", "tq4"): "tq4", ("tq3", "tq3"): "tq3", ("tq2", "tq2"): "tq2"}
MMA_KINDS = {
    **{
        pair: (pair[0] if pair[0] == pair[1] else sfx)
        for pair, sfx in KIND_PAIRS.items()
        if pair != ("f32", "f32")
    },
    **MMA_ONLY_PAIRS,
}
# impl=None takes the mma partials for every pair of MMA_KINDS where they apply: measured on an
# H100 at 128k tokens, 1 row, 1.8x (bf16) to 5.6x (turbo2) faster than their v1 partials; bf16 K
# with turbo3 / turbo2 V against bf16k-turbo4v's v1, 2.9x and 3.1x (docs/tuning-log.md); the tq
# pairs have no other rung.
# the kernels_cuda module (NVRTC compiles each alone) of each rung's kernel, and the combine's;
# a plan's options go to its rung's module, the combine's module takes none
KERNEL_MODULE = dict(family("attention").kernels)
COMBINE_KERNEL = "attn_combine"  # the combine kernel after v1 / mma partials
COMBINE_MODULE = "attention_combine"

# Norm-wise relative error against golden (||gpu - golden|| / ||golden||) that each rung's
# precision implies; an AttentionPlan carries its rung's (the bench checks against plan.tol).
TOL_ATTN = 1e-4  # v0 / v1: same stored codes, float32 exp2 and sums over up to 128k
# tokens in another order (error grows ~sqrt(terms)·eps per split sum)
TOL_ATTN_MMA = 1e-3  # mma rounds each p and each code·d_v to fp16: a term is off by
# <= 2u + u^2 ~ 9.8e-4 relative (u = 2^-11), the norm-wise worst case
# (attention on one token puts it all on that token's V row); measured 2e-4


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """What one decode-attention call launches, decided on the host before any launch.

    rung      "v0" | "v1" | "mma" (RUNGS["attention"])
    kernel    the partials kernel (attn_partials_<K>_<V>, attn_partials_q8_mma_n<NT8> or
              attn_partials_q8_mma_sel_n1), or attention_v0_<K>_<V> (v0: the whole decode)
    combine   the kernel that combines the partials ("attn_combine"); None for v0
    n_splits  S, splits per row; None for v0 (no partials) and in plan(..., gpu=False)'s
              GPU-free plan unless given
    threads   threads per CTA of `kernel`
    smem      dynamic shared memory per CTA of `kernel`, bytes (0: v0 / v1 use static only)
    options   the NVRTC options `kernel` compiles with: its shape -D's, then the caller's
    tol       norm-wise relative error against golden that the rung's precision implies:
              TOL_ATTN_MMA for mma (fp16 P.V), TOL_ATTN for v0 / v1 (float32)
    why       why a faster rung did not apply, or that impl= asked for this one; None for mma
              (but a tq call run in row groups: why the rows do not fit one launch)
    rows      rows per launch of `kernel`: None for one launch over all rows; a tq pair, whose
              mma rung is its only one, takes rows in groups the kernel fits (MMA_MAX_COLS
              columns dense, one row selective), one partials launch each (`kernel`; a last,
              shorter group runs the kernel of its own rows), then one combine
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
    rows: int | None = None


# ---- NVRTC options --------------------------------------------------------------------------
def shape_options(hd, n_rep):
    """-D options of the partials' compile-time shape (attention.cuh; none for its defaults)."""
    return () if (hd, n_rep) == _DEFAULT_SHAPE else (f"-DATTN_HD={hd}", f"-DATTN_NREP={n_rep}")


def _kind_of(k_side, v_side):
    """The cache kind whose sides these are (layout.side_kinds' inverse)."""
    if k_side == v_side:
        return k_side
    return f"{k_side}k-{v_side}v"


def rung_shape_options(rung, hd, n_rep, kind):
    """The options a rung's module takes before the caller's: v0 its head_dim, split and v1 the
    shape, mma the shape and its kind (one module per kind)."""
    if rung == "v0":
        return v0_options(hd)
    if rung in ("split", "v1"):
        return shape_options(hd, n_rep)
    return shape_options(hd, n_rep) + mma_options(kind)


def v0_options(hd):
    """-D options of attention_v0.cu's head_dim (its default is 256)."""
    return () if hd == 256 else (f"-DATTN_V0_HD={hd}",)


def options_arg(options):
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


# ---- the tensor-core (mma) kernels -----------------------------------------------------------
def _mma_nw(options):
    """Warps per CTA of attn_partials_q8_mma_n<NT8>: mirrors mma_attn::Cfg (attention_mma.cuh)."""
    return _opt_value(options, "MMA_NW", 0) or 4


def _mma_nst(options):
    """Pipeline stages of attn_partials_q8_mma_n<NT8>: mirrors mma_attn::Cfg."""
    return _opt_value(options, "MMA_NSTAGE", 0) or 2


def _side_tile(side, hd, role):
    """(row stride in shared memory, scales per token) of one side's tile, role "k" or "v":
    mirrors the loaders of kernels_cuda/kv_tile.cuh (RowLayout: 16-byte chunks; a side read by
    ldmatrix with a multiple of 8 of them swizzled in place, else padded to an odd count; the
    narrow turbo and tq sides read words, except the V of turbo4 and tq4; tq4's K is swizzled
    too)."""
    if side.startswith("tq"):  # codes as turbo's of the same width, one gamma per token
        rowb, scales = hd * tq_bits(side) // 8, 1
    else:
        rowb = {"q8": hd, "bf16": 2 * hd}.get(side) or hd * turbo_bits(side) // 8
        scales = {"q8": hd // 32, "bf16": 0}.get(side, hd // 16)
    nch = rowb // 16
    ldsm = side in ("q8", "bf16", "turbo8", "tq4") or (side == "turbo4" and role == "v")
    rs = 16 * (nch if ldsm and nch % 8 == 0 else nch | 1)
    return rs, scales


def _mma_pair(kind):
    """(k side, v side) of a cache kind that has mma kernels (ValueError otherwise)."""
    pair = side_kinds(kind)
    if pair not in MMA_KINDS:
        raise ValueError(f"kind {kind!r} has no mma kernels (f32 runs on v1)")
    return pair


def mma_smem_bytes(hd, nt8, options=(), kind="q8"):
    """Dynamic shared memory, in bytes, of attn_partials_<kind>_mma_n<nt8> at head_dim hd (the
    selective kernel _sel_n1 has n1's) for a cache kind (layout.CACHE_KINDS), compiled with
    `options` (MMA_NW, MMA_NSTAGE, MMA_TQ2_QUAD change it). Mirrors mma_attn::Lay in
    kernels_cuda/attention_mma.cuh; tests/test_gpu_attention_mma.py checks it against the
    kernel's own attn_mma_smem_bytes_<kind>. Needs no GPU."""
    if hd not in MMA_HEAD_DIMS:
        raise ValueError(f"hd must be one of {MMA_HEAD_DIMS} (the mma kernels'), got {hd!r}")
    nt8 = _int_arg("nt8", nt8, 1)
    if nt8 > MMA_MAX_COLS // 8:
        raise ValueError(f"nt8 must be in 1..{MMA_MAX_COLS // 8}, got {nt8}")
    options = options_arg(options)
    k_side, v_side = _mma_pair(kind)
    (krs, ksc), (vrs, vsc) = _side_tile(k_side, hd, "k"), _side_tile(v_side, hd, "v")
    nw, nst = _mma_nw(options), _mma_nst(options)
    bt, nch, ncol = 16 * nw, hd // 16, 8 * nt8
    pst = 8 * (nt8 if nt8 % 2 else nt8 + 1)
    planes = 2 if v_side == "bf16" else 1
    nbytes = (
        nst * bt * (krs + vrs)  # K and V stages
        + nst * bt * (ksc + vsc) * 2  # d_k and d_v stages (fp16)
        + nch * nt8 * 32 * 16  # q fragments (hi + lo)
        + planes * bt * pst * 2  # P (fp16, or bf16 hi and lo)
        + 2 * ncol * nw * 4  # warp maxima and warp l
        + ncol * 4  # running max
        + nw * 4  # q maxima
    )
    if k_side.startswith("tq"):  # the codebook's table: 128 B an entry (kv_tile_tq.cuh's TqTable)
        b = tq_bits(k_side)
        quad = b == 2 and _opt_value(options, "MMA_TQ2_QUAD", 0)
        entries = 256 if quad else 1 << 2 * b  # four codes an entry, or two
        nbytes = -(-nbytes // 16) * 16 + entries * 128
    return nbytes


def mma_options(kind):
    """The -D option that builds one kind's mma kernels (attention_mma.cu builds every kind's
    without it)."""
    return (f"-DMMA_KIND_{MMA_KINDS[_mma_pair(kind)]}",)


def mma_kernel_name(nb, n_rep, selective=False, kind="q8"):
    """The mma partials kernel for nb rows of n_rep heads of a cache kind:
    attn_partials_<kind>_mma_n<NT8> for dense rows, NT8 = ceil(nb * n_rep / 8) <= 4;
    attn_partials_<kind>_mma_sel_n1 when the (single) row may be selective. The selective path
    is a compile-time flag in attention_mma.cu, so dense rows never pay for it. <kind>: MMA_KINDS
    of the cache kind's sides."""
    nb, n_rep = _int_arg("nb", nb, 1), _int_arg("n_rep", n_rep, 1)
    selective = _bool_arg("selective", selective)
    sfx = MMA_KINDS[_mma_pair(kind)]
    if nb * n_rep > MMA_MAX_COLS:
        raise ValueError(
            f"nb * n_rep = {nb} * {n_rep} is over the mma kernels' {MMA_MAX_COLS} columns"
        )
    nt8 = -(-nb * n_rep // 8)
    if selective:
        if nb != 1 or nt8 != 1:
            raise ValueError(
                f"the selective mma kernel takes one row of <= 8 heads, got nb={nb}, n_rep={n_rep}"
            )
        return f"attn_partials_{sfx}_mma_sel_n1"
    return f"attn_partials_{sfx}_mma_n{nt8}"


# ---- the rung ---------------------------------------------------------------------------------
def check_impl(impl):
    """impl= of every call: None or one of IMPLS (GPU-free, so calls check it first)."""
    if impl is not None and (not isinstance(impl, str) or impl not in IMPLS):
        raise ValueError(f"impl must be None or one of {IMPLS}, got {impl!r}")


def _mma_why_not(k_kind, v_kind, hd, n_rep, nb, sparse_v, selective, options, max_smem):
    """None where the mma rung applies, else the first reason it does not."""
    if (k_kind, v_kind) not in MMA_KINDS:
        return f"cache kinds ({k_kind}, {v_kind}) have no tensor-core kernel"
    if hd not in MMA_HEAD_DIMS:
        return f"head_dim {hd} not in {MMA_HEAD_DIMS}"
    if nb * n_rep > MMA_MAX_COLS:
        return f"nb * n_rep = {nb * n_rep} > {MMA_MAX_COLS}"
    if selective and (nb != 1 or n_rep > 8):
        # each selective row reads its own token list, so rows cannot share one tile's K/V
        return "selective rows (sel_n given) take the mma kernel only for nb = 1, n_rep <= 8"
    if sparse_v > 0.0:
        return "sparse_v > 0 uses v1"
    need = mma_smem_bytes(hd, -(-nb * n_rep // 8), options, _kind_of(k_kind, v_kind))
    if max_smem is not None and need > max_smem:
        return (
            f"the mma kernel needs {need} B of shared memory per block, more than the "
            f"{max_smem} B a block may have here (max_smem)"
        )
    return None


def _rung(k_kind, v_kind, hd, n_rep, nb, sparse_v, selective, impl, options, max_smem):
    """(rung, why, rows per launch or None): impl when given (ValueError where mma does not
    apply), else "mma" where it applies, else "v1" and the first reason it does not; a tq pair:
    "mma" in row groups where the rows do not fit one launch, or ValueError."""
    if (k_kind, v_kind) in MMA_ONLY_PAIRS:
        if impl in ("v0", "split", "v1"):
            raise ValueError(
                f"impl={impl!r} does not apply: cache kinds ({k_kind}, {v_kind}) decode on the "
                f"mma rung only"
            )
        # rows per launch: all where they fit one (MMA_MAX_COLS columns), else as many as do; a
        # selective kernel reads one row's token list
        rows = nb if nb * n_rep <= MMA_MAX_COLS else max(MMA_MAX_COLS // n_rep, 1)
        rows = 1 if selective else rows
        why = _mma_why_not(k_kind, v_kind, hd, n_rep, rows, sparse_v, selective, options, max_smem)
        if why is not None:
            raise ValueError(
                f"cache kinds ({k_kind}, {v_kind}) decode on the mma rung only, which does not "
                f"apply here: {why}"
            )
        if rows == nb:
            return "mma", None, None
        if selective:
            return "mma", f"selective rows take the mma kernel one at a time ({nb} launches)", 1
        why = f"nb * n_rep = {nb * n_rep} > {MMA_MAX_COLS}: {rows} rows per mma launch"
        return "mma", why, rows
    if impl == "split" and n_rep * hd // 32 > SPLIT_MAX_REGS:
        raise ValueError(
            f"impl='split' does not apply: n_rep * head_dim / 32 = {n_rep * hd // 32} > "
            f"{SPLIT_MAX_REGS} (q and o of every head live in a lane's registers)"
        )
    if impl in ("v0", "split", "v1"):
        return impl, f"impl={impl!r} asked for", None
    why = _mma_why_not(k_kind, v_kind, hd, n_rep, nb, sparse_v, selective, options, max_smem)
    if why is None:
        return "mma", None, None
    if impl == "mma":
        raise ValueError(f"impl='mma' does not apply: {why}")
    return "v1", why, None


def _plan_shape(k_kind, v_kind, hd, n_rep, nb, sparse_v, selective, impl, options, max_smem):
    """The plan of a call on this shape with max_smem as given (None: not checked) and no split
    count: plan()'s GPU-free core, its arguments checked here."""
    check_impl(impl)
    nb = _int_arg("nb", nb, 1)
    sparse_v = _sparse_arg(sparse_v)
    selective = _bool_arg("selective", selective)
    options = options_arg(options)
    if max_smem is not None:
        max_smem = _int_arg("max_smem", max_smem, 0)
    pair = KIND_PAIRS.get((k_kind, v_kind)) or MMA_ONLY_PAIRS.get((k_kind, v_kind))
    if pair is None:
        raise ValueError(
            f"cache kinds (k {k_kind!r}, v {v_kind!r}) have no kernel; "
            f"supported: {sorted(KIND_PAIRS) + sorted(MMA_ONLY_PAIRS)}"
        )
    rung, why, rows = _rung(
        k_kind, v_kind, hd, n_rep, nb, sparse_v, selective, impl, options, max_smem
    )
    kind = _kind_of(k_kind, v_kind)
    opts = rung_shape_options(rung, hd, n_rep, kind) + options
    if rung == "v0":  # one warp per (row, q head)
        return AttentionPlan("v0", "attention_v0_" + pair, None, None, 32, 0, opts, TOL_ATTN, why)
    if rung == "split":  # one warp per (row, kv head, split)
        kern = "attn_partials_split_" + pair
        return AttentionPlan("split", kern, COMBINE_KERNEL, None, 32, 0, opts, TOL_ATTN, why)
    if rung == "v1":
        threads = 32 * _opt_value(opts, "ATTN_NWARP", V1_NWARP)
        kern = "attn_partials_" + pair
        return AttentionPlan("v1", kern, COMBINE_KERNEL, None, threads, 0, opts, TOL_ATTN, why)
    nl = nb if rows is None else rows  # rows of one launch
    return AttentionPlan(
        "mma",
        mma_kernel_name(nl, n_rep, selective, kind),
        COMBINE_KERNEL,
        None,
        32 * _mma_nw(opts),
        mma_smem_bytes(hd, -(-nl * n_rep // 8), opts, kind),
        opts,
        TOL_ATTN_MMA,
        why,
        rows,
    )


def _cache_shape(cache):
    """(k_kind, v_kind, head_dim, n_rep) of anything with cfg, k_kind and v_kind."""
    for a in ("cfg", "k_kind", "v_kind"):
        if not hasattr(cache, a):
            raise TypeError(
                f"cache must be a KVCache (qwenref.gpu or qwenref.golden; no attribute {a!r}), "
                f"got {type(cache).__name__}"
            )
    hd = cache.cfg.head_dim
    if hd not in HEAD_DIMS:
        raise ValueError(f"cache.cfg.head_dim must be one of {HEAD_DIMS}, got {hd}")
    return cache.k_kind, cache.v_kind, hd, cache.cfg.n_rep


class _Cfg(NamedTuple):
    head_dim: int
    n_rep: int


class _Shape(NamedTuple):
    """What a plan reads of a cache: a shape alone stands in for one (rung_kernel)."""

    cfg: _Cfg
    k_kind: str
    v_kind: str


# ---- the split count and the whole plan ---------------------------------------------------------
def splits_arg(n_splits):
    """n_splits as an int in 1..MAX_SPLITS."""
    n_splits = _int_arg("n_splits", n_splits, 1)
    if n_splits > MAX_SPLITS:
        raise ValueError(f"n_splits must be <= {MAX_SPLITS}, got {n_splits}")
    return n_splits


def plan_kernel(p):
    """The compiled kernel of plan p (NVRTC on first use; the module is cached), opted into
    the dynamic shared memory p needs above the 48 KB every device allows."""
    if not isinstance(p, AttentionPlan):
        raise TypeError(f"p must be an AttentionPlan, got {type(p).__name__}")
    kern = kernel(KERNEL_MODULE[p.rung], p.kernel, p.options)
    if p.smem > 48 * 1024 and getattr(kern, "max_dynamic_shared_size_bytes", 0) < p.smem:
        kern.max_dynamic_shared_size_bytes = p.smem
    return kern


def _resolve_splits(p, cache, nb, base_pos, selective, width, n_splits):
    """p with its split count: n_splits when given, else the kernel's own (GPU: registers and
    the device's limits) for rows that end at base_pos + nb (None: at len(cache)), or at most
    `width` tokens when selective (width 0: unknown, the dense bound)."""
    if p.rung == "v0":
        return p
    if n_splits is None:
        if base_pos is None:
            base_pos = max(len(cache) - nb, 0)
        n_vis_max = base_pos + nb
        if selective and width > 0:
            n_vis_max = min(n_vis_max, width)
        kern, nkv = plan_kernel(p), cache.cfg.nkv
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
    max_smem=None,
    gpu=True,
):
    """The AttentionPlan of decode_attention / attn_partials on nb rows of `cache` (arguments
    as there): rung (impl=None: "mma" where it applies, else "v1" and why), kernels, threads,
    shared memory, NVRTC options (the shape's, then `options`), tol, and n_splits — the given
    one, or the kernel's own for rows at base_pos .. base_pos + nb - 1 (None: the cache's last
    nb tokens), each seeing at most `width` tokens when selective. cache: anything with cfg,
    k_kind and v_kind (a golden KVCache too). impl: None, or "v0" / "v1" / "mma" (ValueError
    where mma does not apply).
    max_smem: the shared memory one block may opt into, in bytes; the mma rung needs its
    kernel's mma_smem_bytes within it (None: the device's, read when the mma rung is in
    question; give it to plan for another device, or to force the fallback to v1).
    The GPU is read for the device's limit (max_smem None) and the automatic split count
    (n_splits None) only: with both given, plan needs no GPU. gpu=False reads it for neither:
    max_smem None is then not checked and n_splits None stays None (the call that runs the plan
    resolves it), so plan(cache, nb, gpu=False) is the whole plan but the split count."""
    if base_pos is not None:
        base_pos = _int_arg("base_pos", base_pos, 0)
    width = _int_arg("width", width, 0)
    n_splits = None if n_splits is None else splits_arg(n_splits)
    gpu = _bool_arg("gpu", gpu)
    shape = _cache_shape(cache)
    args = (nb, sparse_v, selective, impl, options)
    p = _plan_shape(*shape, *args, max_smem)
    if gpu and p.rung == "mma" and max_smem is None:
        limit = device_limits().smem_per_block_optin
        if p.smem > limit:
            p = _plan_shape(*shape, *args, limit)
    if not gpu and n_splits is None:
        return p
    return _resolve_splits(p, cache, nb, base_pos, bool(selective), width, n_splits)


def plan_rung(cache, nb, **kw):
    """plan(cache, nb, gpu=False, **kw): everything of the plan that needs no GPU (n_splits
    None unless given; max_smem None: not checked)."""
    return plan(cache, nb, gpu=False, **kw)


def rung_kernel(
    family, impl=None, *, kind="q8", nb=1, n_rep=6, hd=256, selective=False, sparse_v=0.0
):
    """The kernel a rung of `family` launches for this shape, by name (for the bench's records,
    as every stage module's rung_kernel): plan(..., gpu=False).kernel of a cache of this kind,
    head_dim and n_rep. v0 "attention_v0_<K>_<V>" (the whole decode, one launch); v1
    "attn_partials_<K>_<V>" and mma "attn_partials_<kind>_mma_n<NT8>" /
    "attn_partials_<kind>_mma_sel_n1" (the partials; attn_combine follows both). impl=None:
    the plan's choice (shared memory not checked). kind: a cache kind (layout.CACHE_KINDS);
    defaults: one row of the Qwen3.5-27B shape (n_rep 6, hd 256)."""
    if family not in RUNGS:
        raise ValueError(f"family must be one of {tuple(RUNGS)}, got {family!r}")
    k_kind, v_kind = side_kinds(kind)
    n_rep = _int_arg("n_rep", n_rep, 1)
    if hd not in HEAD_DIMS:
        raise ValueError(f"hd must be one of {HEAD_DIMS}, got {hd!r}")
    shape = _Shape(_Cfg(hd, n_rep), k_kind, v_kind)
    return plan(shape, nb, sparse_v=sparse_v, selective=selective, impl=impl, gpu=False).kernel


# ---- a plan given to a call ----------------------------------------------------------------------
_PLAN_FIELDS_CHECKED = ("rung", "kernel", "combine", "threads", "smem", "options", "tol", "rows")


def check_plan_arg(plan, impl):
    """GPU-free checks of a call's plan= (run before any other check of the call)."""
    if plan is None:
        return
    if not isinstance(plan, AttentionPlan):
        raise TypeError(
            f"plan must be an AttentionPlan (gpu.attention.plan), got {type(plan).__name__}"
        )
    if impl is not None and impl != plan.rung:
        raise ValueError(f"impl={impl!r} contradicts plan.rung={plan.rung!r}: give one")


def fit_plan(given, cache, nb, *, base_pos, sparse_v, selective, width, n_splits, options):
    """The plan a call given plan=`given` runs: `given` once it is checked to fit the call (the
    plan the call would build with impl=given.rung, up to why and the split count) and the
    device (its shared memory), with the split count resolved as plan() does where it has none,
    so a reused plan never launches a kernel built for another shape. (A call without plan=
    runs plan() of its arguments.)"""
    cfg = cache.cfg
    kind = _kind_of(cache.k_kind, cache.v_kind)
    shape = rung_shape_options(given.rung, cfg.head_dim, cfg.n_rep, kind)
    extra = tuple(given.options[len(shape) :])
    if tuple(given.options[: len(shape)]) != shape or (options and options_arg(options) != extra):
        raise ValueError(
            f"plan.options {given.options} do not fit this call (shape options "
            f"{shape}, options={tuple(options)})"
        )
    try:
        kw = dict(sparse_v=sparse_v, selective=selective, impl=given.rung, options=extra)
        want = plan(cache, nb, gpu=False, **kw)
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
    if given.rung == "mma" and given.smem > device_limits().smem_per_block_optin:
        raise ValueError(
            f"plan does not fit this device: plan.smem = {given.smem} B, a block may have "
            f"{device_limits().smem_per_block_optin} B here (plan() takes v1 then)"
        )
    if given.rung == "v0":
        return given
    if given.n_splits is None:
        return _resolve_splits(given, cache, nb, base_pos, selective, width, n_splits)
    if n_splits is not None and n_splits != given.n_splits:
        raise ValueError(
            f"n_splits (or m_out's) = {n_splits} contradicts plan.n_splits = {given.n_splits}"
        )
    splits_arg(given.n_splits)
    return given
