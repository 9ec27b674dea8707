"""Which decode-partials kernel the GPU wrapper picks, checked without a GPU: plan(...,
gpu=False) (and plan_rung, rung_kernel and mma_kernel_name over it) is plain Python over the
cache's kinds and the config (a golden cache has the same attributes), and every kernel name it
can produce must exist in the module the wrapper loads it from (attention_v1.cu,
attention_mma.cu, attention_combine.cu). plan() with the split count and the shared-memory
limit given needs no GPU either, and the split counts' arithmetic runs on given device
limits."""

import dataclasses
import re
import types

import pytest

import qwenref
from qwenref import golden
from qwenref.gpu import attention as A
from qwenref.gpu._runtime import kernel_source
from qwenref.gpu.attention_splits import EXTRA_CTA_TILES
from qwenref.layout import LADDER_KINDS, side_kinds


def _module_src(module):
    """The source NVRTC compiles for the wrapper's module name (kernels are looked up there)."""
    return kernel_source(module)


SRC_V1, SRC_MMA = _module_src(A.KERNEL_MODULE["v1"]), _module_src(A.KERNEL_MODULE["mma"])
# shared memory one block may opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin)
OPTIN_SM86, OPTIN_SM90 = 101376, 232448


def rung_of(c, nb, sparse_v=0.0, selective=False, **kw):
    """The rung plan() picks for nb rows of cache c, without a GPU."""
    return A.plan(c, nb, sparse_v=sparse_v, selective=selective, gpu=False, **kw).rung


def cache(n_rep, kind="q8", hd=256):
    cfg = qwenref.AttnConfig(
        hidden_size=64,
        num_attention_heads=2 * n_rep,
        num_key_value_heads=2,
        head_dim=hd,
        intermediate_size=128,
    )
    return golden.KVCache(cfg, max_t=64, kind=kind)


@pytest.mark.parametrize(
    "nb,n_rep,sel,kind,name",
    [
        (1, 6, False, "q8", "attn_partials_q8_mma_n1"),
        (4, 6, False, "q8", "attn_partials_q8_mma_n3"),
        (5, 6, False, "q8", "attn_partials_q8_mma_n4"),
        (1, 8, False, "bf16", "attn_partials_bf16_mma_n1"),
        (1, 6, True, "turbo4", "attn_partials_turbo4_mma_sel_n1"),
        (1, 2, True, "bf16k-turbo2v", "attn_partials_bf16_turbo2_mma_sel_n1"),
        (3, 6, False, "turbo3", "attn_partials_turbo3_mma_n3"),
    ],
)
def test_mma_kernel_name(nb, n_rep, sel, kind, name):
    assert A.mma_kernel_name(nb, n_rep, sel, kind) == name
    # the mma module declares it: ATTN_PARTIALS_MMA_KIND(<kind>, ...) makes
    # attn_partials_<kind>_mma_<suffix> for each ATTN_PARTIALS_MMA(KIND, KL, VL, <suffix>, ...)
    sfx = A.MMA_KINDS[side_kinds(kind)]
    suffix = name[len(f"attn_partials_{sfx}_mma_") :]
    assert re.search(rf"^ATTN_PARTIALS_MMA_KIND\({sfx},", SRC_MMA, re.M), name
    assert re.search(rf"ATTN_PARTIALS_MMA\(KIND, KL, VL, {suffix},", SRC_MMA), name


def test_every_mma_kind_is_built_and_selectable():
    """Each kind the plan can pick has its ATTN_PARTIALS_MMA_KIND line behind its own -D flag,
    and the flag is among the ones that make the module build one kind alone."""
    for pair, sfx in A.MMA_KINDS.items():
        flag = f"MMA_KIND_{sfx}"
        assert re.search(
            rf"^#if !defined\(MMA_ONE_KIND\) \|\| defined\({flag}\)\n"
            rf"ATTN_PARTIALS_MMA_KIND\({sfx},",
            SRC_MMA,
            re.M,
        ), sfx
        assert f"defined({flag})" in SRC_MMA.split("#define MMA_ONE_KIND")[0], sfx


def test_each_module_holds_what_the_wrapper_loads_from_it():
    """NVRTC compiles each module alone: the combine and the mma smem query must be in the
    modules the wrapper names for them, and each partials family in its rung's module only."""

    def literal_kernels(src):  # extern "C" kernels outside #define bodies
        code = "\n".join(
            l for l in src.replace("\\\n", " ").splitlines() if not l.lstrip().startswith("#")
        )
        code = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", code)
        return re.findall(r'extern "C"\s+__global__\s+void\s+(\w+)\s*\(', code)

    assert literal_kernels(_module_src(A.COMBINE_MODULE)) == [A.COMBINE_KERNEL]
    assert literal_kernels(SRC_MMA) == []  # all by ATTN_PARTIALS_MMA_KIND
    assert "void attn_mma_smem_bytes_##KIND(" in SRC_MMA
    assert literal_kernels(SRC_V1) == []  # all by ATTN_PARTIALS
    assert not re.search(r"^ATTN_PARTIALS\(", SRC_MMA, re.M)
    assert not re.search(r"^ATTN_PARTIALS_MMA\(", SRC_V1, re.M)
    assert A.KERNEL_MODULE["v0"] == "attention_v0"


