"""Bad input never changes state (docs/bad-input.md): every public golden function refuses NaN
and +-inf in its float inputs, wrong types, shapes and ranges with an error whose message starts
with the argument's name as the caller spelled it, and leaves its inputs, the cache and the
layer exactly as they were."""

import copy

import numpy as np
import pytest

import qwenref
from qwenref import golden, layout
from qwenref.weights import weight_shapes

F32 = np.float32
BAD_VALUES = [np.nan, np.inf, -np.inf]


def _cfg():
    return qwenref.AttnConfig.tiny()  # indexer R = 8, kblk = 4, head_dim 64


def _rng():
    return np.random.default_rng(7)


def _weights(cfg, rng, mlp=True):
    return {
        n: (rng.standard_normal(s) * (0.1 if len(s) == 1 else s[1] ** -0.5)).astype(F32)
        for n, s in weight_shapes(cfg, has_mlp=mlp).items()
    }


def _filled_cache(cfg, rng, kind="q8", n=13, max_t=40):
    """A cache holding n tokens (blocks of 8 completed by the layer's own steps)."""
    layer = golden.FullAttentionLayer(cfg, _weights(cfg, rng))
    cache = golden.KVCache(cfg, max_t=max_t, kind=kind)
    layer.forward(rng.standard_normal((n, cfg.hidden_size)).astype(F32), 0, cache)
    return layer, cache


def snapshot(obj):
    """Everything a call could change: arrays and attributes, deep-copied."""
    return copy.deepcopy(obj.__dict__ if hasattr(obj, "__dict__") else obj)


def assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))  # bit-identical, NaN too
    else:
        assert a == b


# ---- the stage functions: every float input, every non-finite value ----------------------------
def _stage_calls():
    """(function, valid kwargs, names of the float array arguments that must be finite)."""
    rng = _rng()
    r = lambda *s: rng.standard_normal(s).astype(F32)
    q, d = golden.q8_quantize(r(2, 64))
    codes, td = golden.turbo_quantize(r(2, 64), 4)
    tq_codes, gamma = golden.tq_quantize(r(2, 64), 3)
    m, l, o = golden.attn_partials(r(4, 8), r(2, 50, 8), r(2, 50, 8), 3)
    return [
        (golden.rms_norm, dict(x=r(3, 8), weight=r(8)), ["x", "weight"]),
        (
            golden.add_rms_norm,
            dict(x=r(3, 8), residual=r(3, 8), weight=r(8)),
            ["x", "residual", "weight"],
        ),
        (golden.apply_rope, dict(x=r(2, 3, 16), positions=[0, 5], rotary_dim=8, theta=1e4), ["x"]),
        (golden.split_q_gate, dict(qg=r(2, 3, 16)), ["qg"]),
        (
            golden.qk_norm_rope,
            dict(
                qg=r(2, 4, 32),
                k=r(2, 2, 16),
                q_weight=r(16),
                k_weight=r(16),
                positions=[3, 4],
                rotary_dim=8,
                theta=1e4,
            ),
            ["qg", "k", "q_weight", "k_weight"],
        ),
        (golden.wht, dict(x=r(3, 16)), ["x"]),
        (golden.wht_signed, dict(x=r(3, 16), signs=layout.tq_signs(16)), ["x", "signs"]),
        (golden.q8_quantize, dict(x=r(2, 64)), ["x"]),
        (golden.q8_dequantize, dict(q=q, d=d), ["d"]),
        (golden.turbo_quantize, dict(x=r(2, 64), bits=4), ["x"]),
        (golden.turbo_dequantize, dict(codes=codes, d=td, bits=4), ["d"]),
        (golden.tq_quantize, dict(y=r(2, 64), bits=3), ["y"]),
        (golden.tq_dequantize, dict(codes=tq_codes, gamma=gamma, bits=3), ["gamma"]),
        (golden.bf16_bits, dict(x=r(5)), ["x"]),
        (golden.bf16_round, dict(x=r(5)), ["x"]),
        (
            golden.attn_partials,
            dict(q=r(4, 8), k=r(2, 50, 8), v=r(2, 50, 8), n_splits=3),
            ["q", "k", "v"],
        ),
        (golden.attn_combine, dict(m=m, l=l, o=o), ["l", "o"]),  # m: its own test
        (golden.decode_attention, dict(q=r(4, 8), k=r(2, 50, 8), v=r(2, 50, 8)), ["q", "k", "v"]),
        (golden.output_gate, dict(o=r(4, 8), gate=r(4, 8)), ["o", "gate"]),
        (golden.indexer_project, dict(h=r(2, 64), w_qk=r(96, 64), inh=2, ihd=32), ["h", "w_qk"]),
        (
            golden.indexer_queries,
            dict(q_raw=r(2, 2, 32), q_norm_w=r(32), positions=[0, 1], rotary_dim=16, theta=1e4),
            ["q_raw", "q_norm_w"],
        ),
        (
            golden.block_keys,
            dict(raw_keys=r(24, 32), blocks=[0, 2], R=8, k_norm_w=r(32), rotary_dim=16, theta=1e4),
            ["raw_keys", "k_norm_w"],
        ),
        (golden.block_scores, dict(q=r(2, 32), bkeys=r(6, 32)), ["q", "bkeys"]),
        (golden.select_blocks, dict(scores=r(6), kblk=3), ["scores"]),
        (golden.row_selection, dict(t=50, q=r(2, 32), bkeys=r(8, 32), R=8, kblk=4), ["q", "bkeys"]),
        (golden.linear, dict(x=r(2, 8), w=r(5, 8)), ["x", "w"]),
        (golden.silu, dict(x=r(2, 8)), ["x"]),
        (
            golden.mlp,
            dict(x=r(2, 8), w_gate=r(6, 8), w_up=r(6, 8), w_down=r(8, 6)),
            ["x", "w_gate", "w_up", "w_down"],
        ),
        (golden.quantize_weight_q8, dict(w=r(3, 64)), ["w"]),
    ]


