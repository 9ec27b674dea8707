"""Shared plumbing for the GPU stages: CuPy import, kernel source lookup, module cache, and the
argument checks every wrapper runs before a launch (kernels never see a bad argument)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the qwenref package's folder


def kernels_dir() -> Path:
    """kernels_cuda/: shipped inside the package when installed, at the repo root in a checkout."""
    for cand in (PACKAGE_DIR / "kernels_cuda", PACKAGE_DIR.parent / "kernels_cuda"):
        if cand.is_dir() and any(cand.glob("*.cu")):
            return cand
    raise FileNotFoundError(f"kernels_cuda/ not found next to {PACKAGE_DIR}")


_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([\w.-]+\.cuh)"[ \t]*$', re.M)


def kernel_source(name: str) -> str:
    """The text of kernels_cuda/<name>.cu with each local `#include "x.cuh"` replaced by that
    header's text (once per header): what the notebooks show and NVRTC compiles. Pasting rather
    than passing -I keeps CuPy's disk cache, keyed on the source text, honest about headers."""
    kdir = kernels_dir()
    seen = set()

    def paste(m):
        header = m.group(1)
        path = kdir / header
        if not path.is_file():
            raise FileNotFoundError(f"{name}.cu includes {header!r}, not found in {kdir}")
        if header in seen:
            return f'// (#include "{header}": pasted above)'
        seen.add(header)
        text = _LOCAL_INCLUDE.sub(paste, path.read_text())
        return f"// ---- {header} (pasted by kernel_source) ----\n{text}// ---- end {header} ----"

    return _LOCAL_INCLUDE.sub(paste, (kdir / f"{name}.cu").read_text())


def cupy():
    """Import CuPy and check a device is present; raise a RuntimeError that says what is missing."""
    try:
        import cupy as cp
    except ImportError as e:
        raise RuntimeError(
            "qwenref.gpu needs CuPy and an NVIDIA GPU: pip install 'qwenref[gpu]' "
            f"(cupy-cuda13x) ({e})"
        ) from None
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDA driver missing or broken
        raise RuntimeError(
            f"qwenref.gpu: CuPy is installed but no CUDA device is usable ({e})"
        ) from None
    if n == 0:
        raise RuntimeError("qwenref.gpu: CuPy is installed but no CUDA device was found")
    return cp


def available() -> bool:
    """True when CuPy imports and a CUDA device is present (tests skip otherwise)."""
    try:
        cupy()
        return True
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=None)
def module(name: str, options: tuple = ()):
    """kernels_cuda/<name>.cu compiled by NVRTC once per process (CuPy also caches on disk).
    Under compute-sanitizer (QWENREF_SANITIZE=1) with line info, so reports name source lines."""
    cp = cupy()
    opts = ("--std=c++17", "-default-device", *include_opts()) + tuple(options)
    if os.environ.get("QWENREF_SANITIZE") == "1":
        opts += ("-lineinfo",)
    return cp.RawModule(code=kernel_source(name), options=opts, name_expressions=None)


def include_opts():
    """NVRTC's -I option for the toolkit's include dir (cuda_fp16.h / cuda_bf16.h), as a tuple
    (empty when no toolkit is found)."""
    cands = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    try:
        import cupy as cp

        cands.insert(0, cp.cuda.get_cuda_path())
    except Exception:
        pass
    for c in cands:
        if c and (Path(c) / "include" / "cuda_fp16.h").exists():
            return (f"-I{Path(c) / 'include'}",)
    return ()


def kernel(module_name: str, fn: str, options: tuple = ()):
    return module(module_name, options).get_function(fn)


@functools.lru_cache(maxsize=None)
def _sm_limits(device_id):
    """(SMs, registers, threads, shared-memory bytes, blocks per SM) of a device (H100/H200
    defaults for any attribute CuPy does not report)."""
    a = cupy().cuda.Device(device_id).attributes
    return (
        a.get("MultiProcessorCount", 132),
        a.get("MaxRegistersPerMultiprocessor", 65536),
        a.get("MaxThreadsPerMultiProcessor", 2048),
        a.get("MaxSharedMemoryPerMultiprocessor", 228 * 1024),
        a.get("MaxBlocksPerMultiprocessor", 32),
    )


