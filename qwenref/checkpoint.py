"""checkpoint — read Hugging Face Qwen3.5-style checkpoints (and write small random ones).

A checkpoint is a directory holding ``config.json`` (text settings at the top level, or under
``text_config`` for multimodal models such as ``Qwen3_5ForConditionalGeneration``) and
safetensors weights: one ``model.safetensors``, or shards listed in
``model.safetensors.index.json``. The decoder layers' prefix is found from the tensor names:
``model.layers.N.`` (``*ForCausalLM``), ``model.language_model.layers.N.``
(``*ForConditionalGeneration``); multi-token-prediction layers (``mtp.layers.N.``) are ignored.

``load_checkpoint`` reads only the safetensors headers and checks every full-attention layer's
tensor names and shapes against the config; ``ckpt.layer(i)`` then reads that one layer's
tensors. Stored bf16 / f16 / f32 all become float32 (exactly: each is a subset of float32).
bf16 is decoded from its raw bytes (``bits << 16``), so no safetensors version or framework
with bf16 support is needed.

MoE checkpoints (``qwen3_next``, ``qwen3_5_moe``: experts instead of ``mlp.gate_proj``) load the
attention weights only; ``LayerWeights.has_mlp`` is False and loading says so with a warning.
"""
from __future__ import annotations

import json
import math
import re
import struct
import warnings
from pathlib import Path

import numpy as np

from .config import AttnConfig

__all__ = ["LayerWeights", "Checkpoint", "load_checkpoint", "write_random_checkpoint",
           "expected_shapes"]

_MLP_NAMES = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
# safetensors dtype tag -> (numpy dtype of the stored bytes, bytes per element)
_ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}
_DTYPE_ALIASES = {"float32": "F32", "f32": "F32", "float16": "F16", "f16": "F16",
                  "bfloat16": "BF16", "bf16": "BF16"}
# transformers' class-name stems, for the "architectures" entry of written configs
_CLASS_STEMS = {"qwen3_5": "Qwen3_5", "qwen3_5_moe": "Qwen3_5Moe", "qwen3_next": "Qwen3Next"}
# layer prefixes in order of preference when a checkpoint holds several stacks of layers
_KNOWN_PREFIXES = ("model.language_model.layers.", "model.layers.",
                   "language_model.model.layers.", "model.text_model.layers.")


def expected_shapes(cfg: AttnConfig, has_mlp: bool = True) -> dict:
    """The tensors of one full-attention layer, name (relative to the layer) -> shape."""
    H, hd = cfg.hidden_size, cfg.head_dim
    shapes = {
        "input_layernorm.weight": (H,),
        "post_attention_layernorm.weight": (H,),
        "self_attn.q_proj.weight": (cfg.nh * 2 * hd, H),      # per head [q_h | gate_h]
        "self_attn.k_proj.weight": (cfg.nkv * hd, H),
        "self_attn.v_proj.weight": (cfg.nkv * hd, H),
        "self_attn.o_proj.weight": (H, cfg.nh * hd),
        "self_attn.q_norm.weight": (hd,),
        "self_attn.k_norm.weight": (hd,),
    }
    if has_mlp:
        I = cfg.intermediate_size
        shapes.update({"mlp.gate_proj.weight": (I, H), "mlp.up_proj.weight": (I, H),
                       "mlp.down_proj.weight": (H, I)})
    if cfg.has_indexer:
        ihd = cfg.indexer_head_dim
        shapes.update({"self_attn.indexer.qk_proj.weight": ((cfg.indexer_n_heads + 1) * ihd, H),
                       "self_attn.indexer.q_norm.weight": (ihd,),
                       "self_attn.indexer.k_norm.weight": (ihd,)})
    return shapes


class LayerWeights(dict):
    """float32 numpy arrays under HF names relative to the layer ("self_attn.q_proj.weight").

    ``has_mlp`` is False for MoE checkpoints, whose layers carry no dense MLP weights.
    """

    @property
    def has_mlp(self) -> bool:
        return all(n in self for n in _MLP_NAMES)

    def validate(self, cfg: AttnConfig) -> "LayerWeights":
        """Raise ValueError naming the first tensor that is missing, mis-shaped or not float32."""
        for name, shape in expected_shapes(cfg, has_mlp=self.has_mlp).items():
            if name not in self:
                raise ValueError(f"missing tensor {name!r}")
            a = self[name]
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                raise ValueError(f"tensor {name!r} must be a float32 numpy array")
            if a.shape != shape:
                raise ValueError(f"tensor {name!r} has shape {a.shape}, config says {shape}")
        return self


