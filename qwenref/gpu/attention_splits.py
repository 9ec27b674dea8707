"""attention_splits — how many splits per row fill one wave of CTAs on this device: the split
counts of the v1 (auto_n_splits) and mma (mma_n_splits) partials, from the compiled kernel's
registers and shared memory and the device's limits per SM (DeviceLimits: read once per device
by device_limits, or given, so the arithmetic runs without a GPU too). qwenref.gpu.attention_plan
calls them for a plan without a split count; both names are importable from
qwenref.gpu.attention.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from .._args import int_arg as _int_arg
from ._runtime import cupy

__all__ = [
    "DeviceLimits",
    "device_limits",
    "auto_n_splits",
    "mma_n_splits",
    "MAX_SPLITS",
    "CHUNK",
    "V1_NWARP",
]

MAX_SPLITS = 1024  # the combine keeps one weight per split in shared memory
CHUNK = 32  # split bounds are whole 32-token chunks (golden)
# A CTA an SM beyond two (tq's kernels fit three) pays only when each CTA gets enough tiles: on
# an H100, 3 CTAs an SM ran tq 3-9 % faster at 128k tokens (21 tiles a CTA) and 6-10 % slower at
# 32k (5 tiles a CTA; 8 at two an SM) than 2 (docs/tuning-log.md)
EXTRA_CTA_TILES = 16
V1_NWARP = 4  # ATTN_NWARP in attention_v1.cu (threads per partials CTA = 128)


class DeviceLimits(NamedTuple):
    """A device's limits (cudaDevAttr<...>, CuPy's Device.attributes) that decide how many CTAs
    run at once and whether an mma kernel can launch at all."""

    sm_count: int  # MultiProcessorCount
    regs_per_sm: int  # MaxRegistersPerMultiprocessor
    threads_per_sm: int  # MaxThreadsPerMultiProcessor
    blocks_per_sm: int  # MaxBlocksPerMultiprocessor
    smem_per_sm: int  # MaxSharedMemoryPerMultiprocessor
    smem_per_block_optin: int  # MaxSharedMemoryPerBlockOptin: dynamic + static, one block
    smem_reserved_per_block: int  # ReservedSharedMemoryPerBlock (the runtime's, 1 KB)


@functools.lru_cache(maxsize=None)
def _device_limits(device_id):
    a = cupy().cuda.Device(device_id).attributes
    return DeviceLimits(
        int(a["MultiProcessorCount"]),
        int(a["MaxRegistersPerMultiprocessor"]),
        int(a["MaxThreadsPerMultiProcessor"]),
        int(a["MaxBlocksPerMultiprocessor"]),
        int(a["MaxSharedMemoryPerMultiprocessor"]),
        int(a["MaxSharedMemoryPerBlockOptin"]),
        int(a.get("ReservedSharedMemoryPerBlock", 1024)),
    )


def device_limits():
    """The current device's DeviceLimits (read once per device)."""
    return _device_limits(cupy().cuda.Device().id)


def _limits_arg(limits):
    if limits is None:
        return device_limits()
    if not isinstance(limits, DeviceLimits):
        raise TypeError(f"limits must be a DeviceLimits or None, got {type(limits).__name__}")
    return limits


def _kernel_regs(kern):
    """Registers per thread of a compiled kernel (a CuPy RawKernel / Function)."""
    try:
        regs = kern.num_regs
    except AttributeError:  # older CuPy: the attribute dict
        try:
            regs = kern.attributes.get("num_regs", 255)
        except AttributeError:
            raise TypeError(
                f"kern must be a compiled CuPy kernel (num_regs), got {type(kern).__name__}"
            ) from None
    return max(int(regs), 1)


def _warp_regs(regs):
    """Registers a warp is given: regs * 32 rounded up to the allocation unit of 256."""
    return -(-regs * 32 // 256) * 256


def _resident_ctas(regs, threads, smem, lim):
    """CTAs of `threads` threads, `regs` registers each and `smem` bytes of shared memory (static
    + dynamic) that one SM holds at once, at least 1."""
    warps = threads // 32
    by_regs = lim.regs_per_sm // (_warp_regs(regs) * warps)
    by_threads = lim.threads_per_sm // threads
    by_smem = lim.smem_per_sm // (smem + lim.smem_reserved_per_block)
    return max(1, min(by_regs, by_threads, by_smem, lim.blocks_per_sm))


def auto_n_splits(kern, n_vis_max, nkv, nb, nwarp=V1_NWARP, limits=None):
    """v1's split count: enough CTAs for one full wave, sm_count * (CTAs of nwarp warps one SM
    holds by registers, threads, static shared memory and blocks), S = ceil(that / (nkv * nb)),
    clamped to [1, min(chunks of the longest row, MAX_SPLITS)]. limits: DeviceLimits (None:
    the current device's)."""
    n_vis_max = _int_arg("n_vis_max", n_vis_max, 0)
    nkv, nb = _int_arg("nkv", nkv, 1), _int_arg("nb", nb, 1)
    nwarp = _int_arg("nwarp", nwarp, 1)
    regs = _kernel_regs(kern)
    lim = _limits_arg(limits)
    static = int(getattr(kern, "shared_size_bytes", 0) or 0)
    per_sm = _resident_ctas(regs, 32 * nwarp, static, lim)
    chunks = max(-(-n_vis_max // CHUNK), 1)
    s = -(-lim.sm_count * per_sm // (nkv * nb))
    return max(1, min(s, chunks, MAX_SPLITS))


def mma_n_splits(kern, smem, threads, n_vis_max, nkv, limits=None):
    """The mma kernel's split count (one CTA per (kv head, split), all rows inside): enough CTAs
    for one full wave, sm_count * (CTAs one SM holds by shared memory, registers, threads and
    blocks), clamped to [1, min(tiles of the longest row, MAX_SPLITS)] (a tile: the
    threads // 2 tokens one pipeline stage loads). limits: DeviceLimits (None: the current
    device's)."""
    smem, threads = _int_arg("smem", smem, 0), _int_arg("threads", threads, 32)
    n_vis_max, nkv = _int_arg("n_vis_max", n_vis_max, 0), _int_arg("nkv", nkv, 1)
    regs = _kernel_regs(kern)
    lim = _limits_arg(limits)
    per_sm = _resident_ctas(regs, threads, smem, lim)
    # at most one split per tile of 16 * warps tokens (one 64-token block at 4 warps): a split
    # of less than a tile still pays a whole tile's prologue, and doubles the combine's reads
    # (QSA's 2112-token row: 33 splits instead of 66, decode 10.4 -> 9.6 us in one run)
    tiles = max(-(-n_vis_max // (threads // 2)), 1)
    s = -(-lim.sm_count * per_sm // nkv)
    while per_sm > 2 and tiles < EXTRA_CTA_TILES * s:  # too few tiles for the extra CTAs
        per_sm -= 1
        s = -(-lim.sm_count * per_sm // nkv)
    return max(1, min(s, tiles, MAX_SPLITS))
