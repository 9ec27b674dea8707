"""python -m qwenref.status [--results results/nvidia-h200.json] [--out docs/performance.md]

Writes the performance status page (Markdown) from a results file of `python -m qwenref.bench`:
the device and its software, the commits the runs were recorded at with the copy rate each run
measured, one table per pipeline stage, and one "ladder" table per kernel family (the runs that
the bench's ladder recorded: v0, the direct translation of the golden formula, then each faster
rung). Everything on the page comes from the results file; re-run this after re-recording
results (tests/test_status.py fails while the page and the file disagree). `--check` writes
nothing and exits 1 when the page is out of date. Pure Python: no GPU, no numpy.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from . import floor

__all__ = ["STAGE_ORDER", "render", "load", "main", "run_timing", "copy_rate"]

# the bench's pipeline stages, in the order a decode step runs them (gemv before layer)
STAGE_ORDER = ("norm", "rope", "wht", "kvcache", "attention", "indexer", "gemv", "layer")
_SHORT_SHA = 7


def load(path):
    """The results document at `path` (JSON)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _sig(v, sig):
    """v with `sig` significant digits, never in exponent form; '-' for a missing value."""
    if not _num(v):
        return "-"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    return f"{v:.{max(sig - 1 - mag, 0)}f}"


def _pct(v):
    """A percentage: one decimal from 1 % up, two significant digits below."""
    if not _num(v):
        return "-"
    return f"{v:.1f}" if abs(v) >= 1 else _sig(v, 2)


def _err(v):
    if not _num(v):
        return "-"
    return "0" if v == 0 else f"{v:.1e}"


def _cell(text):
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _sha(commit):
    return str(commit or "?")[:_SHORT_SHA]


def _shape(shape, skip=()):
    return " ".join(f"{k}={v}" for k, v in (shape or {}).items() if k not in skip)


def _common_shape(runs):
    """The shape entries every run of `runs` has with the same value (stated once per table)."""
    shapes = [r.get("shape") or {} for r in runs]
    return {k: v for k, v in shapes[0].items() if all(k in s and s[k] == v for s in shapes)}


def run_timing(run):
    """How a run was timed: its `timing` field, else what the bench derives from the kernel
    name ("graph" for CUDA-graph replays, "eager" for host launches, else "queued")."""
    if run.get("timing"):
        return run["timing"]
    kernel = str(run.get("kernel", ""))
    return "graph" if "graph replay" in kernel else "eager" if "eager" in kernel else "queued"


def copy_rate(run):
    """The device-to-device copy rate (GB/s) measured in the run that recorded `run`: its
    copy_gbps, or for runs recorded before that field gbps / pct_of_copy · 100 (the bench's
    definition of pct_of_copy), or None."""
    if _num(run.get("copy_gbps")):
        return run["copy_gbps"]
    g, p = run.get("gbps"), run.get("pct_of_copy")
    return 100.0 * g / p if _num(g) and _num(p) and p > 0 else None


def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _floor_cell(run, l2):
    """% of floor, and above 100 % the reason by qwenref.floor's rule (l2: the L2's bytes)."""
    why = floor.floor_reason(run, l2)
    return _pct(run.get("pct_of_floor")) + (f" ({floor.REASONS[why]})" if why else "")


def _numbers(run, *cols, l2=None):
    """Cells of `cols` for one run; an error run says so in its first number cell."""
    if run.get("error"):
        return ["ERROR: " + str(run["error"])] + [""] * (len(cols) - 1)
    fmt = {
        "us": lambda r: _sig(r.get("median_us"), 4),
        "gbps": lambda r: _sig(r.get("gbps"), 4),
        "copy": lambda r: _pct(r.get("pct_of_copy")),
        "floor": lambda r: _floor_cell(r, l2),
        "err": lambda r: (
            _err(r.get("rel_err"))
            + ("" if r.get("ok", True) else f" (over tol {_err(r.get('tol'))})")
        ),
    }
    return [fmt[c](run) for c in cols]


def _commits(runs):
    return list(dict.fromkeys(_sha(r.get("commit")) for r in runs))


