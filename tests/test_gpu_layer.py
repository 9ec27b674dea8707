"""gpu.FullAttentionLayer against golden.FullAttentionLayer, step by step, on the tiny config:
every cache kind, dense and selective (the indexer turns selective at t + 1 = (kblk+1)·R = 40),
batches whose rows cross the first selective row and a block boundary, f32 and q8 weights; plus
CUDA-graph capture/replay, the per-stage timing through forward's on_stage hook and the
argument checks."""

import warnings

import numpy as np
import pytest

import qwenref
from qwenref import golden
from qwenref.layout import CACHE_KINDS, TQ_KINDS

pytestmark = pytest.mark.gpu

# Row counts per step. Positions: 0..34 | 35..40 (row 39 is the first selective row, t+1 = 40,
# and block 4 completes in the same batch) | 41 | 42..46 | 47..49 (block 5 completes at 47, the
# batch crosses into block 6) | 50. Prefill with 35 rows also exercises the > 8-row GEMV chunks.
STEPS = (35, 6, 1, 5, 3, 1)
MAX_T = 64

# Tolerances (norm-wise on the layer output, per step):
TOL_EXACT_CACHE = 2e-5  # f32 cache: both sides compute the same float32 math in another order
# (GEMV/attention summation, float32 vs float64 RoPE angles at t < 64:
# < 1e-5 rad), ~1e-6 observed scale
TOL_QUANT_CACHE = 1e-3  # quantized caches store the same codes except where a value lands
# within float noise of a rounding boundary: such a value codes one step
# apart and moves that token's K or V by one step. The code-agreement
# check (>= 99.9%) below keeps this slack from hiding a systematic bug.
CODE_AGREE = 0.999  # stored entries (codes, scales, bf16 bits) that must agree; an entry
MAX_DIFF = 3  # differs only where its value lands within float noise (~1e-6 relative)
# of a rounding boundary, so a few per small array (408 turbo scales
# here) are allowed whatever the fraction


def _cp():
    import cupy

    return cupy


def _gpu():
    from qwenref import gpu

    return gpu


def _dense(cfg):
    return cfg.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )


