"""layout — how a KV cache stores K and V: the formats' constants, the cache kinds, the stored
arrays of each kind and their bytes per token.

This is the one specification that the golden cache (qwenref.golden.kvcache), the GPU cache
(qwenref.gpu.kvcache, whose kernels read the same arrays) and the byte counts of the benchmarks
read. The formats themselves (how a value becomes a code) are defined by the golden quantizers.

Cache kinds (CACHE_KINDS). A cache has two sides, K and V; side_kinds(kind) names their formats:
  "f32", "bf16", "q8", "turbo8", "turbo4", "turbo3", "turbo2"   both sides in that format
  "bf16k-turbo4v", "bf16k-turbo3v", "bf16k-turbo2v"            K in bf16, V in turbo4/3/2
  "tq4", "tq3", "tq2"                                          both sides in tq-b (b = 4, 3, 2)
LADDER_KINDS are the kinds every rung of the GPU attention ladder reads (v0, split, v1 and,
but for f32, the tensor-core mma rung); the tq kinds (TQ_KINDS) decode on the mma rung alone.

A turbo or tq side is stored in a rotated domain (the rotation spreads outlier dims over the
row before the quantizer sees it): turbo stores the WHT of the row, y = wht(x); tq first flips
the signs of a fixed pattern, y = wht(s ⊙ x) with s = tq_signs(hd). rotation_signs(side, hd)
gives the pattern of either (all +1 for turbo), so attention on a rotated side reads
q' = wht(s ⊙ q) against the stored keys and turns an output of stored values back into
s ⊙ wht(o).

Stored arrays of one side (side_arrays), head-major: kv head, then token slot, then the head's
values, so one head's tokens are one contiguous run:
  side "f32":    {"data": float32 [nkv, max_t, hd]}
  side "bf16":   {"data": uint16  [nkv, max_t, hd]}            (bf16 bit patterns)
  side "q8":     {"q": int8 [nkv, max_t, hd], "d": float16 [nkv, max_t, hd // 32]}
  side "turboN": {"codes": uint8 [nkv, max_t, hd // 16, 2 * N],
                  "d": float16 [nkv, max_t, hd // 16]}
  side "tqB":    {"codes": uint8 [nkv, max_t, hd * B // 8], "gamma": float16 [nkv, max_t]}
  indexer (cfg.has_indexer, indexer_arrays): idx_keys float32 [max_t, ihd] (raw keys),
                             blk_keys float32 [max_t // R, ihd] (block keys, normed + roped)

q8 is llama.cpp's Q8_0: groups of 32 values, an int8 code each and one float16 scale. turboN
quantizes groups of 16 values to N-bit codes, packed little-endian into 2 * N bytes, with one
float16 scale. tq-b codes each of the hd values of a vector by a B-bit index into a Lloyd–Max
codebook (code i at bits [B·i, B·i + B) of the vector's hd·B/8 little-endian bytes), with one
float16 scale γ per vector. Bytes per token and kv head (side_bytes_per_head) follow from the
arrays: at hd 256, f32 1024, bf16 512, q8 256 + 16 = 272, turbo4 16 * (8 + 2) = 160, turbo2 96,
tq4 128 + 2 = 130, tq3 98, tq2 66.

The sign pattern (tq_signs): s_i = +1 when fmix32(i) is even, -1 when it is odd, where fmix32
is MurmurHash3's 32-bit finalizer on the index i (uint32 arithmetic, every product mod 2**32):
    h ^= h >> 16;  h *= 0x85EBCA6B;  h ^= h >> 13;  h *= 0xC2B2AE35;  h ^= h >> 16
A fixed integer function, so no random state is involved, the pattern is the same on every
machine and numpy version, and a kernel computes it from the index alone; tq_signs(n) is the
first n entries of one sequence, so every head_dim shares a prefix. The first 16:
+ - + - - - + + - - + + - + - -.
"""

import numpy as np

from ._args import int_arg

__all__ = [
    "Q8_GROUP",
    "TURBO_GROUP",
    "Q8_LIMIT",
    "turbo_limit",
    "TQ_GAMMA_LIMIT",
    "CACHE_KINDS",
    "LADDER_KINDS",
    "TQ_KINDS",
    "SIDE_KINDS",
    "side_kinds",
    "turbo_bits",
    "tq_bits",
    "tq_signs",
    "rotation_signs",
    "side_arrays",
    "indexer_arrays",
    "blocks_completing",
    "side_bytes_per_head",
    "bytes_per_token",
]

Q8_GROUP = 32  # values per Q8_0 block (llama.cpp QK8_0)
TURBO_GROUP = 16  # values per turbo group (one float16 scale each)

# The largest max |x| of a group whose float16 scale stays finite: the scale amax / 127
# rounds to inf from 65520 on. The quantizers refuse a group at or past it.
Q8_LIMIT = 65520.0 * 127


def turbo_limit(bits):
    """max |x| of a group whose turbo scale amax / L (L = (2**bits - 1) / 2) stays finite in
    float16 (below 65520)."""
    return 65520.0 * ((1 << bits) - 1) / 2


# A tq scale γ at or past this rounds to inf in float16: the quantizer refuses such a vector.
TQ_GAMMA_LIMIT = 65520.0

LADDER_KINDS = (
    "f32",
    "bf16",
    "q8",
    "turbo8",
    "turbo4",
    "turbo3",
    "turbo2",
    "bf16k-turbo4v",
    "bf16k-turbo3v",
    "bf16k-turbo2v",
)
TQ_KINDS = ("tq4", "tq3", "tq2")
CACHE_KINDS = LADDER_KINDS + TQ_KINDS
SIDE_KINDS = ("f32", "bf16", "q8", "turbo8", "turbo4", "turbo3", "turbo2") + TQ_KINDS


