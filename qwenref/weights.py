"""weights — the tensors of one full-attention layer, and the checks a layer runs on them.

A layer's weights are float32 arrays under Hugging Face's names relative to the layer
("self_attn.q_proj.weight"); weight_shapes(cfg) lists them with their shapes. The checkpoint
reader, the random checkpoint writer, and the golden and GPU layers all read this one list:

  input_layernorm.weight, post_attention_layernorm.weight     [H]
  self_attn.q_proj.weight    [nh · 2 · hd, H]    per head [q_h | gate_h]
  self_attn.k_proj.weight, self_attn.v_proj.weight            [nkv · hd, H]
  self_attn.o_proj.weight    [H, nh · hd]
  self_attn.q_norm.weight, self_attn.k_norm.weight            [hd]
  mlp.gate_proj.weight, mlp.up_proj.weight [I, H]; mlp.down_proj.weight [H, I]
                             (dense MLP; MoE checkpoints have none of the three)
  self_attn.indexer.qk_proj.weight [(inh + 1) · ihd, H]  (indexer queries, then its key)
  self_attn.indexer.q_norm.weight, self_attn.indexer.k_norm.weight  [ihd]   (cfg.has_indexer)

check_layer_args and check_weights are what golden.FullAttentionLayer and gpu.FullAttentionLayer
run before they keep anything: bad input is refused whole, naming the argument or the weight.
"""

import warnings
from collections.abc import Mapping

import numpy as np

from ._args import bool_arg, check_scales, f32_array, sparse_arg
from .config import AttnConfig
from .layout import Q8_GROUP, Q8_LIMIT

__all__ = [
    "WEIGHT_FORMATS",
    "PROJECTIONS",
    "MLP_WEIGHTS",
    "mlp_weights_given",
    "weight_shapes",
    "check_layer_args",
    "check_weights",
]

WEIGHT_FORMATS = ("f32", "q8")  # q8: every projection Q8_0-quantized by rows (input dim)
# the weights a q8 layer quantizes: every matrix; the norm weights stay float32
PROJECTIONS = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "self_attn.indexer.qk_proj.weight",
)
MLP_WEIGHTS = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


def weight_shapes(cfg: AttnConfig, has_mlp: bool = True) -> dict:
    """The tensors of one full-attention layer, name (relative to the layer) -> shape."""
    if not isinstance(cfg, AttnConfig):
        raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
    has_mlp = bool_arg("has_mlp", has_mlp)
    H, hd = cfg.hidden_size, cfg.head_dim
    shapes = {
        "input_layernorm.weight": (H,),
        "post_attention_layernorm.weight": (H,),
        "self_attn.q_proj.weight": (cfg.nh * 2 * hd, H),  # per head [q_h | gate_h]
        "self_attn.k_proj.weight": (cfg.nkv * hd, H),
        "self_attn.v_proj.weight": (cfg.nkv * hd, H),
        "self_attn.o_proj.weight": (H, cfg.nh * hd),
        "self_attn.q_norm.weight": (hd,),
        "self_attn.k_norm.weight": (hd,),
    }
    if has_mlp:
        I = cfg.intermediate_size
        shapes.update(
            {
                "mlp.gate_proj.weight": (I, H),
                "mlp.up_proj.weight": (I, H),
                "mlp.down_proj.weight": (H, I),
            }
        )
    if cfg.has_indexer:
        ihd = cfg.indexer_head_dim
        shapes.update(
            {
                "self_attn.indexer.qk_proj.weight": ((cfg.indexer_n_heads + 1) * ihd, H),
                "self_attn.indexer.q_norm.weight": (ihd,),
                "self_attn.indexer.k_norm.weight": (ihd,),
            }
        )
    return shapes


def check_layer_args(weight_format, sparse_v, n_splits):
    """A layer's settings besides cfg and w: weight_format one of WEIGHT_FORMATS, sparse_v a
    float in [0, 1), n_splits None or an int >= 1 (TypeError / ValueError naming it)."""
    if not isinstance(weight_format, str):
        raise TypeError(f"weight_format must be 'f32' or 'q8', got {type(weight_format).__name__}")
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format must be 'f32' or 'q8', got {weight_format!r}")
    sparse_arg(sparse_v)
    if n_splits is not None:
        if isinstance(n_splits, (bool, np.bool_)) or not isinstance(n_splits, (int, np.integer)):
            raise TypeError(
                f"n_splits must be None or a positive int, got {type(n_splits).__name__}"
            )
        if n_splits < 1:
            raise ValueError(f"n_splits must be None or a positive int, got {n_splits!r}")


def mlp_weights_given(names, missing="missing tensor"):
    """True when `names` (a mapping or set of weight names) holds the dense MLP's three weights,
    False when it holds none of them (a MoE layer); a ValueError starting `missing` and naming
    the absent weight when it holds only some."""
    given = [n for n in MLP_WEIGHTS if n in names]
    if 0 < len(given) < len(MLP_WEIGHTS):
        absent = next(n for n in MLP_WEIGHTS if n not in names)
        raise ValueError(
            f"{missing} {absent!r}: a dense MLP needs all of "
            f"{list(MLP_WEIGHTS)} (a MoE layer has none of them)"
        )
    return bool(given)


def check_weights(cfg, w, weight_format):
    """cfg and weights, checked whole: a missing weight, a wrong shape or dtype, NaN or inf, a
    dense MLP with only some of its three weights -> ValueError / TypeError naming the weight;
    a q8 layer needs every projection's input dim to be a multiple of 32 and every Q8_0 scale
    to fit float16. -> has_mlp (warns when there is no MLP)."""
    if not isinstance(cfg, AttnConfig):
        raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
    if cfg.attention_bias:
        raise ValueError("cfg.attention_bias is True, but the layer has no projection biases")
    if cfg.hidden_act != "silu":
        raise ValueError(
            f"cfg.hidden_act is {cfg.hidden_act!r}; the layer's MLP is SwiGLU ('silu')"
        )
    if not isinstance(w, Mapping):
        raise TypeError(
            f"w must be a mapping of weight name -> array (LayerWeights), got {type(w).__name__}"
        )
    has_mlp = mlp_weights_given(w, "w: missing weight")
    for name, shape in weight_shapes(cfg, has_mlp).items():
        if name not in w:
            raise ValueError(f"w: missing weight {name!r}")
        if tuple(np.shape(w[name])) != shape:
            raise ValueError(f"w[{name!r}] has shape {np.shape(w[name])}, config says {shape}")
        a = f32_array(f"w[{name!r}]", w[name])
        if weight_format == "q8" and name in PROJECTIONS:
            if a.shape[-1] % Q8_GROUP:
                raise ValueError(
                    f"w[{name!r}]: input dim {a.shape[-1]} is not a multiple of "
                    f"{Q8_GROUP}, so it cannot be Q8_0-quantized"
                )
            # the scales q8_quantize would compute (amax / 127 as float16), checked for inf
            amax = np.abs(a.reshape(a.shape[0], -1, Q8_GROUP)).max(axis=-1)
            with np.errstate(over="ignore"):
                check_scales(f"w[{name!r}]", (amax / np.float32(127)).astype(np.float16), Q8_LIMIT)
    if not has_mlp:
        warnings.warn(
            "FullAttentionLayer: no dense MLP weights (MoE checkpoint?): running "
            "attention only, y = x + attention(x)",
            stacklevel=3,
        )
    return has_mlp