# ---- safetensors, read side --------------------------------------------------------------------
def _read_header(file: Path) -> tuple[dict, int]:
    """(tensor name -> {"dtype", "shape", "data_offsets"}, byte offset of the data section)."""
    with open(file, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{file}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 2**20:
            raise ValueError(f"{file}: not a safetensors file (header length {n})")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def _bf16_to_f32(raw: bytes) -> np.ndarray:
    """bf16 bit patterns -> float32, exactly: a bf16 is the top half of a float32."""
    return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)


class Checkpoint:
    """An opened checkpoint directory.

    ckpt.config (AttnConfig), ckpt.full_attention_layers (list of int), ckpt.layer(i)
    (LayerWeights, read from disk on each call), ckpt.path, ckpt.prefix (e.g. "model.layers."),
    ckpt.has_mlp (False for MoE checkpoints), ckpt.stored_dtypes (set of safetensors dtype tags).
    """

    def __init__(self, path: Path, config: AttnConfig, weight_map: dict, prefix: str,
                 headers: dict, has_mlp: bool):
        self.path = Path(path)
        self.config = config
        self.prefix = prefix
        self.has_mlp = has_mlp
        self._weight_map = weight_map          # full tensor name -> shard file name
        self._headers = headers                # shard file name -> (header, data offset)
        self.full_attention_layers = [i for i, t in enumerate(config.layer_types)
                                      if t == "full_attention"]
        self.stored_dtypes = set()
        for i in self.full_attention_layers:
            for n in expected_shapes(config, has_mlp):
                full_name = f"{prefix}{i}.{n}"
                self.stored_dtypes.add(headers[weight_map[full_name]][0][full_name]["dtype"])

    def __repr__(self):
        return (f"Checkpoint({str(self.path)!r}, prefix={self.prefix!r}, "
                f"full_attention_layers={self.full_attention_layers}, has_mlp={self.has_mlp}, "
                f"stored={sorted(self.stored_dtypes)})")

    def layer(self, i) -> LayerWeights:
        """Layer i's weights as float32; ValueError unless layer i is a full-attention layer."""
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"i must be an int, got {type(i).__name__}")
        if i not in self.full_attention_layers:
            kind = (repr(self.config.layer_types[i])
                    if 0 <= i < len(self.config.layer_types) else "out of range")
            raise ValueError(f"i: layer {i} is {kind}, not a full-attention layer; "
                             f"full-attention layers are {self.full_attention_layers}")
        names = list(expected_shapes(self.config, self.has_mlp))
        by_file: dict = {}
        for n in names:
            by_file.setdefault(self._weight_map[f"{self.prefix}{i}.{n}"], []).append(n)
        out = LayerWeights()
        for fname, ns in by_file.items():
            out.update(self._read(fname, [f"{self.prefix}{i}.{n}" for n in ns], ns))
        return LayerWeights((n, out[n]) for n in names).validate(self.config)

    def _read(self, fname: str, full_names: list, short_names: list) -> dict:
        header, data_start = self._headers[fname]
        file = self.path / fname
        res = {}
        plain = [(f, s) for f, s in zip(full_names, short_names) if header[f]["dtype"] != "BF16"]
        if plain:
            from safetensors import safe_open
            with safe_open(str(file), framework="numpy") as st:
                for f, s in plain:
                    res[s] = np.ascontiguousarray(st.get_tensor(f), dtype=np.float32)
        bf16 = [(f, s) for f, s in zip(full_names, short_names) if header[f]["dtype"] == "BF16"]
        if not bf16:
            return res
        with open(file, "rb") as fh:       # numpy has no bf16: decode the raw bytes
            for f, s in bf16:
                meta = header[f]
                b0, b1 = meta["data_offsets"]
                fh.seek(data_start + b0)
                raw = fh.read(b1 - b0)
                res[s] = _bf16_to_f32(raw).reshape(meta["shape"])
        return res


