"""Every kernels_cuda/*.cu builds with nvcc for every architecture in compile_check.ARCHS (CI
has nvcc, no GPU), as the text NVRTC compiles (headers pasted in), and once more as the file on
disk (`nvcc -arch=sm_90 -std=c++17 -I kernels_cuda -ptx`); the ptxas report parser reads what
nvcc prints. The builds come from compile_check's cache: `make test` runs compile_check before,
so these tests read its results instead of building everything again."""

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

import qwenref
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


@functools.lru_cache(maxsize=None)
def _both() -> tuple:
    """Every file's builds (pasted, every arch; as a file, every AS_FILE_ARCHS), all at once on
    the first call: cached ones are read, the others built in one pool (a test run on its own,
    without compile_check before it)."""
    res, files = compile_check.check_all(
        CU_FILES, NVCC, compile_check.ARCHS, compile_check.default_cache_dir()
    )
    return {r.name: r for r in res}, {(b.name, b.arch): b for b in files}


def _results() -> dict:
    return _both()[0]


@needs_nvcc
@pytest.mark.parametrize("arch", compile_check.ARCHS)
@pytest.mark.parametrize("cu", CU_FILES, ids=[p.name for p in CU_FILES])
def test_kernel_compiles(cu, arch):
    r = _results()[cu.name]
    assert arch not in r.failed_archs, (
        f"{cu.name} does not compile for {arch}:\n{r.arch_messages.get(arch) or r.messages}"
    )
    declared = declared_kernels(cu.read_text())
    reported = {k.name for k in r.kernels.get(arch, [])}
    # every extern "C" kernel in the source must reach ptxas under its plain name (CuPy looks
    # kernels up by that name); a missing one means it was mangled or compiled out for this arch
    assert declared <= reported, (
        f"{cu.name} ({arch}): declared {sorted(declared)}, ptxas saw {sorted(reported)}"
    )


@needs_nvcc
@pytest.mark.parametrize("arch", compile_check.AS_FILE_ARCHS)
@pytest.mark.parametrize("cu", CU_FILES, ids=[p.name for p in CU_FILES])
def test_kernel_compiles_as_the_file_on_disk(cu, arch):
    """nvcc -arch=<arch> -std=c++17 -I kernels_cuda -ptx X.cu: the headers found by -I, each
    included as often as the includes say (include guards), as a reader builds a file by hand,
    for Ampere, Ada and Hopper (sm_90a too)."""
    b = _both()[1][(cu.name, arch)]
    assert b.ok, f"{cu.name} does not compile as a file for {arch}:\n{b.messages}"


def test_as_file_archs_cover_the_pasted_ones_and_the_readme_names_them():
    """Every target the pasted build compiles is also built as a file, and the README's
    command list names each as-file target."""
    assert set(compile_check.ARCHS) <= set(compile_check.AS_FILE_ARCHS)
    readme = (ROOT / "README.md").read_text()
    para = readme[readme.index("builds each file as it is on disk") :][:400]
    assert all(a in para for a in compile_check.AS_FILE_ARCHS), para


def test_every_kernel_file_is_checked():
    """compile_check's default files are every kernels_cuda/*.cu, found anew each run: a file
    added there is checked (pasted and as a file) without being listed anywhere."""
    assert compile_check._kernel_files([]) == CU_FILES
    assert len(CU_FILES) >= 19


@needs_nvcc
def test_as_file_check_catches_a_missing_include_guard(tmp_path, monkeypatch):
    """A header without its guard, included twice (directly and through another header): the
    pasted text has it once and builds, the file on disk redefines it and fails, and the check
    says so; with the guard both build. The as-file results are cached like the pasted ones."""
    from qwenref.gpu import _runtime

    kdir, cache = tmp_path / "kernels_cuda", tmp_path / "cache"
    kdir.mkdir()
    (kdir / "one.cuh").write_text("__device__ inline float one() { return 1.0f; }\n")
    (kdir / "two.cuh").write_text('#include "one.cuh"\n')
    (kdir / "k.cu").write_text(
        '#include "one.cuh"\n#include "two.cuh"\n'
        'extern "C" __global__ void k(float* x) { x[0] = one(); }\n'
    )
    monkeypatch.setattr(_runtime, "kernels_dir", lambda: kdir)
    run = lambda: compile_check.check_all(
        [kdir / "k.cu"], NVCC, ("sm_90",), cache, None, ("sm_90",)
    )
    (pasted,), (as_file,) = run()
    assert pasted.ok and not as_file.ok and "already been defined" in as_file.messages, as_file
    assert as_file.messages.startswith("kernels_cuda/one.cuh"), as_file.messages  # no tmp path
    (kdir / "one.cuh").write_text(
        "#ifndef ONE_CUH\n#define ONE_CUH\n__device__ inline float one() { return 1.0f; }\n#endif\n"
    )
    (pasted,), (as_file,) = run()
    assert pasted.ok and as_file.ok and not as_file.cached
    assert run()[1][0].cached


