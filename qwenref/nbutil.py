"""Helpers the notebooks share: the records of GPU runs (measured now or recorded, from
qwenref.nbrecords) and their ladder plots and tables, the rule for runs above their read floor
(qwenref.floor), kernel source by definition name, the relative error, a printout of runs, and
what the two cache notebooks (04, 05) both measure: float64 attention, the dense 27B config,
the stored cache's error against its float32 input, and every append rung's error on a GPU.
Plotting imports matplotlib lazily so `import qwenref` stays light. Live timings in the
notebooks come from qwenref.timing, like the bench's."""

from __future__ import annotations

import inspect

import numpy as np

from . import golden
from .config import AttnConfig
from .excerpts import kernel_excerpt, kernel_header, show_excerpt
from .floor import floor_note, floor_reason
from .nbrecords import (
    Records,
    above_floor,
    best_rungs,
    family_ladders,
    ladder_records,
    live_wanted,
    load_results,
    load_samples,
    plot_ladder,
    plot_splits,
    print_ladder,
    recorded,
    recorded_pairs,
    recorded_samples,
    results_path,
    run_samples,
    stage_records,
)

__all__ = [
    "results_path",
    "load_results",
    "gpu_available",
    "show_source",
    "kernel_excerpt",
    "kernel_header",
    "show_excerpt",
    "relerr",
    "load_samples",
    "print_runs",
    "Records",
    "above_floor",
    "floor_reason",
    "floor_note",
    "best_rungs",
    "ladder_records",
    "family_ladders",
    "live_wanted",
    "plot_ladder",
    "plot_splits",
    "print_ladder",
    "recorded",
    "recorded_pairs",
    "recorded_samples",
    "run_samples",
    "stage_records",
    "attn64",
    "dense_cfg",
    "bench_like_rows",
    "stored_values",
    "golden_errors",
    "print_live_errors",
]


def gpu_available():
    from .gpu import available

    return available()


def show_source(obj):
    """Print an object's source as the package has it (notebooks never re-type golden code)."""
    print(inspect.getsource(obj))


def relerr(a, ref):
    """Norm-wise relative error ||a - ref|| / ||ref|| in float64."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def print_runs(runs, copy_gbps=None):
    """One fixed-width line per run (bench fields; absent ones print '-')."""

    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    if copy_gbps:
        print(f"device copy ceiling {copy_gbps:.0f} GB/s")
    for r in runs:
        shape = ",".join(f"{k}={v}" for k, v in r.get("shape", {}).items())
        line = (
            f"{str(r.get('kernel')):<26} {shape:<30} {f(r.get('median_us'), '9.2f')} us "
            f"{f(r.get('gbps'), '7.0f')} GB/s {f(r.get('pct_of_copy'), '5.1f')}% of copy"
        )
        if r.get("rel_err") is not None:
            line += f"  rel_err {r['rel_err']:.1e}"
        if r.get("peer_median_us"):
            line += (
                f"  | {r.get('peer')}: {r['peer_median_us']:.2f} us "
                f"(ours {f(r.get('speedup'), '.2f')}x)"
            )
        if r.get("code_match") is not None:
            line += f"  | stored bytes equal to golden: {100 * r['code_match']:.4f}%"
        print(line)


def attn64(q, K, V):
    """softmax(q·k/√hd)·v in float64 with GQA. q [n, nh, hd], K, V [nkv, T, hd] ->
    (out [n, nh, hd], N_eff = mean over rows of 1/Σp², how many tokens carry the softmax)."""
    n, nh, hd = q.shape
    nkv = K.shape[0]
    qg = q.astype(np.float64).reshape(n, nkv, nh // nkv, hd).transpose(1, 0, 2, 3)
    qg = qg.reshape(nkv, -1, hd)  # [G, n·R, D]: each kv head's query rows, one matmul
    K, V = K.astype(np.float64, copy=False), V.astype(np.float64, copy=False)
    s = (qg @ K.transpose(0, 2, 1)) / np.sqrt(hd)  # [G, n·R, T]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    n_eff = float(np.mean(1 / (p**2).sum(-1)))
    o = (p @ V).reshape(nkv, n, nh // nkv, hd).transpose(1, 0, 2, 3)
    return o.reshape(n, nh, hd), n_eff


def dense_cfg(cfg=None):
    """Qwen3.5-27B's attention (or cfg) without the block indexer: every row reads every token."""
    cfg = cfg or AttnConfig.qwen35_27b()
    return cfg.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )


def bench_like_rows(nb, cfg, seed=5):
    """K and V float32 [nb, nkv, hd] drawn like the bench's inputs: unit normals with every
    (size // 37)-th value ×8 (a few outliers)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        x = rng.standard_normal((nb, cfg.nkv, cfg.head_dim)).astype(np.float32)
        x.reshape(-1)[:: max(1, x.size // 37)] *= np.float32(8)
        out.append(x)
    return out


def stored_values(cache, nb):
    """K then V of a golden cache's first nb tokens, dequantized and un-rotated, flat float32."""
    sides = []
    for vals, rotated in ((cache.keys(nb), cache.k_rotated), (cache.values(nb), cache.v_rotated)):
        sides.append((golden.wht(vals) if rotated else vals).ravel())
    return np.concatenate(sides)


def golden_errors(kind, cfg, nb=1024):
    """Relative error of golden's stored K and V (dequantized, un-rotated) against the float32
    input taken as exact, on bench-like rows; with the input and cache for reuse."""
    k, v = bench_like_rows(nb, cfg)
    c = golden.KVCache(cfg, max_t=nb, kind=kind)
    c.append(k, v)
    truth = np.concatenate([k.transpose(1, 0, 2).ravel(), v.transpose(1, 0, 2).ravel()])
    return relerr(stored_values(c, nb), truth), (k, v, c, truth)


def _bytes_equal(got, ref):
    """Share of the stored arrays' elements (codes, scales; K and V) equal in two caches."""
    pairs = [
        (getattr(got, s)[n], getattr(ref, s)[n])
        for s in ("k_store", "v_store")
        for n in getattr(ref, s)
    ]
    return sum(int((a == b).sum()) for a, b in pairs) / sum(b.size for _, b in pairs)


def print_live_errors(kind, family, cfg, nb=1024):
    """On a GPU, every rung of `family` on the same bench-like rows: golden vs float64, GPU vs
    golden, GPU vs float64 (relative), and the share of stored elements equal to golden's."""
    import cupy as cp

    from . import gpu
    from .gpu import kvcache as gkv

    g_err, (k, v, gc, truth) = golden_errors(kind, cfg, nb)
    gold = stored_values(gc, nb)
    print(f"measured just now on this GPU, {kind}, nb={nb}; golden vs float64: {g_err:.2e}")
    for impl in gkv.RUNGS[family]:
        c = gpu.KVCache(cfg, max_t=nb, kind=kind)
        c.append(cp.asarray(k), cp.asarray(v), impl=impl)
        got = c.to_golden()
        mine = stored_values(got, nb)
        name = gkv.rung_kernel(family, impl, head_dim=cfg.head_dim)
        print(
            f"{impl} {name:<22} GPU vs golden {relerr(mine, gold):.1e}  GPU vs float64 "
            f"{relerr(mine, truth):.2e}  stored equal {100 * _bytes_equal(got, gc):.4f}%"
        )