def test_selective_mma_kernel_takes_one_row_of_at_most_8_heads():
    with pytest.raises(ValueError, match="one row"):
        A.mma_kernel_name(2, 6, True)
    with pytest.raises(ValueError, match="one row"):
        A.mma_kernel_name(1, 12, True)
    with pytest.raises(ValueError, match="one row"):  # 2 x 2 heads fit one tile, but each
        A.mma_kernel_name(2, 2, True)  # row has its own token list


@pytest.mark.parametrize(
    "nb,n_rep,selective,sparse_v,want",
    [
        (1, 6, False, 0.0, "mma"),
        (4, 6, False, 0.0, "mma"),
        (6, 6, False, 0.0, "v1"),
        (1, 6, True, 0.0, "mma"),
        (2, 6, True, 0.0, "v1"),
        (1, 12, True, 0.0, "v1"),
        (2, 2, True, 0.0, "v1"),
        (1, 2, True, 0.0, "mma"),
        (1, 6, False, 1e-3, "v1"),
    ],
)
def test_plan_picks_the_rung(nb, n_rep, selective, sparse_v, want):
    got = rung_of(cache(n_rep), nb, sparse_v, selective)
    assert got == want
    if got == "mma":  # every choice has a kernel to launch
        A.mma_kernel_name(nb, n_rep, selective)


@pytest.mark.parametrize("kind", LADDER_KINDS)
def test_plan_other_kinds_and_forcing(kind):
    """Every kind but f32 has tensor-core partials at hd 128 / 256, taken by default and when
    asked (impl='mma'); hd 64 runs v1."""
    assert rung_of(cache(6, kind=kind), 1) == ("v1" if kind == "f32" else "mma")
    if kind != "f32":
        assert rung_of(cache(6, kind=kind), 1, impl="mma") == "mma"
    assert rung_of(cache(6, kind=kind, hd=64), 1) == "v1"
    assert rung_of(cache(6, kind=kind), 1, impl="v1") == "v1"
    if kind == "f32":
        with pytest.raises(ValueError, match="impl='mma' does not apply"):
            rung_of(cache(6, kind=kind), 1, impl="mma")


def test_the_plan_names_are_importable_from_attention():
    """attention re-exports the plan's public names, each imported by name (no star import);
    plan() is the one way to ask which kernel runs, plan_rung and rung_kernel thin over it."""
    from pathlib import Path

    from qwenref.gpu import attention_plan

    for name in A.__all__:
        assert getattr(A, name) is not None, name
    for name in ("plan", "plan_rung", "rung_kernel", "AttentionPlan", "RUNGS", "KERNEL_MODULE"):
        assert name in A.__all__ and getattr(A, name) is getattr(attention_plan, name), name
    assert "import *" not in Path(A.__file__).read_text()
    for gone in ("choose_impl", "call_plan"):
        assert not hasattr(A, gone) and not hasattr(attention_plan, gone), gone


# ---- rungs: v0 (attention_v0.cu), v1, mma ------------------------------------------------------
SRC_V0 = _module_src(A.KERNEL_MODULE["v0"])


def test_rungs():
    assert A.RUNGS == {"attention": ("v0", "split", "v1", "mma")}
    assert A.DEFAULT_RUNG == {"attention": None}  # None: plan() decides per call
    assert rung_of(cache(6), 1, impl="v0") == "v0"
    assert rung_of(cache(6, kind="turbo3"), 9, 1e-3, True, impl="v0") == "v0"


@pytest.mark.parametrize("kind", LADDER_KINDS)
def test_every_kind_has_a_kernel_on_each_rung(kind):
    """v0 and v1 cover every cache kind; the names exist in their sources (ATTENTION_V0(<pair>,
    ...) makes attention_v0_<pair>, ATTN_PARTIALS(<pair>, ...) attn_partials_<pair>)."""
    v0 = A.rung_kernel("attention", "v0", kind=kind, nb=3, n_rep=4, hd=64)
    v1 = A.rung_kernel("attention", "v1", kind=kind, nb=3, n_rep=4, hd=64)
    pair = v0[len("attention_v0_") :]
    assert v1 == "attn_partials_" + pair
    assert re.search(rf"^ATTENTION_V0\({pair},", SRC_V0, re.MULTILINE), v0
    assert re.search(rf"^ATTN_PARTIALS\({pair},", SRC_V1, re.MULTILINE), v1