@needs_nvcc
@pytest.mark.parametrize("cu", CU_FILES, ids=[p.name for p in CU_FILES])
def test_pasted_source_is_what_was_compiled(cu):
    """What NVRTC compiles: kernel_source pastes the local headers (#include "x.cuh") in. The
    check builds that text, in a folder without the headers: no local #include may survive, and
    the build read above must be of this very text (its hash)."""
    import hashlib

    from qwenref.gpu._runtime import kernel_source

    text = kernel_source(cu.stem)
    assert not re.search(r'^\s*#\s*include\s+"', text, re.M), "a local #include survived"
    assert _results()[cu.name].source_sha256 == hashlib.sha256(text.encode()).hexdigest()


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


_TINY = 'extern "C" __global__ void tiny(float* x) { x[threadIdx.x] = %s; }\n'


@needs_nvcc
def test_cache_hit_and_miss(tmp_path, monkeypatch):
    """A second check of the same text reads the cache (no nvcc run); another text, or another
    nvcc version, builds again; an older entry of the same file is replaced."""
    from qwenref.gpu import _runtime

    kdir, cache = tmp_path / "kernels_cuda", tmp_path / "cache"
    kdir.mkdir()
    (kdir / "tiny.cu").write_text(_TINY % "1.0f")
    monkeypatch.setattr(_runtime, "kernels_dir", lambda: kdir)
    archs = ("sm_80",)
    built = []
    real_build = compile_check._build
    monkeypatch.setattr(
        compile_check, "_build", lambda *a: built.append(a[0].name) or real_build(*a)
    )
    check = lambda: compile_check.check_files([kdir / "tiny.cu"], NVCC, archs, cache)[0]
    first = check()
    assert first.ok and not first.cached and [k.name for k in first.kernels["sm_80"]] == ["tiny"]
    second = check()
    assert second.cached and second.kernels == first.kernels and built == ["tiny.cu"]
    (kdir / "tiny.cu").write_text(_TINY % "2.0f")
    assert not check().cached and len(list(cache.glob("tiny-*.json"))) == 1
    monkeypatch.setitem(compile_check._VERSIONS, NVCC, "another nvcc")
    assert not check().cached and len(built) == 3


@needs_nvcc
def test_failing_arch_is_named(tmp_path):
    """A PTX instruction newer than an arch fails that arch only, and the result says which;
    behind `#if __CUDA_ARCH__ >= 900` it builds for both."""
    sm90_only = 'asm volatile("griddepcontrol.wait;" ::: "memory");'
    bad = tmp_path / "pdl.cu"
    bad.write_text(f'extern "C" __global__ void pdl(float* x) {{ {sm90_only} x[0] = 1.0f; }}\n')
    guarded = tmp_path / "pdl_guarded.cu"
    guarded.write_text(
        'extern "C" __global__ void pdl(float* x) {\n#if __CUDA_ARCH__ >= 900\n'
        f"  {sm90_only}\n#endif\n  x[0] = 1.0f;\n}}\n"
    )
    r_bad, r_ok = compile_check.check_files([bad, guarded], NVCC, ("sm_80", "sm_90"))
    assert not r_bad.ok and r_bad.failed_archs == ["sm_80"], r_bad
    assert "griddepcontrol" in r_bad.arch_messages["sm_80"]
    assert [k.name for k in r_bad.kernels["sm_90"]] == ["pdl"]
    assert r_ok.ok and {a: [k.name for k in ks] for a, ks in r_ok.kernels.items()} == {
        "sm_80": ["pdl"],
        "sm_90": ["pdl"],
    }


