"""Tune gemv.cu's launch configurations on the 27B layer's projection shapes (GPU only).

    python -m qwenref.dev.tune_gemv [--old path/to/old_gemv.cu] [--nbs 1,4,8] [--f32]

Compiles gemv.cu with -DGEMV_TUNE (the extra variants), checks every variant against a float64
reference (norm-wise rel. error < 1e-5, poisoned output), and times it like qwenref.bench
(timing.queued_us: CUDA events, spin-queued batches, median, weights rotated past 2 x L2).
Prints one line per (shape, nb, variant): microseconds, GB/s (bytes the kernel must move,
bench.counting.bytes_gemv_q8), % of the 1 GiB device-copy ceiling measured in the same run.
--old times a previous gemv.cu's gemv_q8_nb<nb> kernels (the old launch: 128 threads, 16 rows
per CTA) for a before/after line.
--f32 also times the f32 GEMV variants against cuBLAS sgemm (gpu.linear).
"""

from __future__ import annotations

import argparse
import re
import time

from .. import timing
from ..bench.cases_gemv import PROJS
from ..bench.counting import bytes_gemv_q8, bytes_linear
from ..gpu import gemv as G
from ..gpu._runtime import cupy, include_opts, kernel_source, module

SHAPES = list(PROJS)
BATCHES = 15  # fewer than the bench's 25: a sweep times many variants
TOL = 1e-5  # norm-wise relative error a variant must stay under (float32 sums of n_in terms)


def _variants(kind, nb):
    """(rows, threads, unroll, name suffix) of every gemv.cu kernel for (kind, nb)."""
    src = kernel_source("gemv")
    out = {
        (int(r), int(t), int(u), f"r{r}t{t}u{u}")
        for r, t, u in re.findall(rf"GEMV_KERNEL\({kind}, \w+, {nb}, (\d+), (\d+), (\d+)\)", src)
    }
    out |= {
        (int(r), int(t), int(u), f"r{r}t{t}u{u}m{m}")
        for r, t, u, m in re.findall(
            rf"GEMV_KERNEL_MB\({kind}, \w+, {nb}, (\d+), (\d+), (\d+), (\d+)\)", src
        )
    }
    return sorted(out)