@pytest.mark.parametrize(
    "impl,shape,name",
    [
        ("v0", {"kind": "q8"}, "attention_v0_q8_q8"),
        ("v0", {"kind": "bf16k-turbo2v"}, "attention_v0_bf16_turbo2"),
        ("v1", {"kind": "q8"}, "attn_partials_q8_q8"),
        ("mma", {"kind": "q8", "nb": 4, "n_rep": 6}, "attn_partials_q8_mma_n3"),
        ("mma", {"kind": "q8", "n_rep": 2, "selective": True}, "attn_partials_q8_mma_sel_n1"),
        (None, {"kind": "q8", "nb": 1, "n_rep": 6, "hd": 256}, "attn_partials_q8_mma_n1"),
        (None, {"kind": "q8", "nb": 6, "n_rep": 6}, "attn_partials_q8_q8"),
        (None, {"kind": "q8", "sparse_v": 1e-3}, "attn_partials_q8_q8"),
        (None, {"kind": "q8", "hd": 64}, "attn_partials_q8_q8"),
        ("mma", {"kind": "turbo4"}, "attn_partials_turbo4_mma_n1"),
        (None, {"kind": "turbo4", "sparse_v": 1e-3}, "attn_partials_turbo4_turbo4"),
        (None, {"kind": "f32"}, "attn_partials_f32_f32"),
    ],
)
def test_rung_kernel(impl, shape, name):
    assert A.rung_kernel("attention", impl, **shape) == name


def test_rung_kernel_refuses():
    with pytest.raises(ValueError, match="family"):
        A.rung_kernel("norm", "v0")
    with pytest.raises(ValueError, match="impl"):
        A.rung_kernel("attention", "v2")
    with pytest.raises(ValueError, match="kind"):
        A.rung_kernel("attention", "v0", kind="q4")
    with pytest.raises(ValueError, match="impl='mma' does not apply"):
        A.rung_kernel("attention", "mma", kind="f32")


def test_bad_impl_is_refused_before_anything_runs():
    """Checked first, so no GPU (and no argument) is needed to see it; attn_partials has no v0."""
    for bad in ("bogus", "V0", 0):
        with pytest.raises(ValueError, match="impl"):
            A.decode_attention(None, None, 0, impl=bad)
        with pytest.raises(ValueError, match="impl"):
            A.attn_partials(None, None, 0, impl=bad)
    with pytest.raises(ValueError, match="impl='v0' has no partials"):
        A.attn_partials(None, None, 0, impl="v0")


@pytest.mark.parametrize(
    "call,exc,name",
    [
        (lambda: A.decode_attention(None, None, -1), ValueError, "base_pos"),
        (lambda: A.attn_partials(None, None, 1.5), TypeError, "base_pos"),
        (lambda: A.decode_attention(None, None, 0, n_splits=0), ValueError, "n_splits"),
        (lambda: A.attn_partials(None, None, 0, n_splits=True), TypeError, "n_splits"),
        (lambda: A.decode_attention(None, None, 0, sparse_v=1.0), ValueError, "sparse_v"),
        (lambda: A.decode_attention(None, None, 0, options="-DX=1"), TypeError, "options"),
        (lambda: A.decode_attention(None, None, 0, sel_n=[0]), ValueError, "sel_idx"),
        (lambda: A.decode_attention(None, None, 0, partials=3), TypeError, "partials"),
        (lambda: A.attn_combine(None, None, None, inverse_wht=1), TypeError, "inverse_wht"),
    ],
)
def test_plain_arguments_are_refused_before_any_array(call, exc, name):
    """The calls check their plain Python arguments before any array, so these need no GPU
    (the arrays here are None)."""
    with pytest.raises(exc, match=rf"^{name}(?!\w)"):
        call()


# ---- the plan: its GPU-free part (plan_rung) and plan() with the split count given ------------
# (kind, nb, n_rep, hd, sparse_v, selective) -> (rung, words of why); why is None exactly when
# the tensor-core rung applies.
PLAN_CASES = [
    ("q8", 1, 6, 256, 0.0, False, "mma", None),
    ("q8", 5, 6, 256, 0.0, False, "mma", None),  # 30 columns
    ("q8", 6, 6, 256, 0.0, False, "v1", "nb * n_rep = 36 > 32"),
    ("q8", 1, 6, 128, 0.0, False, "mma", None),
    ("q8", 1, 6, 64, 0.0, False, "v1", "head_dim 64"),
    ("q8", 1, 6, 256, 1e-3, False, "v1", "sparse_v > 0"),
    ("q8", 1, 6, 256, 0.0, True, "mma", None),
    ("q8", 2, 6, 256, 0.0, True, "v1", "selective rows"),
    ("q8", 1, 12, 256, 0.0, True, "v1", "selective rows"),
    ("q8", 2, 2, 128, 0.0, True, "v1", "selective rows"),  # one tile, two token lists
    ("bf16", 1, 6, 256, 0.0, False, "mma", None),
    ("turbo4", 4, 6, 256, 0.0, False, "mma", None),
    ("turbo2", 1, 6, 128, 0.0, True, "mma", None),
    ("bf16k-turbo3v", 1, 6, 256, 0.0, True, "mma", None),
    ("turbo3", 1, 6, 256, 1e-3, False, "v1", "sparse_v > 0"),
    ("f32", 1, 6, 256, 0.0, False, "v1", "(f32, f32) have no tensor-core kernel"),
    ("f32", 9, 6, 64, 1e-3, True, "v1", "no tensor-core kernel"),  # the first reason is given
]


