"""Every kernels_cuda/*.cu builds with nvcc for sm_90 (CI has nvcc, no GPU), and the ptxas
report parser reads what nvcc prints."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from qwenref.gpu import compile_check

ROOT = Path(__file__).resolve().parent.parent
CU_FILES = sorted((ROOT / "kernels_cuda").glob("*.cu"))
NVCC = compile_check.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found: kernel compile check skipped")

# extern "C" __global__ [qualifiers] void name(   (__launch_bounds__(...) is removed first)
_DECL = re.compile(r'extern\s+"C"\s+__global__\s+(?:\w+\s+)*?(\w+)\s*\(')
_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")


def declared_kernels(source: str) -> set:
    """Kernels declared literally; #define bodies (joined over their line continuations) are
    left out: a macro's kernel name is a parameter, its instances reach ptxas by their own."""
    lines = source.replace("\\\n", " ").splitlines()
    code = "\n".join(l for l in lines if not l.lstrip().startswith("#"))
    return set(_DECL.findall(_BOUNDS.sub(" ", code)))


@needs_nvcc
@pytest.mark.parametrize("cu", CU_FILES, ids=[p.name for p in CU_FILES])
def test_kernel_compiles(cu):
    ok, kernels, messages = compile_check.compile_file(cu, NVCC)
    assert ok, f"{cu.name} does not compile with nvcc -arch={compile_check.ARCH}:\n{messages}"
    declared = declared_kernels(cu.read_text())
    reported = {k.name for k in kernels}
    # every extern "C" kernel in the source must reach ptxas under its plain name (CuPy looks
    # kernels up by that name); a missing one means it was mangled or compiled out
    assert declared <= reported, \
        f"{cu.name}: declared {sorted(declared)}, ptxas saw {sorted(reported)}"


@needs_nvcc
@pytest.mark.parametrize("cu", CU_FILES, ids=[p.name for p in CU_FILES])
def test_pasted_source_compiles_alone(cu, tmp_path):
    """What NVRTC compiles: kernel_source pastes the local headers (#include "x.cuh") in. The
    pasted text must build on its own, in a folder without the headers, with the same kernels."""
    from qwenref.gpu._runtime import kernel_source
    text = kernel_source(cu.stem)
    assert not re.search(r'^\s*#\s*include\s+"', text, re.M), "a local #include survived"
    alone = tmp_path / cu.name
    alone.write_text(text)
    ok, kernels, messages = compile_check.compile_file(alone, NVCC)
    assert ok, f"{cu.name} as pasted does not compile on its own:\n{messages}"
    assert declared_kernels(cu.read_text()) <= {k.name for k in kernels}


def test_kernel_source_pastes_each_header_once(tmp_path, monkeypatch):
    """A header included twice (directly and through another header) is pasted once; a
    missing header is an error naming it."""
    from qwenref.gpu import _runtime
    (tmp_path / "a.cuh").write_text('#include "b.cuh"\nint a;\n')
    (tmp_path / "b.cuh").write_text("int b;\n")
    (tmp_path / "k.cu").write_text('#include "a.cuh"\n#include "b.cuh"\nint k;\n')
    (tmp_path / "bad.cu").write_text('#include "nope.cuh"\n')
    monkeypatch.setattr(_runtime, "kernels_dir", lambda: tmp_path)
    text = _runtime.kernel_source("k")
    assert text.count("int b;") == 1 and text.count("int a;") == 1 and text.endswith("int k;\n")
    assert text.index("int b;") < text.index("int a;") < text.index("int k;")
    with pytest.raises(FileNotFoundError, match="nope.cuh"):
        _runtime.kernel_source("bad")


@needs_nvcc
def test_cli_fails_on_a_broken_kernel(tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    good = tmp_path / "fine.cu"
    good.write_text('extern "C" __global__ void fine(float* x) { x[threadIdx.x] = 1.0f; }\n')
    r = subprocess.run([sys.executable, "-m", "qwenref.gpu.compile_check", str(good), str(bad)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "broken.cu" in r.stdout and "FAILED TO COMPILE" in r.stdout
    assert re.search(r"fine\.cu\s+fine\s+\d+", r.stdout), r.stdout


def test_cli_skips_without_nvcc(monkeypatch, capsys):
    monkeypatch.setattr(compile_check, "find_nvcc", lambda: None)
    assert compile_check.main([]) == 0
    assert "skipping" in capsys.readouterr().out


def test_declared_kernels():
    src = """extern "C" __global__ void foo(float* x) {}
extern "C" __global__ __launch_bounds__(256) void bar (int n) {}
extern "C"
__global__ void __launch_bounds__(128, 2) baz(const float* __restrict__ x) {}
__device__ float helper(float x) { return x; }
"""
    assert declared_kernels(src) == {"foo", "bar", "baz"}


def test_parse_ptxas():
    # nvcc 13.0's report for two kernels (trimmed); values differ per field so a swap shows
    text = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 21 registers, used 0 barriers, 256 bytes cumulative stack size
ptxas info    : Compile time = 13.606 ms
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
"""
    b, a = compile_check.parse_ptxas(text)
    fields = lambda k: (k.name, k.registers, k.stack, k.spill_stores, k.spill_loads, k.smem)
    assert fields(b) == ("b", 21, 256, 8, 12, 0)
    assert fields(a) == ("a", 10, 0, 0, 0, 1024)