def side_kinds(kind):
    """Cache kind -> (k side kind, v side kind); a kind not in CACHE_KINDS is refused
    (TypeError for a non-str, ValueError otherwise, naming `kind`)."""
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, one of {CACHE_KINDS}, got {type(kind).__name__}")
    if kind not in CACHE_KINDS:
        raise ValueError(f"kind must be one of {CACHE_KINDS}, got {kind!r}")
    if kind.startswith("bf16k-"):
        return "bf16", kind[len("bf16k-") : -1]  # 'bf16k-turbo4v'
    return kind, kind


def _check_side(side):
    if side not in SIDE_KINDS:
        raise ValueError(f"side must be one of {SIDE_KINDS}, got {side!r}")


def turbo_bits(side):
    """Bits per code of a turbo side ("turbo4" -> 4); 0 for the other sides."""
    _check_side(side)
    return int(side[len("turbo") :]) if side.startswith("turbo") else 0


def tq_bits(side):
    """Bits per code of a tq side ("tq4" -> 4); 0 for the other sides."""
    _check_side(side)
    return int(side[len("tq") :]) if side.startswith("tq") else 0


def tq_signs(head_dim):
    """The tq sign pattern s: float32 [head_dim] of +-1, s_i = +1 iff fmix32(i) is even (the
    rule in the module docstring). head_dim: an int >= 1 (TypeError / ValueError naming it)."""
    n = int_arg("head_dim", head_dim, 1)
    h = np.arange(n, dtype=np.uint32)  # uint32 arrays wrap mod 2**32, as the hash needs
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return np.where(h & np.uint32(1), np.float32(-1), np.float32(1))


def rotation_signs(side, hd):
    """The sign pattern a rotated side applies before its WHT, float32 [hd], read-only: all +1
    for turbo (y = wht(x)), tq_signs(hd) for tq (y = wht(s ⊙ x)); None for a side stored
    unrotated (f32, bf16, q8)."""
    _check_side(side)
    if side.startswith("turbo"):
        s = np.ones(hd, np.float32)
    elif side.startswith("tq"):
        s = tq_signs(hd)
    else:
        return None
    s.flags.writeable = False
    return s


def side_arrays(side, nkv, max_t, hd):
    """The arrays one side stores: {name: (shape, numpy dtype)}, data first, then its scales
    (the table in the module docstring). Both caches allocate exactly these."""
    _check_side(side)
    rows = (nkv, max_t)
    if side == "f32":
        return {"data": (rows + (hd,), np.dtype(np.float32))}
    if side == "bf16":
        return {"data": (rows + (hd,), np.dtype(np.uint16))}
    if side == "q8":
        return {
            "q": (rows + (hd,), np.dtype(np.int8)),
            "d": (rows + (hd // Q8_GROUP,), np.dtype(np.float16)),
        }
    if side.startswith("tq"):
        return {
            "codes": (rows + (hd * tq_bits(side) // 8,), np.dtype(np.uint8)),
            "gamma": (rows, np.dtype(np.float16)),
        }
    n = turbo_bits(side)
    return {
        "codes": (rows + (hd // TURBO_GROUP, 2 * n), np.dtype(np.uint8)),
        "d": (rows + (hd // TURBO_GROUP,), np.dtype(np.float16)),
    }


def indexer_arrays(max_t, ihd, R):
    """The indexer state a cache stores: {name: (shape, numpy dtype)} for idx_keys (one raw
    key per token) and blk_keys (one key per complete block of R tokens)."""
    return {
        "idx_keys": ((max_t, ihd), np.dtype(np.float32)),
        "blk_keys": ((max_t // R, ihd), np.dtype(np.float32)),
    }


def blocks_completing(t0, t1, R, n_tokens, n_block_rows):
    """The indexer blocks that complete at a position in [t0, t1): int64 [t1 // R - t0 // R].

    Block j (tokens jR .. (j+1)R - 1) completes at token (j+1)R - 1, so j runs over
    [t0 // R, t1 // R). The positions must be cached (t1 <= n_tokens) and every block must have
    a row in blk_keys (n_block_rows of them); a ValueError names what does not fit.
    """
    if t1 < t0:
        raise ValueError(f"t1 ({t1}) must be >= t0 ({t0})")
    if t1 > n_tokens:
        raise ValueError(f"t1 ({t1}) must be <= len(cache) ({n_tokens})")
    blocks = np.arange(t0 // R, t1 // R, dtype=np.int64)
    if blocks.size and blocks[-1] >= n_block_rows:
        raise ValueError(
            f"cache.blk_keys has {n_block_rows} rows, block {int(blocks[-1])} does not fit"
        )
    return blocks


def side_bytes_per_head(side, hd):
    """Bytes one token of one kv head takes in a side, scales included: the side's arrays
    at one head and one token slot."""
    return sum(
        int(np.prod(shape)) * dtype.itemsize
        for shape, dtype in side_arrays(side, 1, 1, hd).values()
    )


def bytes_per_token(kind, nkv, hd):
    """Bytes of K + V storage per token of a cache of this kind (all kv heads, scales
    included): what one appended token adds, and what attention reads per visible token."""
    k_side, v_side = side_kinds(kind)
    return nkv * (side_bytes_per_head(k_side, hd) + side_bytes_per_head(v_side, hd))
