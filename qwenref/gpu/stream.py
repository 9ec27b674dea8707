"""The floor of one launch: kernels_cuda/stream.cu's stream_read reads a buffer once and does
nothing else, so its time for n bytes is the best any kernel that must read n bytes in one
launch can do at that size (the copy rate less the launch, ramp and tail). Not a stage of the
layer: qwenref.timing.floor_us times it, and the bench and qwenref.dev.tune_attention record it
beside the decode it bounds.

    out = stream_read(buf)                  # one launch; uint32 [grid], one word per CTA
    xor_words(out) == xor_words(buf)        # every byte was read (host check)
"""

from __future__ import annotations

import numpy as np

from .._args import int_arg
from ._runtime import check_array, cupy, kernel, out_array

__all__ = ["stream_read", "grid_size", "xor_words", "checked_buffers"]

CTAS_PER_SM = 16  # 4 per SM leave HBM idle at tens of MB (stream.cu)
_NT = 256  # STREAM_NT in the .cu


def grid_size():
    return CTAS_PER_SM * int(cupy().cuda.Device().attributes["MultiProcessorCount"])


def stream_read(buf, out=None):
    """Read every byte of buf (a C-contiguous cupy array, nbytes a multiple of 16, 16-byte
    aligned) in one launch of grid_size() CTAs. Returns out, uint32 [grid_size()]: the XOR of
    each CTA's 16-byte words."""
    check_array("buf", buf)
    if buf.nbytes % 16 or buf.data.ptr % 16:
        raise ValueError(
            f"buf must be 16-byte aligned with nbytes a multiple of 16, got "
            f"{buf.nbytes} bytes at offset {buf.data.ptr % 16}"
        )
    grid = grid_size()
    out = out_array("out", out, (grid,), np.uint32)
    kernel("stream", "stream_read")((grid,), (_NT,), (buf, np.int64(buf.nbytes // 16), out))
    return out


def xor_words(a):
    """XOR of an array's uint32 words (host or cupy array; nbytes a multiple of 4)."""
    h = a.get() if hasattr(a, "get") else np.asarray(a)
    return int(np.bitwise_xor.reduce(np.ascontiguousarray(h).view(np.uint32).ravel()))


def checked_buffers(nbytes, n):
    """n random buffers of nbytes (rounded down to 16) with their stream_read outputs, [(buf,
    out), ...], each launch checked to have read every byte (RuntimeError otherwise): the inputs
    of a floor timing that rotates over them (n copies > the L2 keep the reads in HBM).
    nbytes: an int >= 16; n: an int >= 1."""
    nbytes = int_arg("nbytes", nbytes, 16)
    n = int_arg("n", n, 1)
    cp = cupy()
    pairs = []
    for _ in range(n):
        buf = cp.random.randint(-(2**31), 2**31 - 1, size=nbytes // 16 * 4, dtype=cp.int32)
        out = stream_read(buf)
        if xor_words(out) != xor_words(buf):
            raise RuntimeError("stream_read: the XOR of its output is not the buffer's")
        pairs.append((buf, out))
    return pairs
