"""AttnConfig: the shape of one Qwen3.5-style full-attention layer, named as Hugging Face names it.

Field names follow transformers' ``Qwen3_5TextConfig``; the indexer fields are qwenref's own
(after the cherenkov seed). ``from_hf`` reads a config dict or a checkpoint directory, including
multimodal configs whose text settings sit under ``text_config``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["AttnConfig"]


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
        for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})")
        if self.rotary_dim % 2 or self.rotary_dim > self.head_dim:
            raise ValueError(f"partial_rotary_factor {self.partial_rotary_factor} gives rotary_dim "
                             f"{self.rotary_dim}: must be even and <= head_dim {self.head_dim}")
        if self.has_indexer:
            R, B = self.indexer_compress_ratio, self.indexer_budget
            if min(self.indexer_n_heads, self.indexer_head_dim, R, B) <= 0:
                raise ValueError("indexer_n_heads, indexer_head_dim, indexer_compress_ratio and "
                                 "indexer_budget must all be positive when an indexer is configured")
            if B % R:
                raise ValueError(f"indexer_budget ({B}) must be a multiple of "
                                 f"indexer_compress_ratio ({R})")
        object.__setattr__(self, "layer_types", tuple(self.layer_types))

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
        return any((self.indexer_n_heads, self.indexer_head_dim, self.indexer_compress_ratio,
                    self.indexer_budget))

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
        return cls(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   intermediate_size=128, rope_theta=1e4, partial_rotary_factor=0.25,
                   indexer_n_heads=2, indexer_head_dim=32, indexer_compress_ratio=8,
                   indexer_budget=32)

    @classmethod
    def qwen35_27b(cls) -> "AttnConfig":
        """Qwen3.5-27B's full-attention layer (24 q heads, 4 kv heads, head_dim 256), with the
        indexer setting of the benchmarks (R = 64, budget 2048, 8 heads x 128)."""
        return cls(hidden_size=5120, num_attention_heads=24, num_key_value_heads=4, head_dim=256,
                   intermediate_size=17408, rope_theta=1e7, partial_rotary_factor=0.25,
                   indexer_n_heads=8, indexer_head_dim=128, indexer_compress_ratio=64,
                   indexer_budget=2048, num_hidden_layers=64,
                   layer_types=tuple("full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                                     for i in range(64)))

    @classmethod
    def qwen3_next_80b(cls) -> "AttnConfig":
        """Qwen3-Next-80B-A3B's full-attention layer (16 q heads, 2 kv heads, head_dim 256);
        a MoE model, so qwenref runs its attention only."""
        return cls(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                   intermediate_size=5120, rope_theta=1e7, partial_rotary_factor=0.25,
                   num_hidden_layers=48, model_type="qwen3_next",
                   layer_types=tuple("full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                                     for i in range(48)))

    @classmethod
    def from_hf(cls, src) -> "AttnConfig":
        """From a transformers config dict, or a directory / path holding config.json."""
        if isinstance(src, (str, Path)):
            p = Path(src)
            p = p / "config.json" if p.is_dir() else p
            if not p.exists():
                raise ValueError(f"src: no config.json at {p}")
            src = json.loads(p.read_text())
        if not isinstance(src, dict):
            raise TypeError(f"src must be a dict or a path, got {type(src).__name__}")
        top_type = src.get("model_type", "")
        d = dict(src.get("text_config") or src)
        rp = d.get("rope_parameters") or d.get("rope_scaling") or {}

        def pick(key, default):
            if key in rp and rp[key] is not None:
                return rp[key]
            if d.get(key) is not None:
                return d[key]
            return default

        try:
            nh = int(d["num_attention_heads"])
            hidden = int(d["hidden_size"])
        except KeyError as e:
            raise ValueError(f"src: config lacks {e.args[0]!r}") from None
        n_layers = int(d.get("num_hidden_layers", 1))
        layer_types = d.get("layer_types")
        if layer_types is None:
            interval = int(d.get("full_attention_interval", 4))
            layer_types = ["linear_attention" if (i + 1) % interval else "full_attention"
                           for i in range(n_layers)]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(
            hidden_size=hidden,
            num_attention_heads=nh,
            num_key_value_heads=int(d.get("num_key_value_heads", nh)),
            head_dim=int(d.get("head_dim") or hidden // nh),
            intermediate_size=int(d.get("intermediate_size", 4 * hidden)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=float(pick("rope_theta", 1e4)),
            partial_rotary_factor=float(pick("partial_rotary_factor", 0.25)),
            indexer_n_heads=int(d.get("indexer_n_heads", 0)),
            indexer_head_dim=int(d.get("indexer_head_dim", 0)),
            indexer_compress_ratio=int(d.get("indexer_compress_ratio", 0)),
            indexer_budget=int(d.get("indexer_budget", 0)),
            num_hidden_layers=n_layers,
            layer_types=tuple(layer_types),
            model_type=str(d.get("model_type") or top_type or "qwen3_5_text"),
            attention_bias=bool(d.get("attention_bias", False)),
            hidden_act=str(d.get("hidden_act", "silu")),
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
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta,
                                "partial_rotary_factor": self.partial_rotary_factor},
        }
        if self.has_indexer:
            d.update(indexer_n_heads=self.indexer_n_heads, indexer_head_dim=self.indexer_head_dim,
                     indexer_compress_ratio=self.indexer_compress_ratio,
                     indexer_budget=self.indexer_budget)
        return d
