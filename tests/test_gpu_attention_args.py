"""Bad input to qwenref.gpu.attention's calls (docs/bad-input.md): each bad argument is a
TypeError or ValueError whose message starts with the argument's name as the caller spelled it
(partials[0] for the first buffer of decode_attention's partials=), raised before any launch,
so every output passed in (out=, the partials buffers, lse_out=) still holds what it held.
Every rung refuses the same calls: impl None (the tensor-core rung on this q8 cache), "v1" and
"v0" (whose partials buffers and n_splits are checked, then unused)."""

import re
from types import SimpleNamespace

import numpy as np
import pytest

import qwenref
import qwenref.gpu.attention as A
from qwenref import golden

pytestmark = pytest.mark.gpu

NB, NH, NKV, HD, T, S = 2, 4, 2, 128, 40, 3  # n_rep 2, hd 128: the mma rung applies
FILL = 7.0  # what every output holds before a call that must fail


@pytest.fixture
def ctx(cp, gpu):
    """A q8 cache of T tokens (golden and GPU), q, a gate and outputs filled with FILL."""
    cfg = qwenref.AttnConfig(
        hidden_size=64,
        num_attention_heads=NH,
        num_key_value_heads=NKV,
        head_dim=HD,
        intermediate_size=128,
    )
    rng = np.random.default_rng(0)
    gc = golden.KVCache(cfg, max_t=T + 8, kind="q8")
    kv = rng.standard_normal((2, T, NKV, HD)).astype(np.float32)
    gc.append(kv[0], kv[1])
    full = lambda shape: cp.full(shape, FILL, cp.float32)
    return SimpleNamespace(
        cp=cp,
        gc=gc,
        cache=gpu.KVCache.from_golden(gc),
        q=cp.asarray(rng.standard_normal((NB, NH, HD)).astype(np.float32)),
        gate=cp.zeros((NB, NH, HD), cp.float32),
        m=full((NB, S, NH)),
        l=full((NB, S, NH)),
        o=full((NB, S, NH, HD)),
        out=full((NB, NH, HD)),
        lse=full((NB, NH)),
    )


def broken_cache(c, change):
    """A copy of c.cache with change(copy) applied (the original stays as it was)."""
    bad = c.cache.copy()
    change(bad)
    return bad


def misaligned(cp, shape):
    """A C-contiguous float32 array that starts 4 bytes into its buffer."""
    flat = cp.full(int(np.prod(shape)) + 1, FILL, cp.float32)
    return flat[1:].reshape(shape)


def raises(exc, name):
    """pytest.raises for a message that starts with the argument's name."""
    return pytest.raises(exc, match=rf"^{re.escape(name)}(?!\w)")


def assert_untouched(c, *arrays):
    c.cp.cuda.Device().synchronize()
    for a in arrays:
        assert bool((a == FILL).all()), "an output was written by a call that failed"


