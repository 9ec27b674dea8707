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

MoE checkpoints (``qwen3_next``, ``qwen3_5_moe``: experts instead of ``mlp.gate_proj``) load the
attention weights only; ``LayerWeights.has_mlp`` is False and loading says so with a warning.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np

from ._args import bool_arg, int_arg
from .config import AttnConfig
from .weights import MLP_WEIGHTS, weight_shapes

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

_INDEX = "model.safetensors.index.json"
# safetensors dtype tag -> (numpy dtype of the stored bytes, bytes per element): the ones read
_ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}
# bytes per element of the other safetensors dtypes, so any entry's byte range can be checked
_ST_ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "I32": 4,
    "U32": 4,
    "I64": 8,
    "U64": 8,
    **{k: v[1] for k, v in _ST_DTYPES.items()},
}
_MAX_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header
_DTYPE_ALIASES = {
    "float32": "F32",
    "f32": "F32",
    "float16": "F16",
    "f16": "F16",
    "bfloat16": "BF16",
    "bf16": "BF16",
}
# transformers' class-name stems, for the "architectures" entry of written configs
_CLASS_STEMS = {"qwen3_5": "Qwen3_5", "qwen3_5_moe": "Qwen3_5Moe", "qwen3_next": "Qwen3Next"}
# layer prefixes in order of preference when a checkpoint holds several stacks of layers
_KNOWN_PREFIXES = (
    "model.language_model.layers.",
    "model.layers.",
    "language_model.model.layers.",
    "model.text_model.layers.",
)
# what write_random_checkpoint may replace: a directory holding nothing else
_CHECKPOINT_FILE = re.compile(
    r"config\.json|model\.safetensors(\.index\.json)?|"
    r"model-\d+-of-\d+\.safetensors"
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
        mlp = [n for n in MLP_WEIGHTS if n in self]
        if 0 < len(mlp) < len(MLP_WEIGHTS):
            missing = next(n for n in MLP_WEIGHTS if n not in self)
            raise ValueError(
                f"missing tensor {missing!r}: a dense MLP needs all of "
                f"{list(MLP_WEIGHTS)} (a MoE layer has none of them)"
            )
        for name, shape in weight_shapes(cfg, has_mlp=self.has_mlp).items():
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


# ---- safetensors, read side --------------------------------------------------------------------
def _check_entry(fname: str, name: str, meta, data_len: int) -> None:
    """One header entry: well-formed, and its bytes inside the file's data section."""
    if not isinstance(meta, dict) or not {"dtype", "shape", "data_offsets"} <= meta.keys():
        raise ValueError(
            f"{fname}: tensor {name}: header entry must hold dtype, shape and "
            f"data_offsets, got {meta!r}"
        )
    dtype, shape, offs = meta["dtype"], meta["shape"], meta["data_offsets"]

    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if not isinstance(dtype, str):
        raise ValueError(f"{fname}: tensor {name}: dtype must be a string, got {dtype!r}")
    if not isinstance(shape, list) or not all(count(v) for v in shape):
        raise ValueError(f"{fname}: tensor {name}: shape must be a list of sizes, got {shape!r}")
    if not (
        isinstance(offs, list)
        and len(offs) == 2
        and all(count(v) for v in offs)
        and offs[0] <= offs[1]
    ):
        raise ValueError(
            f"{fname}: tensor {name}: data_offsets must be [begin, end] with "
            f"0 <= begin <= end, got {offs!r}"
        )
    if offs[1] > data_len:
        raise ValueError(
            f"{fname}: tensor {name} ends at byte {offs[1]} of the data section, "
            f"which holds {data_len} bytes: the file is truncated"
        )
    size = _ST_ITEMSIZE.get(dtype)
    if size is not None and offs[1] - offs[0] != math.prod(shape) * size:
        raise ValueError(
            f"{fname}: tensor {name}: {offs[1] - offs[0]} bytes stored, shape "
            f"{tuple(shape)} {dtype} needs {math.prod(shape) * size}"
        )


def _read_header(file: Path) -> tuple[dict, int, int]:
    """(tensor name -> {"dtype", "shape", "data_offsets"}, byte offset of the data section,
    file size), every entry checked against the file's size. Faults -> ValueError naming the
    file; a file that is gone is one too (a shard missing from the checkpoint)."""
    fname = file.name
    try:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(
                    f"{fname}: not a safetensors file ({size} bytes, shorter "
                    f"than the 8-byte header length)"
                )
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                raise ValueError(
                    f"{fname}: header length {n} runs past the end of the file "
                    f"({size} bytes): truncated, or not a safetensors file"
                )
            if n > _MAX_HEADER:
                raise ValueError(f"{fname}: not a safetensors file (header length {n})")
            text = f.read(n)
    except (FileNotFoundError, IsADirectoryError) as e:
        raise ValueError(f"{fname}: {e.strerror.lower()} in {file.parent}") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{fname}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{fname}: header must be a JSON object, got a {type(header).__name__}")
    header = dict(header)
    header.pop("__metadata__", None)
    for name, meta in header.items():
        _check_entry(fname, name, meta, size - 8 - n)
    return header, 8 + n, size


def _bf16_to_f32(raw: bytes) -> np.ndarray:
    """bf16 bit patterns -> float32, exactly: a bf16 is the top half of a float32."""
    return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)