_CASES = [
    (fn, kw, arg, bad) for fn, kw, args in _stage_calls() for arg in args for bad in BAD_VALUES
]


@pytest.mark.parametrize(
    "fn, kwargs, arg, bad", _CASES, ids=[f"{c[0].__name__}-{c[2]}-{c[3]}" for c in _CASES]
)
def test_non_finite_input_is_refused_by_name(fn, kwargs, arg, bad):
    kwargs = copy.deepcopy(kwargs)
    a = np.array(kwargs[arg])
    a.flat[a.size // 2] = bad
    kwargs[arg] = a
    before = snapshot(kwargs)
    with pytest.raises(ValueError, match=rf"^{arg}\b"):
        fn(**kwargs)
    assert_same(snapshot(kwargs), before)  # inputs untouched


@pytest.mark.parametrize(
    "fn, kwargs, args", _stage_calls(), ids=[c[0].__name__ for c in _stage_calls()]
)
def test_valid_call_works_and_leaves_inputs_alone(fn, kwargs, args):
    before = snapshot(kwargs)
    out = fn(**copy.deepcopy(kwargs))
    assert_same(snapshot(kwargs), before)
    for a in out if isinstance(out, tuple) else (out,):
        a = np.asarray(a)
        if np.issubdtype(a.dtype, np.floating):
            # finite out; the one -inf is attn_partials' m of an empty split
            ok = np.isfinite(a) | ((a == -np.inf) & (fn is golden.attn_partials))
            assert ok.all(), fn.__name__


@pytest.mark.parametrize(
    "fn, kwargs, args", _stage_calls(), ids=[c[0].__name__ for c in _stage_calls()]
)
def test_complex_input_is_a_type_error_by_name(fn, kwargs, args):
    for arg in args:
        kw = copy.deepcopy(kwargs)
        kw[arg] = np.asarray(kw[arg]).astype(np.complex64)
        with pytest.raises(TypeError, match=rf"^{arg}\b"):
            fn(**kw)


def test_float64_values_beyond_float32_are_refused():
    # the stages read float32: 1e39 would become inf there, so it counts as non-finite
    with pytest.raises(ValueError, match=r"^x must be finite in float32"):
        golden.q8_quantize(np.full(32, 1e39))
    with pytest.raises(ValueError, match=r"^q must be finite in float32"):
        golden.decode_attention(np.full((2, 4), 1e39), np.ones((1, 3, 4)), np.ones((1, 3, 4)))


def test_attn_combine_m_allows_minus_inf_only():
    m = np.array([[-np.inf, 1.0], [0.5, -np.inf]], F32)
    l, o = np.array([[0, 2.0], [1.0, 0]], F32), np.ones((2, 2, 4), F32)
    out, lse2 = golden.attn_combine(m, l, o)  # empty splits: fine
    assert np.isfinite(out).all() and np.isfinite(lse2).all()
    for bad in (np.nan, np.inf):
        mb = m.copy()
        mb[0, 1] = bad
        with pytest.raises(ValueError, match=r"^m must be finite or -inf"):
            golden.attn_combine(mb, l, o)
    with pytest.raises(ValueError, match=r"^l must be >= 0"):
        golden.attn_combine(m, -l, o)


def test_bf16_from_bits_refuses_nan_and_inf_patterns():
    for pattern in (0x7F80, 0xFF80, 0x7FC0):
        with pytest.raises(ValueError, match=r"^b\b"):
            golden.bf16_from_bits(np.array([0x3F80, pattern], np.uint16))


def test_quantizers_refuse_a_scale_beyond_float16():
    # never an inf scale (which dequantizes to inf or 0 * inf = NaN)
    with pytest.raises(ValueError, match=r"^x: a group's max"):
        golden.q8_quantize(np.full(32, 1e7, F32))
    golden.q8_quantize(np.full(32, 8e6, F32))  # 8e6 / 127 fits float16
    with pytest.raises(ValueError, match=r"^x: a group's max"):
        golden.turbo_quantize(np.full(16, 1e5, F32), 2)  # L = 1.5: limit 98280
    with pytest.raises(ValueError, match=r"^w: a group's max"):
        golden.quantize_weight_q8(np.full((1, 32), 1e7, F32))
    with pytest.raises(ValueError, match=r"^x holds values of magnitude"):
        golden.bf16_bits(np.array([np.finfo(F32).max], F32))


def test_norm_rows_float32_cannot_normalize():
    w = np.zeros(4, F32)
    with pytest.raises(ValueError, match=r"^x: a row's mean square overflows"):
        golden.rms_norm(np.full((1, 4), 1e20, F32), w)
    with pytest.raises(ValueError, match=r"^x: a row's mean square is 0"):
        golden.rms_norm(np.zeros((1, 4), F32), w, eps=0.0)
    assert np.array_equal(golden.rms_norm(np.zeros((1, 4), F32), w), np.zeros((1, 4), F32))
    with pytest.raises(ValueError, match=r"^x \+ residual overflows"):
        golden.add_rms_norm(np.full((1, 4), 3e38, F32), np.full((1, 4), 3e38, F32), w)


# ---- scalar arguments ---------------------------------------------------------------------------
_SCALARS = [
    # (call with the bad value, exception, argument name)
    (lambda v: golden.rms_norm(np.ones((1, 4), F32), np.zeros(4, F32), eps=v), "eps"),
    (
        lambda v: golden.add_rms_norm(
            np.ones((1, 4), F32), np.ones((1, 4), F32), np.zeros(4, F32), eps=v
        ),
        "eps",
    ),
    (lambda v: golden.rope_inv_freq(8, v), "theta"),
    (lambda v: golden.rope_cos_sin([0, 1], 8, v), "theta"),
    (lambda v: golden.apply_rope(np.ones((1, 2, 8), F32), [0], 8, v), "theta"),
    (
        lambda v: golden.qk_norm_rope(
            np.ones((1, 1, 16), F32),
            np.ones((1, 1, 8), F32),
            np.zeros(8, F32),
            np.zeros(8, F32),
            [0],
            8,
            1e4,
            eps=v,
        ),
        "eps",
    ),
    (
        lambda v: golden.indexer_queries(np.ones((1, 1, 8), F32), np.zeros(8, F32), [0], 4, v),
        "theta",
    ),
    (
        lambda v: golden.block_keys(np.ones((8, 8), F32), [0], 8, np.zeros(8, F32), 4, 1e4, eps=v),
        "eps",
    ),
    (
        lambda v: golden.decode_attention(
            np.ones((2, 4), F32), np.ones((1, 3, 4), F32), np.ones((1, 3, 4), F32), sparse_v=v
        ),
        "sparse_v",
    ),
]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1.0])
@pytest.mark.parametrize(
    "call, name", _SCALARS, ids=[f"{i}-{s[1]}" for i, s in enumerate(_SCALARS)]
)
def test_bad_float_scalar_is_refused_by_name(call, name, bad):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call(bad)


