"""Compile every kernels_cuda/*.cu with nvcc for sm_90 and print each kernel's resource use.

    python -m qwenref.gpu.compile_check [FILE.cu ...]

CI has nvcc but no GPU, so this is how a kernel that no longer builds fails CI, and how a
register or spill regression shows up in the log. CuPy compiles the same sources with NVRTC at
run time; nvcc here is only the build check (same -std=c++17). Kernels are extern "C", so ptxas
reports plain names and no demangling is needed. Exit status: 1 if any file fails to compile,
0 otherwise (also when nvcc is absent: then it says it skipped).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KernelInfo", "parse_ptxas", "find_nvcc", "compile_file", "main"]

ARCH = "sm_90"

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass
class KernelInfo:
    name: str
    registers: int = 0
    stack: int = 0          # bytes of local memory per thread (arrays that did not fit registers)
    spill_stores: int = 0
    spill_loads: int = 0
    smem: int = 0           # static shared memory; dynamic shared memory is set at launch


def parse_ptxas(text: str) -> list[KernelInfo]:
    """Kernels in the order ptxas reports them, from `nvcc -Xptxas -v` output."""
    out: list[KernelInfo] = []
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            out.append(KernelInfo(m.group(1)))
        elif not out:
            continue
        elif m := _FRAME.search(line):
            out[-1].stack, out[-1].spill_stores, out[-1].spill_loads = map(int, m.groups())
        elif m := _USED.search(line):
            out[-1].registers = int(m.group(1))
            if s := _SMEM.search(line):
                out[-1].smem = int(s.group(1))
    return out


def compile_file(path: Path, nvcc: str = "nvcc") -> tuple[bool, list[KernelInfo], str]:
    """(ok, kernels, nvcc's messages other than ptxas info) for one .cu file."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, f"-arch={ARCH}", "-std=c++17", "-Xptxas", "-v", "-c",
               "-o", os.path.join(tmp, path.stem + ".o"), str(path)]
        r = subprocess.run(cmd, capture_output=True, text=True)
    text = r.stdout + r.stderr
    other = "\n".join(l for l in text.splitlines()
                      if l.strip() and not l.startswith("ptxas info") and not _FRAME.search(l))
    return r.returncode == 0, parse_ptxas(text), other


def find_nvcc() -> str | None:
    """nvcc on PATH, else in $CUDA_HOME / $CUDA_PATH / /usr/local/cuda (often not on PATH)."""
    found = shutil.which("nvcc")
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if found is None and root and (Path(root) / "bin" / "nvcc").is_file():
            found = str(Path(root) / "bin" / "nvcc")
    return found


def _kernel_files(args: list[str]) -> list[Path]:
    if args:
        return [Path(a) for a in args]
    from ._runtime import kernels_dir
    try:
        return sorted(kernels_dir().glob("*.cu"))
    except FileNotFoundError:
        return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qwenref.gpu.compile_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="default: every kernels_cuda/*.cu")
    args = ap.parse_args(argv)

    nvcc = find_nvcc()
    if nvcc is None:
        print("compile_check: nvcc not found on PATH; skipping the kernel compile check")
        return 0
    files = _kernel_files(args.files)
    if not files:
        print("compile_check: no kernels_cuda/*.cu files found; nothing to compile")
        return 0

    # nvcc is mostly single-threaded; one job per core keeps CI's 2 cores busy.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda f: compile_file(f, nvcc), files))

    print(f"compile_check: nvcc -arch={ARCH} -Xptxas -v, {len(files)} file(s)")
    print(f"{'file':<20} {'kernel':<34} {'regs':>5} {'stack':>6} {'spill_st':>9} "
          f"{'spill_ld':>9} {'smem':>7}")
    failed = []
    for f, (ok, kernels, other) in zip(files, results):
        if not ok:
            failed.append(f.name)
            print(f"{f.name:<20} FAILED TO COMPILE\n{other}")
            continue
        if other:  # warnings: shown, not fatal
            print(f"{f.name}: nvcc says:\n{other}")
        if not kernels:
            print(f"{f.name:<20} (no kernels)")
        for k in kernels:
            spill = "  <- spills" if k.spill_stores or k.spill_loads else ""
            print(f"{f.name:<20} {k.name:<34} {k.registers:>5} {k.stack:>6} {k.spill_stores:>9} "
                  f"{k.spill_loads:>9} {k.smem:>7}{spill}")
    if failed:
        print(f"compile_check: {len(failed)} file(s) failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
