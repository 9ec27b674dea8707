"""AttnConfig: reading Hugging Face config dicts, the presets, and the checks on bad fields."""

import json

import pytest

from qwenref import AttnConfig


def _text(**over):
    """A small Qwen3_5TextConfig-style dict (as transformers saves it) with overrides."""
    d = {
        "model_type": "qwen3_5_text",
        "hidden_size": 96,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 40,
        "intermediate_size": 160,
        "rms_norm_eps": 1e-5,
        "num_hidden_layers": 3,
        "layer_types": ["linear_attention", "full_attention", "full_attention"],
        "vocab_size": 100,
        "linear_num_key_heads": 4,
    }
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


# ---- RoPE settings ------------------------------------------------------------------------------
def test_rope_parameters_win_over_top_level_keys():
    d = _text(
        rope_theta=123.0,
        partial_rotary_factor=0.5,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.2},
    )
    c = AttnConfig.from_hf(d)
    assert (c.rope_theta, c.partial_rotary_factor, c.rotary_dim) == (1e7, 0.2, 8)


def test_rope_from_top_level_keys():
    # Qwen3-Next-style configs (transformers 4.x) keep RoPE at the top and rope_scaling null.
    c = AttnConfig.from_hf(_text(rope_theta=5e6, partial_rotary_factor=0.5, rope_scaling=None))
    assert (c.rope_theta, c.partial_rotary_factor, c.rotary_dim) == (5e6, 0.5, 20)


def test_rope_parameters_fall_back_key_by_key():
    # rope_parameters without partial_rotary_factor: the top-level one is used
    c = AttnConfig.from_hf(
        _text(
            partial_rotary_factor=0.5, rope_parameters={"rope_type": "default", "rope_theta": 2e6}
        )
    )
    assert (c.rope_theta, c.partial_rotary_factor) == (2e6, 0.5)


def test_rope_defaults_are_transformers_defaults():
    # Qwen3_5TextConfig: theta 1e4 (rope default), partial_rotary_factor 0.25 (its __post_init__)
    c = AttnConfig.from_hf(_text())
    assert (c.rope_theta, c.partial_rotary_factor, c.rotary_dim) == (1e4, 0.25, 10)


def test_mrope_keys_are_ignored():
    plain = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}
    mrope = dict(plain, mrope_section=[11, 11, 10], mrope_interleaved=True)
    a = AttnConfig.from_hf(_text(rope_parameters=plain))
    b = AttnConfig.from_hf(_text(rope_parameters=mrope))
    assert a == b and b.rotary_dim == 10


# ---- nesting, paths, derived fields ---------------------------------------------------------
def test_text_config_nesting():
    text = _text(rope_parameters={"rope_theta": 1e7, "partial_rotary_factor": 0.25})
    mm = {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "hidden_size": 9999,
        "num_attention_heads": 7,  # must not leak into the text
        "vision_config": {"hidden_size": 32, "num_heads": 2},
        "text_config": text,
    }
    assert AttnConfig.from_hf(mm) == AttnConfig.from_hf(text)


def test_text_config_without_model_type_takes_the_top_one():
    text = _text(model_type=None)
    assert AttnConfig.from_hf({"model_type": "qwen3_5_moe", "text_config": text}).is_moe
    assert AttnConfig.from_hf(text).model_type == "qwen3_5_text"