@pytest.mark.parametrize(
    "call, name", _SCALARS, ids=[f"{i}-{s[1]}" for i, s in enumerate(_SCALARS)]
)
def test_bool_or_string_scalar_is_a_type_error(call, name):
    for bad in (True, "0.1", None):
        with pytest.raises(TypeError, match=rf"^{name}\b"):
            call(bad)


def test_theta_zero_and_bool_flags():
    with pytest.raises(ValueError, match=r"^theta"):
        golden.rope_inv_freq(8, 0)
    with pytest.raises(TypeError, match=r"^zero_centered"):
        golden.rms_norm(np.ones((1, 4), F32), np.zeros(4, F32), zero_centered="no")
    with pytest.raises(TypeError, match=r"^inverse"):
        golden.wht(np.ones(4, F32), inverse=1)


_INTS = [
    (lambda v: golden.rope_inv_freq(v, 1e4), "rotary_dim"),
    (lambda v: golden.default_n_splits(v), "t_len"),
    (lambda v: golden.split_bounds(10, v), "n_splits"),
    (
        lambda v: golden.decode_attention(
            np.ones((2, 4), F32), np.ones((1, 3, 4), F32), np.ones((1, 3, 4), F32), n_splits=v
        ),
        "n_splits",
    ),
    (lambda v: golden.select_blocks(np.zeros(5, F32), v), "kblk"),
    (lambda v: golden.visible_tokens(v, np.array([0]), 8), "t"),
    (lambda v: golden.row_selection(3, np.zeros((1, 4), F32), np.zeros((1, 4), F32), v, 1), "R"),
    (lambda v: golden.indexer_project(np.ones((1, 8), F32), np.ones((16, 8), F32), v, 8), "inh"),
    (lambda v: golden.KVCache(_cfg(), max_t=v), "max_t"),
]


