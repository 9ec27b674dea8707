"""The bench's driver: the run list (every stage case at its shapes, then the ladder), running
it with one error row per failing case, and the command line of `python -m qwenref.bench`."""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import traceback

from ..layout import TQ_KINDS
from .cases_attention import case_attention
from .cases_elementwise import case_norm, case_rope, case_wht
from .cases_gemv import PROJS, case_gemv
from .cases_indexer import case_qsa
from .cases_kvcache import case_append, case_quantize
from .cases_layer import case_layer
from .context import Context
from .ladder import LADDER
from .records import device_slug, error_run, format_table, require_commit, write_results

__all__ = ["STAGES", "case_list", "case_kind", "run_all", "stage_list", "kind_list", "main"]

K = 1024  # tokens in a "k" of context
STAGES = ("norm", "rope", "wht", "kvcache", "attention", "indexer", "gemv", "layer", "ladder")


def case_list(quick):
    """(stage, kernel, shape, callable) in run order; quick = fewer and smaller."""
    qk = quick
    cases = (
        [
            (
                "norm",
                "rms_norm",
                {"rows": 8192, "n": 5120},
                lambda c: case_norm(c, 8192, 5120, False),
            ),
            (
                "norm",
                "add_rms_norm",
                {"rows": 8192, "n": 5120},
                lambda c: case_norm(c, 8192, 5120, True),
            ),
            ("norm", "rms_norm", {"rows": 1, "n": 5120}, lambda c: case_norm(c, 1, 5120, False)),
            ("rope", "qk_norm_rope", {"nb": 4096}, lambda c: case_rope(c, 4096)),
            ("rope", "qk_norm_rope", {"nb": 1}, lambda c: case_rope(c, 1)),
            ("wht", "wht", {"rows": 262144, "n": 256}, lambda c: case_wht(c, 262144, 256)),
            ("wht", "wht", {"rows": 524288, "n": 128}, lambda c: case_wht(c, 524288, 128)),
            (
                "kvcache",
                "q8_quantize",
                {"rows": 262144, "n": 256},
                lambda c: case_quantize(c, 262144, 256, "q8"),
            ),
            (
                "kvcache",
                "turbo_quantize bits=4",
                {"rows": 262144, "n": 256},
                lambda c: case_quantize(c, 262144, 256, 4),
            ),
            ("kvcache", "KVCache.append q8", {"nb": 4096}, lambda c: case_append(c, 4096, "q8")),
        ]
        + (
            []
            if qk
            else [
                # a 16k-token prefill chunk: 170 MB, a size where launch and tail are a small share
                (
                    "kvcache",
                    "KVCache.append q8",
                    {"nb": 16384},
                    lambda c: case_append(c, 16384, "q8"),
                ),
            ]
        )
        + [
            (
                "kvcache",
                "KVCache.append turbo4",
                {"nb": 4096},
                lambda c: case_append(c, 4096, "turbo4"),
            ),
            ("kvcache", "KVCache.append q8", {"nb": 1}, lambda c: case_append(c, 1, "q8")),
        ]
        + [
            (
                "kvcache",
                f"KVCache.append {kind}",
                {"nb": 4096},
                lambda c, kind=kind: case_append(c, 4096, kind),
            )
            for kind in (("tq4",) if qk else TQ_KINDS)
        ]
    )
    cases += _attention_cases(qk)
    for kind, nb in _qsa_runs(qk):
        T = 32 * K if qk else 128 * K
        cases.append(
            (
                "indexer",
                f"QSA selective {kind}",
                {"T": T, "nb": nb},
                lambda c, T=T, nb=nb, kind=kind: case_qsa(c, T, nb, kind),
            )
        )
    for name, n_out, n_in in PROJS:
        nbs = [1] if qk else [1, 4, 8]
        cases.append(
            (
                "gemv",
                f"gemv_q8 {name}",
                {"n_in": n_in, "n_out": n_out},
                lambda c, a=(name, n_out, n_in, nbs): case_gemv(c, *a),
            )
        )
    T = (4 if qk else 32) * K
    cases.append(
        ("layer", "decode step q8", {"T": T}, lambda c: case_layer(c, T, [1] if qk else [1, 4]))
    )
    for kind in () if qk else ("q8", "turbo4"):  # the dense layer (no indexer) at its floor
        cases.append(
            (
                "layer",
                f"dense decode step {kind}",
                {"T": T, "kind": kind},
                lambda c, kind=kind: case_layer(c, T, [1], kind, dense=True),
            )
        )
    for fn, sizes in LADDER:
        for kw in sizes[:1] if qk else sizes:
            cases.append(("ladder", fn.__name__, kw, lambda c, fn=fn, kw=kw: fn(c, **kw)))
    return cases


def _attention_cases(qk):
    """Dense decode: q8 at 4k and 32k (quick: and three more kinds at 32k); else every cache kind
    with GPU kernels at 32k and 128k tokens with 1 and 4 rows, and q8 at 4k."""
    from ..layout import CACHE_KINDS

    if qk:
        runs = [("q8", 4 * K, 1), ("q8", 32 * K, 1)]
        runs += [(kind, 32 * K, 1) for kind in ("f32", "turbo4", "bf16k-turbo4v")]
    else:
        runs = [("q8", 4 * K, 1)]
        runs += [(kd, T, nb) for kd in CACHE_KINDS for T in (32 * K, 128 * K) for nb in (1, 4)]
    return [
        (
            "attention",
            f"decode_attention {kind}",
            {"T": T, "nb": nb},
            lambda c, kind=kind, T=T, nb=nb: case_attention(c, T, nb, kind),
        )
        for kind, T, nb in runs
    ]