def _shape_line(runs, what):
    """The table's preamble: its commits and the shape entries all its runs share."""
    common = _common_shape(runs)
    text = f"Commit {', '.join(_commits(runs))}."
    if common:
        text += f" Every {what} has {_shape(common)}."
    return text, tuple(common)


def _stage_table(runs, common, l2=None):
    floor = any("pct_of_floor" in r for r in runs)
    peer = any("peer" in r for r in runs)
    multi = len(_commits(runs)) > 1
    head = ["kernel", "shape", "µs", "GB/s", "% of copy"] + (["% of floor"] if floor else [])
    head += ["rel_err"] + (["peer", "peer µs", "speedup"] if peer else []) + ["timing"]
    head += ["commit"] if multi else []
    rows = []
    for r in runs:
        cols = ("us", "gbps", "copy") + (("floor",) if floor else ()) + ("err",)
        row = [r.get("kernel", "?"), _shape(r.get("shape"), common) or "-"]
        row += _numbers(r, *cols, l2=l2)
        if peer:
            row += (
                [r["peer"], _sig(r.get("peer_median_us"), 4), _speed(r.get("speedup"))]
                if "peer" in r
                else ["", "", ""]
            )
        row.append(run_timing(r))
        rows.append(row + ([_sha(r.get("commit"))] if multi else []))
    return _table(head, rows)


def _speed(v):
    """A ratio: two decimals below 100, none from 100 up."""
    if not _num(v):
        return "-"
    return f"{v:.0f}×" if abs(v) >= 100 else f"{v:.2f}×"


def _ladder_table(runs, common, l2=None):
    """One family's rungs, grouped by shape (in file order), each shape's rungs ascending."""
    shapes = list(dict.fromkeys(_shape(r.get("shape")) for r in runs))
    order = sorted(runs, key=lambda r: (shapes.index(_shape(r.get("shape"))), r.get("rung", 0)))
    base = {}
    for r in order:
        if r.get("rung") == 0 and _num(r.get("median_us")):
            base.setdefault(_shape(r.get("shape")), r["median_us"])
    floor = any("pct_of_floor" in r for r in runs)
    head = ["rung", "kernel", "shape", "µs", "% of copy"] + (["% of floor"] if floor else [])
    head += ["× rung 0", "rel_err", "default"]
    rows = []
    for r in order:
        b, us = base.get(_shape(r.get("shape"))), r.get("median_us")
        speed = _speed(b / us) if b and _num(us) and us > 0 else "-"
        cols = ("us", "copy") + (("floor",) if floor else ()) + ("err",)
        nums = _numbers(r, *cols, l2=l2)
        rows.append(
            [str(r.get("rung", "?")), r.get("kernel", "?"), _shape(r.get("shape"), common) or "-"]
            + nums[:-1]
            + [speed, nums[-1], "✓" if r.get("default") else ""]
        )
    return _table(head, rows)


def _is_ladder(run):
    return run.get("bench") == "ladder"  # every run names its family; the ladder's say so


def _stage_key(stage):
    return (STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER), stage)


_SOFTWARE = (("cuda", "CUDA"), ("cupy", "CuPy"), ("torch", "torch"))

_INTRO = (
    'Each run\'s "% of copy" is its GB/s over the device-to-device copy rate measured in the '
    "same bench run (2 × 1 GiB / copy time; per commit below), so no ratio mixes two runs. "
    'Timing: "queued" = launches queued behind a spin kernel, CUDA events, median of '
    'batches; "graph" = CUDA-graph replays; "eager" = host launches. µs is the median '
    "time, rel_err = ‖gpu − golden‖ / ‖golden‖ (for a selection: the fraction of tokens that "
    "differ), speedup = peer µs / our µs. Shapes: `docs/design/` has each kernel's bytes."
)

