"""Checkpoint I/O: write_random_checkpoint -> load_checkpoint round trips (f32/bf16/f16, sharded,
multimodal prefix, MoE), exact dtype conversion, and ValueErrors naming the bad tensor."""

import json
import re
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import qwenref
from qwenref import AttnConfig, load_checkpoint, write_random_checkpoint
from qwenref.safetensors_io import bf16_to_f32, encode
from qwenref.weights import weight_shapes


def _cfg(**over):
    """tiny, with two full-attention layers among linear-attention ones (indices 1 and 3)."""
    return AttnConfig.tiny().replace(
        num_hidden_layers=5,
        layer_types=(
            "linear_attention",
            "full_attention",
            "linear_attention",
            "full_attention",
            "linear_attention",
        ),
        **over,
    )


def _read_all(file):
    """Every tensor of a float32 safetensors file, via safetensors itself."""
    with safe_open(str(file), framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


@pytest.fixture(scope="module")
def f32_dir(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("f32"), _cfg(), seed=3)


# ---- round trips ------------------------------------------------------------------------------
def test_f32_round_trip_matches_safetensors(f32_dir):
    ckpt = load_checkpoint(f32_dir)
    cfg = _cfg()
    assert ckpt.config == cfg
    assert ckpt.full_attention_layers == [1, 3]
    assert ckpt.prefix == "model.layers." and ckpt.stored_dtypes == {"F32"} and ckpt.has_mlp
    assert ckpt.path == f32_dir
    ref = _read_all(f32_dir / "model.safetensors")  # independent reader
    assert len(ref) == 2 * len(weight_shapes(cfg))  # nothing but the two layers' tensors
    for i in (1, 3):
        w = ckpt.layer(i)
        assert isinstance(w, qwenref.LayerWeights) and w.has_mlp
        assert list(w) == list(weight_shapes(cfg))
        for name, shape in weight_shapes(cfg).items():
            assert w[name].dtype == np.float32 and w[name].shape == shape
            assert w[name].flags.c_contiguous and w[name].flags.writeable
            np.testing.assert_array_equal(w[name], ref[f"model.layers.{i}.{name}"])
    # the two layers differ (not one layer written twice)
    assert not np.array_equal(
        ckpt.layer(1)["self_attn.q_proj.weight"], ckpt.layer(3)["self_attn.q_proj.weight"]
    )


def test_random_weights_have_the_promised_scale(f32_dir):
    w = load_checkpoint(f32_dir).layer(1)
    for name, a in w.items():
        std = float(a.std())
        if a.ndim == 1:
            # norm weights ~ N(0, 0.1^2): far from 0 so that a w vs 1 + w slip shows;
            # 64-element samples: std within 0.06..0.14 with overwhelming probability
            assert 0.06 < std < 0.14, (name, std)
        else:
            # projections ~ N(0, 1/fan_in): keeps activations O(1)
            assert 0.8 < std * a.shape[1] ** 0.5 < 1.2, (name, std)


def test_seed_determines_the_weights(tmp_path, f32_dir):
    same = load_checkpoint(write_random_checkpoint(tmp_path / "a", _cfg(), seed=3)).layer(3)
    other = load_checkpoint(write_random_checkpoint(tmp_path / "b", _cfg(), seed=4)).layer(3)
    ref = load_checkpoint(f32_dir).layer(3)
    for name in ref:
        np.testing.assert_array_equal(same[name], ref[name])
        assert not np.array_equal(other[name], ref[name])


@pytest.mark.parametrize(
    "dtype, np_dtype, tag",
    [("bfloat16", ml_dtypes.bfloat16, "BF16"), ("float16", np.float16, "F16")],
)
def test_reduced_precision_equals_rounding_the_f32_weights(tmp_path, f32_dir, dtype, np_dtype, tag):
    ckpt = load_checkpoint(write_random_checkpoint(tmp_path, _cfg(), seed=3, dtype=dtype))
    assert ckpt.stored_dtypes == {tag}
    ref = load_checkpoint(f32_dir)
    rounded_up = 0
    for i in (1, 3):
        w, w32 = ckpt.layer(i), ref.layer(i)
        for name, a32 in w32.items():
            want = a32.astype(np_dtype).astype(np.float32)  # ml_dtypes / numpy: RNE
            assert w[name].dtype == np.float32 and w[name].flags.writeable
            np.testing.assert_array_equal(w[name], want, err_msg=name)
            assert not np.array_equal(w[name], a32)  # really stored reduced
            rounded_up += int(np.sum(np.abs(w[name]) > np.abs(a32)))
    assert rounded_up > 0  # rounding, not truncation (truncation never grows |x|)


def test_bf16_file_read_by_safetensors_agrees(tmp_path):
    # An independent reader of the bf16 file: safetensors' numpy API where it supports bf16
    # (>= 0.6 with ml_dtypes), else torch.
    d = write_random_checkpoint(tmp_path, _cfg(), seed=5, dtype="bf16")
    w = load_checkpoint(d).layer(1)
    name = "model.layers.1.self_attn.q_proj.weight"
    with safe_open(str(d / "model.safetensors"), framework="numpy") as f:
        assert f.get_slice(name).get_dtype() == "BF16"
        try:
            ref = np.asarray(f.get_tensor(name)).astype(np.float32)
        except Exception:  # older safetensors: numpy cannot hold bf16
            ref = None
    if ref is None:
        torch = pytest.importorskip("torch", reason="no bf16-capable reader to cross-check")
        from safetensors.torch import load_file

        ref = load_file(str(d / "model.safetensors"))[name].to(torch.float32).numpy()
    np.testing.assert_array_equal(w["self_attn.q_proj.weight"], ref)


def test_bf16_decode_and_rne_encode_on_chosen_bits():
    bits = np.array(
        [0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x0001, 0x7F7F, 0x4049], np.uint16
    )
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(bf16_to_f32(bits.tobytes()), want)
    # ties go to even: 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7
    x = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0xBF808000], np.uint32).view(np.float32)
    np.testing.assert_array_equal(
        encode(x, "BF16"), np.array([0x3F80, 0x3F82, 0x3F81, 0xBF80], np.uint16)
    )