def _weights(cfg, rng, mlp=True):
    """Random LayerWeights: projections N(0, 1/in) (activations stay O(1)), norm weights
    N(0, 0.1) around the zero-centred 1."""
    c = cfg
    hd, H, I = c.head_dim, c.hidden_size, c.intermediate_size

    def lin(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def vec(n):
        return (rng.standard_normal(n) * 0.1).astype(np.float32)

    w = {
        "input_layernorm.weight": vec(H),
        "post_attention_layernorm.weight": vec(H),
        "self_attn.q_proj.weight": lin(2 * c.nh * hd, H),
        "self_attn.k_proj.weight": lin(c.nkv * hd, H),
        "self_attn.v_proj.weight": lin(c.nkv * hd, H),
        "self_attn.o_proj.weight": lin(H, c.nh * hd),
        "self_attn.q_norm.weight": vec(hd),
        "self_attn.k_norm.weight": vec(hd),
    }
    if mlp:
        w.update(
            {
                "mlp.gate_proj.weight": lin(I, H),
                "mlp.up_proj.weight": lin(I, H),
                "mlp.down_proj.weight": lin(H, I),
            }
        )
    if c.has_indexer:
        ihd = c.indexer_head_dim
        w.update(
            {
                "self_attn.indexer.qk_proj.weight": lin((c.indexer_n_heads + 1) * ihd, H),
                "self_attn.indexer.q_norm.weight": vec(ihd),
                "self_attn.indexer.k_norm.weight": vec(ihd),
            }
        )
    return qwenref.LayerWeights(w)


def _rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


def _check_caches(ucache, gcache):
    """Stored K/V: f32 sides close, coded sides agreeing on >= 99.9% of the codes; indexer
    keys close."""
    mine = ucache.to_golden()
    assert len(mine) == len(gcache)
    T = len(gcache)
    for side, ms, gs in (("k", mine.k_store, gcache.k_store), ("v", mine.v_store, gcache.v_store)):
        kind = gcache.k_kind if side == "k" else gcache.v_kind
        for name in gs:
            a, b = ms[name][:, :T], gs[name][:, :T]
            if kind == "f32":
                assert _rel(a, b) < TOL_EXACT_CACHE, (side, name)
            else:
                n_diff = int((a != b).sum())
                assert n_diff <= max(MAX_DIFF, (1 - CODE_AGREE) * a.size), (
                    f"{side} {name}: {n_diff} of {a.size} stored entries differ"
                )
                if a.dtype == np.float16:  # a scale flips by one f16 ulp
                    step = np.abs(a.view(np.int16).astype(int) - b.view(np.int16).astype(int))
                    assert step.max() <= 1, f"{side} {name}: a scale differs by {step.max()} ulp"
    if gcache.idx_keys is not None:
        assert _rel(mine.idx_keys[:T], gcache.idx_keys[:T]) < TOL_EXACT_CACHE
        nblk = T // gcache.cfg.indexer_compress_ratio
        assert _rel(mine.blk_keys[:nblk], gcache.blk_keys[:nblk]) < TOL_EXACT_CACHE


def _check_selection(utrace, trace, base):
    """The GPU layer's per-row token lists (its forward's trace) equal the golden layer's
    (score gaps of random inputs are far above the float noise between the two)."""
    gold = trace.get("selections") or []
    sel = utrace["selection"]
    if sel is None:  # the GPU took the all-dense path
        for b, (idx, _) in enumerate(gold):
            assert np.array_equal(idx, np.arange(base + b + 1)), f"row {base + b} is selective"
        return 0
    si, sn = sel[0].get(), sel[1].get()
    n_sel = 0
    for b, (idx, _) in enumerate(gold):
        t = base + b
        mine = si[b, : sn[b]] if sn[b] > 0 else np.arange(t + 1)
        assert np.array_equal(mine, idx), f"row t={t}: selections differ"
        n_sel += int(sn[b] > 0)
    return n_sel


def _check_plan(utrace, ucache, nb, base):
    """The step's attention plan is the one its rows call for (the rung rule, the layer's own
    n_splits or the kernel's count); returns its rung."""
    from qwenref.gpu import attention as A

    p, sel = utrace["attention_plan"], utrace["selection"]
    assert isinstance(p, A.AttentionPlan) and p.n_splits >= 1
    assert p == A.plan(
        ucache,
        nb,
        base_pos=base,
        selective=sel is not None,
        width=0 if sel is None else sel[0].shape[1],
        n_splits=p.n_splits,
    )
    return p.rung


def _drive(cfg, w, kind, weight_format, rng, steps=STEPS, tol=None, rungs=None):
    """Run both layers through `steps` with the same inputs; check every step. Returns the
    number of selective rows seen; rungs, a list, receives each step's attention rung."""
    cp, gpu = _cp(), _gpu()
    glayer = golden.FullAttentionLayer(cfg, w, weight_format=weight_format)
    ulayer = gpu.FullAttentionLayer(cfg, w, weight_format=weight_format)
    gcache = golden.KVCache(cfg, max_t=MAX_T, kind=kind)
    ucache = gpu.KVCache(cfg, max_t=MAX_T, kind=kind)
    tol = tol or (TOL_EXACT_CACHE if kind == "f32" else TOL_QUANT_CACHE)
    n_sel = 0
    for nb in steps:
        base = len(gcache)
        x = rng.standard_normal((nb, cfg.hidden_size)).astype(np.float32)
        trace = {}
        ref = glayer.forward(x, base, gcache, trace=trace)
        xd = cp.asarray(x)
        out = cp.full((nb, cfg.hidden_size), cp.nan, cp.float32)
        utrace = {}
        y = ulayer.forward(xd, base, ucache, out=out, trace=utrace)
        assert y is out
        rung = _check_plan(utrace, ucache, nb, base)
        if rungs is not None:
            rungs.append(rung)
        got = y.get()
        assert np.isfinite(got).all(), f"step at {base}: unwritten or non-finite output"
        np.testing.assert_array_equal(xd.get(), x)  # input left alone
        err = _rel(got, ref)
        assert err < tol, f"step at base {base} (nb {nb}): rel_err {err:.2e} >= {tol:.0e}"
        if cfg.has_indexer:
            n_sel += _check_selection(utrace, trace, base)
        else:
            assert utrace["selection"] is None
    _check_caches(ucache, gcache)
    return n_sel


def _for_kind(cfg, kind):
    """The tq kinds decode on the mma rung alone, which takes head_dim 128 / 256: their layer
    runs at head_dim 128 (rotary_dim 32, the WHT over 128)."""
    return cfg.replace(head_dim=128) if kind in TQ_KINDS else cfg


@pytest.mark.parametrize("weight_format", ["f32", "q8"])
@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_layer_selective_matches_golden(tiny_cfg, rng, kind, weight_format):
    cfg = _for_kind(tiny_cfg, kind)
    n_sel = _drive(cfg, _weights(cfg, rng), kind, weight_format, rng)
    # rows 39..50 are selective: the test really went through the indexer's path
    assert n_sel == 12


@pytest.mark.parametrize("weight_format", ["f32", "q8"])
@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_layer_dense_matches_golden(tiny_cfg, rng, kind, weight_format):
    cfg = _dense(_for_kind(tiny_cfg, kind))
    _drive(cfg, _weights(cfg, rng), kind, weight_format, rng)


@pytest.mark.parametrize("kind", ["f32", "q8", "turbo3", "bf16k-turbo4v"])
def test_layer_head_dim_128(tiny_cfg, rng, kind):
    cfg = tiny_cfg.replace(head_dim=128)  # rotary_dim 32, WHT over 128
    rungs = []
    _drive(cfg, _weights(cfg, rng), kind, "q8", rng, rungs=rungs)
    # every kind but f32 takes the tensor-core rung at hd 128 where it applies: the one-row
    # selective steps (positions 41 and 50, n_rep 2); the 35-row prefill (70 columns > 32) and
    # the selective batches of several rows stay on v1; f32 is v1 throughout
    if kind == "f32":
        assert set(rungs) == {"v1"}
    else:
        assert "mma" in rungs and "v1" in rungs


def test_layer_without_mlp_runs_attention_only(tiny_cfg, rng):
    w = _weights(tiny_cfg, rng, mlp=False)
    with pytest.warns(UserWarning, match="attention only"):
        _drive(tiny_cfg, w, "q8", "f32", rng, steps=(9, 2))


def _twin_caches(cfg, layer, kind, rng, steps):
    """Two GPU caches brought to the same state by the same eager steps."""
    cp, gpu = _cp(), _gpu()
    caches = [gpu.KVCache(cfg, max_t=MAX_T, kind=kind) for _ in range(2)]
    for nb in steps:
        x = cp.asarray(rng.standard_normal((nb, cfg.hidden_size)).astype(np.float32))
        for c in caches:
            layer.forward(x, len(c), c)
    return caches


@pytest.mark.parametrize(
    "selective,weight_format,kind,nb",
    [
        (True, "q8", "q8", 3),
        (True, "f32", "turbo4", 3),
        (False, "f32", "f32", 3),
        (True, "f32", "f32", 10),
    ],
)
def test_graph_capture_replays_the_eager_step(tiny_cfg, rng, selective, weight_format, kind, nb):
    # f32 weights: captured steps run gemv.cu's f32 GEMV whatever nb is (CuPy refuses cuBLAS
    # during capture); an eager step of nb = 10 > 8 rows uses cuBLAS: the two paths agree to
    # float32 summation order, hence the looser tolerance there
    cp, gpu = _cp(), _gpu()
    cfg = tiny_cfg if selective else _dense(tiny_cfg)
    layer = gpu.FullAttentionLayer(cfg, _weights(cfg, rng), weight_format=weight_format)
    a, b = _twin_caches(cfg, layer, kind, rng, (41,))  # next rows 41..: selective
    base = 41
    x = cp.asarray(rng.standard_normal((nb, cfg.hidden_size)).astype(np.float32))
    g = layer.capture(x, base, a)
    assert len(a) == base + nb
    y_graph = g.out.get()
    y_eager = layer.forward(x, base, b).get()
    ga, gb = a.to_golden(), b.to_golden()
    if nb <= 8:
        # same kernels, same inputs: equal up to any run-to-run nondeterminism of the kernels
        np.testing.assert_allclose(y_graph, y_eager, rtol=1e-6, atol=1e-6)
        for name in gb.k_store:
            np.testing.assert_array_equal(
                ga.k_store[name][:, : base + nb], gb.k_store[name][:, : base + nb]
            )
        for name in gb.v_store:
            np.testing.assert_array_equal(
                ga.v_store[name][:, : base + nb], gb.v_store[name][:, : base + nb]
            )
    else:
        # GEMV kernel vs cuBLAS: float32 summation order only (TOL_EXACT_CACHE, see the top)
        assert _rel(y_graph, y_eager.astype(np.float64)) < TOL_EXACT_CACHE
        for name in gb.k_store:
            assert (
                _rel(
                    ga.k_store[name][:, : base + nb],
                    gb.k_store[name][:, : base + nb].astype(np.float64),
                )
                < TOL_EXACT_CACHE
            )
    # replays rewrite the same slots from the same inputs: idempotent
    g.out.fill(cp.nan)
    g.replay()
    g.stream.synchronize()
    np.testing.assert_array_equal(g.out.get(), y_graph)
    assert len(a) == base + nb
    # new inputs copied into the graph's x give that step's output
    x2 = cp.asarray(rng.standard_normal((nb, cfg.hidden_size)).astype(np.float32))
    g.x[...] = x2
    cp.cuda.Device().synchronize()
    g.replay()
    g.stream.synchronize()
    assert not np.allclose(g.out.get(), y_graph)
    from qwenref import timing

    gt = timing.graph_us(g, batches=3, per_batch=2)
    assert gt.us > 0 and gt.mode == "graph"


def test_on_stage_names_the_stages_in_order(tiny_cfg, rng):
    """forward's hook: "start" before any launch, then each stage that runs, in STAGES order."""
    cp, gpu = _cp(), _gpu()
    from qwenref.gpu.layer import STAGES

    layer = gpu.FullAttentionLayer(tiny_cfg, _weights(tiny_cfg, rng), weight_format="q8")
    a, b = _twin_caches(tiny_cfg, layer, "q8", rng, (44,))
    x = cp.asarray(rng.standard_normal((2, tiny_cfg.hidden_size)).astype(np.float32))
    names = []
    y = layer.forward(x, 44, a, on_stage=names.append)
    assert names[0] == "start" and names[1:] == [s for s in STAGES if s in names]
    assert {"input_norm", "qkv_proj", "attention", "select", "mlp_down"} <= set(names)
    np.testing.assert_allclose(y.get(), layer.forward(x, 44, b).get(), rtol=1e-6, atol=1e-6)


@pytest.mark.no_sanitizer("times the layer's stages; their kernels run in the other tests here")
def test_stage_us(tiny_cfg, rng):
    cp, gpu = _cp(), _gpu()
    from qwenref import timing
    from qwenref.gpu.layer import STAGES

    layer = gpu.FullAttentionLayer(tiny_cfg, _weights(tiny_cfg, rng), weight_format="q8")
    a, b = _twin_caches(tiny_cfg, layer, "q8", rng, (44,))
    x = cp.asarray(rng.standard_normal((2, tiny_cfg.hidden_size)).astype(np.float32))
    y, times = timing.stage_us(layer, x, 44, a, spin_us=200)
    np.testing.assert_allclose(y.get(), layer.forward(x, 44, b).get(), rtol=1e-6, atol=1e-6)
    stages = [k for k in times if k != "total"]
    assert stages == [s for s in STAGES if s in times]  # in execution order
    assert {"input_norm", "qkv_proj", "attention", "select", "mlp_down"} <= set(stages)
    assert all(v >= 0 for v in times.values())
    assert sum(times[s] for s in stages) == pytest.approx(times["total"], rel=1e-3, abs=1e-3)
    assert len(a) == 46


def test_argument_checks(tiny_cfg, rng):
    cp, gpu = _cp(), _gpu()
    w = _weights(tiny_cfg, rng)
    layer = gpu.FullAttentionLayer(tiny_cfg, w)
    cache = gpu.KVCache(tiny_cfg, max_t=16, kind="q8")
    x = cp.ones((1, tiny_cfg.hidden_size), cp.float32)
    with pytest.raises(ValueError, match="base_pos"):
        layer.forward(x, 3, cache)
    with pytest.raises(TypeError, match="x"):
        layer.forward(x.astype(cp.float64), 0, cache)
    with pytest.raises(TypeError, match="x"):
        layer.forward(np.ones((1, tiny_cfg.hidden_size), np.float32), 0, cache)
    with pytest.raises(ValueError, match="x"):
        layer.forward(cp.ones((1, 7), cp.float32), 0, cache)
    with pytest.raises(ValueError, match="cache"):
        layer.forward(x, 0, gpu.KVCache(_dense(tiny_cfg), max_t=16, kind="q8"))
    assert len(cache) == 0  # nothing appended by bad calls
    with pytest.raises(ValueError, match="weight_format"):
        gpu.FullAttentionLayer(tiny_cfg, w, weight_format="int4")
    bad = dict(w)
    del bad["self_attn.k_proj.weight"]
    with pytest.raises(ValueError, match="k_proj"):
        gpu.FullAttentionLayer(tiny_cfg, bad)
    bad = dict(w)
    bad["self_attn.o_proj.weight"] = bad["self_attn.o_proj.weight"][:, :-1]
    with pytest.raises(ValueError, match="o_proj"):
        gpu.FullAttentionLayer(tiny_cfg, bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a full layer warns about nothing
        gpu.FullAttentionLayer(tiny_cfg, w, weight_format="q8")