# (id, argument named in the message, exception, the call's changed arguments)
ROWS = [
    ("q-numpy", "q", TypeError, lambda c: {"q": c.cp.asnumpy(c.q)}),
    ("q-float16", "q", TypeError, lambda c: {"q": c.q.astype(c.cp.float16)}),
    ("q-heads", "q", ValueError, lambda c: {"q": c.q[:, :3].copy()}),
    ("q-no-rows", "q", ValueError, lambda c: {"q": c.q[:0]}),
    (
        "q-strided",
        "q",
        ValueError,
        lambda c: {"q": c.cp.zeros((NB, NH, 2 * HD), c.cp.float32)[:, :, ::2]},
    ),
    ("cache-golden", "cache", TypeError, lambda c: {"cache": c.gc}),
    ("cache-object", "cache", TypeError, lambda c: {"cache": object()}),
    (
        "cache-scale-dtype",
        "cache",
        TypeError,
        lambda c: {
            "cache": broken_cache(
                c, lambda b: b.k_store.update(d=b.k_store["d"].astype(c.cp.float32))
            )
        },
    ),
    (
        "cache-store-lengths",
        "cache",
        ValueError,
        lambda c: {
            "cache": broken_cache(
                c, lambda b: b.v_store.update({k: a[:, :-1].copy() for k, a in b.v_store.items()})
            )
        },
    ),
    (
        "cache-length",
        "cache",
        ValueError,
        lambda c: {"cache": broken_cache(c, lambda b: setattr(b, "length", b.max_t + 1))},
    ),
    ("base_pos-float", "base_pos", TypeError, lambda c: {"base_pos": float(T - NB)}),
    ("base_pos-bool", "base_pos", TypeError, lambda c: {"base_pos": True}),
    ("base_pos-negative", "base_pos", ValueError, lambda c: {"base_pos": -1}),
    ("base_pos-past-cache", "base_pos", ValueError, lambda c: {"base_pos": T - NB + 1}),
    ("n_splits-zero", "n_splits", ValueError, lambda c: {"n_splits": 0}),
    ("n_splits-over", "n_splits", ValueError, lambda c: {"n_splits": A.MAX_SPLITS + 1}),
    ("n_splits-float", "n_splits", TypeError, lambda c: {"n_splits": 3.0}),
    ("sparse_v-one", "sparse_v", ValueError, lambda c: {"sparse_v": 1.0}),
    ("sparse_v-nan", "sparse_v", ValueError, lambda c: {"sparse_v": float("nan")}),
    ("sparse_v-str", "sparse_v", TypeError, lambda c: {"sparse_v": "0.1"}),
    ("sel_n-alone", "sel_idx", ValueError, lambda c: {"sel_n": c.cp.zeros(NB, c.cp.int32)}),
    (
        "sel_idx-alone",
        "sel_idx",
        ValueError,
        lambda c: {"sel_idx": c.cp.zeros((NB, 4), c.cp.int32)},
    ),
    (
        "sel_n-int64",
        "sel_n",
        TypeError,
        lambda c: {
            "sel_idx": c.cp.zeros((NB, 4), c.cp.int32),
            "sel_n": c.cp.zeros(NB, c.cp.int64),
        },
    ),
    (
        "sel_n-numpy",
        "sel_n",
        TypeError,
        lambda c: {"sel_idx": c.cp.zeros((NB, 4), c.cp.int32), "sel_n": np.zeros(NB, np.int32)},
    ),
    (
        "sel_n-rows",
        "sel_n",
        ValueError,
        lambda c: {
            "sel_idx": c.cp.zeros((NB, 4), c.cp.int32),
            "sel_n": c.cp.zeros(NB + 1, c.cp.int32),
        },
    ),
    (
        "sel_idx-rows",
        "sel_idx",
        ValueError,
        lambda c: {
            "sel_idx": c.cp.zeros((NB + 1, 4), c.cp.int32),
            "sel_n": c.cp.zeros(NB, c.cp.int32),
        },
    ),
    (
        "sel_idx-no-columns",
        "sel_idx",
        ValueError,
        lambda c: {
            "sel_idx": c.cp.zeros((NB, 0), c.cp.int32),
            "sel_n": c.cp.zeros(NB, c.cp.int32),
        },
    ),
    ("impl-unknown", "impl", ValueError, lambda c: {"impl": "v2"}),
    ("plan-str", "plan", TypeError, lambda c: {"plan": "mma"}),
    ("options-str", "options", TypeError, lambda c: {"options": "-DATTN_TT=2"}),
    ("options-int", "options", TypeError, lambda c: {"options": (2,)}),
]
# decode_attention's own arguments (its partials= buffers are partials[0..2])
DECODE_ROWS = ROWS + [
    ("gate-numpy", "gate", TypeError, lambda c: {"gate": c.cp.asnumpy(c.gate)}),
    ("gate-float64", "gate", TypeError, lambda c: {"gate": c.gate.astype(c.cp.float64)}),
    ("gate-shape", "gate", ValueError, lambda c: {"gate": c.gate[:, :, :64].copy()}),
    ("out-shape", "out", ValueError, lambda c: {"out": c.cp.zeros((NB, NH, HD + 1), "f4")}),
    ("out-float64", "out", TypeError, lambda c: {"out": c.cp.zeros((NB, NH, HD), "f8")}),
    ("out-numpy", "out", TypeError, lambda c: {"out": np.zeros((NB, NH, HD), np.float32)}),
    ("partials-array", "partials", TypeError, lambda c: {"partials": c.m}),
    ("partials-two", "partials", TypeError, lambda c: {"partials": (c.m, c.l)}),
    (
        "partials-m-heads",
        "partials[0]",
        ValueError,
        lambda c: {"partials": (c.cp.zeros((NB, S, NH + 1), "f4"), c.l, c.o)},
    ),
    (
        "partials-m-splits",
        "partials[0]",
        ValueError,
        lambda c: {"n_splits": S + 1},  # n_splits says 4, the buffers hold 3
    ),
    (
        "partials-l-shape",
        "partials[1]",
        ValueError,
        lambda c: {"partials": (c.m, c.cp.zeros((NB, S + 1, NH), "f4"), c.o)},
    ),
    (
        "partials-o-dtype",
        "partials[2]",
        TypeError,
        lambda c: {"partials": (c.m, c.l, c.cp.zeros((NB, S, NH, HD), "f8"))},
    ),
    (
        "partials-o-misaligned",
        "partials[2]",
        ValueError,
        lambda c: {"partials": (c.m, c.l, misaligned(c.cp, (NB, S, NH, HD)))},
    ),
]
# attn_partials' own arguments
PARTIALS_ROWS = ROWS + [
    ("m_out-heads", "m_out", ValueError, lambda c: {"m_out": c.cp.zeros((NB, S, NH + 1), "f4")}),
    ("m_out-numpy", "m_out", TypeError, lambda c: {"m_out": np.zeros((NB, S, NH), np.float32)}),
    ("l_out-shape", "l_out", ValueError, lambda c: {"l_out": c.cp.zeros((NB, S + 1, NH), "f4")}),
    ("o_out-dtype", "o_out", TypeError, lambda c: {"o_out": c.cp.zeros((NB, S, NH, HD), "f8")}),
    (
        "o_out-misaligned",
        "o_out",
        ValueError,
        lambda c: {"o_out": misaligned(c.cp, (NB, S, NH, HD))},
    ),
]