@pytest.mark.parametrize("call, name", _INTS, ids=[s[1] for s in _INTS])
def test_int_arguments(call, name):
    for bad in (True, 2.0, "3"):
        with pytest.raises(TypeError, match=rf"^{name}\b"):
            call(bad)
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call(-1)


def test_bits_and_kind():
    for bits in (0, 9, True, 4.0):  # the GPU twin shares this check: ValueError for all
        with pytest.raises(ValueError, match=r"^bits"):
            golden.turbo_quantize(np.ones(16, F32), bits)
    for bits in (0, 5, True, 4.0):  # tq: 1..4
        with pytest.raises(ValueError, match=r"^bits"):
            golden.tq_quantize(np.ones(16, F32), bits)
    with pytest.raises(TypeError, match=r"^kind"):
        golden.KVCache(_cfg(), 8, kind=["q8"])
    with pytest.raises(ValueError, match=r"^kind"):
        golden.KVCache(_cfg(), 8, kind="q4")


# ---- the cache: a refused append stores nothing -------------------------------------------------
@pytest.mark.parametrize("kind", ["f32", "bf16", "q8", "turbo3", "bf16k-turbo2v", "tq3"])
def test_refused_append_changes_nothing(kind):
    cfg, rng = _cfg(), _rng()
    _, cache = _filled_cache(cfg, rng, kind)
    good_k = rng.standard_normal((3, cfg.nkv, cfg.head_dim)).astype(F32)
    good_ik = rng.standard_normal((3, cfg.indexer_head_dim)).astype(F32)
    before = snapshot(cache)
    bad_calls = []
    for name in ("k", "v", "index_k"):
        for bad in BAD_VALUES:
            args = {"k": good_k.copy(), "v": good_k.copy(), "index_k": good_ik.copy()}
            args[name][-1, -1] = bad  # the last row's last value
            bad_calls.append((ValueError, name, args))
    big = good_k.copy()
    big[2, 1, 5] = 1e38 if kind.startswith(("bf16", "f32")) else 1e7
    if kind != "f32":  # f32 stores any finite value
        name = "k" if kind != "bf16k-turbo2v" else "v"
        if kind == "bf16":
            big[2, 1, 5] = np.finfo(F32).max  # rounds to inf in bf16
        bad_calls.append(
            (
                ValueError,
                name,
                {
                    "k": big if name == "k" else good_k,
                    "v": big if name == "v" else good_k,
                    "index_k": good_ik,
                },
            )
        )
    bad_calls += [
        (TypeError, "k", {"k": good_k.astype(np.float64), "v": good_k, "index_k": good_ik}),
        (ValueError, "v", {"k": good_k, "v": good_k[:2], "index_k": good_ik}),
        (ValueError, "index_k", {"k": good_k, "v": good_k, "index_k": None}),
        (
            ValueError,
            "k",
            {
                "k": np.zeros((30, cfg.nkv, cfg.head_dim), F32),  # past max_t
                "v": np.zeros((30, cfg.nkv, cfg.head_dim), F32),
                "index_k": np.zeros((30, cfg.indexer_head_dim), F32),
            },
        ),
    ]
    for exc, name, args in bad_calls:
        with pytest.raises(exc, match=rf"^{name}\b"):
            cache.append(**args)
        assert_same(snapshot(cache), before)
    cache.append(good_k, good_k, index_k=good_ik)  # and it still works
    assert len(cache) == 16