@pytest.mark.parametrize("kind,nb,n_rep,hd,sparse_v,selective,rung,why", PLAN_CASES)
def test_plan_rung_and_why(kind, nb, n_rep, hd, sparse_v, selective, rung, why):
    c = cache(n_rep, kind=kind, hd=hd)
    p = A.plan_rung(c, nb, sparse_v=sparse_v, selective=selective)
    assert p.rung == rung
    if why is None:
        assert p.why is None
    else:
        assert why in p.why
    assert p.n_splits is None  # the split count is plan()'s, on the GPU
    # plan_rung and rung_kernel are plan(..., gpu=False) and its kernel
    assert p == A.plan(c, nb, sparse_v=sparse_v, selective=selective, gpu=False)
    assert (
        A.rung_kernel(
            "attention",
            kind=kind,
            nb=nb,
            n_rep=n_rep,
            hd=hd,
            selective=selective,
            sparse_v=sparse_v,
        )
        == p.kernel
    )


@pytest.mark.parametrize("kind", LADDER_KINDS)
def test_plan_fields_per_rung(kind):
    """kernel, combine, threads, smem, options and tol of each rung; v0 has no partials."""
    c = cache(6, kind=kind)
    pair = A.rung_kernel("attention", "v1", kind=kind)[len("attn_partials_") :]
    v0 = A.plan_rung(c, 3, impl="v0")
    assert (v0.rung, v0.kernel, v0.combine, v0.n_splits) == (
        "v0",
        f"attention_v0_{pair}",
        None,
        None,
    )
    assert (v0.threads, v0.smem, v0.options, v0.tol) == (32, 0, (), A.TOL_ATTN)
    assert v0.why == "impl='v0' asked for"
    v1 = A.plan_rung(c, 3, impl="v1")
    assert (v1.rung, v1.kernel, v1.combine) == ("v1", f"attn_partials_{pair}", "attn_combine")
    assert (v1.threads, v1.smem, v1.options, v1.tol) == (128, 0, (), A.TOL_ATTN)
    if kind != "f32":
        mma = A.plan_rung(c, 3, impl="mma")
        sfx = A.MMA_KINDS[side_kinds(kind)]
        assert (mma.rung, mma.kernel, mma.combine) == (
            "mma",
            f"attn_partials_{sfx}_mma_n3",
            "attn_combine",
        )
        assert (mma.threads, mma.tol, mma.why) == (128, A.TOL_ATTN_MMA, None)
        assert mma.options == (f"-DMMA_KIND_{sfx}",)  # one module per kind
        assert mma.smem == A.mma_smem_bytes(256, 3, kind=kind) > 48 * 1024  # needs the opt-in
    else:
        with pytest.raises(ValueError, match="impl='mma' does not apply"):
            A.plan_rung(c, 3, impl="mma")


def test_plan_tol_per_rung():
    """tol follows the precision: fp16 P.V (2u + u^2, u = 2^-11) on mma, float32 elsewhere."""
    u = 2.0**-11
    assert 2 * u + u * u < A.TOL_ATTN_MMA < 2 * 2.0**-10
    assert A.TOL_ATTN < A.TOL_ATTN_MMA
    c = cache(6)
    assert {r: A.plan_rung(c, 1, impl=r).tol for r in A.IMPLS} == {
        "v0": A.TOL_ATTN,
        "split": A.TOL_ATTN,
        "v1": A.TOL_ATTN,
        "mma": A.TOL_ATTN_MMA,
    }
    from qwenref.bench import tolerances  # one source: the bench imports them

    assert (tolerances.TOL_ATTN, tolerances.TOL_ATTN_MMA) == (A.TOL_ATTN, A.TOL_ATTN_MMA)


def test_plan_options_shape_and_tuning():
    """options: the shape's -D's (none at the .cu's default hd 256, n_rep 6), then the
    caller's; MMA_NW / MMA_NSTAGE / ATTN_NWARP among them change threads and smem to match."""
    assert A.plan_rung(cache(6), 1).options == ("-DMMA_KIND_q8",)
    assert A.plan_rung(cache(6), 1, impl="v1").options == ()
    assert A.plan_rung(cache(2, hd=128), 1).options == (
        "-DATTN_HD=128",
        "-DATTN_NREP=2",
        "-DMMA_KIND_q8",
    )
    assert A.plan_rung(cache(6, hd=64), 1, impl="v0").options == ("-DATTN_V0_HD=64",)
    nw8 = A.plan_rung(cache(6), 1, options=("-DMMA_NW=8", "-DMMA_NSTAGE=3"))
    assert nw8.options == ("-DMMA_KIND_q8", "-DMMA_NW=8", "-DMMA_NSTAGE=3")
    assert nw8.threads == 256
    assert nw8.smem == A.mma_smem_bytes(256, 1, nw8.options) > A.plan_rung(cache(6), 1).smem
    assert A.plan_rung(cache(6), 1, impl="v1", options=["-DATTN_NWARP=2"]).threads == 64
    for bad in ("-DMMA_NW=8", ("-DX=1", 3), None):
        with pytest.raises(TypeError, match="options"):
            A.plan_rung(cache(6), 1, options=bad)


