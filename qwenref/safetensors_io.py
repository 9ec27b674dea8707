"""safetensors_io — the safetensors file format as qwenref's checkpoints use it: a file's header
read and checked entry by entry against the file's size, stored bf16 / f16 / f32 / f64 bytes
decoded to float32, a sharded checkpoint's index read, and files written (float32 arrays encoded
as F32, F16 or BF16). Every fault is a ValueError whose message starts with the file's name
(docs/bad-input.md, "Checkpoint faults"). qwenref.checkpoint reads checkpoints with it,
qwenref.checkpoint_write writes them.

bf16 is decoded from its raw bytes (bits << 16), so no safetensors version or framework with
bf16 support is needed to read; writing bf16 uses ml_dtypes (round to nearest even).
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np

__all__ = [
    "INDEX",
    "ST_DTYPES",
    "read_header",
    "read_index",
    "decode_f32",
    "bf16_to_f32",
    "write_safetensors",
    "encode",
]

INDEX = "model.safetensors.index.json"  # a sharded checkpoint's tensor name -> shard file
# safetensors dtype tag -> (numpy dtype of the stored bytes, bytes per element): the ones read
ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}
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
    **{k: v[1] for k, v in ST_DTYPES.items()},
}
_MAX_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header


# ---- reading -------------------------------------------------------------------------------------
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


def read_header(file: Path) -> tuple[dict, int, int]:
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


def bf16_to_f32(raw: bytes) -> np.ndarray:
    """bf16 bit patterns -> float32, exactly: a bf16 is the top half of a float32."""
    return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)


def decode_f32(raw: bytes, dtype: str) -> np.ndarray:
    """Stored bytes -> a new (writeable) float32 array; F64 values beyond float32 become inf,
    which the caller's finiteness check then reports."""
    if dtype == "BF16":
        return bf16_to_f32(raw)
    with np.errstate(over="ignore"):
        return np.frombuffer(raw, ST_DTYPES[dtype][0]).astype(np.float32)


def read_index(index: Path) -> dict:
    """model.safetensors.index.json's weight_map, checked: tensor name -> shard file name."""
    try:
        data = json.loads(index.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{INDEX}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{INDEX}: must hold a JSON object, got a {type(data).__name__}")
    if "weight_map" not in data:
        raise ValueError(f"{INDEX}: has no 'weight_map' (tensor name -> shard file)")
    wm = data["weight_map"]
    if not isinstance(wm, dict):
        raise ValueError(
            f"{INDEX}: 'weight_map' must be an object (tensor name -> shard "
            f"file), got a {type(wm).__name__}"
        )
    for name, f in wm.items():
        # a plain file name in the checkpoint directory; "../x" would read outside it
        if not isinstance(f, str) or f in ("", ".", "..") or Path(f).name != f:
            raise ValueError(
                f"{INDEX}: weight_map[{name!r}] must be a shard file name in "
                f"the checkpoint directory, got {f!r}"
            )
    return dict(wm)


# ---- writing -------------------------------------------------------------------------------------
def write_safetensors(file: Path, tensors: dict) -> int:
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


def encode(a: np.ndarray, tag: str) -> np.ndarray:
    """float32 array -> the array of stored values for dtype tag (bf16: RNE bit patterns)."""
    if tag == "F32":
        return a.astype("<f4")
    if tag == "F16":
        return a.astype("<f2")
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16).view("<u2")