def _ids(rows):
    return [r[0] for r in rows]


@pytest.mark.parametrize("impl", [None, "v1", "v0"])
@pytest.mark.parametrize("row", DECODE_ROWS, ids=_ids(DECODE_ROWS))
def test_decode_attention_refuses(ctx, row, impl):
    _, name, exc, change = row
    kw = dict(q=ctx.q, cache=ctx.cache, base_pos=T - NB, gate=ctx.gate, out=ctx.out, impl=impl)
    kw["partials"] = (ctx.m, ctx.l, ctx.o)
    kw.update(change(ctx))  # a plan of the wrong type is refused before impl is compared to it
    with raises(exc, name):
        A.decode_attention(**kw)
    assert_untouched(ctx, ctx.out, ctx.m, ctx.l, ctx.o)


@pytest.mark.parametrize("impl", [None, "v1"])
@pytest.mark.parametrize("row", PARTIALS_ROWS, ids=_ids(PARTIALS_ROWS))
def test_attn_partials_refuses(ctx, row, impl):
    _, name, exc, change = row
    kw = dict(q=ctx.q, cache=ctx.cache, base_pos=T - NB, impl=impl)
    kw.update(m_out=ctx.m, l_out=ctx.l, o_out=ctx.o)
    kw.update(change(ctx))
    with raises(exc, name):
        A.attn_partials(**kw)
    assert_untouched(ctx, ctx.m, ctx.l, ctx.o)


def test_the_valid_call_writes_the_outputs(ctx):
    """The base call of the tables above succeeds (so each row fails for its own argument)."""
    got = A.decode_attention(
        ctx.q, ctx.cache, T - NB, gate=ctx.gate, out=ctx.out, partials=(ctx.m, ctx.l, ctx.o)
    )
    assert got is ctx.out and not bool((ctx.out == FILL).any())
    m, l, o = A.attn_partials(ctx.q, ctx.cache, T - NB, m_out=ctx.m, l_out=ctx.l, o_out=ctx.o)
    assert m is ctx.m and not bool((ctx.m == FILL).any())