def test_plan_with_splits_given_needs_no_gpu():
    """plan() is pure when n_splits and max_smem are given (or for v0 and v1): the split count
    and the device's shared-memory limit are the only parts that read the GPU."""
    c = cache(6)
    p = A.plan(c, 2, base_pos=10, n_splits=7, max_smem=OPTIN_SM90)
    assert p == dataclasses.replace(A.plan_rung(c, 2), n_splits=7)
    assert A.plan(c, 2, impl="v0").n_splits is None
    assert A.plan(c, 2, impl="v1", n_splits=3).n_splits == 3  # no mma rung in question
    sel = A.plan(c, 1, selective=True, width=64, n_splits=3, max_smem=OPTIN_SM90)
    assert (sel.rung, sel.kernel, sel.n_splits) == ("mma", "attn_partials_q8_mma_sel_n1", 3)
    with pytest.raises(ValueError, match="n_splits"):
        A.plan(c, 1, n_splits=A.MAX_SPLITS + 1)
    with pytest.raises(ValueError, match="n_splits"):
        A.plan(c, 1, n_splits=0)
    with pytest.raises(ValueError, match="nb"):
        A.plan(c, 0, n_splits=1)
    with pytest.raises(ValueError, match="sparse_v"):
        A.plan(c, 1, sparse_v=1.0, n_splits=1)
    with pytest.raises(ValueError, match="impl='mma' does not apply"):
        A.plan(c, 6, impl="mma", n_splits=1)


def test_plan_is_a_frozen_value():
    """A plan is a value: held, compared, hashed (a cache of captured graphs can key on it)."""
    p = A.plan(cache(6), 1, n_splits=2, max_smem=OPTIN_SM90)
    q = A.plan(cache(6), 1, n_splits=2, max_smem=OPTIN_SM90)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.n_splits = 3
    assert p == q and hash(p) == hash(q)


def test_plan_argument_is_checked_before_anything_runs():
    """A call refuses a non-plan, a plan whose rung contradicts impl=, and a v0 plan for the
    partials, before touching its (here absent) arrays."""
    p = A.plan_rung(cache(6), 1)
    for f in (A.decode_attention, A.attn_partials):
        with pytest.raises(TypeError, match="plan"):
            f(None, None, 0, plan="mma")
        with pytest.raises(ValueError, match="contradicts plan.rung"):
            f(None, None, 0, plan=p, impl="v1")
    with pytest.raises(ValueError, match="impl='v0' has no partials"):
        A.attn_partials(None, None, 0, plan=A.plan_rung(cache(6), 1, impl="v0"))


def test_no_mutable_module_state():
    """Options are arguments and the choice is a returned plan: the old globals are gone."""
    for name in ("DEFAULT_IMPL", "LAST_IMPL", "TUNING_OPTIONS"):
        assert not hasattr(A, name), name


# ---- shared memory: the mma rung only where the device lets a block have its layout ------------
def test_mma_smem_bytes():
    """The layouts the design note lists (2 stages, 4 warps): NT8 1..4 at hd 256 and 128."""
    assert [A.mma_smem_bytes(256, n) for n in (1, 2, 3, 4)] == [79152, 89680, 98160, 108688]
    assert [A.mma_smem_bytes(128, n) for n in (1, 2, 3, 4)] == [40240, 46672, 51056, 57488]
    assert A.mma_smem_bytes(256, 1, ("-DMMA_NW=8", "-DMMA_NSTAGE=3")) == 219712
    # other kinds (kv_tile.cuh's rows): bf16 stages 2 * 64 * (512 + 512) B and two P planes;
    # turbo4 rows of 128 B and 16 scales: K padded to 144 (word loads), V swizzled (ldmatrix);
    # turbo2 rows of 64 B padded to 80
    assert A.mma_smem_bytes(256, 1, kind="bf16") == 131072 + 8192 + 2 * 1024 + 304
    assert A.mma_smem_bytes(256, 1, kind="turbo4") == 18432 + 16384 + 8192 + 8192 + 1024 + 304
    assert A.mma_smem_bytes(256, 1, kind="turbo2") == 20480 + 8192 + 8192 + 1024 + 304
    assert A.mma_smem_bytes(256, 1, kind="bf16k-turbo4v") == 81920 + 4096 + 8192 + 1024 + 304