def _qsa_runs(qk):
    """(kind, rows) of the selective path: q8 with 1 row (quick), else every kind with GPU
    kernels with 1 row and q8 with 4."""
    from ..layout import CACHE_KINDS

    return [("q8", 1)] if qk else [(kind, 1) for kind in CACHE_KINDS] + [("q8", 4)]


def case_kind(kernel, shape):
    """The cache kind a case measures (its shape's "kind", else its name's last word when that
    is a cache kind), or None."""
    from ..layout import CACHE_KINDS

    last = kernel.split()[-1]
    return shape.get("kind") or (last if last in CACHE_KINDS else None)


def run_all(quick=False, only=None, kinds=None):
    """Run the cases (all, or those of the stages in `only`, and of the cache kinds in `kinds`:
    a case of no kind is then left out) -> (ctx, n_failed)."""
    ctx = Context(quick)
    print(f"{ctx.device}: copy ceiling {ctx.copy_gbps:.1f} GB/s, L2 {ctx.l2 / 2**20:.0f} MiB")
    print(format_table([]).splitlines()[0])
    for stage, kernel, shape, fn in case_list(quick):
        if only and stage not in only:
            continue
        if kinds and case_kind(kernel, shape) not in kinds:
            continue
        n0 = len(ctx.runs)
        try:
            fn(ctx)
        except Exception as e:  # one broken stage must not stop the bench
            ctx.add(error_run(stage, kernel, shape, e))
            traceback.print_exc(limit=3, file=sys.stderr)
        if len(ctx.runs) == n0:
            ctx.add(error_run(stage, kernel, shape, RuntimeError("case added no run")))
        try:  # the case's arrays are gone: give memory back
            ctx.cp.get_default_memory_pool().free_all_blocks()
            if ctx.torch is not None:
                ctx.torch.cuda.empty_cache()
        except Exception:  # best effort: the next case allocates anew
            pass
    failed = sum(1 for r in ctx.runs if not r.get("ok", False))
    return ctx, failed


def _versions(ctx):
    cp = ctx.cp
    v = cp.cuda.runtime.runtimeGetVersion()
    return {
        "cupy": cp.__version__,
        "cuda": f"{v // 1000}.{(v % 1000) // 10}",
        "torch": getattr(ctx.torch, "__version__", None),
    }


def _names(text, allowed, what):
    """Comma-separated names, each one of `allowed` -> a set (argparse error naming `what`)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in allowed]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {bad or text!r}; choose from {', '.join(allowed)}"
        )
    return set(names)


def stage_list(text):
    """--only's argument: comma-separated names of STAGES -> a set (argparse error otherwise)."""
    return _names(text, STAGES, "stage(s)")


def kind_list(text):
    """--kinds's argument: comma-separated cache kinds -> a set (argparse error otherwise)."""
    from ..layout import CACHE_KINDS

    return _names(text, CACHE_KINDS, "cache kind(s)")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m qwenref.bench",
        description="Validate every GPU kernel against the golden model, time it, and record "
        "results/<device>.json and .npz (needs QWENREF_COMMIT=<sha> unless --dry).",
    )
    ap.add_argument("--quick", action="store_true", help="fewer, smaller runs and fewer repeats")
    ap.add_argument(
        "--only",
        type=stage_list,
        metavar="STAGE[,STAGE...]",
        help=f"run these stages of {','.join(STAGES)} (their runs replace those "
        f"stages' runs in an existing results file)",
    )
    ap.add_argument(
        "--kinds",
        type=kind_list,
        metavar="KIND[,KIND...]",
        help="run only the cases of these cache kinds (their runs replace those stages' runs "
        "of the same kinds in an existing results file)",
    )
    ap.add_argument("--out", default="results", help="directory for <device>.json/.npz")
    ap.add_argument("--dry", action="store_true", help="print the table, record nothing")
    args = ap.parse_args(argv)
    commit = None
    if not args.dry:
        try:
            commit = require_commit()
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
    from ..gpu._runtime import available

    if not available():
        try:
            from ..gpu._runtime import cupy

            cupy()
        except RuntimeError as e:
            print(f"qwenref.bench: {e}", file=sys.stderr)
        return 1
    ctx, failed = run_all(args.quick, args.only, args.kinds)
    print()
    print(format_table(ctx.runs, ctx.copy_gbps))
    doc = {
        "device": ctx.device,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit or "",
        **_versions(ctx),
        "copy_gbps": ctx.copy_gbps,
        "l2_bytes": ctx.l2,
        "quick": bool(args.quick),
        "only": sorted(args.only) if args.only else None,
        "kinds": sorted(args.kinds) if args.kinds else None,
        "runs": ctx.runs,
    }
    if args.dry:
        print("\n--dry: nothing recorded")
    else:
        for r in ctx.runs:
            r["commit"] = commit
        j, n = write_results(
            doc,
            ctx.samples,
            args.out,
            device_slug(ctx.device),
            merge=args.only is not None or args.kinds is not None,
        )
        print(f"\nwrote {j} and {n}")
    if failed:
        print(f"{failed} run(s) failed or missed their tolerance", file=sys.stderr)
    return 1 if failed else 0