def test_from_directory_and_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": _text()}))
    want = AttnConfig.from_hf(_text())
    assert AttnConfig.from_hf(tmp_path) == want
    assert AttnConfig.from_hf(str(tmp_path / "config.json")) == want
    with pytest.raises(FileNotFoundError, match="src"):
        AttnConfig.from_hf(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json"):
        AttnConfig.from_hf(tmp_path / "empty")
    with pytest.raises(TypeError, match="src"):
        AttnConfig.from_hf(42)


def test_missing_required_field_is_named():
    d = _text()
    del d["num_attention_heads"]
    with pytest.raises(ValueError, match="num_attention_heads"):
        AttnConfig.from_hf(d)


def test_layer_types_from_full_attention_interval():
    c = AttnConfig.from_hf(_text(layer_types=None, num_hidden_layers=7, full_attention_interval=3))
    assert [i for i, t in enumerate(c.layer_types) if t == "full_attention"] == [2, 5]
    c = AttnConfig.from_hf(_text(layer_types=None, num_hidden_layers=8))  # default interval 4
    assert [i for i, t in enumerate(c.layer_types) if t == "full_attention"] == [3, 7]


def test_head_dim_defaults_to_hidden_over_heads():
    assert AttnConfig.from_hf(_text(head_dim=None)).head_dim == 96 // 6


def test_fields_read():
    c = AttnConfig.from_hf(_text())
    assert (
        c.hidden_size,
        c.nh,
        c.nkv,
        c.n_rep,
        c.head_dim,
        c.intermediate_size,
        c.rms_norm_eps,
        c.num_hidden_layers,
    ) == (96, 6, 2, 3, 40, 160, 1e-5, 3)
    assert not c.has_indexer and c.kblk == 0 and not c.is_moe
    assert c.extra["vocab_size"] == 100  # unknown keys are kept, not dropped silently


@pytest.mark.parametrize("preset", ["tiny", "qwen35_27b", "qwen3_next_80b"])
def test_to_hf_round_trip(preset):
    c = getattr(AttnConfig, preset)()
    d = json.loads(json.dumps(c.to_hf()))  # through JSON, as config.json
    assert AttnConfig.from_hf(d) == c
    assert AttnConfig.from_hf({"model_type": "qwen3_5", "text_config": d}) == c


# ---- presets against the published configs ---------------------------------------------------
def test_qwen35_27b_matches_its_published_config():
    # Qwen/Qwen3.5-27B config.json (multimodal: text settings under text_config, mRoPE keys)
    hf = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {
            "model_type": "qwen3_5_text",
            "hidden_size": 5120,
            "intermediate_size": 17408,
            "num_hidden_layers": 64,
            "num_attention_heads": 24,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "full_attention_interval": 4,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"],  # x16, below
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000000,
                "partial_rotary_factor": 0.25,
                "mrope_interleaved": True,
                "mrope_section": [11, 11, 10],
            },
        },
    }
    hf["text_config"]["layer_types"] = hf["text_config"]["layer_types"] * 16
    c = AttnConfig.qwen35_27b()
    assert AttnConfig.from_hf(hf) == c.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )
    assert (c.nh, c.nkv, c.n_rep, c.head_dim, c.rotary_dim, c.hidden_size) == (
        24,
        4,
        6,
        256,
        64,
        5120,
    )
    assert [i for i, t in enumerate(c.layer_types) if t == "full_attention"] == list(
        range(3, 64, 4)
    )
    assert (
        c.indexer_n_heads,
        c.indexer_head_dim,
        c.indexer_compress_ratio,
        c.indexer_budget,
        c.kblk,
        c.indexer_rotary_dim,
    ) == (8, 128, 64, 2048, 32, 64)


def test_qwen3_next_80b_matches_its_published_config():
    # Qwen/Qwen3-Next-80B-A3B config.json (transformers 4.x style: RoPE keys at the top level,
    # layer pattern from full_attention_interval, MoE)
    hf = {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "intermediate_size": 5120,
        "moe_intermediate_size": 512,
        "num_experts": 512,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
        "rope_scaling": None,
        "full_attention_interval": 4,
        "hidden_act": "silu",
        "attention_bias": False,
    }
    c = AttnConfig.qwen3_next_80b()
    assert AttnConfig.from_hf(hf) == c
    assert c.is_moe and not c.has_indexer
    assert (c.nh, c.nkv, c.n_rep, c.rotary_dim) == (16, 2, 8, 64)
    assert sum(t == "full_attention" for t in c.layer_types) == 12


def test_tiny_preset():
    c = AttnConfig.tiny()
    assert (c.hidden_size, c.nh, c.nkv, c.n_rep, c.head_dim, c.rotary_dim) == (64, 4, 2, 2, 64, 16)
    assert c.has_indexer and (c.indexer_compress_ratio, c.kblk, c.indexer_rotary_dim) == (8, 4, 16)


# ---- bad fields ------------------------------------------------------------------------------
def test_budget_not_a_multiple_of_R():
    with pytest.raises(ValueError, match="indexer_budget"):
        AttnConfig.tiny().replace(indexer_budget=36)


def test_heads_not_divisible():
    with pytest.raises(ValueError, match="num_attention_heads"):
        AttnConfig.tiny().replace(num_attention_heads=5)
    with pytest.raises(ValueError, match="num_attention_heads"):
        AttnConfig.from_hf(_text(num_attention_heads=5))


