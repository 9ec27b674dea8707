"""Compile every kernels_cuda/*.cu with nvcc for each GPU architecture a learner may own from
sm_80 on, and print each kernel's resource use; then compile each file again as it is on disk.

    python -m qwenref.gpu.compile_check [--no-cache] [--arch sm_XX ...] [FILE.cu ...]

CI has nvcc but no GPU, so this is how a kernel that no longer builds fails CI, and how a
register or spill regression shows up in the log. CuPy compiles the same sources with NVRTC at
run time for the GPU at hand; nvcc here is only the build check (same -std=c++17). What is
compiled is the text NVRTC gets: kernel_source's, with the local headers pasted in, in a folder
without the headers. Kernels are extern "C", so ptxas reports plain names and no demangling is
needed.

One nvcc per file builds every architecture (-gencode per arch, -fatbin: device code only, as
NVRTC builds it). Results are cached under build/compile_check/ (in a checkout; else
~/.cache/qwenref/compile_check) by a hash of the compiled text, the nvcc version, the flags and
the architectures, so `make test`'s pytest run reuses this run's builds instead of repeating
them. It prints the sm_90 resource table, one line per arch (kernels, most registers, spilling
kernels, failed files) and, when attention_mma.cu is among the files, one line per arch saying
which mma attention kernels fit the dynamic shared memory a block may opt into there (the plan
runs v1 instead of the others: qwenref/gpu/attention_plan.py).

Each file of kernels_cuda/ is also compiled as the file on disk, the way a reader builds one by
hand: `nvcc -arch=sm_XX -std=c++17 -I kernels_cuda -ptx X.cu` for sm_80, sm_86, sm_89, sm_90 and
sm_90a (AS_FILE_ARCHS; AS_FILE_FLAGS: the C++ compile to PTX; the pasted builds above already
run ptxas on the same code; attention_mma.cu with one kind's -D, AS_FILE_DEFINES). This checks
what pasting hides: a header without its include guard, or one that does not compile where it
is included. Both checks share one pool of `--jobs` nvcc processes, the longest builds first,
and the same cache. Every *.cu in kernels_cuda/ is checked, so a new file is picked up by
itself. Exit status: 1 if any file fails to compile for any architecture or as a file, 0
otherwise (also when nvcc is absent: then it says it skipped).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "ARCH",
    "ARCHS",
    "KernelInfo",
    "FileResult",
    "parse_ptxas",
    "find_nvcc",
    "check_files",
    "AS_FILE_FLAGS",
    "AS_FILE_ARCHS",
    "AS_FILE_DEFINES",
    "FileBuild",
    "check_as_files",
    "check_all",
    "default_cache_dir",
    "SMEM_OPTIN",
    "mma_smem_requests",
    "mma_smem_table",
    "main",
]

# Ampere A100 (80), Ampere consumer (86) and Hopper (90). Ada (89) runs sm_86's code (a cubin
# runs on any later minor version of its major) with sm_86's limits for these kernels (99 KiB a
# block, no fp8 used), so its build would repeat sm_86's at a quarter of the check's time;
# sm_87 (Jetson Orin) is left out, and so is Hopper's arch-specific sm_90a: no kernel uses what
# only it has (wgmma, setmaxnreg).
ARCHS = ("sm_80", "sm_86", "sm_90")
ARCH = "sm_90"  # the per-kernel table's architecture: the kernels are tuned on an H200
FLAGS = ("-std=c++17", "-Xptxas", "-v")
_CACHE_FORMAT = 1  # bump when the JSON layout changes, so old entries miss
# the as-file build: the headers found through -I kernels_cuda, the C++ compile to PTX (ptxas
# runs on the pasted builds), for every architecture a reader may build one file for by hand:
# Ada (89) and Hopper's arch-specific target (90a) too, a front-end pass each
AS_FILE_FLAGS = ("-std=c++17", "-ptx")
AS_FILE_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
# per file, the -D options of its as-file build: attention_mma.cu builds one kind there, as the
# wrapper builds one a module (its includes are the same for every kind; the pasted build
# compiles them all)
AS_FILE_DEFINES = {"attention_mma.cu": ("-DMMA_KIND_q8",)}

# Shared memory one block may opt into per architecture (cudaDevAttrMaxSharedMemoryPerBlockOptin;
# CUDA C++ Programming Guide, technical specifications per compute capability): what the plan
# reads from the device at run time, here per target.
SMEM_OPTIN = {
    "sm_80": 166912,  # 163 KiB (A100)
    "sm_86": 101376,  # 99 KiB (100 KB per SM)
    "sm_89": 101376,  # 99 KiB
    "sm_90": 232448,  # 227 KiB (H100, H200)
}
_MMA_FILE = "attention_mma.cu"

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass
class KernelInfo:
    name: str
    registers: int = 0
    stack: int = 0  # bytes of local memory per thread (arrays that did not fit registers)
    spill_stores: int = 0
    spill_loads: int = 0
    smem: int = 0  # static shared memory; dynamic shared memory is set at launch
    arch: str = ""  # the sm_XX ptxas compiled it for


@dataclass
class FileResult:
    """One file built for several architectures (what the cache stores, as JSON)."""

    name: str
    ok: bool
    failed_archs: list = field(default_factory=list)
    messages: str = ""  # nvcc's output other than ptxas info, all archs together
    arch_messages: dict = field(default_factory=dict)  # per failed arch, from its own build
    kernels: dict = field(default_factory=dict)  # arch -> [KernelInfo]
    source_sha256: str = ""  # of the text compiled (the pasted source for kernels_cuda/)
    seconds: float = 0.0  # nvcc time when it was built
    cached: bool = False  # True when this run read it from the cache

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("cached")
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "FileResult":
        d = json.loads(text)
        d["kernels"] = {a: [KernelInfo(**k) for k in ks] for a, ks in d["kernels"].items()}
        return cls(**d, cached=True)


def parse_ptxas(text: str) -> list[KernelInfo]:
    """Kernels in the order ptxas reports them, from `nvcc -Xptxas -v` output (each tagged with
    the architecture of its 'Compiling entry function' line)."""
    out: list[KernelInfo] = []
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            out.append(KernelInfo(m.group(1), arch=m.group(2)))
        elif not out:
            continue
        elif m := _FRAME.search(line):
            out[-1].stack, out[-1].spill_stores, out[-1].spill_loads = map(int, m.groups())
        elif m := _USED.search(line):
            out[-1].registers = int(m.group(1))
            if s := _SMEM.search(line):
                out[-1].smem = int(s.group(1))
    return out


def _gencodes(archs, text: str = "") -> list[str]:
    """-gencode flags for archs. Targets of one family share one front-end pass (compute_80's
    PTX for sm_80 / 86, compute_90's for sm_90; ptxas still builds each target) when
    the source never tests __CUDA_ARCH__, so the PTX could not differ between them: the front
    end is most of a template-heavy file's build time (attention_mma.cu). Otherwise one pass
    per arch."""
    if "__CUDA_ARCH__" in text:
        return [g for a in archs for g in ("-gencode", f"arch=compute_{a[3:]},code={a}")]
    family: dict = {}
    for a in archs:
        v = "90" if a.startswith("sm_90") else "80" if a.startswith("sm_8") else a[3:]
        family.setdefault(v, []).append(a)
    return [
        g
        for v, codes in family.items()
        for g in ("-gencode", f"arch=compute_{v},code=[{','.join(codes)}]")
    ]


def _messages(text: str) -> str:
    """nvcc's output without ptxas's info lines (errors and warnings remain)."""
    return "\n".join(
        l
        for l in text.splitlines()
        if l.strip() and not l.startswith("ptxas info") and not _FRAME.search(l)
    )


def _nvcc(path: Path, nvcc: str, archs) -> tuple[int, str]:
    # --threads 2: the archs of one file build two at a time, so both of CI's cores stay busy
    # when one long file is the last one left (nvcc prints each step's ptxas report whole)
    threads = ["--threads", "2"] if len(archs) > 1 else []
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            nvcc,
            *FLAGS,
            *threads,
            *_gencodes(archs, path.read_text()),
            "-fatbin",
            "-o",
            os.path.join(tmp, path.stem + ".fatbin"),
            str(path),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def _build(path: Path, nvcc: str, archs) -> FileResult:
    """One nvcc for all archs; only when that fails, one per arch to say which ones fail (a
    front-end error fails them all, a PTX feature only the older ones)."""
    t0 = time.perf_counter()
    rc, text = _nvcc(path, nvcc, archs)
    kernels = {a: [] for a in archs}
    for k in parse_ptxas(text):
        kernels.setdefault(k.arch, []).append(k)
    res = FileResult(path.name, rc == 0, messages=_messages(text), kernels=kernels)
    if rc != 0:
        for a in archs:
            rc_a, text_a = _nvcc(path, nvcc, (a,))
            res.kernels[a] = parse_ptxas(text_a)
            if rc_a != 0:
                res.failed_archs.append(a)
                res.arch_messages[a] = _messages(text_a)
        if not res.failed_archs:  # fails only together (e.g. out of memory): blame all
            res.failed_archs = list(archs)
    res.seconds = round(time.perf_counter() - t0, 2)
    return res


def find_nvcc() -> str | None:
    """nvcc on PATH, else in $CUDA_HOME / $CUDA_PATH / /usr/local/cuda (often not on PATH)."""
    found = shutil.which("nvcc")
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if found is None and root and (Path(root) / "bin" / "nvcc").is_file():
            found = str(Path(root) / "bin" / "nvcc")
    return found


_VERSIONS: dict = {}


def _nvcc_version(nvcc: str) -> str:
    """`nvcc --version`: part of the cache key, so a new toolkit rebuilds everything."""
    if nvcc not in _VERSIONS:
        r = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
        _VERSIONS[nvcc] = r.stdout.strip()
    return _VERSIONS[nvcc]


def default_cache_dir() -> Path:
    """$QWENREF_COMPILE_CACHE, else build/compile_check in a checkout (git-ignored, and
    `make clean` empties it), else ~/.cache/qwenref/compile_check."""
    if env := os.environ.get("QWENREF_COMPILE_CACHE"):
        return Path(env)
    from ._runtime import PACKAGE_DIR

    repo = PACKAGE_DIR.parent
    if (repo / "pyproject.toml").is_file() and (repo / "kernels_cuda").is_dir():
        return repo / "build" / "compile_check"
    return Path.home() / ".cache" / "qwenref" / "compile_check"


def _in_kernels_dir(path: Path) -> bool:
    from ._runtime import kernels_dir

    try:
        return path.resolve().parent == kernels_dir().resolve()
    except FileNotFoundError:
        return False


def _key(text: str, nvcc: str, archs) -> str:
    h = hashlib.sha256()
    for part in (str(_CACHE_FORMAT), _nvcc_version(nvcc), " ".join(FLAGS), " ".join(archs), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _check_one(path: Path, nvcc: str, archs, cache_dir: Path | None) -> FileResult:
    """A file of kernels_cuda/ is built as kernel_source pastes it, in a folder without its
    headers, and cached; any other file is built where it is and not cached (ad hoc use)."""
    if not _in_kernels_dir(path):
        res = _build(path, nvcc, archs)
        res.source_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        return res
    from ._runtime import kernel_source

    text = kernel_source(path.stem)
    key = _key(text, nvcc, archs)
    # one entry per (file, arch set): a run for fewer archs (--arch) leaves the full one alone
    prefix = f"{path.stem}-{'-'.join(a[3:] for a in archs)}-"
    entry = cache_dir / f"{prefix}{key[:20]}.json" if cache_dir else None
    if entry is not None and entry.is_file():
        try:
            return FileResult.from_json(entry.read_text())
        except (ValueError, TypeError, KeyError):
            pass  # unreadable (interrupted write): rebuild
    with tempfile.TemporaryDirectory() as tmp:
        pasted = Path(tmp) / path.name
        pasted.write_text(text)
        res = _build(pasted, nvcc, archs)
    res.source_sha256 = hashlib.sha256(text.encode()).hexdigest()
    if text == path.read_text():
        shown = str(path)  # nothing pasted: the line numbers are the file's
    elif cache_dir is not None and not res.ok:
        # headers pasted: messages' line numbers are the pasted text's; keep it to look at
        cache_dir.mkdir(parents=True, exist_ok=True)
        shown = str(cache_dir / f"{path.stem}-pasted.cu")
        Path(shown).write_text(text)
    else:
        shown = f"{path.name} (as pasted)"
    res.messages = res.messages.replace(str(pasted), shown)
    res.arch_messages = {a: m.replace(str(pasted), shown) for a, m in res.arch_messages.items()}
    if entry is not None and res.ok:  # a failure is built again: it may be passing
        cache_dir.mkdir(parents=True, exist_ok=True)
        for old in cache_dir.glob(f"{prefix}*.json"):  # older versions of this file
            old.unlink(missing_ok=True)
        tmp_entry = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp_entry.write_text(res.to_json())
        os.replace(tmp_entry, entry)  # atomic: a reader never sees half an entry
    return res


def _in_pool(tasks, jobs):
    """Run the callables of tasks [(weight, fn)], `jobs` (default: CPU count) at a time, the
    heaviest first so the long builds do not end up alone at the tail; results in task order."""
    order = sorted(range(len(tasks)), key=lambda i: -tasks[i][0])
    out: list = [None] * len(tasks)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        futs = {i: pool.submit(tasks[i][1]) for i in order}
        for i, f in futs.items():
            out[i] = f.result()
    return out


def _pasted_tasks(paths, nvcc, archs, cache_dir):
    return [
        (p.stat().st_size * len(archs), functools.partial(_check_one, p, nvcc, archs, cache_dir))
        for p in paths
    ]


def check_files(
    paths, nvcc: str, archs=ARCHS, cache_dir: Path | None = None, jobs: int | None = None
) -> list[FileResult]:
    """Every file for every arch, from the cache where the key matches, else built: one nvcc
    per file, `jobs` (default: CPU count) at a time, largest source first."""
    return _in_pool(_pasted_tasks([Path(p) for p in paths], nvcc, tuple(archs), cache_dir), jobs)


# ---- each file as it is on disk -------------------------------------------------------------


@dataclass
class FileBuild:
    """One file of kernels_cuda/ compiled as it is on disk (AS_FILE_FLAGS, -I its folder)."""

    name: str
    ok: bool
    arch: str = ARCH
    messages: str = ""  # nvcc's output: errors and warnings
    seconds: float = 0.0  # nvcc time when it was built
    cached: bool = False  # True when this run read it from the cache


def _build_as_file(path: Path, nvcc: str, arch: str) -> FileBuild:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            nvcc,
            f"-arch={arch}",
            *AS_FILE_FLAGS,
            *AS_FILE_DEFINES.get(path.name, ()),
            "-I",
            str(path.parent),
            "-o",
            os.path.join(tmp, path.stem + ".ptx"),
            str(path),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
    text = "\n".join(l for l in (r.stdout + r.stderr).splitlines() if l.strip())
    text = text.replace(str(path.parent), path.parent.name)  # kernels_cuda/x.cu(12): ...
    return FileBuild(path.name, r.returncode == 0, arch, text, round(time.perf_counter() - t0, 2))


def _check_as_file(path: Path, nvcc: str, arch: str, cache_dir: Path | None) -> FileBuild:
    """path built as a file, cached like the pasted builds: the key hashes the pasted text
    (the file with every header it includes), so a changed header rebuilds it too."""
    from ._runtime import kernel_source

    entry = None
    if cache_dir is not None and _in_kernels_dir(path):
        try:
            text = kernel_source(path.stem)
        except FileNotFoundError:  # a missing header: the build says so
            text = None
        if text is not None:
            flags = " ".join(AS_FILE_FLAGS + AS_FILE_DEFINES.get(path.name, ()))
            key = _key("as-file " + flags + "\0" + text, nvcc, (arch,))
            entry = cache_dir / f"{path.stem}-file-{arch[3:]}-{key[:20]}.json"
    if entry is not None and entry.is_file():
        try:
            return FileBuild(**json.loads(entry.read_text()), cached=True)
        except (ValueError, TypeError):
            pass  # unreadable (interrupted write): rebuild
    res = _build_as_file(path, nvcc, arch)
    if entry is not None and res.ok:
        cache_dir.mkdir(parents=True, exist_ok=True)
        for old in cache_dir.glob(f"{path.stem}-file-{arch[3:]}-*.json"):
            old.unlink(missing_ok=True)
        d = asdict(res)
        d.pop("cached")
        tmp_entry = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp_entry.write_text(json.dumps(d, indent=1))
        os.replace(tmp_entry, entry)
    return res


def _as_file_tasks(paths, nvcc, archs, cache_dir):
    return [
        (p.stat().st_size, functools.partial(_check_as_file, p, nvcc, a, cache_dir))
        for p in paths
        for a in archs
    ]


def check_as_files(
    paths,
    nvcc: str,
    archs=AS_FILE_ARCHS,
    cache_dir: Path | None = None,
    jobs: int | None = None,
) -> list[FileBuild]:
    """Every file compiled as it is on disk for each of `archs` (`nvcc -arch=<arch> -std=c++17
    -I <its folder> -ptx`), from the cache where the key matches, `jobs` at a time: one
    FileBuild per (file, arch), the archs of a file together."""
    return _in_pool(_as_file_tasks([Path(p) for p in paths], nvcc, archs, cache_dir), jobs)


def check_all(paths, nvcc, archs=ARCHS, cache_dir=None, jobs=None, file_archs=AS_FILE_ARCHS):
    """(check_files(...), check_as_files(...)) of the same files, in one pool; the as-file
    builds are skipped (an empty list) for files outside kernels_cuda/."""
    paths = [Path(p) for p in paths]
    on_disk = [p for p in paths if _in_kernels_dir(p)]
    tasks = _pasted_tasks(paths, nvcc, tuple(archs), cache_dir)
    tasks += _as_file_tasks(on_disk, nvcc, tuple(file_archs), cache_dir)
    out = _in_pool(tasks, jobs)
    return out[: len(paths)], out[len(paths) :]


def mma_smem_requests() -> dict:
    """{kernel (hd): dynamic shared memory bytes} of the mma attention kernels at their default
    options, from attention_plan.mma_smem_bytes (the formula that mirrors attention_mma.cuh's
    layout; attn_partials_q8_mma_sel_n1 has n1's)."""
    from .attention_plan import MMA_HEAD_DIMS, MMA_MAX_COLS, mma_smem_bytes

    return {
        f"attn_partials_q8_mma_n{nt8} (hd {hd})": mma_smem_bytes(hd, nt8)
        for hd in MMA_HEAD_DIMS
        for nt8 in range(1, MMA_MAX_COLS // 8 + 1)
    }


def mma_smem_table(sizes: dict, archs=tuple(SMEM_OPTIN)) -> list[str]:
    """One line per arch of SMEM_OPTIN (those built or not: the plan reads the device's limit
    wherever it runs): how many of the kernels in sizes ({kernel: dynamic shared memory
    bytes}) fit what one block may opt into there (SMEM_OPTIN), and which do not: there the
    plan runs v1 instead. The other kernels' shared memory stays under the 48 KB every arch
    allows."""
    lines = []
    for a in archs:
        over = [f"{k} {b} B" for k, b in sizes.items() if b > SMEM_OPTIN[a]]
        line = f"{a:<7} {SMEM_OPTIN[a]:>6} B: {len(sizes) - len(over)} of {len(sizes)} fit"
        lines.append(line + (f"; over, v1 runs instead: {', '.join(over)}" if over else ""))
    return lines


def _kernel_files(args: list[str]) -> list[Path]:
    if args:
        return [Path(a) for a in args]
    from ._runtime import kernels_dir

    try:
        return sorted(kernels_dir().glob("*.cu"))
    except FileNotFoundError:
        return []


def _arch_line(arch: str, results: list[FileResult]) -> str:
    ks = [(r.name, k) for r in results for k in r.kernels.get(arch, [])]
    failed = [r.name for r in results if arch in r.failed_archs]
    top = max(ks, key=lambda rk: rk[1].registers, default=None)
    regs = f"{top[1].registers} ({top[1].name})" if top else "-"
    spill = [k.name for _, k in ks if k.spill_stores or k.spill_loads]
    some = ", ".join(spill[:2]) + (f", {len(spill) - 2} more" if len(spill) > 2 else "")
    return (
        f"{arch:<7} {len(ks):>4} kernels  max regs {regs:<32} "
        f"spilling {len(spill)}{f' ({some})' if spill else ''}  "
        f"failed {', '.join(failed) if failed else '-'}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m qwenref.gpu.compile_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("files", nargs="*", help="default: every kernels_cuda/*.cu")
    ap.add_argument(
        "--no-cache", action="store_true", help="rebuild, do not read or write the cache"
    )
    ap.add_argument(
        "--jobs", type=int, default=None, help="nvcc processes at once (default: CPU count)"
    )
    ap.add_argument(
        "--arch",
        action="append",
        choices=ARCHS,
        help="only this architecture (repeatable; default: all of " + " ".join(ARCHS) + ")",
    )
    args = ap.parse_args(argv)

    nvcc = find_nvcc()
    if nvcc is None:
        print("compile_check: nvcc not found on PATH; skipping the kernel compile check")
        return 0
    files = _kernel_files(args.files)
    if not files:
        print("compile_check: no kernels_cuda/*.cu files found; nothing to compile")
        return 0

    archs = tuple(a for a in ARCHS if a in args.arch) if args.arch else ARCHS
    table = ARCH if ARCH in archs else archs[-1]
    cache_dir = None if args.no_cache else default_cache_dir()
    t0 = time.perf_counter()
    results, as_files = check_all(files, nvcc, archs, cache_dir, args.jobs)
    wall = time.perf_counter() - t0
    n_cached = sum(r.cached for r in results) + sum(b.cached for b in as_files)
    n_built = len(results) + len(as_files) - n_cached
    where = f", cache {cache_dir}" if cache_dir else ""
    print(
        f"compile_check: nvcc {' '.join(FLAGS)} for {' '.join(archs)}, {len(files)} file(s), "
        f"and {len(as_files)} as on disk: {n_built} builds, {n_cached} cached, {wall:.1f} s"
        f"{where}"
    )
    print(f"per kernel, {table}:")
    print(
        f"{'file':<20} {'kernel':<34} {'regs':>5} {'stack':>6} {'spill_st':>9} "
        f"{'spill_ld':>9} {'smem':>7}"
    )
    for r in results:
        if table in r.failed_archs:
            print(f"{r.name:<20} FAILED TO COMPILE for {table}")
            continue
        if not r.kernels.get(table):
            print(f"{r.name:<20} (no kernels)")
        for k in r.kernels.get(table, []):
            spill = "  <- spills" if k.spill_stores or k.spill_loads else ""
            print(
                f"{r.name:<20} {k.name:<34} {k.registers:>5} {k.stack:>6} {k.spill_stores:>9} "
                f"{k.spill_loads:>9} {k.smem:>7}{spill}"
            )
    print("per arch:")
    for a in archs:
        print("  " + _arch_line(a, results))
    if any(r.name == _MMA_FILE for r in results):
        print("mma attention kernels' dynamic shared memory, per arch (what a block may opt into):")
        for line in mma_smem_table(mma_smem_requests()):
            print("  " + line)
    if as_files:
        bad = [b for b in as_files if not b.ok]
        print(
            f"as files (nvcc -arch=<{' | '.join(AS_FILE_ARCHS)}> {' '.join(AS_FILE_FLAGS)} "
            f"-I kernels_cuda): {len(as_files)} build(s), failed "
            f"{', '.join(f'{b.name} ({b.arch})' for b in bad) or '-'}"
        )
        for b in bad:
            print(f"{b.name}: FAILED TO COMPILE as a file for {b.arch}\n{b.messages}")
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"{r.name}: FAILED TO COMPILE for {', '.join(r.failed_archs)}")
        for a in r.failed_archs:
            print(f"--- {a}:\n{r.arch_messages.get(a) or r.messages}")
    for r in results:
        if r.ok and r.messages:  # warnings: shown, not fatal
            print(f"{r.name}: nvcc says:\n{r.messages}")
    which = [f"{r.name} ({' '.join(r.failed_archs)})" for r in failed]
    which += [f"{b.name} (as a file, {b.arch})" for b in as_files if not b.ok]
    if which:
        print(f"compile_check: {len(which)} build(s) failed: {', '.join(which)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