def test_plan_falls_back_to_v1_where_shared_memory_is_short():
    """max_smem: what one block may opt into. Under sm_86 / sm_89's 99 KiB, hd 256 with four
    column tiles (nb 5 of n_rep 6: 108,688 B) takes v1 and says why; three tiles (98,160 B),
    hd 128 and every smaller shape stay on the tensor cores."""
    c = cache(6)
    p = A.plan_rung(c, 5, max_smem=OPTIN_SM86)
    assert (p.rung, p.kernel, p.smem, p.tol) == ("v1", "attn_partials_q8_q8", 0, A.TOL_ATTN)
    assert "108688 B of shared memory" in p.why and "101376 B" in p.why
    assert A.plan_rung(c, 5, max_smem=OPTIN_SM90).rung == "mma"
    assert A.plan_rung(c, 5).rung == "mma"  # None: not checked
    assert A.plan_rung(c, 5, max_smem=108688).rung == "mma"  # the limit is inclusive
    assert A.plan_rung(c, 5, max_smem=108687).rung == "v1"
    assert A.plan_rung(c, 4, max_smem=OPTIN_SM86).rung == "mma"
    for nb in (1, 2, 3, 5):
        assert A.plan_rung(cache(6, hd=128), nb, max_smem=OPTIN_SM86).rung == "mma"
    # tuning options size the layout: 8 warps and 3 stages need 219,712 B at one tile
    big = ("-DMMA_NW=8", "-DMMA_NSTAGE=3")
    assert A.plan_rung(c, 1, options=big, max_smem=OPTIN_SM90).rung == "mma"
    assert A.plan_rung(c, 1, options=big, max_smem=OPTIN_SM86).rung == "v1"
    # asked for, the mma rung that does not fit is an error that says why
    with pytest.raises(ValueError, match="impl='mma' does not apply: the mma kernel needs 108688"):
        A.plan_rung(c, 5, impl="mma", max_smem=OPTIN_SM86)
    # bf16 at hd 256 (141,616 B at one tile) does not fit sm_86's opt-in; turbo4 does
    assert A.plan_rung(cache(6, kind="bf16"), 1, max_smem=OPTIN_SM86).rung == "v1"
    assert A.plan_rung(cache(6, kind="turbo4"), 1, impl="mma", max_smem=OPTIN_SM86).rung == "mma"
    # the other reasons come first: the shared memory is only asked of shapes that fit
    assert "no tensor-core kernel" in A.plan_rung(cache(6, kind="f32"), 5, max_smem=0).why
    assert "nb * n_rep = 36" in A.plan_rung(c, 6, max_smem=0).why
    # with gpu=False, or max_smem and n_splits given, plan reads no GPU
    assert rung_of(c, 5, max_smem=OPTIN_SM86) == "v1"
    assert A.plan(c, 5, n_splits=4, max_smem=OPTIN_SM86) == dataclasses.replace(p, n_splits=4)


# A device's limits per SM (DeviceLimits): an H200 (132 SMs, 228 KB per SM) and an sm_86 card
# (82 SMs, 100 KB and 1,536 threads per SM, 16 blocks).
H200 = A.DeviceLimits(132, 65536, 2048, 32, 233472, OPTIN_SM90, 1024)
SM86 = A.DeviceLimits(82, 65536, 1536, 16, 102400, OPTIN_SM86, 1024)


def compiled(regs, static_smem=0):
    """What the split counts read of a compiled kernel."""
    return types.SimpleNamespace(num_regs=regs, shared_size_bytes=static_smem)


def test_split_counts_read_the_device_limits():
    """One wave of CTAs per device: registers, threads, shared memory and blocks per SM each
    bound the CTAs an SM holds (registers as ptxas reports them for sm_90)."""
    n1, n3 = compiled(165), compiled(246)  # attn_partials_q8_mma_n1 / _n3 at hd 256
    # two CTAs per SM on an H200 (shared memory; n3: registers too), so 66 splits for 4 kv
    # heads (the design note's count); one on sm_86 (100 KB hold one 79 KB layout)
    assert A.mma_n_splits(n1, 79152, 128, 32768, 4, limits=H200) == 66
    assert A.mma_n_splits(n3, 98160, 128, 32768, 4, limits=H200) == 66
    assert A.mma_n_splits(n1, 79152, 128, 32768, 4, limits=SM86) == 21
    assert A.mma_n_splits(n1, 79152, 128, 2112, 4, limits=H200) == 33  # one per 64-token tile
    # three CTAs an SM (tq4's n1: 167 registers, 75,568 B) only where each CTA of the wave gets
    # EXTRA_CTA_TILES tiles: 99 splits at 128k tokens (20.7 tiles each), 66 at 32k (at 99: 5.2)
    tq = compiled(167)
    assert A.mma_n_splits(tq, 75568, 128, 131072, 4, limits=H200) == 99
    assert A.mma_n_splits(tq, 75568, 128, 99 * 64 * EXTRA_CTA_TILES, 4, limits=H200) == 99
    assert A.mma_n_splits(tq, 75568, 128, 99 * 64 * EXTRA_CTA_TILES - 64, 4, limits=H200) == 66
    assert A.mma_n_splits(tq, 75568, 128, 32768, 4, limits=H200) == 66
    v1 = compiled(229, 25472)  # attn_partials_q8_q8: 229 registers, 25,472 B static
    assert A.auto_n_splits(v1, 32768, 4, 1, limits=H200) == 66  # two CTAs by registers
    assert A.auto_n_splits(v1, 32768, 4, 1, limits=SM86) == 41
    few = compiled(32, 25472)  # few registers: shared memory bounds it (8, and 3 on sm_86)
    assert A.auto_n_splits(few, 32768, 4, 1, limits=H200) == 264
    assert A.auto_n_splits(few, 32768, 4, 1, limits=SM86) == 62
    assert A.auto_n_splits(v1, 100, 4, 1, limits=H200) == 4  # one per 32-token chunk
    assert A.auto_n_splits(v1, 10**6, 1, 1, limits=H200) == 264


