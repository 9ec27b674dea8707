"""Parity with Hugging Face transformers: transformers itself builds and saves a tiny Qwen3.5
model; qwenref loads that checkpoint and its golden FullAttentionLayer must reproduce
transformers' Qwen3_5DecoderLayer (float32, eager attention) over a prefill and decode steps.

Parity is the norm-wise relative error ||ours - ref|| / ||ref|| (README.md), asserted <= 1e-5 on
every chunk of rows (the prefill, each decode step) and on every single row. Both sides compute
in float32; what differs is summation order (numpy vs torch GEMMs, softmax vs base-2 split-T)
and RoPE angles (transformers: float32 inv_freq and angles; golden: float64), together ~1e-7
relative at these sizes and positions < 32, so 1e-5 leaves two orders of margin while a real
slip (w vs 1 + w, q/gate order, rotate-half pairing, GQA mapping) gives >= 1e-3.
"""

import copy
import json

import numpy as np
import pytest

pytestmark = pytest.mark.oracle

torch = pytest.importorskip("torch", reason="parity tests need torch (pip install torch)")
pytest.importorskip("transformers", reason="parity tests need transformers >= 5 (Qwen3.5)")
try:
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config, Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import (
        Qwen3_5ForCausalLM,
        Qwen3_5ForConditionalGeneration,
    )
except ImportError as e:  # transformers too old for Qwen3.5
    pytest.skip(f"this transformers has no Qwen3.5 model ({e})", allow_module_level=True)

import qwenref  # noqa: E402

TOL = 1e-5  # see the module docstring
N_LAYERS = 2  # both full attention; parity is checked on each (catches a layer-index slip)


def _text_config(theta):
    c = Qwen3_5TextConfig(
        vocab_size=16,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rms_norm_eps=1e-6,
        layer_types=["full_attention"] * N_LAYERS,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": theta,
            "partial_rotary_factor": 0.25,
        },
    )
    c._attn_implementation = "eager"
    return c


def _randomise(model, seed):
    """transformers initialises the zero-centred norms' weights to 0 (a `w` vs `1 + w` slip would
    not show) and projections with std 0.02 (gates all ~0.5, attention nearly uniform): draw
    norms ~ N(0, 0.1^2) and projections ~ N(0, 1/fan_in) so every term is O(1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
    return model


@pytest.fixture(scope="module", params=[1e4, 1e7], ids=["theta1e4", "theta1e7"])
def hf(request, tmp_path_factory):
    """(model, checkpoint dir): a Qwen3_5ForCausalLM saved by transformers' save_pretrained."""
    theta = request.param
    torch.manual_seed(0)
    model = _randomise(Qwen3_5ForCausalLM(_text_config(theta)), seed=int(theta) % 1000 + 1).eval()
    d = tmp_path_factory.mktemp(f"hf_{int(theta)}")
    model.save_pretrained(d)
    return model, d


def _reference(model, i, x):
    """transformers' decoder layer i over all rows at once, causal: row t sees rows <= t, which
    is what a prefill followed by decode steps computes."""
    T = x.shape[0]
    xt = torch.from_numpy(x)[None]  # [1, T, H]
    # text positions 0..T-1 as the three identical mRoPE rows [3, 1, T]: older transformers (5.17)
    # want that shape, newer ones expand a [1, T] input to it themselves
    cos_sin = model.model.rotary_emb(xt, torch.arange(T)[None, None].expand(3, 1, T))
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]  # additive causal mask
    with torch.no_grad():
        y = model.model.layers[i](xt, position_embeddings=cos_sin, attention_mask=mask)
    return y[0].numpy()


def _ours(ckpt, i, x, chunks, kind="f32"):
    layer = qwenref.golden.FullAttentionLayer(ckpt.config, ckpt.layer(i))
    cache = qwenref.golden.KVCache(ckpt.config, max_t=64, kind=kind)
    out, p = [], 0
    for n in chunks:
        out.append(layer.forward(x[p : p + n], base_pos=len(cache), cache=cache))
        p += n
    assert len(cache) == p == x.shape[0]
    return out


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _inputs(T, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, 64)).astype(np.float32)
    x[5, 7] = 9.0  # an outlier channel, as real hidden states have
    x[T - 1] *= 3.0  # a loud decode row
    return x


@pytest.mark.parametrize(
    "chunks", [(20, 1, 1, 1), (7, 13, 2, 1)], ids=["prefill20+3decode", "chunked"]
)
def test_layer_matches_transformers(hf, chunks):
    model, d = hf
    ckpt = qwenref.load_checkpoint(d)
    theta = model.config.rope_parameters["rope_theta"]
    x = _inputs(sum(chunks), seed=len(chunks))
    for i in range(N_LAYERS):
        ref = _reference(model, i, x)
        ys = _ours(ckpt, i, x, chunks)
        y = np.concatenate(ys)
        # the layer must do real work, or parity on y would only compare the residual x
        assert _rel(ref, x) > 0.3
        p, errs = 0, []
        for n, yc in zip(chunks, ys):
            errs.append(_rel(yc, ref[p : p + n]))
            p += n
        row = max(_rel(y[t], ref[t]) for t in range(len(y)))
        delta = _rel(y - x, ref - x)  # the attention + MLP update alone
        print(
            f"\nparity theta={theta:.0e} layer={i} chunks={chunks}: per chunk "
            + " ".join(f"{e:.2e}" for e in errs)
            + f" | worst row {row:.2e} | update (y - x) {delta:.2e}"
        )
        assert max(errs) <= TOL and row <= TOL and delta <= TOL