def test_cache_reads_check_t_len():
    cfg, rng = _cfg(), _rng()
    _, cache = _filled_cache(cfg, rng)
    for bad in (True, 1.0):
        with pytest.raises(TypeError, match=r"^t_len"):
            cache.keys(bad)
    with pytest.raises(ValueError, match=r"^t_len"):
        cache.values(len(cache) + 1)


def test_update_block_keys_checks_before_writing():
    cfg, rng = _cfg(), _rng()
    _, cache = _filled_cache(cfg, rng, n=13)
    before = snapshot(cache)
    w = np.zeros(cfg.indexer_head_dim, F32)
    for call, exc, name in [
        (
            lambda: golden.update_block_keys(cache, np.full_like(w, np.nan), cfg, 0, 13),
            ValueError,
            "k_norm_w",
        ),
        (lambda: golden.update_block_keys(cache, w[:5], cfg, 0, 13), ValueError, "k_norm_w"),
        (lambda: golden.update_block_keys(cache, w, cfg, 0, 14), ValueError, "t1"),
        (lambda: golden.update_block_keys(cache, w, cfg, True, 8), TypeError, "t0"),
        (lambda: golden.update_block_keys(cache, w, cfg.to_hf(), 0, 8), TypeError, "cfg"),
    ]:
        with pytest.raises(exc, match=rf"^{name}\b"):
            call()
        assert_same(snapshot(cache), before)
    # nothing to update still checks the weight
    with pytest.raises(ValueError, match=r"^k_norm_w"):
        golden.update_block_keys(cache, np.full_like(w, np.inf), cfg, 9, 10)


# ---- the layer ----------------------------------------------------------------------------------
def _layer_and_cache(kind="q8"):
    cfg, rng = _cfg(), _rng()
    layer, cache = _filled_cache(cfg, rng, kind, n=6)
    return cfg, rng, layer, cache


