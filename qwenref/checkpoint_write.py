"""checkpoint_write — write a small Hugging Face-layout checkpoint with random weights
(write_random_checkpoint; importable from qwenref and qwenref.checkpoint too): config.json from
an AttnConfig, the full-attention layers' tensors in one safetensors file or in shards with
their index, stored as float32, float16 or bfloat16.

Every argument is checked before the disk is touched, and the checkpoint is written into a new
directory beside the target and renamed into place when complete, so a failure leaves the disk
as it was (docs/bad-input.md).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from pathlib import Path

import numpy as np

from ._args import bool_arg, int_arg
from .config import AttnConfig
from .safetensors_io import INDEX, encode, write_safetensors
from .weights import weight_shapes

__all__ = ["write_random_checkpoint"]

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
# what write_random_checkpoint may replace: a directory holding nothing else
_CHECKPOINT_FILE = re.compile(
    r"config\.json|model\.safetensors(\.index\.json)?|"
    r"model-\d+-of-\d+\.safetensors"
)


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
            tensors[f"{prefix}{i}.{n}"] = (tag, encode(a, tag))
    names = list(tensors)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_dir(target.parent, f".{target.name}.tmp-")
    try:
        (tmp / "config.json").write_text(json.dumps(conf, indent=2) + "\n")
        if shards == 1:
            write_safetensors(tmp / "model.safetensors", tensors)
        else:
            weight_map, total = {}, 0
            for k, part in enumerate(np.array_split(np.arange(len(names)), shards)):
                fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
                total += write_safetensors(tmp / fname, {names[j]: tensors[names[j]] for j in part})
                weight_map.update({names[j]: fname for j in part})
            (tmp / INDEX).write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
                + "\n"
            )
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Path(path)