def test_sharded_round_trip_and_lazy_reads(tmp_path, f32_dir):
    d = write_random_checkpoint(tmp_path, _cfg(), seed=3, shards=2)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert not (d / "model.safetensors").exists()
    ckpt, ref = load_checkpoint(d), load_checkpoint(f32_dir)
    for i in (1, 3):
        for name, a in ref.layer(i).items():
            np.testing.assert_array_equal(ckpt.layer(i)[name], a)
    # 14 tensors per layer, split 14/14: layer 1 lives in shard 1, layer 3 in shard 2. With
    # shard 2 gone, layer 1 still loads: ckpt.layer reads only the layer's own tensors.
    assert {index["weight_map"][k] for k in index["weight_map"] if ".layers.1." in k} == {files[0]}
    (d / files[1]).unlink()
    ckpt.layer(1)
    with pytest.raises(ValueError, match=files[1]):  # the missing shard, by name
        ckpt.layer(3)


def test_more_shards_than_layers_split_a_layer(tmp_path, f32_dir):
    d = write_random_checkpoint(tmp_path, _cfg(), seed=3, dtype="bfloat16", shards=5)
    ckpt = load_checkpoint(d)
    assert (
        len(
            set(json.loads((d / "model.safetensors.index.json").read_text())["weight_map"].values())
        )
        == 5
    )
    ref = load_checkpoint(f32_dir).layer(3)
    for name, a in ckpt.layer(3).items():
        np.testing.assert_array_equal(a, ref[name].astype(ml_dtypes.bfloat16).astype(np.float32))


def test_multimodal_prefix(tmp_path, f32_dir):
    d = write_random_checkpoint(tmp_path, _cfg(), seed=3, multimodal=True)
    conf = json.loads((d / "config.json").read_text())
    assert conf["model_type"] == "qwen3_5" and "text_config" in conf
    assert conf["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert all(
        k.startswith("model.language_model.layers.") for k in _read_all(d / "model.safetensors")
    )
    ckpt = load_checkpoint(d)
    assert ckpt.prefix == "model.language_model.layers." and ckpt.config == _cfg()
    ref = load_checkpoint(f32_dir).layer(1)
    for name, a in ckpt.layer(1).items():
        np.testing.assert_array_equal(a, ref[name])


