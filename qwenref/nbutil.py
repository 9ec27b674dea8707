"""Helpers the notebooks share: the records of GPU runs (measured now or recorded, from
qwenref.nbrecords) and their ladder plots and tables, the rule for runs above their read floor
(qwenref.floor), kernel source by definition name, the relative error, and a printout of runs.
Plotting imports matplotlib lazily so `import qwenref` stays light. Live timings in the
notebooks come from qwenref.timing, like the bench's."""

from __future__ import annotations

import inspect

import numpy as np

from .excerpts import kernel_excerpt, kernel_header, show_excerpt
from .floor import floor_note, floor_reason
from .nbrecords import (
    Records,
    above_floor,
    best_rungs,
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
    "live_wanted",
    "plot_ladder",
    "plot_splits",
    "print_ladder",
    "recorded",
    "recorded_pairs",
    "recorded_samples",
    "stage_records",
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