# ---- loading ---------------------------------------------------------------------------------
def _find_prefix(names, first_full: int) -> str:
    """The prefix P such that P + "<first_full>.self_attn.q_proj.weight" is a tensor."""
    pat = re.compile(rf"^(.*?layers\.){first_full}\.self_attn\.q_proj\.weight$")
    found = sorted({m.group(1) for n in names if (m := pat.match(n))
                    and not m.group(1).startswith("mtp")})
    if not found:
        raise ValueError(f"no tensor '<prefix>layers.{first_full}.self_attn.q_proj.weight' "
                         f"(layer {first_full} is the first full-attention layer)")
    for p in _KNOWN_PREFIXES:
        if p in found:
            return p
    if len(found) > 1:
        raise ValueError(f"several layer stacks look like the text decoder: {found}")
    return found[0]


def load_checkpoint(path) -> Checkpoint:
    """Open a Hugging Face checkpoint directory (config.json + safetensors, single or sharded).

    Checks names, shapes and dtypes of every full-attention layer's tensors against the config
    (headers only: no weights are read here). ValueError names the offending tensor.
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"path: {path} is not a directory")
    if not (path / "config.json").exists():
        raise ValueError(f"path: no config.json in {path}")
    cfg = AttnConfig.from_hf(path)
    if cfg.attention_bias:
        raise ValueError("config: attention_bias=True, but qwenref's layer has no projection "
                         "biases")
    full = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    if not full:
        raise ValueError("config: layer_types has no 'full_attention' layer")

    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = dict(json.loads(index.read_text())["weight_map"])
        files = sorted(set(weight_map.values()))
        for f in files:
            if not (path / f).exists():
                raise ValueError(f"{index.name} names shard {f!r}, which is not in {path}")
        headers = {}
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
        if not files:
            raise ValueError(f"path: no model.safetensors(.index.json) or *.safetensors in {path}")
        headers = {f: _read_header(path / f) for f in files}
        weight_map = {n: f for f, (h, _) in headers.items() for n in h}

    prefix = _find_prefix(weight_map, full[0])

    def header_of(fname):
        if fname not in headers:
            headers[fname] = _read_header(path / fname)
        return headers[fname][0]

    # dense MLP present? (absent in MoE layers, which hold mlp.experts.* / mlp.gate.weight)
    mlp_present = {i: [n for n in _MLP_NAMES if f"{prefix}{i}.{n}" in weight_map] for i in full}
    has_mlp = any(mlp_present.values())
    if not has_mlp:
        moe_hint = cfg.is_moe or any(f"{prefix}{full[0]}.mlp.experts." in n or
                                     n == f"{prefix}{full[0]}.mlp.gate.weight"
                                     for n in weight_map)
        if not moe_hint:
            raise ValueError(f"missing tensor {prefix}{full[0]}.mlp.gate_proj.weight "
                             f"(model_type {cfg.model_type!r} is not a MoE model)")
        warnings.warn(f"{path}: MoE checkpoint (model_type {cfg.model_type!r}): no dense MLP, "
                      f"loading attention weights only (LayerWeights.has_mlp is False)",
                      stacklevel=2)

    shapes = expected_shapes(cfg, has_mlp)
    for i in full:
        for n, shape in shapes.items():
            full_name = f"{prefix}{i}.{n}"
            if full_name not in weight_map:
                raise ValueError(f"missing tensor {full_name}")
            meta = header_of(weight_map[full_name]).get(full_name)
            if meta is None:
                raise ValueError(f"missing tensor {full_name} (the index names "
                                 f"{weight_map[full_name]!r}, which lacks it)")
            if meta["dtype"] not in _ST_DTYPES:
                raise ValueError(f"tensor {full_name} is stored as {meta['dtype']}; qwenref "
                                 f"reads {sorted(_ST_DTYPES)} only")
            if tuple(meta["shape"]) != shape:
                raise ValueError(f"tensor {full_name} has shape {tuple(meta['shape'])}, "
                                 f"config says {shape}")
            b0, b1 = meta["data_offsets"]
            if b1 - b0 != math.prod(shape) * _ST_DTYPES[meta["dtype"]][1]:
                raise ValueError(f"tensor {full_name}: {b1 - b0} bytes stored, shape {shape} "
                                 f"{meta['dtype']} needs "
                                 f"{math.prod(shape) * _ST_DTYPES[meta['dtype']][1]}")
    return Checkpoint(path, cfg, weight_map, prefix, headers, has_mlp)


# ---- writing ---------------------------------------------------------------------------------
def _write_safetensors(file: Path, tensors: dict) -> int:
    """Write {name: (dtype tag, numpy array holding the stored bytes)}; returns data bytes."""
    header, blobs, off = {}, [], 0
    for name, (tag, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": tag, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)                  # data section starts 8-byte aligned
    with open(file, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    return off


def _encode(a: np.ndarray, tag: str) -> np.ndarray:
    """float32 array -> the array of stored values for dtype tag (bf16: RNE bit patterns)."""
    if tag == "F32":
        return a.astype("<f4")
    if tag == "F16":
        return a.astype("<f2")
    import ml_dtypes
    return a.astype(ml_dtypes.bfloat16).view("<u2")


def _random_layer(cfg: AttnConfig, rng: np.random.Generator, has_mlp: bool) -> dict:
    """One layer's random float32 weights; projections ~ N(0, fan_in^-1) keep activations O(1),
    norm weights ~ N(0, 0.1^2) are far from zero so a `w` vs `1 + w` slip shows."""
    out = {}
    for name, shape in expected_shapes(cfg, has_mlp).items():
        if len(shape) == 1:
            out[name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * shape[1] ** -0.5).astype(np.float32)
    return out


def write_random_checkpoint(path, cfg: AttnConfig, seed: int = 0, dtype: str = "float32",
                            shards: int = 1, multimodal: bool = False) -> Path:
    """Write a Hugging Face-layout checkpoint with random weights for cfg's full-attention layers.

    config.json holds cfg.to_hf() (under "text_config" when multimodal, whose tensors are then
    named model.language_model.layers.N.*); dtype "float32" | "bfloat16" | "float16" (bf16 with
    round to nearest even); shards > 1 writes model-0000k-of-0000n.safetensors and
    model.safetensors.index.json. MoE configs (cfg.is_moe) get no MLP weights. Returns the path.
    """
    tag = _DTYPE_ALIASES.get(str(dtype))
    if tag is None:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_ALIASES)}, got {dtype!r}")
    if not isinstance(shards, (int, np.integer)) or shards < 1:
        raise ValueError(f"shards must be a positive int, got {shards!r}")
    if not isinstance(cfg, AttnConfig):
        raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    full = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    if not full:
        raise ValueError("cfg: layer_types has no 'full_attention' layer")

    text = cfg.to_hf()
    dtype_name = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[tag]
    top_type = cfg.model_type.removesuffix("_text")
    stem = _CLASS_STEMS.get(top_type, "Qwen3_5")
    if multimodal:
        conf = {"architectures": [stem + "ForConditionalGeneration"], "model_type": top_type,
                "dtype": dtype_name, "text_config": text}
        prefix = "model.language_model.layers."
    else:
        conf = {"architectures": [stem + "ForCausalLM"], "dtype": dtype_name, **text}
        prefix = "model.layers."
    (path / "config.json").write_text(json.dumps(conf, indent=2) + "\n")

    rng = np.random.default_rng(seed)
    tensors = {}
    for i in full:
        for n, a in _random_layer(cfg, rng, has_mlp=not cfg.is_moe).items():
            tensors[f"{prefix}{i}.{n}"] = (tag, _encode(a, tag))
    names = list(tensors)
    if shards > len(names):
        raise ValueError(f"shards ({shards}) exceeds the number of tensors ({len(names)})")
    for stale in list(path.glob("model*.safetensors")) + [path / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)   # a previous write must not leave shards behind
    if shards == 1:
        _write_safetensors(path / "model.safetensors", tensors)
        return path
    weight_map, total = {}, 0
    for k, part in enumerate(np.array_split(np.arange(len(names)), shards)):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        total += _write_safetensors(path / fname, {names[j]: tensors[names[j]] for j in part})
        weight_map.update({names[j]: fname for j in part})
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    return path