def test_plan_that_does_not_fit_is_refused(ctx):
    """A plan for another call (rows, rung, split count, options) is refused naming plan (or
    the argument it contradicts), before any launch."""
    selective = A.plan(ctx.cache, 1, base_pos=T - 1, selective=True, width=8, n_splits=S)
    assert selective.kernel == "attn_partials_q8_mma_sel_n1"
    v1 = A.plan(ctx.cache, NB, base_pos=T - NB, n_splits=S, impl="v1")
    base = dict(gate=ctx.gate, out=ctx.out, partials=(ctx.m, ctx.l, ctx.o))
    cases = [
        ("plan", dict(plan=selective)),  # dense rows run attn_partials_q8_mma_n1
        ("impl", dict(plan=v1, impl="mma")),
        ("n_splits", dict(plan=v1, n_splits=S + 1)),
        ("plan", dict(plan=v1, options=("-DATTN_TT=2",))),
    ]
    for name, kw in cases:
        with raises(ValueError, name):
            A.decode_attention(ctx.q, ctx.cache, T - NB, **base, **kw)
        assert_untouched(ctx, ctx.out, ctx.m, ctx.l, ctx.o)


# attn_combine: (id, argument, exception, changed arguments)
COMBINE_ROWS = [
    ("m-numpy", "m", TypeError, lambda c: {"m": c.cp.asnumpy(c.m)}),
    ("m-2d", "m", ValueError, lambda c: {"m": c.m[0]}),
    (
        "m-no-splits",
        "m",
        ValueError,
        lambda c: {
            "m": c.cp.zeros((NB, 0, NH), "f4"),
            "l": c.cp.zeros((NB, 0, NH), "f4"),
            "o": c.cp.zeros((NB, 0, NH, HD), "f4"),
        },
    ),
    (
        "m-too-many-splits",
        "m",
        ValueError,
        lambda c: {
            "m": c.cp.zeros((1, A.MAX_SPLITS + 1, 1), "f4"),
            "l": c.cp.zeros((1, A.MAX_SPLITS + 1, 1), "f4"),
            "o": c.cp.zeros((1, A.MAX_SPLITS + 1, 1, 32), "f4"),
            "gate": None,
            "out": None,
            "lse_out": None,
        },
    ),
    ("l-shape", "l", ValueError, lambda c: {"l": c.l[:, :2].copy()}),
    ("l-float64", "l", TypeError, lambda c: {"l": c.l.astype(c.cp.float64)}),
    ("o-heads", "o", ValueError, lambda c: {"o": c.o[:, :, :2].copy()}),
    ("o-head_dim", "o", ValueError, lambda c: {"o": c.cp.zeros((NB, S, NH, 48), "f4")}),
    ("o-misaligned", "o", ValueError, lambda c: {"o": misaligned(c.cp, (NB, S, NH, HD))}),
    ("inverse_wht-int", "inverse_wht", TypeError, lambda c: {"inverse_wht": 1}),
    (
        "inverse_wht-hd96",
        "inverse_wht",
        ValueError,
        lambda c: {
            "o": c.cp.zeros((NB, S, NH, 96), "f4"),
            "inverse_wht": True,
            "gate": None,
            "out": None,
        },
    ),
    ("gate-shape", "gate", ValueError, lambda c: {"gate": c.gate[:1].copy()}),
    ("out-shape", "out", ValueError, lambda c: {"out": c.cp.zeros((NB, NH, 64), "f4")}),
    ("lse_out-shape", "lse_out", ValueError, lambda c: {"lse_out": c.cp.zeros((NB, NH + 1), "f4")}),
    ("lse_out-float64", "lse_out", TypeError, lambda c: {"lse_out": c.cp.zeros((NB, NH), "f8")}),
]


@pytest.mark.parametrize("row", COMBINE_ROWS, ids=_ids(COMBINE_ROWS))
def test_attn_combine_refuses(ctx, row):
    _, name, exc, change = row
    m, l, o = ctx.cp.zeros_like(ctx.m), ctx.cp.ones_like(ctx.l), ctx.cp.zeros_like(ctx.o)
    kw = dict(m=m, l=l, o=o, gate=ctx.gate, out=ctx.out, lse_out=ctx.lse)
    kw.update(change(ctx))
    with raises(exc, name):
        A.attn_combine(**kw)
    assert_untouched(ctx, ctx.out, ctx.lse)