def _decode(raw: bytes, dtype: str) -> np.ndarray:
    """Stored bytes -> a new (writeable) float32 array; F64 values beyond float32 become inf,
    which the caller's finiteness check then reports."""
    if dtype == "BF16":
        return _bf16_to_f32(raw)
    with np.errstate(over="ignore"):
        return np.frombuffer(raw, _ST_DTYPES[dtype][0]).astype(np.float32)


def _read_index(index: Path) -> dict:
    """model.safetensors.index.json's weight_map, checked: tensor name -> shard file name."""
    try:
        data = json.loads(index.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{_INDEX}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{_INDEX}: must hold a JSON object, got a {type(data).__name__}")
    if "weight_map" not in data:
        raise ValueError(f"{_INDEX}: has no 'weight_map' (tensor name -> shard file)")
    wm = data["weight_map"]
    if not isinstance(wm, dict):
        raise ValueError(
            f"{_INDEX}: 'weight_map' must be an object (tensor name -> shard "
            f"file), got a {type(wm).__name__}"
        )
    for name, f in wm.items():
        # a plain file name in the checkpoint directory; "../x" would read outside it
        if not isinstance(f, str) or f in ("", ".", "..") or Path(f).name != f:
            raise ValueError(
                f"{_INDEX}: weight_map[{name!r}] must be a shard file name in "
                f"the checkpoint directory, got {f!r}"
            )
    return dict(wm)


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
        header, data_start, _ = _read_header(file)
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
                a = _decode(raw, meta["dtype"]).reshape(meta["shape"])
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

    index = path / _INDEX
    if index.exists():
        weight_map = _read_index(index)
        for f in sorted(set(weight_map.values())):
            if not (path / f).is_file():
                raise ValueError(f"{f}: missing shard: {_INDEX} names it, {path} lacks it")
        headers = {}
        source = _INDEX
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
        if not files:
            raise ValueError(
                f"path: no model.safetensors, {_INDEX} or other *.safetensors file in {path}"
            )
        headers = {f: _read_header(path / f) for f in files}
        weight_map = {}
        for f, (h, _, _) in headers.items():
            for n in h:
                if n in weight_map:
                    raise ValueError(
                        f"{f}: tensor {n} is also in {weight_map[n]}; without "
                        f"{_INDEX} that is ambiguous"
                    )
                weight_map[n] = f
        source = ", ".join(files)

    prefix = _find_prefix(weight_map, full[0], source)

    def header_of(fname):
        if fname not in headers:
            headers[fname] = _read_header(path / fname)
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
                    f"{fname}: missing tensor {full_name} ({_INDEX} says it is in this shard)"
                )
            if meta["dtype"] not in _ST_DTYPES:
                raise ValueError(
                    f"{fname}: tensor {full_name} is stored as {meta['dtype']}; "
                    f"qwenref reads {sorted(_ST_DTYPES)} only"
                )
            if tuple(meta["shape"]) != shape:
                raise ValueError(
                    f"{fname}: tensor {full_name} has shape "
                    f"{tuple(meta['shape'])}, config says {shape}"
                )
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
    hb += b" " * (-len(hb) % 8)  # data section starts 8-byte aligned
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
    for name, shape in weight_shapes(cfg, has_mlp).items():
        if len(shape) == 1:
            out[name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * shape[1] ** -0.5).astype(np.float32)
    return out


def _fresh_dir(parent: Path, prefix: str) -> Path:
    """A new empty directory parent/<prefix><random> (mkdir honours the umask, unlike
    tempfile.mkdtemp's 0700, so the renamed checkpoint gets ordinary permissions)."""
    while True:
        d = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue


def _swap_in(new: Path, target: Path) -> None:
    """Put the complete directory `new` at `target`, replacing what is there only now."""
    if not target.exists() or not any(target.iterdir()):
        os.replace(new, target)  # rename(2) replaces an empty directory in one step
        return
    # A non-empty directory cannot be replaced by one rename: move it aside first, and put it
    # back if the second rename fails, so a failure leaves the old checkpoint in place.
    holder = _fresh_dir(target.parent, f".{target.name}.old-")
    old = holder / "checkpoint"
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        shutil.rmtree(holder, ignore_errors=True)
        raise
    shutil.rmtree(holder, ignore_errors=True)


def write_random_checkpoint(
    path,
    cfg: AttnConfig,
    seed: int = 0,
    dtype: str = "float32",
    shards: int = 1,
    multimodal: bool = False,
) -> Path:
    """Write a Hugging Face-layout checkpoint with random weights for cfg's full-attention layers.

    config.json holds cfg.to_hf() (under "text_config" when multimodal, whose tensors are then
    named model.language_model.layers.N.*); dtype "float32" | "bfloat16" | "float16" (bf16 with
    round to nearest even); shards > 1 writes model-0000k-of-0000n.safetensors and
    model.safetensors.index.json. MoE configs (cfg.is_moe) get no MLP weights. Returns the path.

    Every argument is checked before the disk is touched. The checkpoint is written into a new
    directory next to `path` and renamed into place when complete, so a failure leaves `path`
    as it was. `path` may be new, empty, or an earlier checkpoint (which is replaced); a
    directory holding anything else is refused (ValueError): replacing it would delete that.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if not isinstance(cfg, AttnConfig):
        raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
    seed = int_arg("seed", seed, 0)
    tag = _DTYPE_ALIASES.get(str(dtype))
    if tag is None:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_ALIASES)}, got {dtype!r}")
    shards = int_arg("shards", shards, 1)
    multimodal = bool_arg("multimodal", multimodal)
    full = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    if not full:
        raise ValueError("cfg: layer_types has no 'full_attention' layer")
    if cfg.attention_bias or cfg.hidden_act != "silu":  # load_checkpoint would refuse it
        raise ValueError(
            f"cfg: attention_bias={cfg.attention_bias}, hidden_act="
            f"{cfg.hidden_act!r}: qwenref's layer has no biases and a SwiGLU MLP"
        )
    n_tensors = len(full) * len(weight_shapes(cfg, has_mlp=not cfg.is_moe))
    if shards > n_tensors:
        raise ValueError(f"shards ({shards}) exceeds the number of tensors ({n_tensors})")
    # the real directory, so a symlinked path keeps pointing at the new checkpoint
    target = Path(os.path.realpath(path))
    if target.exists():
        if not target.is_dir():
            raise ValueError(f"path: {target} exists and is not a directory")
        foreign = sorted(
            p.name
            for p in target.iterdir()
            if not (p.is_file() and _CHECKPOINT_FILE.fullmatch(p.name))
        )
        if foreign:
            raise ValueError(
                f"path: {target} holds {foreign[0]!r}"
                f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, "
                f"which is not part of a checkpoint; write into a new or empty "
                f"directory"
            )

    text = cfg.to_hf()
    dtype_name = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[tag]
    top_type = cfg.model_type.removesuffix("_text")
    stem = _CLASS_STEMS.get(top_type, "Qwen3_5")
    if multimodal:
        conf = {
            "architectures": [stem + "ForConditionalGeneration"],
            "model_type": top_type,
            "dtype": dtype_name,
            "text_config": text,
        }
        prefix = "model.language_model.layers."
    else:
        conf = {"architectures": [stem + "ForCausalLM"], "dtype": dtype_name, **text}
        prefix = "model.layers."
    rng = np.random.default_rng(seed)
    tensors = {}
    for i in full:
        for n, a in _random_layer(cfg, rng, has_mlp=not cfg.is_moe).items():
            tensors[f"{prefix}{i}.{n}"] = (tag, _encode(a, tag))
    names = list(tensors)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_dir(target.parent, f".{target.name}.tmp-")
    try:
        (tmp / "config.json").write_text(json.dumps(conf, indent=2) + "\n")
        if shards == 1:
            _write_safetensors(tmp / "model.safetensors", tensors)
        else:
            weight_map, total = {}, 0
            for k, part in enumerate(np.array_split(np.arange(len(names)), shards)):
                fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
                total += _write_safetensors(
                    tmp / fname, {names[j]: tensors[names[j]] for j in part}
                )
                weight_map.update({names[j]: fname for j in part})
            (tmp / _INDEX).write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
                + "\n"
            )
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Path(path)
