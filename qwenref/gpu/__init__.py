"""qwenref.gpu — the golden model's stages as CUDA kernels, run by CuPy, under the same names.

Importing this package needs neither CuPy nor a GPU; the first call of a GPU function does, and
raises a RuntimeError that says what is missing. Stage functions take an optional ``out=`` (and
similar) so tests can poison outputs before a launch.
"""

from __future__ import annotations

import importlib

from ._runtime import available, kernel_source, kernels_dir
from .wht import wht as wht  # eager: the submodule shares the function's name, so bind the function

# public name -> submodule that defines it (resolved lazily, so no CuPy import happens here)
_EXPORTS = {
    "rms_norm": "norm",
    "add_rms_norm": "norm",
    "qk_norm_rope": "rope",
    "wht": "wht",
    "q8_quantize": "kvcache",
    "q8_dequantize": "kvcache",
    "turbo_quantize": "kvcache",
    "turbo_dequantize": "kvcache",
    "bf16_bits": "kvcache",
    "tq_codebook": "kvcache",
    "tq_quantize": "kvcache",
    "tq_dequantize": "kvcache",
    "KVCache": "kvcache",
    "attn_partials": "attention",
    "attn_combine": "attention",
    "decode_attention": "attention",
    "plan": "attention",
    "AttentionPlan": "attention",
    "indexer_queries": "indexer",
    "update_block_keys": "indexer",
    "block_scores": "indexer",
    "select_rows": "indexer",
    "linear": "gemv",
    "gemv_q8": "gemv",
    "gemv_f32": "gemv",
    "q8_weight": "gemv",
    "FullAttentionLayer": "layer",
}

__all__ = ["available", "kernel_source", "kernels_dir", *_EXPORTS]


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'qwenref.gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__ (and never see a submodule)
    return value