def test_prefix_ignores_mtp_and_vision_tensors(tmp_path, f32_dir):
    # Real Qwen3.5 checkpoints also hold mtp.layers.0.* (multi-token prediction, same names as
    # a decoder layer) and model.visual.blocks.*: neither may be taken for the text layers.
    d = write_random_checkpoint(tmp_path, _cfg(), seed=3, multimodal=True)
    t = _read_all(d / "model.safetensors")
    rng = np.random.default_rng(0)
    for k in [k for k in t if ".layers.1." in k]:
        t["mtp.layers.1." + k.split(".layers.1.")[1]] = rng.standard_normal(t[k].shape, np.float32)
    t["model.visual.blocks.0.attn.qkv.weight"] = np.zeros((6, 2), np.float32)
    save_file(t, str(d / "model.safetensors"))
    ckpt = load_checkpoint(d)
    assert ckpt.prefix == "model.language_model.layers."
    np.testing.assert_array_equal(
        ckpt.layer(1)["self_attn.q_proj.weight"],
        load_checkpoint(f32_dir).layer(1)["self_attn.q_proj.weight"],
    )


def test_no_indexer_config_has_no_indexer_tensors(tmp_path):
    cfg = _cfg(indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0)
    w = load_checkpoint(write_random_checkpoint(tmp_path, cfg)).layer(1)
    assert not any("indexer" in k for k in w) and len(w) == 11
    wi = load_checkpoint(write_random_checkpoint(tmp_path / "i", _cfg())).layer(1)
    assert wi["self_attn.indexer.qk_proj.weight"].shape == (3 * 32, 64)  # (inh + 1) * ihd
    assert wi["self_attn.indexer.q_norm.weight"].shape == (32,)


def test_moe_checkpoint_loads_attention_only(tmp_path):
    cfg = _cfg(model_type="qwen3_next")
    d = write_random_checkpoint(tmp_path, cfg)
    assert json.loads((d / "config.json").read_text())["architectures"] == ["Qwen3NextForCausalLM"]
    with pytest.warns(UserWarning, match="MoE"):
        ckpt = load_checkpoint(d)
    assert not ckpt.has_mlp
    w = ckpt.layer(3)
    assert not w.has_mlp and not any(k.startswith("mlp.") for k in w)
    assert set(w) == set(weight_shapes(cfg, has_mlp=False))


def test_moe_layer_runs_attention_only_in_the_golden_layer(tmp_path):
    # attention only means y = x + attention(x): the same as a dense layer whose MLP adds 0
    cfg = _cfg(model_type="qwen3_next")
    with pytest.warns(UserWarning, match="MoE"):
        w = load_checkpoint(write_random_checkpoint(tmp_path, cfg, seed=2)).layer(1)
    x = np.random.default_rng(0).standard_normal((3, cfg.hidden_size)).astype(np.float32)
    with pytest.warns(UserWarning, match="MLP"):
        y = qwenref.golden.FullAttentionLayer(cfg, w).forward(
            x, base_pos=0, cache=qwenref.golden.KVCache(cfg, max_t=64)
        )
    dense = qwenref.LayerWeights(
        w,
        **{
            n: np.zeros(s, np.float32)
            for n, s in weight_shapes(cfg).items()
            if n.startswith("mlp.")
        },
    )
    y0 = qwenref.golden.FullAttentionLayer(cfg, dense).forward(
        x, base_pos=0, cache=qwenref.golden.KVCache(cfg, max_t=64)
    )
    np.testing.assert_array_equal(y, y0)
    assert np.linalg.norm(y - x) > 0.1 * np.linalg.norm(x)


# ---- errors ---------------------------------------------------------------------------------
def test_layer_of_a_linear_attention_layer(f32_dir):
    ckpt = load_checkpoint(f32_dir)
    with pytest.raises(ValueError, match="linear_attention"):
        ckpt.layer(2)
    with pytest.raises(ValueError, match="out of range"):
        ckpt.layer(7)
    with pytest.raises(TypeError):
        ckpt.layer("1")