# ---- bad input to the GPU-free functions ------------------------------------------------------
@pytest.mark.parametrize(
    "call,exc,name",
    [
        (lambda: A.mma_smem_bytes(64, 1), ValueError, "hd"),
        (lambda: A.mma_smem_bytes(256, 5), ValueError, "nt8"),
        (lambda: A.mma_smem_bytes(256, 1.0), TypeError, "nt8"),
        (lambda: A.mma_smem_bytes(256, 1, "-DMMA_NW=8"), TypeError, "options"),
        (lambda: A.mma_kernel_name(6, 6), ValueError, "nb \\* n_rep"),
        (lambda: A.mma_kernel_name(1, 6, kind="f32"), ValueError, "kind"),
        (lambda: A.mma_smem_bytes(256, 1, kind="f16"), ValueError, "kind"),
        (lambda: A.mma_kernel_name(0, 6), ValueError, "nb"),
        (lambda: A.mma_kernel_name(1, 6, selective=1), TypeError, "selective"),
        (lambda: A.plan_rung(None, 1), TypeError, "cache"),
        (lambda: A.plan_rung(cache(6, hd=96), 1), ValueError, "cache"),
        (lambda: A.plan_rung(cache(6), 1, selective=1), TypeError, "selective"),
        (lambda: A.plan_rung(cache(6), 1, max_smem=-1), ValueError, "max_smem"),
        (lambda: A.plan_rung(cache(6), 1, max_smem=1.5e5), TypeError, "max_smem"),
        (lambda: A.plan(cache(6), 1, base_pos=-1, n_splits=1), ValueError, "base_pos"),
        (lambda: A.plan(cache(6), 1, width=-1, n_splits=1), ValueError, "width"),
        (lambda: A.plan(cache(6), 1, width=2.0, n_splits=1), TypeError, "width"),
        (lambda: A.plan(cache(6), 1, n_splits=True), TypeError, "n_splits"),
        (lambda: A.rung_kernel("attention", hd=100), ValueError, "hd"),
        (lambda: A.rung_kernel("attention", n_rep=0), ValueError, "n_rep"),
        (lambda: A.plan(cache(6), 1.0, gpu=False), TypeError, "nb"),
        (lambda: A.plan(cache(6), 1, gpu=0), TypeError, "gpu"),
        (lambda: A.mma_n_splits(object(), 1, 128, 1, 1, limits=H200), TypeError, "kern"),
        (lambda: A.mma_n_splits(compiled(1), 1, 128, 1, 1, limits="h200"), TypeError, "limits"),
        (lambda: A.mma_n_splits(compiled(1), 1, 16, 1, 1, limits=H200), ValueError, "threads"),
        (lambda: A.mma_n_splits(compiled(1), -1, 128, 1, 1, limits=H200), ValueError, "smem"),
        (lambda: A.auto_n_splits(compiled(1), -1, 1, 1, limits=H200), ValueError, "n_vis_max"),
        (lambda: A.auto_n_splits(compiled(1), 1, 0, 1, limits=H200), ValueError, "nkv"),
        (lambda: A.auto_n_splits(compiled(1), 1, 1, 1, nwarp=0, limits=H200), ValueError, "nwarp"),
    ],
)
def test_gpu_free_functions_refuse_bad_input(call, exc, name):
    """Each names the argument first in its message (docs/bad-input.md)."""
    with pytest.raises(exc, match=rf"^{name}(?!\w)"):
        call()


# ---- tq: the mma rung alone -------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tq4", "tq3", "tq2"])
def test_tq_decodes_on_the_mma_rung_only(kind):
    """A tq cache plans the tq mma kernels (its codebook loader) with mma's tolerance, by default
    and when asked; v0, split and v1 have no tq kernels and are refused by name, as are the
    shapes mma does not take (there is no rung to fall back to)."""
    p = A.plan_rung(cache(6, kind), 1)
    assert (p.rung, p.kernel, p.tol, p.rows) == (
        "mma",
        f"attn_partials_{kind}_mma_n1",
        A.TOL_ATTN_MMA,
        None,
    )
    assert p == A.plan_rung(cache(6, kind), 1, impl="mma")
    assert f"-DMMA_KIND_{kind}" in p.options
    assert A.plan_rung(cache(6, kind), 4).kernel == f"attn_partials_{kind}_mma_n3"
    sel = A.plan_rung(cache(6, kind), 1, selective=True)
    assert (sel.kernel, sel.rows) == (f"attn_partials_{kind}_mma_sel_n1", None)
    for impl in ("v0", "split", "v1"):
        with pytest.raises(ValueError, match=f"impl='{impl}' does not apply: .*mma rung only"):
            A.plan_rung(cache(6, kind), 1, impl=impl)
    with pytest.raises(ValueError, match="mma rung only, which does not apply here: head_dim 64"):
        A.plan_rung(cache(6, kind, hd=64), 1)
    with pytest.raises(ValueError, match="sparse_v > 0 uses v1"):
        A.plan_rung(cache(6, kind), 1, sparse_v=1e-3)


