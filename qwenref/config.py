"""AttnConfig: the shape of one Qwen3.5-style full-attention layer, named as Hugging Face names it.

Field names follow transformers' ``Qwen3_5TextConfig``; the indexer fields are qwenref's own.
``from_hf`` reads a config dict or a checkpoint directory, including multimodal configs whose
text settings sit under ``text_config``.

Every field is checked when the config is built (and by ``replace``): a wrong type is a
TypeError, a bad value a ValueError, each naming the field. ``from_hf`` turns both into a
ValueError that also names where the config came from (``config.json: ...`` or ``src: ...``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["AttnConfig"]

# sizes that must be >= 1, and the indexer's, which are all 0 (no indexer) or all >= 1
_SIZES = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "num_hidden_layers",
)
_INDEXER = ("indexer_n_heads", "indexer_head_dim", "indexer_compress_ratio", "indexer_budget")


def _field_int(name, v, lo):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return int(v)


def _field_float(name, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        raise TypeError(f"{name} must be a float, got {type(v).__name__} {v!r}")
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return v


@dataclass(frozen=True)
class AttnConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e4
    partial_rotary_factor: float = 0.25
    indexer_n_heads: int = 0
    indexer_head_dim: int = 0
    indexer_compress_ratio: int = 0
    indexer_budget: int = 0
    num_hidden_layers: int = 1
    layer_types: tuple = ("full_attention",)
    model_type: str = "qwen3_5_text"
    attention_bias: bool = False
    hidden_act: str = "silu"
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        def put(name, v):  # frozen: normalized values go in this way
            object.__setattr__(self, name, v)

        for name in _SIZES:
            put(name, _field_int(name, getattr(self, name), 1))
        for name in _INDEXER:
            put(name, _field_int(name, getattr(self, name), 0))
        for name in ("rms_norm_eps", "rope_theta", "partial_rotary_factor"):
            put(name, _field_float(name, getattr(self, name)))
        # eps > 0: with eps = 0 an all-zero row normalizes to 0/0
        if self.rms_norm_eps <= 0:
            raise ValueError(f"rms_norm_eps must be > 0, got {self.rms_norm_eps!r}")
        if self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta!r}")
        if not 0 <= self.partial_rotary_factor <= 1:
            raise ValueError(
                f"partial_rotary_factor must be in [0, 1], got {self.partial_rotary_factor!r}"
            )
        lt = self.layer_types
        if (
            isinstance(lt, str)
            or not isinstance(lt, (list, tuple))
            or not all(isinstance(t, str) for t in lt)
        ):
            raise TypeError(f"layer_types must be a list or tuple of str, got {lt!r}")
        put("layer_types", tuple(lt))
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries, "
                f"num_hidden_layers is {self.num_hidden_layers}"
            )
        for name in ("model_type", "hidden_act"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a str, got {getattr(self, name)!r}")
        if not isinstance(self.attention_bias, (bool, np.bool_)):
            raise TypeError(f"attention_bias must be a bool, got {self.attention_bias!r}")
        put("attention_bias", bool(self.attention_bias))
        if not isinstance(self.extra, dict):
            raise TypeError(f"extra must be a dict, got {type(self.extra).__name__}")

        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.rotary_dim % 2 or self.rotary_dim > self.head_dim:
            raise ValueError(
                f"partial_rotary_factor {self.partial_rotary_factor} gives "
                f"rotary_dim {self.rotary_dim}: must be even and <= head_dim "
                f"{self.head_dim}"
            )
        if self.has_indexer:
            R, B = self.indexer_compress_ratio, self.indexer_budget
            if min(self.indexer_n_heads, self.indexer_head_dim, R, B) <= 0:
                raise ValueError(
                    "indexer_n_heads, indexer_head_dim, indexer_compress_ratio and "
                    "indexer_budget must all be positive when an indexer is "
                    "configured"
                )
            if B % R:
                raise ValueError(
                    f"indexer_budget ({B}) must be a multiple of indexer_compress_ratio ({R})"
                )
            if self.indexer_rotary_dim % 2:
                raise ValueError(
                    f"indexer_head_dim ({self.indexer_head_dim}) gives the indexer "
                    f"rotary width min(rotary_dim {self.rotary_dim}, "
                    f"indexer_head_dim) = {self.indexer_rotary_dim}: must be even"
                )

    # ---- derived sizes ---------------------------------------------------------------
    @property
    def nh(self) -> int:
        return self.num_attention_heads

    @property
    def nkv(self) -> int:
        return self.num_key_value_heads

    @property
    def n_rep(self) -> int:
        """q heads per kv head (GQA group size): q head h reads kv head h // n_rep."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def has_indexer(self) -> bool:
        return any(
            (
                self.indexer_n_heads,
                self.indexer_head_dim,
                self.indexer_compress_ratio,
                self.indexer_budget,
            )
        )

    @property
    def kblk(self) -> int:
        """Blocks a selective row keeps (0 without an indexer)."""
        return self.indexer_budget // self.indexer_compress_ratio if self.has_indexer else 0

    @property
    def indexer_rotary_dim(self) -> int:
        """The indexer's rotary width: the attention's, capped at the indexer head width."""
        return min(self.rotary_dim, self.indexer_head_dim)

    @property
    def is_moe(self) -> bool:
        return "moe" in self.model_type or "next" in self.model_type

    def replace(self, **kw) -> "AttnConfig":
        return dataclasses.replace(self, **kw)

    # ---- presets ---------------------------------------------------------------------
    @classmethod
    def tiny(cls) -> "AttnConfig":
        """Small enough for CPU tests and notebooks; keeps the real model's ratios (GQA 2,
        partial rotary 0.25) and an indexer that turns selective after 5 blocks of 8 tokens."""
        return cls(
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            intermediate_size=128,
            rope_theta=1e4,
            partial_rotary_factor=0.25,
            indexer_n_heads=2,
            indexer_head_dim=32,
            indexer_compress_ratio=8,
            indexer_budget=32,
        )

    @classmethod
    def qwen35_27b(cls) -> "AttnConfig":
        """Qwen3.5-27B's full-attention layer (24 q heads, 4 kv heads, head_dim 256), with the
        indexer setting of the benchmarks (R = 64, budget 2048, 8 heads x 128)."""
        return cls(
            hidden_size=5120,
            num_attention_heads=24,
            num_key_value_heads=4,
            head_dim=256,
            intermediate_size=17408,
            rope_theta=1e7,
            partial_rotary_factor=0.25,
            indexer_n_heads=8,
            indexer_head_dim=128,
            indexer_compress_ratio=64,
            indexer_budget=2048,
            num_hidden_layers=64,
            layer_types=tuple(
                "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(64)
            ),
        )

    @classmethod
    def qwen3_next_80b(cls) -> "AttnConfig":
        """Qwen3-Next-80B-A3B's full-attention layer (16 q heads, 2 kv heads, head_dim 256);
        a MoE model, so qwenref runs its attention only."""
        return cls(
            hidden_size=2048,
            num_attention_heads=16,
            num_key_value_heads=2,
            head_dim=256,
            intermediate_size=5120,
            rope_theta=1e7,
            partial_rotary_factor=0.25,
            num_hidden_layers=48,
            model_type="qwen3_next",
            layer_types=tuple(
                "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)
            ),
        )

    @classmethod
    def from_hf(cls, src) -> "AttnConfig":
        """From a transformers config dict, or a directory / path holding config.json.

        A path that does not exist is a FileNotFoundError; a directory without config.json,
        a file that is not a JSON object, and any missing or bad field are a ValueError that
        starts with the file ("config.json: ...") or "src: " for a dict, and names the field.
        """
        where = "src"
        if isinstance(src, (str, os.PathLike)):
            p = Path(src)
            if not p.exists():
                raise FileNotFoundError(f"src: no such file or directory: {p}")
            p = p / "config.json" if p.is_dir() else p
            if not p.is_file():
                raise ValueError(f"src: no config.json in {p.parent}")
            where = p.name
            try:
                src = json.loads(p.read_bytes().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError(f"{where}: not valid JSON ({e}) in {p}") from None
            if not isinstance(src, dict):
                raise ValueError(
                    f"{where}: must hold a JSON object, got a {type(src).__name__} ({p})"
                )
        elif not isinstance(src, dict):
            raise TypeError(f"src must be a dict or a path, got {type(src).__name__}")
        try:
            return cls._from_dict(src)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from None

    @classmethod
    def _from_dict(cls, src: dict) -> "AttnConfig":
        top_type = src.get("model_type", "")
        text = src.get("text_config")
        if text is not None and not isinstance(text, dict):
            raise ValueError(f"text_config must be an object, got {type(text).__name__}")
        d = dict(text or src)
        rp_key = "rope_parameters" if d.get("rope_parameters") else "rope_scaling"
        rp = d.get(rp_key) or {}
        if not isinstance(rp, dict):
            raise ValueError(f"{rp_key} must be an object, got {type(rp).__name__}")

        def get(key, default=None, required=False):
            """d[key] (None counts as absent); the RoPE keys are read from rp first."""
            if key in ("rope_theta", "partial_rotary_factor") and rp.get(key) is not None:
                return rp[key]
            if d.get(key) is not None:
                return d[key]
            if required:
                raise ValueError(f"config lacks {key!r}")
            return default

        def integer(key, default=None, required=False):
            v = get(key, default, required)
            # JSON writers may emit 64.0 for 64; 64.5, "64" and true are not sizes
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{key} must be an integer, got {v!r}")
            return v

        def number(key, default):
            v = get(key, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{key} must be a number, got {v!r}")
            return float(v)

        def string(key, default):
            v = get(key, default)
            if not isinstance(v, str):
                raise ValueError(f"{key} must be a string, got {v!r}")
            return v

        nh = integer("num_attention_heads", required=True)
        hidden = integer("hidden_size", required=True)
        layer_types = get("layer_types")
        if layer_types is not None and (
            not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types)
        ):
            raise ValueError(f"layer_types must be a list of strings, got {layer_types!r}")
        n_layers = integer("num_hidden_layers", len(layer_types) if layer_types else 1)
        if layer_types is None:
            interval = integer("full_attention_interval", 4)
            if interval < 1:
                raise ValueError(f"full_attention_interval must be >= 1, got {interval}")
            layer_types = [
                "linear_attention" if (i + 1) % interval else "full_attention"
                for i in range(n_layers)
            ]
        bias = get("attention_bias", False)
        if not isinstance(bias, bool):
            raise ValueError(f"attention_bias must be true or false, got {bias!r}")
        if not nh:
            raise ValueError("num_attention_heads must be >= 1, got 0")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(
            hidden_size=hidden,
            num_attention_heads=nh,
            num_key_value_heads=integer("num_key_value_heads", nh),
            head_dim=integer("head_dim", hidden // nh),
            intermediate_size=integer("intermediate_size", 4 * hidden),
            rms_norm_eps=number("rms_norm_eps", 1e-6),
            rope_theta=number("rope_theta", 1e4),
            partial_rotary_factor=number("partial_rotary_factor", 0.25),
            indexer_n_heads=integer("indexer_n_heads", 0),
            indexer_head_dim=integer("indexer_head_dim", 0),
            indexer_compress_ratio=integer("indexer_compress_ratio", 0),
            indexer_budget=integer("indexer_budget", 0),
            num_hidden_layers=n_layers,
            layer_types=tuple(layer_types),
            model_type=string("model_type", top_type or "qwen3_5_text"),
            attention_bias=bias,
            hidden_act=string("hidden_act", "silu"),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_hf(self) -> dict:
        """A Qwen3_5TextConfig-style dict (what write_random_checkpoint saves)."""
        d = {
            "model_type": self.model_type,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "rms_norm_eps": self.rms_norm_eps,
            "num_hidden_layers": self.num_hidden_layers,
            "layer_types": list(self.layer_types),
            "hidden_act": self.hidden_act,
            "attention_bias": self.attention_bias,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": self.rope_theta,
                "partial_rotary_factor": self.partial_rotary_factor,
            },
        }
        if self.has_indexer:
            d.update(
                indexer_n_heads=self.indexer_n_heads,
                indexer_head_dim=self.indexer_head_dim,
                indexer_compress_ratio=self.indexer_compress_ratio,
                indexer_budget=self.indexer_budget,
            )
        return d