_LADDER_INTRO = (
    "Every rung of each kernel family, timed queued at the shapes below: rung 0 is the direct "
    "translation of the golden formula (`kernels_cuda/<stage>_v0.cu`), the later rungs are the "
    "fast kernels (the other `kernels_cuda/<stage>*.cu`: `attention_v1.cu`, `attention_mma.cu` "
    "and `attention_combine.cu` for attention); ✓ marks the rung the wrappers run by default. "
    '"% of floor" is the time of one launch that only reads the same bytes '
    "(`kernels_cuda/stream.cu`) over the rung's time; above 100 it carries its likely reason, "
    "by one rule (`qwenref/floor.py`): bytes from the L2 when the run's bytes fit in the L2, "
    "timing spread when they do not and the run is at most 3 % above its floor, not explained "
    "by the L2 beyond that. \"× rung 0\" is rung 0's time over this rung's, at the same shape."
)


def render(doc, source="results/nvidia-h200.json"):
    """The Markdown page for results document `doc` (as the bench writes it); `source` is the
    path the page names as its origin."""
    runs = doc.get("runs", [])
    lines = [
        "# Performance status",
        "",
        f"Generated by `python -m qwenref.status` from `{source}`; do not edit by hand "
        "(re-run it after re-recording results: `tests/test_status.py` checks that this "
        "page matches the file).",
        "",
    ]
    soft = ", ".join(f"{name} {doc[k]}" for k, name in _SOFTWARE if doc.get(k))
    lines += [
        f"- Device: {doc.get('device', '?')}" + (f" ({soft})" if soft else ""),
        f"- Results file written {doc.get('date', '?')}, at commit "
        f"{_sha(doc.get('commit'))}; that run's copy rate: "
        f"{_sig(doc.get('copy_gbps'), 5)} GB/s",
    ]
    dates = sorted({r["date"] for r in runs if r.get("date")})
    if dates:
        lines.append("- Run dates: " + ", ".join(dates))
    lines += ["", _INTRO, "", "## Commits", ""]
    by_commit = {}
    for r in runs:
        e = by_commit.setdefault(_sha(r.get("commit")), {"stages": [], "n": 0, "copy": None})
        st = f"{r.get('stage', '?')} (ladder)" if _is_ladder(r) else r.get("stage", "?")
        if st not in e["stages"]:
            e["stages"].append(st)
        e["n"] += 1
        e["copy"] = e["copy"] or copy_rate(r)
    lines += _table(
        ["commit", "runs", "stages", "copy rate (GB/s)"],
        [
            [c, str(e["n"]), ", ".join(e["stages"]), _sig(e["copy"], 5)]
            for c, e in by_commit.items()
        ],
    )
    plain = [r for r in runs if not _is_ladder(r)]
    for st in sorted(dict.fromkeys(r.get("stage", "?") for r in plain), key=_stage_key):
        sr = [r for r in plain if r.get("stage", "?") == st]
        text, common = _shape_line(sr, "run")
        lines += ["", f"## {st}", "", text, ""] + _stage_table(sr, common, doc.get("l2_bytes"))
    ladder = [r for r in runs if _is_ladder(r)]
    if ladder:
        lines += ["", "## Ladders", "", _LADDER_INTRO]
        fams = {}
        for r in ladder:
            fam = r["family"] + (f", {r['sweep']} sweep" if r.get("sweep") else "")
            fams.setdefault((_stage_key(r.get("stage", "?")), fam), []).append(r)
        for (_, fam), fr in sorted(fams.items()):
            st = fr[0].get("stage", "?")
            text, common = _shape_line(fr, "rung")
            lines += ["", f"### {fam}" + ("" if fam == st else f" ({st})"), "", text, ""]
            lines += _ladder_table(fr, common, doc.get("l2_bytes"))
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m qwenref.status",
        description="Write the performance page from a results file.",
    )
    ap.add_argument(
        "--results",
        default="results/nvidia-h200.json",
        help="results file of python -m qwenref.bench",
    )
    ap.add_argument("--out", default="docs/performance.md", help="the page to write")
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if --out differs from what would be written",
    )
    args = ap.parse_args(argv)
    text = render(load(args.results), source=f"results/{Path(args.results).name}")
    out = Path(args.out)
    if args.check:
        same = out.is_file() and out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'out of date'}")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