def resident_blocks(kern, threads, smem=0):
    """Blocks of `threads` threads of kernel `kern` (dynamic shared memory `smem` bytes, its
    static shared memory added) that fit on the current device at once: a grid of this many
    blocks is one wave, and a grid-stride kernel needs no more."""
    sms, regs_sm, threads_sm, smem_sm, blocks_sm = _sm_limits(cupy().cuda.Device().id)
    try:
        regs = max(1, int(kern.num_regs))
        smem += int(kern.shared_size_bytes)
    except Exception:  # attributes missing: assume 128 registers, no static shared memory
        regs = 128
    regs = -(-regs // 8) * 8  # allocation granularity
    per_sm = min(
        regs_sm // (regs * threads), threads_sm // threads, smem_sm // (smem + 1024), blocks_sm
    )  # 1 KiB reserved per block
    return sms * max(1, per_sm)


# ---- argument checks ----------------------------------------------------------------------
# Every wrapper checks its arguments in one order: impl and the plain Python arguments (sizes,
# flags, eps, theta: qwenref._args' helpers) first, which needs no GPU; then each array with
# check_array / out_array; then what depends on the arrays' shapes; then it launches. A refused
# call has launched nothing and written nothing (out= buffers included).


def type_name(obj):
    """The type of obj as the caller would write it, for error messages: 'list',
    'numpy.ndarray', 'cupy.ndarray', 'qwenref.golden.kvcache.KVCache'."""
    t = type(obj)
    top = t.__module__.split(".")[0]
    if top == "builtins":
        return t.__qualname__
    return (
        f"{top}.{t.__qualname__}"
        if top in ("numpy", "cupy")
        else f"{t.__module__}.{t.__qualname__}"
    )


def check_array(name, a, dtype=None, shape=None, ndim=None, contiguous=True):
    """a must be a CuPy array on the current device, of this dtype and shape (shape entries of
    None match anything), C-contiguous (contiguous=True) or with a contiguous last axis and
    strides of whole elements (contiguous="last": a strided view of rows).
    Raises TypeError (not a cupy array; dtype) or ValueError (device, ndim, shape, layout)
    naming the argument; returns a."""
    cp = cupy()
    if not isinstance(a, cp.ndarray):
        hint = (
            " (a host array: cupy.asarray copies it to the GPU)" if hasattr(a, "__array__") else ""
        )
        raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type_name(a)}{hint}")
    if a.device.id != cp.cuda.Device().id:
        raise ValueError(f"{name} is on device {a.device.id}, expected {cp.cuda.Device().id}")
    if dtype is not None and a.dtype != cp.dtype(dtype):
        raise TypeError(f"{name} must have dtype {cp.dtype(dtype)}, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {a.shape}")
    if shape is not None:
        if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
            want = tuple("*" if s is None else s for s in shape)
            raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    if contiguous == "last":
        item = a.itemsize
        if a.ndim and a.shape[-1] > 1 and a.strides[-1] != item:
            raise ValueError(f"{name}'s last axis must be contiguous, got strides {a.strides}")
        if any(s % item for s in a.strides):
            raise ValueError(f"{name}'s strides must be whole elements, got {a.strides}")
    elif not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous, got strides {a.strides}")
    return a


def out_array(name, out, shape, dtype):
    """Return `out` after checking it, or a fresh empty array (wrappers allocate, kernels never)."""
    cp = cupy()
    if out is None:
        return cp.empty(shape, dtype=dtype)
    return check_array(name, out, dtype=dtype, shape=tuple(shape))


def resolve_rung(rungs, defaults, family, impl):
    """The rung `impl` names for `family` (None: defaults[family]), checked against
    rungs[family] (the stage module's RUNGS, in teaching order). ValueError naming family or
    impl otherwise; needs no GPU, so wrappers call it before any other check."""
    if family not in rungs:
        raise ValueError(f"family must be one of {sorted(rungs)}, got {family!r}")
    if impl is None:
        return defaults[family]
    if not isinstance(impl, str) or impl not in rungs[family]:
        raise ValueError(f"impl must be None or one of {rungs[family]} for {family}, got {impl!r}")
    return impl