def _launcher(fn, rows, threads, x, weights, y, n_in, n_out, nb):
    """run(i): one launch of the gemv.cu kernel fn over weights[i] = (w, d) (d None for f32),
    `rows` outputs per CTA of `threads` threads, into y."""
    cp = cupy()
    scalars = (cp.int32(n_in), cp.int32(n_out), *(cp.int32(n_out),) * 4)
    tail = (cp.int32(0), cp.int32(nb), cp.int32(0))

    def run(i):
        w, d = weights[i]
        d = cp.uint64(0) if d is None else d
        fn(((n_out + rows - 1) // rows,), (threads,), (x, w, d, y, cp.uint64(0), *scalars, *tail))

    return run


def _sweep(kind, tmod, shape, weights, w_ref, nbs, nbytes, line, first=None):
    """Every gemv.cu variant of `kind` (and first(nb, x, y) -> (label, run), a reference run
    timed before them, when given) on one projection shape for each nb: checked on a poisoned
    output against x @ w_ref.T in float64, then timed over the rotated weights."""
    cp = cupy()
    name, n_out, n_in = shape
    for nb in nbs:
        x = cp.random.standard_normal((nb, n_in), dtype=cp.float32)
        ref = x.astype(cp.float64) @ w_ref.T
        y = cp.empty((nb, n_out), cp.float32)
        runs = [] if first is None else [first(nb, x, y)]
        for r, t, _, suffix in _variants(kind, nb):
            kname = f"gemv_{kind}_nb{nb}_{suffix}"
            star = " *" if G.pick_kernel(kind, nb, n_out)[2] == kname else ""  # the wrapper's
            label = ("f32 " if kind == "f32" else "") + suffix + star
            fn = tmod.get_function(kname)
            runs.append((label, _launcher(fn, r, t, x, weights, y, n_in, n_out, nb)))
        for label, run in runs:
            y.fill(cp.nan)
            run(0)
            err = float(cp.linalg.norm(y - ref) / cp.linalg.norm(ref))
            line(name, nb, label, timing.queued_us(run, len(weights), BATCHES).us, nbytes(nb), err)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", default=None)
    ap.add_argument("--nbs", default="1,4,8")
    ap.add_argument("--f32", action="store_true")
    ap.add_argument(
        "--shapes", default=None, help="comma-separated indices into bench.cases_gemv.PROJS"
    )
    args = ap.parse_args(argv)
    cp = cupy()
    l2 = timing.l2_bytes()
    copy = timing.copy_gbps(batches=BATCHES)
    print(f"copy ceiling {copy:.0f} GB/s, L2 {l2 >> 20} MiB", flush=True)
    tmod = module("gemv", ("-DGEMV_TUNE",))
    old = None
    if args.old:
        old = cp.RawModule(
            code=open(args.old).read(), options=("--std=c++17", "-default-device", *include_opts())
        )
    nbs = [int(v) for v in args.nbs.split(",")]
    rows = []

    def line(shape, nb, var, us, nbytes, err):
        gbps = nbytes / (us * 1e-6) / 1e9
        rows.append((shape, nb, var, us, gbps, 100 * gbps / copy, err))
        print(
            f"{shape:<22} nb={nb} {var:<24} {us:9.2f} us {gbps:7.0f} GB/s "
            f"{100 * gbps / copy:5.1f}%  rel_err {err:.1e}",
            flush=True,
        )

    shapes = SHAPES if not args.shapes else [SHAPES[int(i)] for i in args.shapes.split(",")]
    for shape in shapes:
        _, n_out, n_in = shape
        q = cp.random.randint(-127, 128, (n_out, n_in), dtype=cp.int32).astype(cp.int8)
        d = cp.random.random((n_out, n_in // 32), dtype=cp.float32) * 0.02 + 1e-3
        d = d.astype(cp.float16)
        n_rot = timing.rotations(bytes_gemv_q8(1, n_in, n_out), l2)
        weights = [(q, d)] + [(q.copy(), d.copy()) for _ in range(n_rot - 1)]
        w_ref = q.astype(cp.float64) * cp.repeat(d.astype(cp.float64), 32, axis=1)

        def old_run(nb, x, y, weights=weights, n_out=n_out, n_in=n_in):
            fn = old.get_function(f"gemv_q8_nb{nb}")
            return "old r16 (4 warps x 4)", _launcher(fn, 16, 128, x, weights, y, n_in, n_out, nb)

        nbytes = lambda nb, n_in=n_in, n_out=n_out: bytes_gemv_q8(nb, n_in, n_out)
        first = old_run if old is not None else None
        _sweep("q8", tmod, shape, weights, w_ref, nbs, nbytes, line, first)
        weights = q = d = w_ref = None  # free before the next shape
        cp.get_default_memory_pool().free_all_blocks()

    if args.f32:
        for shape in shapes:
            _, n_out, n_in = shape
            w = cp.random.standard_normal((n_out, n_in), dtype=cp.float32)
            n_rot = timing.rotations(bytes_linear(1, n_in, n_out, 4), l2)
            weights = [(w, None)] + [(w.copy(), None) for _ in range(n_rot - 1)]

            def cublas(nb, x, y, weights=weights):
                return "f32 cuBLAS (linear)", lambda i: G.linear(x, weights[i][0], out=y)

            nbytes = lambda nb, n_in=n_in, n_out=n_out: bytes_linear(nb, n_in, n_out, 4)
            _sweep("f32", tmod, shape, weights, w.astype(cp.float64), nbs, nbytes, line, cublas)
            weights = w = None
            cp.get_default_memory_pool().free_all_blocks()

    print("\nbest per (shape, nb):")
    best = {}
    for r in rows:
        key = (r[0], r[1], r[2].startswith("f32"))
        if r[6] < TOL and (key not in best or r[3] < best[key][3]):
            best[key] = r
    for r in best.values():
        print(f"{r[0]:<22} nb={r[1]} {r[2]:<24} {r[3]:9.2f} us {r[5]:5.1f}% of copy")
    bad = [r for r in rows if not r[6] < TOL]
    print(f"{len(bad)} variants failed the {TOL:g} check" + (f": {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"tune_gemv: {time.time() - t0:.0f} s")
    raise SystemExit(rc)