def test_forward_bad_arguments_change_nothing():
    cfg, rng, layer, cache = _layer_and_cache()
    x = rng.standard_normal((3, cfg.hidden_size)).astype(F32)
    other = golden.KVCache(cfg.replace(rms_norm_eps=1e-5), max_t=40)
    before, layer_before = snapshot(cache), snapshot(layer)
    cases = []
    for bad in BAD_VALUES:
        xb = x.copy()
        xb[1, 7] = bad
        cases.append(((xb, 6, cache), {}, ValueError, "x"))
    cases += [
        ((x, True, cache), {}, TypeError, "base_pos"),
        ((x, 6.0, cache), {}, TypeError, "base_pos"),
        ((x, 5, cache), {}, ValueError, "base_pos"),
        ((x.astype(np.float64), 6, cache), {}, TypeError, "x"),
        ((x[:, :10].copy(), 6, cache), {}, ValueError, "x"),
        ((x.tolist(), 6, cache), {}, TypeError, "x"),
        ((np.zeros((40, cfg.hidden_size), F32), 6, cache), {}, ValueError, "x"),  # > max_t
        ((x, 6, cache), {"trace": []}, TypeError, "trace"),
        ((x, 0, other), {}, ValueError, "cache"),
        ((x, 6, cache.__dict__), {}, TypeError, "cache"),
    ]
    for args, kw, exc, name in cases:
        with pytest.raises(exc, match=rf"^{name}\b"):
            layer.forward(*args, **kw)
        assert_same(snapshot(cache), before)
    # attention() names its own input, h
    with pytest.raises(ValueError, match=r"^h\b"):
        layer.attention(np.full((1, cfg.hidden_size), np.nan, F32), 6, cache)
    assert_same(snapshot(cache), before)
    assert_same(snapshot(layer), layer_before)
    trace = {}
    layer.forward(x, 6, cache, trace=trace)  # still works afterwards
    assert len(cache) == 9 and "selections" in trace


@pytest.mark.parametrize("kind", ["f32", "q8", "turbo4", "bf16k-turbo3v", "tq4"])
@pytest.mark.parametrize("what", ["v_proj", "down_proj"])
def test_step_that_overflows_after_its_checks_is_undone(kind, what):
    """Finite x and finite weights can still overflow float32 inside the step (here: a huge
    v_proj, stored by the quantizer or not, and a huge down_proj, whose output overflows only
    after the append and the block-key update). The cache must come back exactly as it was."""
    cfg, rng, _, cache = _layer_and_cache(kind)
    w = _weights(cfg, _rng())
    if what == "v_proj":
        w["self_attn.v_proj.weight"] *= F32(1e37)
    else:  # every output sums 128 terms times float32's max
        w["mlp.down_proj.weight"][:] = np.finfo(F32).max
    layer = golden.FullAttentionLayer(cfg, w)
    x = rng.standard_normal((4, cfg.hidden_size)).astype(F32)  # rows 6..9 complete block 0
    before, trace = snapshot(cache), {"kept": 1}
    with pytest.raises(ValueError, match=r"^x: a value computed from x is out of range") as e:
        layer.forward(x, 6, cache, trace=trace)
    assert "the cache is unchanged" in str(e.value)
    assert_same(snapshot(cache), before)
    assert trace == {"kept": 1}  # trace filled on success only


def test_layer_constructor_checks_every_weight():
    cfg, rng = _cfg(), _rng()
    w = _weights(cfg, rng)
    w_before = snapshot(w)
    cases = []
    for name in w:
        bad = dict(w)
        bad[name] = w[name].copy()
        bad[name].flat[0] = np.nan
        cases.append((bad, {}, ValueError, rf"w\['{name}'\] must be finite"))
    bad = dict(w)
    bad["mlp.up_proj.weight"] = w["mlp.up_proj.weight"][:, :5]
    cases.append((bad, {}, ValueError, r"w\['mlp.up_proj.weight'\] has shape"))
    bad = dict(w)
    del bad["mlp.down_proj.weight"]  # one of three: not a MoE layer
    cases.append((bad, {}, ValueError, r"w: missing weight 'mlp.down_proj.weight'"))
    bad = dict(w)
    bad["self_attn.k_norm.weight"] = w["self_attn.k_norm.weight"].astype(np.complex64)
    cases.append((bad, {}, TypeError, r"w\['self_attn.k_norm.weight'\]"))
    bad = dict(w)
    bad["self_attn.o_proj.weight"] = w["self_attn.o_proj.weight"] * F32(1e9)
    cases.append((bad, {"weight_format": "q8"}, ValueError, r"w\['self_attn.o_proj.weight'\]"))
    cases += [
        (w, {"weight_format": "int4"}, ValueError, "weight_format"),
        (w, {"weight_format": None}, TypeError, "weight_format"),
        (w, {"sparse_v": True}, TypeError, "sparse_v"),
        (w, {"sparse_v": float("nan")}, ValueError, "sparse_v"),
        (w, {"n_splits": 0}, ValueError, "n_splits"),
        (w, {"n_splits": 2.0}, TypeError, "n_splits"),
        (list(w.items()), {}, TypeError, "w"),
    ]
    for weights, kw, exc, match in cases:
        with pytest.raises(exc, match="^" + match):
            golden.FullAttentionLayer(cfg, weights, **kw)
    with pytest.raises(TypeError, match="^cfg"):
        golden.FullAttentionLayer(cfg.to_hf(), w)
    with pytest.raises(ValueError, match="^cfg.hidden_act"):
        golden.FullAttentionLayer(cfg.replace(hidden_act="gelu"), w)
    assert_same(snapshot(w), w_before)
    # a layer with no MLP weights at all runs attention only, with a warning
    with pytest.warns(UserWarning, match="attention only"):
        golden.FullAttentionLayer(cfg, _weights(cfg, rng, mlp=False))