def test_odd_rotary_dim():
    assert AttnConfig.tiny().replace(partial_rotary_factor=0.2).rotary_dim == 12  # int(12.8)
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        AttnConfig.tiny().replace(partial_rotary_factor=0.3)  # int(19.2) = 19, odd
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        AttnConfig.tiny().replace(partial_rotary_factor=1.5)  # 96 > head_dim 64


@pytest.mark.parametrize(
    "field", ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"]
)
def test_non_positive_sizes(field):
    with pytest.raises(ValueError, match=field):
        AttnConfig.tiny().replace(**{field: 0})


def test_partial_indexer():
    with pytest.raises(ValueError, match="indexer"):
        AttnConfig.tiny().replace(indexer_head_dim=0)


@pytest.mark.parametrize(
    "field, value, exc",
    [
        ("hidden_size", -64, ValueError),
        ("intermediate_size", 0, ValueError),
        ("num_hidden_layers", 0, ValueError),
        ("indexer_budget", -32, ValueError),
        ("hidden_size", True, TypeError),  # True is not a size
        ("head_dim", 64.0, TypeError),
        ("num_key_value_heads", "2", TypeError),
        ("rms_norm_eps", -1e-6, ValueError),
        ("rms_norm_eps", 0.0, ValueError),  # 0 makes an all-zero row 0/0
        ("rms_norm_eps", float("nan"), ValueError),
        ("rope_theta", 0, ValueError),
        ("rope_theta", float("inf"), ValueError),
        ("rope_theta", True, TypeError),
        ("partial_rotary_factor", -0.25, ValueError),
        ("partial_rotary_factor", float("nan"), ValueError),
        ("indexer_head_dim", 15, ValueError),  # indexer rotary width min(16, 15) is odd
        ("layer_types", "full_attention", TypeError),  # a string, not a list of them
        ("layer_types", ("full_attention", "full_attention"), ValueError),  # 2 != num_hidden_layers
        ("model_type", 3, TypeError),
        ("attention_bias", "false", TypeError),
        ("hidden_act", None, TypeError),
        ("extra", [], TypeError),
    ],
)
def test_bad_field_is_named(field, value, exc):
    with pytest.raises(exc, match=rf"^{field}\b"):
        AttnConfig.tiny().replace(**{field: value})


def test_numpy_ints_are_sizes():
    import numpy as np

    c = AttnConfig.tiny().replace(hidden_size=np.int64(64), rope_theta=np.float32(1e4))
    assert type(c.hidden_size) is int and type(c.rope_theta) is float
    assert c == AttnConfig.tiny()


@pytest.mark.parametrize(
    "over, match",
    [
        (dict(hidden_size="96"), "hidden_size must be an integer"),
        (dict(hidden_size=96.5), "hidden_size must be an integer"),
        (dict(num_key_value_heads=False), "num_key_value_heads must be an integer"),
        (dict(rms_norm_eps="1e-6"), "rms_norm_eps must be a number"),
        (dict(rms_norm_eps=-1.0), "rms_norm_eps must be > 0"),
        (dict(rope_parameters=[1e4]), "rope_parameters must be an object"),
        (dict(layer_types="full_attention"), "layer_types must be a list"),
        (dict(layer_types=None, full_attention_interval=0), "full_attention_interval"),
        (dict(attention_bias="false"), "attention_bias must be true or false"),
        (dict(model_type=7), "model_type must be a string"),
        (dict(num_attention_heads=0), "num_attention_heads must be >= 1"),
        (dict(num_hidden_layers=2), "layer_types has 3 entries, num_hidden_layers is 2"),
    ],
)
def test_from_hf_names_the_field(over, match):
    with pytest.raises(ValueError, match=rf"^src: {match}"):
        AttnConfig.from_hf(_text(**over))


def test_from_hf_integral_floats_are_sizes():
    assert AttnConfig.from_hf(_text(hidden_size=96.0)) == AttnConfig.from_hf(_text())


def test_from_hf_file_faults_name_the_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match=r"^config\.json: not valid JSON"):
        AttnConfig.from_hf(tmp_path)
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"^config\.json: must hold a JSON object"):
        AttnConfig.from_hf(p)
    p.write_text(json.dumps({"text_config": [1]}))
    with pytest.raises(ValueError, match=r"^config\.json: text_config must be an object"):
        AttnConfig.from_hf(p)
    p.write_text(json.dumps(_text(head_dim=-8)))
    with pytest.raises(ValueError, match=r"^config\.json: head_dim must be >= 1"):
        AttnConfig.from_hf(p)
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=r"^config\.json: not valid JSON"):
        AttnConfig.from_hf(p)