def _rewrite(d, edit):
    t = _read_all(d / "model.safetensors")
    edit(t)
    save_file(t, str(d / "model.safetensors"))


@pytest.mark.parametrize(
    "name",
    [
        "model.layers.3.self_attn.k_norm.weight",
        "model.layers.1.self_attn.indexer.qk_proj.weight",
        "model.layers.3.mlp.down_proj.weight",
    ],
)
def test_missing_tensor_is_named(tmp_path, name):
    d = write_random_checkpoint(tmp_path, _cfg())
    _rewrite(d, lambda t: t.pop(name))
    with pytest.raises(ValueError, match=f"missing tensor {name}"):
        load_checkpoint(d)


def test_dense_model_without_any_mlp_is_an_error(tmp_path):
    d = write_random_checkpoint(tmp_path, _cfg())
    _rewrite(d, lambda t: [t.pop(k) for k in list(t) if ".mlp." in k])
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.gate_proj\.weight"):
        load_checkpoint(d)


def test_wrong_shape_is_named(tmp_path):
    d = write_random_checkpoint(tmp_path, _cfg())
    name = "model.layers.3.self_attn.o_proj.weight"
    _rewrite(d, lambda t: t.__setitem__(name, np.ascontiguousarray(t[name].T)))
    with pytest.raises(ValueError, match=rf"{name} has shape \(256, 64\), config says \(64, 256\)"):
        load_checkpoint(d)


def test_config_contradicting_the_weights(tmp_path):
    d = write_random_checkpoint(tmp_path, _cfg())
    conf = json.loads((d / "config.json").read_text())
    conf["num_key_value_heads"] = 4
    (d / "config.json").write_text(json.dumps(conf))
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.k_proj\.weight"):
        load_checkpoint(d)


def test_index_naming_a_shard_without_the_tensor(tmp_path):
    d = write_random_checkpoint(tmp_path, _cfg(), shards=2)
    p = d / "model.safetensors.index.json"
    index = json.loads(p.read_text())
    name = "model.layers.1.input_layernorm.weight"
    index["weight_map"][name] = "model-00002-of-00002.safetensors"
    p.write_text(json.dumps(index))
    with pytest.raises(ValueError, match=f"missing tensor {name}"):
        load_checkpoint(d)


def test_unsupported_dtype_is_named(tmp_path):
    d = write_random_checkpoint(tmp_path, _cfg())
    name = "model.layers.1.self_attn.q_norm.weight"
    _rewrite(d, lambda t: t.__setitem__(name, t[name].astype(np.int32)))
    with pytest.raises(ValueError, match=rf"{name} is stored as I32"):
        load_checkpoint(d)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="path"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        load_checkpoint(tmp_path / "file")
    with pytest.raises(ValueError, match="config.json"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(_cfg().to_hf()))
    with pytest.raises(ValueError, match="safetensors"):
        load_checkpoint(tmp_path)