@needs_nvcc
def test_cli_fails_on_a_broken_kernel(tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    good = tmp_path / "fine.cu"
    good.write_text('extern "C" __global__ void fine(float* x) { x[threadIdx.x] = 1.0f; }\n')
    archs = ["--arch", "sm_80", "--arch", "sm_90"]  # two archs: a quicker run
    r = subprocess.run(
        [sys.executable, "-m", "qwenref.gpu.compile_check", *archs, str(good), str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "broken.cu" in r.stdout and "FAILED TO COMPILE" in r.stdout
    assert "undefined_name" in r.stdout
    assert re.search(r"fine\.cu\s+fine\s+\d+", r.stdout), r.stdout
    for arch in ("sm_80", "sm_90"):  # one summary line per arch, naming the failure
        assert re.search(rf"^\s*{arch}\s.*failed broken\.cu", r.stdout, re.M), r.stdout


def test_cli_skips_without_nvcc(monkeypatch, capsys):
    monkeypatch.setattr(compile_check, "find_nvcc", lambda: None)
    assert compile_check.main([]) == 0
    assert "skipping" in capsys.readouterr().out


def test_mma_smem_table():
    """sm_86 / sm_89 let a block opt into 99 KiB of shared memory, sm_80 163 KiB, sm_90 227 KiB:
    of the mma attention kernels only hd 256's four-tile one (108,688 B) is over, and only on
    sm_86 / sm_89. The table and the plan read one rule: where a kernel is over, plan_rung
    with that arch's limit takes v1."""
    from qwenref import golden
    from qwenref.gpu import attention

    assert compile_check.SMEM_OPTIN == {
        "sm_80": 166912,
        "sm_86": 101376,
        "sm_89": 101376,
        "sm_90": 232448,
    }
    sizes = compile_check.mma_smem_requests()
    assert len(sizes) == 8 and sizes["attn_partials_q8_mma_n4 (hd 256)"] == 108688
    lines = compile_check.mma_smem_table(sizes)
    assert [line.split()[0] for line in lines] == list(compile_check.SMEM_OPTIN)
    for arch, line in zip(compile_check.SMEM_OPTIN, lines):
        short = arch in ("sm_86", "sm_89")
        assert ("7 of 8 fit" if short else "8 of 8 fit") in line
        assert ("attn_partials_q8_mma_n4 (hd 256) 108688 B" in line) == short
        assert "n3" not in line
    for hd in attention.MMA_HEAD_DIMS:
        cfg = qwenref.AttnConfig(
            hidden_size=64,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=hd,
            intermediate_size=128,
        )
        cache = golden.KVCache(cfg, max_t=8, kind="q8")
        for nb in (1, 2, 3, 4):  # 8 heads a row: NT8 = nb
            for arch in compile_check.SMEM_OPTIN:
                limit = compile_check.SMEM_OPTIN[arch]
                fits = sizes[f"attn_partials_q8_mma_n{nb} (hd {hd})"] <= limit
                rung = attention.plan_rung(cache, nb, max_smem=limit).rung
                assert rung == ("mma" if fits else "v1"), (arch, hd, nb)


def test_cli_prints_the_mma_smem_table(monkeypatch, capsys):
    """With attention_mma.cu among the files, the check prints the table (the build itself is
    stubbed: this is about what is printed)."""
    res = compile_check.FileResult(
        "attention_mma.cu", True, kernels={a: [] for a in compile_check.ARCHS}
    )
    monkeypatch.setattr(compile_check, "find_nvcc", lambda: "nvcc")
    monkeypatch.setattr(compile_check, "check_all", lambda paths, *a: ([res], []))
    assert compile_check.main(["--no-cache", str(ROOT / "kernels_cuda" / "attention_mma.cu")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  sm_86 +101376 B: 7 of 8 fit; over", out, re.M), out
    assert re.search(r"^  sm_90 +232448 B: 8 of 8 fit$", out, re.M), out


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
ptxas info    : Compiling entry function 'a' for 'sm_80'
ptxas info    : Function properties for a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
"""
    b, a = compile_check.parse_ptxas(text)
    fields = lambda k: (k.name, k.arch, k.registers, k.stack, k.spill_stores, k.spill_loads, k.smem)
    assert fields(b) == ("b", "sm_90", 21, 256, 8, 12, 0)
    assert fields(a) == ("a", "sm_80", 10, 0, 0, 0, 1024)


def test_one_front_end_pass_per_arch_family():
    """A file that never tests __CUDA_ARCH__ gets one front-end pass per family (compute_80's
    PTX for sm_80 / 86, compute_90's for sm_90); one that does, a pass per arch."""
    g = compile_check._gencodes(compile_check.ARCHS, "__global__ void k() {}")
    assert g == [
        "-gencode",
        "arch=compute_80,code=[sm_80,sm_86]",
        "-gencode",
        "arch=compute_90,code=[sm_90]",
    ]
    g = compile_check._gencodes(("sm_80", "sm_90"), "#if __CUDA_ARCH__ >= 900\n#endif")
    assert g == ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]


_LAY_PROBE = r"""
#include <cstdio>
#include "attention.cuh"
#include "attention_mma.cuh"
#include "kv_tile.cuh"
#include "kv_tile_tq.cuh"
using namespace mma_attn;
template <class K, class V> void row(const char* kind) {
    printf("%s %d %d %d %d\n", kind, Lay<K, V, 1>::BYTES, Lay<K, V, 2>::BYTES,
           Lay<K, V, 3>::BYTES, Lay<K, V, 4>::BYTES);
}
int main() {
    row<KQ8, VQ8>("q8");
    row<KBf16, VBf16>("bf16");
    row<KTurbo<8>, VTurbo<8>>("turbo8");
    row<KTurbo<4>, VTurbo<4>>("turbo4");
    row<KTurbo<3>, VTurbo<3>>("turbo3");
    row<KTurbo<2>, VTurbo<2>>("turbo2");
    row<KBf16, VTurbo<4>>("bf16k-turbo4v");
    row<KBf16, VTurbo<3>>("bf16k-turbo3v");
    row<KBf16, VTurbo<2>>("bf16k-turbo2v");
    row<KTq<4>, VTq<4>>("tq4");
    row<KTq<3>, VTq<3>>("tq3");
    row<KTq<2>, VTq<2>>("tq2");
}
"""


@needs_nvcc
def test_tq2_quad_kernels_compile(tmp_path):
    """The tq2 kernels with -DMMA_TQ2_QUAD=1 (their table of quads, kv_tile_tq.cuh), a knob off
    by default: built here so that it cannot rot while the pair table is the default, with every
    tq2 kernel reaching ptxas and none spilling."""
    res = subprocess.run(
        [
            NVCC,
            "-arch=sm_90",
            "-std=c++17",
            "-I",
            str(ROOT / "kernels_cuda"),
            "-cubin",
            "-DMMA_KIND_tq2",
            "-DMMA_TQ2_QUAD=1",
            "-Xptxas",
            "-v",
            str(ROOT / "kernels_cuda" / "attention_mma.cu"),
            "-o",
            str(tmp_path / "q.cubin"),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    kernels = {k.name: k for k in compile_check.parse_ptxas(res.stderr)}
    names = {f"attn_partials_tq2_mma_{n}" for n in ("n1", "n2", "n3", "n4", "sel_n1")}
    assert names <= set(kernels), sorted(kernels)
    assert all(kernels[n].spill_stores == 0 == kernels[n].spill_loads for n in names)


@needs_nvcc
@pytest.mark.parametrize("quad", [(), ("-DMMA_TQ2_QUAD=1",)], ids=["pairs", "tq2-quads"])
@pytest.mark.parametrize("hd", [256, 128])
def test_mma_smem_mirror_matches_the_header(hd, quad, tmp_path):
    """attention_plan.mma_smem_bytes (what the plan checks before choosing the mma rung, without
    a GPU) equals mma_attn::Lay<K, V, NT8>::BYTES of the headers, built for the host and run:
    every kind with mma kernels, NT8 1..4, tq2's table of pairs or of quads."""
    from qwenref.gpu import attention_plan as A

    src = tmp_path / "lay.cu"
    src.write_text(_LAY_PROBE)
    exe = tmp_path / "lay"
    flags = ["-std=c++17", "-DMMA_NW=0", f"-DATTN_HD={hd}", "-DATTN_NREP=6", *quad]
    subprocess.run(
        [NVCC, *flags, "-I", str(ROOT / "kernels_cuda"), str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
        text=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    assert len(rows) == 12
    for kind, *sizes in rows:
        mirror = [A.mma_smem_bytes(hd, n, quad, kind=kind) for n in (1, 2, 3, 4)]
        assert mirror == [int(x) for x in sizes], kind
