"""checkpoint — read Hugging Face Qwen3.5-style checkpoints (and write small random ones).

A checkpoint is a directory holding ``config.json`` (text settings at the top level, or under
``text_config`` for multimodal models such as ``Qwen3_5ForConditionalGeneration``) and
safetensors weights: one ``model.safetensors``, or shards listed in
``model.safetensors.index.json``. The decoder layers' prefix is found from the tensor names:
``model.layers.N.`` (``*ForCausalLM``), ``model.language_model.layers.N.``
(``*ForConditionalGeneration``); multi-token-prediction layers (``mtp.layers.N.``) are ignored.

``load_checkpoint`` reads only config.json, the index and the safetensors headers, and checks
every full-attention layer's tensor names, dtypes, shapes and byte ranges against the config
and the file sizes; ``ckpt.layer(i)`` then reads that one layer's tensors. Stored bf16 / f16 /
f32 all become float32 (exactly: each is a subset of float32). bf16 is decoded from its raw
bytes (``bits << 16``), so no safetensors version or framework with bf16 support is needed.

Damage is reported, never read through: a missing path is a FileNotFoundError; every other
structural fault (missing or invalid config.json or index, a missing shard, a truncated file,
a bad header, a missing tensor, a wrong dtype or shape, NaN or inf in a tensor) is a ValueError
whose message starts with the file (``model-00002-of-00003.safetensors: ...``) and names the
tensor as stored (``model.layers.0.self_attn.v_proj.weight``) or the config field.

The safetensors format itself (headers, dtypes, decoding) is qwenref/safetensors_io.py; writing
random checkpoints, qwenref/checkpoint_write.py (write_random_checkpoint, re-exported here).

MoE checkpoints (``qwen3_next``, ``qwen3_5_moe``: experts instead of ``mlp.gate_proj``) load the
attention weights only; ``LayerWeights.has_mlp`` is False and loading says so with a warning.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np

from .checkpoint_write import write_random_checkpoint
from .config import AttnConfig
from .safetensors_io import INDEX, ST_DTYPES, decode_f32, read_header, read_index
from .weights import MLP_WEIGHTS, mlp_weights_given, weight_shapes

__all__ = [
    "LayerWeights",
    "Checkpoint",
    "load_checkpoint",
    "write_random_checkpoint",
    "expected_shapes",
]

# The layer's tensors are listed in qwenref.weights (weight_shapes); the name this module gave
# them stays, for notebooks and scripts that use it.
expected_shapes = weight_shapes

# layer prefixes in order of preference when a checkpoint holds several stacks of layers
_KNOWN_PREFIXES = (
    "model.language_model.layers.",
    "model.layers.",
    "language_model.model.layers.",
    "model.text_model.layers.",
)


class LayerWeights(dict):
    """float32 numpy arrays under HF names relative to the layer ("self_attn.q_proj.weight"),
    the tensors of qwenref.weights.weight_shapes.

    ``has_mlp`` is False for MoE checkpoints, whose layers carry no dense MLP weights.
    """

    @property
    def has_mlp(self) -> bool:
        return all(n in self for n in MLP_WEIGHTS)

    def validate(self, cfg: AttnConfig) -> "LayerWeights":
        """Raise ValueError naming the first tensor that is missing, mis-shaped, not float32
        or not finite; a dense MLP with one or two of its three weights is an error too."""
        if not isinstance(cfg, AttnConfig):
            raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
        has_mlp = mlp_weights_given(self)  # raises on a partial MLP
        for name, shape in weight_shapes(cfg, has_mlp=has_mlp).items():
            if name not in self:
                raise ValueError(f"missing tensor {name!r}")
            a = self[name]
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                raise ValueError(f"tensor {name!r} must be a float32 numpy array")
            if a.shape != shape:
                raise ValueError(f"tensor {name!r} has shape {a.shape}, config says {shape}")
            if not np.isfinite(a).all():
                raise ValueError(f"tensor {name!r} holds NaN or +-inf values")
        return self


class Checkpoint:
    """An opened checkpoint directory.

    ckpt.config (AttnConfig), ckpt.full_attention_layers (list of int), ckpt.layer(i)
    (LayerWeights, read from disk on each call), ckpt.path, ckpt.prefix (e.g. "model.layers."),
    ckpt.has_mlp (False for MoE checkpoints), ckpt.stored_dtypes (set of safetensors dtype tags).
    """

    def __init__(
        self,
        path: Path,
        config: AttnConfig,
        weight_map: dict,
        prefix: str,
        headers: dict,
        has_mlp: bool,
    ):
        self.path = Path(path)
        self.config = config
        self.prefix = prefix
        self.has_mlp = has_mlp
        self._weight_map = weight_map  # full tensor name -> shard file name
        self._headers = headers  # shard file name -> (header, data offset, size)
        self.full_attention_layers = [
            i for i, t in enumerate(config.layer_types) if t == "full_attention"
        ]
        self.stored_dtypes = set()
        for i in self.full_attention_layers:
            for n in weight_shapes(config, has_mlp):
                full_name = f"{prefix}{i}.{n}"
                self.stored_dtypes.add(headers[weight_map[full_name]][0][full_name]["dtype"])

    def __repr__(self):
        return (
            f"Checkpoint({str(self.path)!r}, prefix={self.prefix!r}, "
            f"full_attention_layers={self.full_attention_layers}, has_mlp={self.has_mlp}, "
            f"stored={sorted(self.stored_dtypes)})"
        )

    def layer(self, i) -> LayerWeights:
        """Layer i's weights as float32; ValueError unless layer i is a full-attention layer.

        The files are read again here: one that has gone, shrunk or changed its header since
        load_checkpoint is a ValueError naming it, as is a tensor holding NaN or inf."""
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"i must be an int, got {type(i).__name__}")
        n_layers = len(self.config.layer_types)
        if not 0 <= i < n_layers:
            raise ValueError(
                f"i: layer {i} is out of range: config.json's layer_types has "
                f"{n_layers} layers; full-attention layers are "
                f"{self.full_attention_layers}"
            )
        if i not in self.full_attention_layers:
            raise ValueError(
                f"i: layer {i} is {self.config.layer_types[i]!r}, not a "
                f"full-attention layer; full-attention layers are "
                f"{self.full_attention_layers}"
            )
        names = list(weight_shapes(self.config, self.has_mlp))
        by_file: dict = {}
        for n in names:
            by_file.setdefault(self._weight_map[f"{self.prefix}{i}.{n}"], []).append(n)
        out = LayerWeights()
        for fname, ns in by_file.items():
            out.update(self._read(fname, [f"{self.prefix}{i}.{n}" for n in ns], ns))
        return LayerWeights((n, out[n]) for n in names).validate(self.config)

    def _read(self, fname: str, full_names: list, short_names: list) -> dict:
        file = self.path / fname
        header, data_start, _ = read_header(file)
        old_header, old_start, _ = self._headers[fname]
        res = {}
        with open(file, "rb") as fh:
            for f, s in zip(full_names, short_names):
                meta = header.get(f)
                if meta != old_header[f] or data_start != old_start:
                    raise ValueError(
                        f"{fname}: changed on disk since load_checkpoint (tensor "
                        f"{f} moved or is gone); load the checkpoint again"
                    )
                b0, b1 = meta["data_offsets"]
                fh.seek(data_start + b0)
                raw = fh.read(b1 - b0)
                if len(raw) != b1 - b0:  # the file shrank while being read
                    raise ValueError(
                        f"{fname}: tensor {f} is cut short: {len(raw)} of {b1 - b0} bytes"
                    )
                a = decode_f32(raw, meta["dtype"]).reshape(meta["shape"])
                if not np.isfinite(a).all():
                    bad = int(np.count_nonzero(~np.isfinite(a)))
                    raise ValueError(f"{fname}: tensor {f} holds {bad} NaN or +-inf values")
                res[s] = a
        return res


# ---- loading ---------------------------------------------------------------------------------
def _find_prefix(names, first_full: int, source: str) -> str:
    """The prefix P such that P + "<first_full>.self_attn.q_proj.weight" is a tensor."""
    pat = re.compile(rf"^(.*?layers\.){first_full}\.self_attn\.q_proj\.weight$")
    found = sorted(
        {m.group(1) for n in names if (m := pat.match(n)) and not m.group(1).startswith("mtp")}
    )
    if not found:
        raise ValueError(
            f"{source}: no tensor '<prefix>layers.{first_full}.self_attn."
            f"q_proj.weight' (layer {first_full} is the first full-attention "
            f"layer of config.json)"
        )
    for p in _KNOWN_PREFIXES:
        if p in found:
            return p
    if len(found) > 1:
        raise ValueError(f"{source}: several layer stacks look like the text decoder: {found}")
    return found[0]


def load_checkpoint(path) -> Checkpoint:
    """Open a Hugging Face checkpoint directory (config.json + safetensors, single or sharded).

    Checks names, shapes, dtypes and byte ranges of every full-attention layer's tensors
    against the config and the files (headers only: no weights are read here). A missing path
    is a FileNotFoundError; every other fault is a ValueError naming the file and the tensor
    or config field.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"path: no such directory: {path}")
    if not path.is_dir():
        raise ValueError(f"path: {path} is not a directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"config.json: missing from {path}")
    cfg = AttnConfig.from_hf(path / "config.json")
    if cfg.attention_bias:
        raise ValueError(
            "config.json: attention_bias is true, but qwenref's layer has no projection biases"
        )
    if cfg.hidden_act != "silu":
        raise ValueError(
            f"config.json: hidden_act is {cfg.hidden_act!r}; qwenref's MLP is SwiGLU ('silu')"
        )
    full = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    if not full:
        raise ValueError("config.json: layer_types has no 'full_attention' layer")

    index = path / INDEX
    if index.exists():
        weight_map = read_index(index)
        for f in sorted(set(weight_map.values())):
            if not (path / f).is_file():
                raise ValueError(f"{f}: missing shard: {INDEX} names it, {path} lacks it")
        headers = {}
        source = INDEX
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
        if not files:
            raise ValueError(
                f"path: no model.safetensors, {INDEX} or other *.safetensors file in {path}"
            )
        headers = {f: read_header(path / f) for f in files}
        weight_map = {}
        for f, (h, _, _) in headers.items():
            for n in h:
                if n in weight_map:
                    raise ValueError(
                        f"{f}: tensor {n} is also in {weight_map[n]}; without "
                        f"{INDEX} that is ambiguous"
                    )
                weight_map[n] = f
        source = ", ".join(files)

    prefix = _find_prefix(weight_map, full[0], source)

    def header_of(fname):
        if fname not in headers:
            headers[fname] = read_header(path / fname)
        return headers[fname][0]

    # dense MLP present? (absent in MoE layers, which hold mlp.experts.* / mlp.gate.weight)
    mlp_present = {i: [n for n in MLP_WEIGHTS if f"{prefix}{i}.{n}" in weight_map] for i in full}
    has_mlp = any(mlp_present.values())
    if not has_mlp:
        moe_hint = cfg.is_moe or any(
            f"{prefix}{full[0]}.mlp.experts." in n or n == f"{prefix}{full[0]}.mlp.gate.weight"
            for n in weight_map
        )
        if not moe_hint:
            raise ValueError(
                f"{source}: missing tensor {prefix}{full[0]}.mlp.gate_proj.weight "
                f"(model_type {cfg.model_type!r} is not a MoE model)"
            )
        warnings.warn(
            f"{path}: MoE checkpoint (model_type {cfg.model_type!r}): no dense MLP, "
            f"loading attention weights only (LayerWeights.has_mlp is False)",
            stacklevel=2,
        )

    shapes = weight_shapes(cfg, has_mlp)
    for i in full:
        for n, shape in shapes.items():
            full_name = f"{prefix}{i}.{n}"
            if full_name not in weight_map:
                raise ValueError(f"{source}: missing tensor {full_name}")
            fname = weight_map[full_name]
            meta = header_of(fname).get(full_name)
            if meta is None:
                raise ValueError(
                    f"{fname}: missing tensor {full_name} ({INDEX} says it is in this shard)"
                )
            if meta["dtype"] not in ST_DTYPES:
                raise ValueError(
                    f"{fname}: tensor {full_name} is stored as {meta['dtype']}; "
                    f"qwenref reads {sorted(ST_DTYPES)} only"
                )
            if tuple(meta["shape"]) != shape:
                raise ValueError(
                    f"{fname}: tensor {full_name} has shape "
                    f"{tuple(meta['shape'])}, config says {shape}"
                )
    return Checkpoint(path, cfg, weight_map, prefix, headers, has_mlp)