def test_write_arguments(tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        write_random_checkpoint(tmp_path, _cfg(), dtype="int8")
    with pytest.raises(ValueError, match="shards"):
        write_random_checkpoint(tmp_path, _cfg(), shards=0)
    with pytest.raises(ValueError, match="shards"):
        write_random_checkpoint(tmp_path, _cfg(), shards=100)
    with pytest.raises(TypeError, match="cfg"):
        write_random_checkpoint(tmp_path, _cfg().to_hf())


def test_rewriting_a_directory_leaves_no_stale_shards(tmp_path):
    write_random_checkpoint(tmp_path, _cfg(), shards=3)
    write_random_checkpoint(tmp_path, _cfg(), shards=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    load_checkpoint(tmp_path).layer(1)


def test_layer_weights_validate():
    cfg = _cfg()
    w = qwenref.LayerWeights({n: np.zeros(s, np.float32) for n, s in weight_shapes(cfg).items()})
    assert w.validate(cfg) is w
    w["mlp.up_proj.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="mlp.up_proj.weight"):
        w.validate(cfg)


# ---- damaged checkpoints: every fault named, nothing read through ----------------------------
def _tree(d):
    """Every file under d with its bytes: what a refused write must leave alone."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def sharded_src(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("sh"), _cfg(), seed=3, shards=3)


@pytest.fixture
def sharded(tmp_path, sharded_src):
    d = tmp_path / "ck"
    d.mkdir()
    for p in sharded_src.iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    return d


SHARD2 = "model-00002-of-00003.safetensors"
INDEX = "model.safetensors.index.json"


def _header_bytes(header):
    hb = json.dumps(header).encode()
    return struct.pack("<Q", len(hb)) + hb


@pytest.mark.parametrize(
    "fault, where, match",
    [
        # (what is done to the checkpoint, file the message starts with, what else it names)
        ("config invalid JSON", "config.json", "not valid JSON"),
        ("config a list", "config.json", "JSON object"),
        ("config field a string", "config.json", "hidden_size must be an integer"),
        ("config field negative", "config.json", "rms_norm_eps must be > 0"),
        ("config field missing", "config.json", "num_attention_heads"),
        ("config layer_types length", "config.json", "layer_types has 4 entries"),
        ("config bias", "config.json", "attention_bias"),
        ("config act", "config.json", "hidden_act"),
        ("index invalid JSON", INDEX, "not valid JSON"),
        ("index a list", INDEX, "JSON object"),
        ("index without weight_map", INDEX, "weight_map"),
        ("index weight_map a list", INDEX, "weight_map"),
        ("index names a path", INDEX, r"\.\./x\.safetensors"),
        ("missing shard", SHARD2, "missing shard"),
        ("truncated shard", SHARD2, "truncated"),
        ("shorter than 8 bytes", SHARD2, "shorter than the 8-byte"),
        ("header past the end", SHARD2, "header length 4096 runs past the end"),
        ("header not JSON", SHARD2, "header is not valid JSON"),
        ("header a list", SHARD2, "header must be a JSON object, got a list"),
        ("header entry malformed", SHARD2, r"tensor model\.layers\.\d\.\S+: shape must be"),
        ("header offsets reversed", SHARD2, r"data_offsets must be \[begin, end\]"),
        ("header bytes disagree", SHARD2, r"bytes stored, shape"),
        ("tensor missing from shard", SHARD2, "missing tensor"),
    ],
)
def test_damaged_checkpoint_is_named(sharded, fault, where, match):
    index = json.loads((sharded / INDEX).read_text())
    conf = json.loads((sharded / "config.json").read_text())
    shard = sharded / SHARD2
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")

    def put_header(h):
        shard.write_bytes(_header_bytes(h) + raw[8 + n :])

    edits = {
        "config invalid JSON": lambda: (sharded / "config.json").write_text("{nope"),
        "config a list": lambda: (sharded / "config.json").write_text("[1]"),
        "config field a string": lambda: (sharded / "config.json").write_text(
            json.dumps(dict(conf, hidden_size="64"))
        ),
        "config field negative": lambda: (sharded / "config.json").write_text(
            json.dumps(dict(conf, rms_norm_eps=-1e-6))
        ),
        "config field missing": lambda: (sharded / "config.json").write_text(
            json.dumps({k: v for k, v in conf.items() if k != "num_attention_heads"})
        ),
        "config layer_types length": lambda: (sharded / "config.json").write_text(
            json.dumps(dict(conf, layer_types=conf["layer_types"][:4]))
        ),
        "config bias": lambda: (sharded / "config.json").write_text(
            json.dumps(dict(conf, attention_bias=True))
        ),
        "config act": lambda: (sharded / "config.json").write_text(
            json.dumps(dict(conf, hidden_act="gelu"))
        ),
        "index invalid JSON": lambda: (sharded / INDEX).write_text("{"),
        "index a list": lambda: (sharded / INDEX).write_text("[]"),
        "index without weight_map": lambda: (sharded / INDEX).write_text('{"metadata": {}}'),
        "index weight_map a list": lambda: (sharded / INDEX).write_text('{"weight_map": []}'),
        "index names a path": lambda: (sharded / INDEX).write_text(
            json.dumps({"weight_map": dict(index["weight_map"], **{name: "../x.safetensors"})})
        ),
        "missing shard": lambda: shard.unlink(),
        "truncated shard": lambda: shard.write_bytes(raw[:-100]),
        "shorter than 8 bytes": lambda: shard.write_bytes(raw[:5]),
        "header past the end": lambda: shard.write_bytes(struct.pack("<Q", 4096) + b"{}"),
        "header not JSON": lambda: shard.write_bytes(struct.pack("<Q", 4) + b"{x]x"),
        "header a list": lambda: shard.write_bytes(_header_bytes([1, 2])),
        "header entry malformed": lambda: put_header(
            dict(header, **{name: dict(header[name], shape="64")})
        ),
        "header offsets reversed": lambda: put_header(
            dict(
                header,
                **{name: dict(header[name], data_offsets=header[name]["data_offsets"][::-1])},
            )
        ),
        "header bytes disagree": lambda: put_header(
            dict(header, **{name: dict(header[name], shape=[1])})
        ),
        "tensor missing from shard": lambda: put_header(
            {k: v for k, v in header.items() if k != name}
        ),
    }
    if name == "__metadata__":
        pytest.skip("no tensor")
    edits[fault]()
    with pytest.raises(ValueError, match=rf"^{re.escape(where)}: .*{match}"):
        load_checkpoint(sharded)


def test_faults_after_loading_are_named(sharded):
    ckpt = load_checkpoint(sharded)
    index = json.loads((sharded / INDEX).read_text())["weight_map"]
    layer = next(int(k.split(".")[2]) for k, f in index.items() if f == SHARD2)
    shard = sharded / SHARD2
    raw = shard.read_bytes()
    shard.write_bytes(raw[:-10])  # cut short
    with pytest.raises(ValueError, match=rf"^{re.escape(SHARD2)}: .*truncated"):
        ckpt.layer(layer)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"] = [
        0,
        header[name]["data_offsets"][1] - header[name]["data_offsets"][0],
    ]  # moved
    shard.write_bytes(_header_bytes(header) + raw[8 + n :])
    with pytest.raises(ValueError, match=rf"^{re.escape(SHARD2)}: (changed on disk|.*bytes)"):
        ckpt.layer(layer)
    shard.unlink()
    with pytest.raises(ValueError, match=rf"^{re.escape(SHARD2)}: no such file"):
        ckpt.layer(layer)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weight_is_named(tmp_path, bad):
    d = write_random_checkpoint(tmp_path, _cfg())
    name = "model.layers.3.self_attn.v_proj.weight"

    def poison(t):
        t[name] = t[name].copy()
        t[name][2, 5] = bad

    _rewrite(d, poison)
    ckpt = load_checkpoint(d)  # headers are fine
    ckpt.layer(1)  # layer 1 is clean
    with pytest.raises(ValueError, match=rf"^model\.safetensors: tensor {name} holds 1 NaN"):
        ckpt.layer(3)


def test_f64_beyond_float32_is_named(tmp_path):
    d = write_random_checkpoint(tmp_path, _cfg())
    name = "model.layers.1.self_attn.q_norm.weight"

    def widen(t):
        t[name] = t[name].astype(np.float64)
        t[name][0] = 1e300

    _rewrite(d, widen)
    with pytest.raises(ValueError, match=rf"^model\.safetensors: tensor {name} holds"):
        load_checkpoint(d).layer(1)


def test_tensor_in_two_files_without_an_index(tmp_path):
    d = write_random_checkpoint(tmp_path, _cfg())
    t = _read_all(d / "model.safetensors")
    name = "model.layers.1.input_layernorm.weight"
    save_file({name: t[name]}, str(d / "extra.safetensors"))
    with pytest.raises(
        ValueError,
        match=rf"^model\.safetensors: tensor {name} is also in "
        rf"extra\.safetensors",
    ):
        load_checkpoint(d)


def test_load_arguments(tmp_path):
    with pytest.raises(TypeError, match="^path"):
        load_checkpoint(3)
    ckpt = load_checkpoint(write_random_checkpoint(tmp_path, _cfg()))
    for bad in (True, 1.0, "1"):
        with pytest.raises(TypeError, match="^i"):
            ckpt.layer(bad)
    for bad in (-1, 5, 99):
        with pytest.raises(ValueError, match=r"^i: layer -?\d+ is out of range"):
            ckpt.layer(bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^config\.json: missing"):
        load_checkpoint(tmp_path / "empty")


# ---- write_random_checkpoint: check first, write atomically ------------------------------------
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(dtype="int8"), ValueError, "dtype"),
        (dict(shards=0), ValueError, "shards"),
        (dict(shards=100), ValueError, "shards"),
        (dict(shards=1.5), TypeError, "shards"),
        (dict(shards=True), TypeError, "shards"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(seed=None), TypeError, "seed"),
        (dict(multimodal="yes"), TypeError, "multimodal"),
        (dict(cfg={"hidden_size": 64}), TypeError, "cfg"),
        (dict(cfg=_cfg().replace(layer_types=("linear_attention",) * 5)), ValueError, "cfg"),
        (dict(cfg=_cfg(attention_bias=True)), ValueError, "cfg"),
        (dict(path=3), TypeError, "path"),
    ],
)
def test_refused_write_leaves_the_disk_alone(tmp_path, kwargs, exc, match):
    d = write_random_checkpoint(tmp_path / "ck", _cfg(), seed=1, shards=2)
    before = _tree(tmp_path)
    args = dict(path=d, cfg=_cfg(), seed=2)
    args.update(kwargs)
    with pytest.raises(exc, match=f"^{match}"):
        write_random_checkpoint(args.pop("path"), args.pop("cfg"), **args)
    assert _tree(tmp_path) == before  # config.json and shards untouched
    load_checkpoint(d).layer(1)


def test_write_refuses_a_directory_holding_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="^path: .*'notes.txt'"):
        write_random_checkpoint(tmp_path, _cfg())
    assert _tree(tmp_path) == {"notes.txt": b"mine"}
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="^path: .*not a directory"):
        write_random_checkpoint(tmp_path / "file", _cfg())


def test_failed_write_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    import qwenref.checkpoint_write as ck

    d = write_random_checkpoint(tmp_path / "ck", _cfg(), seed=1, shards=3)
    before = _tree(tmp_path)
    calls = []

    def fail_on_second_shard(file, tensors):
        calls.append(file.name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(file, tensors)

    real = ck.write_safetensors
    monkeypatch.setattr(ck, "write_safetensors", fail_on_second_shard)
    with pytest.raises(OSError, match="No space"):
        write_random_checkpoint(d, _cfg(), seed=2, shards=2)
    assert _tree(tmp_path) == before  # old checkpoint intact, no temporary left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_rewrite_replaces_the_whole_checkpoint(tmp_path):
    d = write_random_checkpoint(tmp_path / "ck", _cfg(), seed=1, shards=3)
    write_random_checkpoint(d, _cfg(), seed=2, dtype="bf16")
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no temporaries left
    assert load_checkpoint(d).stored_dtypes == {"BF16"}
    link = tmp_path / "link"
    link.symlink_to(d)
    write_random_checkpoint(link, _cfg(), seed=3)  # through a symlink: the target is replaced
    assert link.is_symlink() and load_checkpoint(link).stored_dtypes == {"F32"}


def test_layer_weights_validate_faults():
    cfg = _cfg()
    good = {n: np.zeros(s, np.float32) for n, s in weight_shapes(cfg).items()}
    for edit, match in [
        (lambda w: w.pop("mlp.up_proj.weight"), "missing tensor 'mlp.up_proj.weight': a dense"),
        (
            lambda w: w["self_attn.q_norm.weight"].__setitem__(0, np.nan),
            "tensor 'self_attn.q_norm.weight' holds NaN",
        ),
        (
            lambda w: w.__setitem__("self_attn.k_norm.weight", np.zeros(64)),
            "'self_attn.k_norm.weight' must be a float32",
        ),
    ]:
        w = qwenref.LayerWeights({n: a.copy() for n, a in good.items()})
        edit(w)
        with pytest.raises(ValueError, match=match):
            w.validate(cfg)
    with pytest.raises(TypeError, match="^cfg"):
        qwenref.LayerWeights(good).validate(cfg.to_hf())