def test_the_comparison_can_fail(hf):
    """The same comparison with the norm weights dropped (the `w` vs `1 + w` slip, in effect)
    or the kv heads swapped must exceed the tolerance by orders of magnitude."""
    model, d = hf
    ckpt = qwenref.load_checkpoint(d)
    x = _inputs(23, seed=4)
    ref = _reference(model, 1, x)
    w = ckpt.layer(1)
    for name in (
        "input_layernorm.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "post_attention_layernorm.weight",
    ):
        assert float(np.std(w[name])) > 0.05  # non-trivial norms were saved and loaded
        broken = qwenref.LayerWeights(w, **{name: np.zeros_like(w[name])})
        layer = qwenref.golden.FullAttentionLayer(ckpt.config, broken)
        cache = qwenref.golden.KVCache(ckpt.config, max_t=64, kind="f32")
        assert _rel(layer.forward(x, base_pos=0, cache=cache), ref) > 1e-3, name
    k = w["self_attn.k_proj.weight"].reshape(2, 32, 64)
    broken = qwenref.LayerWeights(w, **{"self_attn.k_proj.weight": k[::-1].reshape(64, 64)})
    layer = qwenref.golden.FullAttentionLayer(ckpt.config, broken)
    cache = qwenref.golden.KVCache(ckpt.config, max_t=64, kind="f32")
    assert _rel(layer.forward(x, base_pos=0, cache=cache), ref) > 1e-3


def test_config_and_weights_as_transformers_saved_them(hf):
    model, d = hf
    ckpt = qwenref.load_checkpoint(d)
    c, hc = ckpt.config, model.config
    assert (c.hidden_size, c.nh, c.nkv, c.head_dim, c.intermediate_size, c.rms_norm_eps) == (
        hc.hidden_size,
        hc.num_attention_heads,
        hc.num_key_value_heads,
        hc.head_dim,
        hc.intermediate_size,
        hc.rms_norm_eps,
    )
    assert c.rope_theta == hc.rope_parameters["rope_theta"]
    assert 2 * model.model.rotary_emb.inv_freq.numel() == c.rotary_dim == 8
    assert c.model_type == "qwen3_5_text" and not c.has_indexer and not c.is_moe
    assert ckpt.full_attention_layers == list(range(N_LAYERS)) and ckpt.prefix == "model.layers."
    sd = model.state_dict()
    for i in range(N_LAYERS):
        w = ckpt.layer(i)
        assert w.has_mlp and len(w) == 11
        for name, a in w.items():
            np.testing.assert_array_equal(a, sd[f"model.layers.{i}.{name}"].numpy())


def test_bf16_checkpoint_saved_by_transformers(hf, tmp_path):
    model, _ = hf
    m16 = Qwen3_5ForCausalLM(copy.deepcopy(model.config))  # .to() below edits its config
    m16.load_state_dict(model.state_dict())
    m16.to(torch.bfloat16).save_pretrained(tmp_path)
    ckpt = qwenref.load_checkpoint(tmp_path)
    assert ckpt.stored_dtypes == {"BF16"}
    sd = m16.state_dict()
    for name, a in ckpt.layer(1).items():
        # torch's bf16 -> float32 is exact; so must ours be
        np.testing.assert_array_equal(a, sd[f"model.layers.1.{name}"].float().numpy())


def test_multimodal_checkpoint_saved_by_transformers(hf, tmp_path):
    """Qwen3_5ForConditionalGeneration (tiny vision tower): text settings under text_config,
    text weights under model.language_model.layers.N, next to model.visual.* tensors."""
    model, d = hf
    vision = dict(
        depth=1,
        hidden_size=32,
        num_heads=2,
        intermediate_size=64,
        out_hidden_size=64,
        patch_size=2,
        temporal_patch_size=1,
        num_position_embeddings=16,
    )
    mm = Qwen3_5ForConditionalGeneration(
        Qwen3_5Config(text_config=copy.deepcopy(model.config).to_dict(), vision_config=vision)
    )
    mm.model.language_model.load_state_dict(model.model.state_dict())
    mm.save_pretrained(tmp_path)
    conf = json.loads((tmp_path / "config.json").read_text())
    assert conf["model_type"] == "qwen3_5" and "text_config" in conf
    ckpt, text = qwenref.load_checkpoint(tmp_path), qwenref.load_checkpoint(d)
    assert ckpt.prefix == "model.language_model.layers."
    assert ckpt.config == text.config
    for i in range(N_LAYERS):
        a, b = ckpt.layer(i), text.layer(i)
        assert list(a) == list(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])


def test_the_notebooks_parity_run_matches_its_record():
    """qwenref.parity.hf_parity, the run notebook 08 shows (live) and results/parity_hf.json
    records: it runs to the end on a checkpoint transformers wrote, its f32 variant is within the
    recorded tolerance, and the record holds the same fields and the same q8 and tq errors."""
    import json
    from pathlib import Path

    from qwenref.parity import VARIANTS, hf_parity

    p = hf_parity()
    rec = json.loads((Path(__file__).parent.parent / "results" / "parity_hf.json").read_text())
    assert set(p) | {"how"} == set(rec)
    assert list(rec["variants"]) == [f"{w} weights, {k} cache" for w, k in VARIANTS]
    assert p["variants"]["f32 weights, f32 cache"]["all"] < p["tolerance"]
    # the q8 and tq variants' errors are the quantizers' (~2e-3 and more), the same for the same
    # random draws; the f32 one is float32 rounding, which another BLAS may move by tens of
    # percent
    for name, v in rec["variants"].items():
        if name != "f32 weights, f32 cache":
            assert p["variants"][name]["all"] == pytest.approx(v["all"], rel=0.05), name