def test_stage_helpers_name_their_arguments():
    r = np.ones((2, 8), F32)
    with pytest.raises(ValueError, match=r"^w must be \[out, 8\]"):
        golden.linear(r, np.ones((5, 7), F32))
    with pytest.raises(ValueError, match=r"^w_up"):
        golden.mlp(r, np.ones((6, 8), F32), np.ones((5, 8), F32), np.ones((8, 6), F32))
    with pytest.raises(ValueError, match=r"^w_down"):
        golden.mlp(r, np.ones((6, 8), F32), np.ones((6, 8), F32), np.ones((6, 8), F32))
    with pytest.raises(ValueError, match=r"^w's last axis"):
        golden.quantize_weight_q8(np.ones((2, 40), F32))


def test_wider_float_inputs_must_fit_float32():
    # float64 stages compute from the value as given; one beyond float32 could only give inf
    # (or NaN, where two of them cancel), so it is refused like an inf
    big = np.array([[1e300, -1e300, 1e300, 1e300]])
    for call, name in [
        (lambda: golden.wht(big), "x"),
        (lambda: golden.wht_signed(big, np.ones(4)), "x"),
        (lambda: golden.apply_rope(big[None], [3], 4, 1e4), "x"),
        (lambda: golden.output_gate(big, np.zeros_like(big)), "o"),
        (lambda: golden.attn_combine(np.zeros((1, 4)), np.ones((1, 4)), big[..., None]), "o"),
        (lambda: golden.attn_combine(big, np.ones((1, 4)), np.ones((1, 4, 2))), "m"),
    ]:
        with pytest.raises(ValueError, match=rf"^{name} must be finite in float32"):
            call()
    assert np.isfinite(golden.wht(np.full(4, 1e38))).all()  # within range: fine


def test_weights_changed_after_construction_still_cannot_reach_the_cache():
    """The layer checks its weights once, when built, and holds read-only views of them; the
    caller's own array stays checked on every direct call. NaN written into the caller's array
    afterwards shows up in the first value computed from it: the step raises, nothing stored."""
    cfg, rng = _cfg(), _rng()
    w = _weights(cfg, rng)
    layer = golden.FullAttentionLayer(cfg, w)
    name = "self_attn.k_proj.weight"
    assert not layer.w[name].flags.writeable and np.shares_memory(layer.w[name], w[name])
    cache = golden.KVCache(cfg, 16)
    x = rng.standard_normal((2, cfg.hidden_size)).astype(F32)
    w[name][3, 3] = np.nan
    with pytest.raises(ValueError, match=r"^w must be finite"):
        golden.linear(x, w[name])  # the caller's array: checked
    with pytest.raises(ValueError, match=r"^x: a value computed from x is out of range"):
        layer.forward(x, 0, cache)
    assert len(cache) == 0 and not cache.k_store["data"].any() and not cache.idx_keys.any()