@pytest.mark.parametrize("kind", ["tq4", "tq2"])
@pytest.mark.parametrize(
    "n_rep,nb,selective,rows,kernel",
    [
        (6, 6, False, 5, "mma_n4"),  # 36 columns: groups of 5 rows (30 columns)
        (6, 35, False, 5, "mma_n4"),  # a prefill: 7 launches
        (4, 9, False, 8, "mma_n4"),  # 32 columns exactly per group
        (6, 2, True, 1, "mma_sel_n1"),  # selective rows one at a time
        (8, 12, True, 1, "mma_sel_n1"),
    ],
)
def test_tq_rows_beyond_one_launch_run_in_groups(kind, n_rep, nb, selective, rows, kernel):
    """Rows that do not fit one mma launch (more than MMA_MAX_COLS columns, or more than one
    selective row) run in groups that do: plan.rows of them per launch, the kernel and its
    shared memory those of a group, and why says so; a row that cannot fit alone (n_rep > 8
    selective) is refused."""
    p = A.plan_rung(cache(n_rep, kind), nb, selective=selective)
    assert (p.rung, p.rows, p.kernel) == ("mma", rows, f"attn_partials_{kind}_{kernel}")
    assert p.smem == A.mma_smem_bytes(256, -(-rows * n_rep // 8), kind=kind)
    assert ("one at a time" if selective else f"{rows} rows per mma launch") in p.why
    assert p == A.plan_rung(cache(n_rep, kind), nb, selective=selective, impl="mma")
    with pytest.raises(ValueError, match="mma rung only, which does not apply here: selective"):
        A.plan_rung(cache(12, kind), 1, selective=True)


def test_a_last_row_group_runs_the_kernel_of_its_rows():
    """7 dense rows of 6 heads run as 5 + 2: the group of 5 with the plan's kernel (n4), the last
    group of 2 with n2's kernel and shared memory, as a call of those 2 rows would; selective
    rows (one a launch) and plans without groups keep theirs."""
    c = cache(6, "tq4")
    p = A.plan_rung(c, 7)
    assert (p.rows, p.kernel) == (5, "attn_partials_tq4_mma_n4")
    assert A._group_plan(p, c, 5) is p
    two = A.plan_rung(c, 2)
    assert A._group_plan(p, c, 2) == dataclasses.replace(p, kernel=two.kernel, smem=two.smem)
    assert (two.kernel, two.smem) == (
        "attn_partials_tq4_mma_n2",
        A.mma_smem_bytes(256, 2, kind="tq4"),
    )
    sel = A.plan_rung(c, 3, selective=True)
    assert sel.rows == 1 and A._group_plan(sel, c, 1) is sel
    q8 = A.plan_rung(cache(6), 4)
    assert A._group_plan(q8, cache(6), 4) is q8


def test_tq_smem_holds_the_pair_table():
    """tq4's layout (hd 256, NT8 1): K and V rows of 128 B swizzled (no padding), one gamma a
    token per side, q, P and the reductions as for turbo4, then the codebook's pair table (256
    entries x 32 banks x 4 B), 16-byte aligned: 75,568 B, so that three CTAs share an SM's
    228 KiB (each with its 1 KiB the driver reserves)."""
    base = 16384 + 16384 + 2 * 64 * 2 * 2 + 8192 + 1024 + 304
    smem = A.mma_smem_bytes(256, 1, kind="tq4")
    assert smem == -(-base // 16) * 16 + 256 * 128 == 75568
    assert 3 * (smem + 1024) <= 228 * 1024


def test_tq2_quad_table_fits_three_ctas():
    """tq2's table with -DMMA_TQ2_QUAD=1: 256 quad entries x 16 copies x 8 B in place of 16 pair
    entries x 32 banks x 4 B, and three one-row CTAs still share an SM."""
    quad = ("-DMMA_TQ2_QUAD=1",)
    for hd, n in ((256, 1), (256, 4), (128, 2)):
        pairs = A.mma_smem_bytes(hd, n, kind="tq2")
        assert A.mma_smem_bytes(hd, n, quad, kind="tq2") == pairs - 16 * 128 + 256 * 128
    assert A.mma_smem_bytes(256, 1, ("-DMMA_TQ2_QUAD=0",), kind="tq2") == 32560
    assert A.mma_smem_bytes(256, 1, quad, kind="tq4") == 75568  # tq2's alone
    assert 3 * (A.mma_smem_bytes(256, 1, quad, kind="tq2") + 1024) <= 228 * 1024
