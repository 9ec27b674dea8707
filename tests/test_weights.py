"""qwenref.weights: the layer's tensors (weight_shapes) and the checks both layers run on them."""

import numpy as np
import pytest

import qwenref
from qwenref import checkpoint
from qwenref.weights import MLP_WEIGHTS, PROJECTIONS, check_layer_args, check_weights, weight_shapes


def test_weight_shapes():
    cfg = qwenref.AttnConfig.tiny()
    H, hd, ihd = cfg.hidden_size, cfg.head_dim, cfg.indexer_head_dim
    shapes = weight_shapes(cfg)
    assert shapes["self_attn.q_proj.weight"] == (cfg.nh * 2 * hd, H)
    assert shapes["self_attn.o_proj.weight"] == (H, cfg.nh * hd)
    assert shapes["self_attn.indexer.qk_proj.weight"] == ((cfg.indexer_n_heads + 1) * ihd, H)
    assert set(MLP_WEIGHTS) <= set(shapes) and set(PROJECTIONS) <= set(shapes)
    assert not set(MLP_WEIGHTS) & set(weight_shapes(cfg, has_mlp=False))
    assert checkpoint.expected_shapes is weight_shapes  # the name notebooks use
    with pytest.raises(TypeError, match="^cfg"):
        weight_shapes(cfg.to_hf())
    with pytest.raises(TypeError, match="^has_mlp"):
        weight_shapes(cfg, has_mlp="no")


def test_check_weights_and_layer_args():
    cfg = qwenref.AttnConfig.tiny()
    w = {n: np.zeros(s, np.float32) for n, s in weight_shapes(cfg).items()}
    assert check_weights(cfg, w, "q8") is True
    moe = {n: a for n, a in w.items() if n not in MLP_WEIGHTS}
    with pytest.warns(UserWarning, match="no dense MLP"):
        assert check_weights(cfg, moe, "f32") is False
    big = dict(w, **{"self_attn.k_proj.weight": np.full_like(w["self_attn.k_proj.weight"], 1e7)})
    check_weights(cfg, big, "f32")  # fine as float32
    with pytest.raises(ValueError, match=r"^w\['self_attn.k_proj.weight'\]: a group"):
        check_weights(cfg, big, "q8")  # its Q8_0 scale overflows
    check_layer_args("q8", 0.5, None)
    with pytest.raises(ValueError, match="^weight_format"):
        check_layer_args("q4", 0.0, None)
    with pytest.raises(TypeError, match="^n_splits"):
        check_layer_args("f32", 0.0, True)
