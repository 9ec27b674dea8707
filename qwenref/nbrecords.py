"""One path from measurements to figures: a notebook asks for records (the dicts the bench writes
to results/), measured now when a GPU is here or read from the recorded file otherwise, and every
plot reads records. So a figure drawn on a laptop and one drawn on the H200 come from the same
code, and each says where and when its numbers were measured.

    recs = ladder_records("rms_norm")   # live on a GPU, else results/nvidia-h200.json
    plot_ladder(recs)                   # GB/s against bytes moved, copy and floor lines
    print_ladder(recs)                  # the same numbers as a table
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
from pathlib import Path

import numpy as np

from . import floor

__all__ = [
    "results_path",
    "load_results",
    "load_samples",
    "recorded_samples",
    "recorded_pairs",
    "run_samples",
    "Records",
    "recorded",
    "live_wanted",
    "ladder_records",
    "family_ladders",
    "stage_records",
    "plot_ladder",
    "plot_splits",
    "print_ladder",
    "above_floor",
    "best_rungs",
]


def results_path(name="nvidia-h200.json"):
    """results/<name>, searched from $QWENREF_RESULTS, the cwd upwards, then the package's repo."""
    env = os.environ.get("QWENREF_RESULTS")
    starts = ([Path(env)] if env else []) + [
        Path.cwd(),
        *Path.cwd().parents,
        Path(__file__).resolve().parent.parent,
    ]
    for d in starts:
        p = d / name if d.name == "results" else d / "results" / name
        if p.exists():
            return p
    return None


def load_results(name="nvidia-h200.json"):
    """The bench's JSON as a dict, or None when no results were recorded."""
    p = results_path(name)
    return json.loads(p.read_text()) if p else None


def load_samples(name="nvidia-h200.npz"):
    p = results_path(name)
    return dict(np.load(p)) if p else {}


def recorded_samples(stage, kernels):
    """{kernel: (golden, gpu, shapes)} of the bench's recorded sample pairs (results/*.npz,
    keyed "<i>|<stage>|<kernel>", i the run's index in the results file) for those kernels of
    the stage; the runs of one kernel at several sizes are concatenated and their shapes
    listed. Empty when nothing was recorded."""
    s = load_samples()
    runs = (load_results() or {}).get("runs", [])
    out = {}
    for key in s.get("run_keys", []):
        i, st, kernel = str(key).split("|", 2)
        if st == stage and kernel in kernels and f"{i}_golden" in s:
            g, d, shapes = out.get(kernel, (np.empty(0, np.float32), np.empty(0, np.float32), []))
            shape = runs[int(i)].get("shape", {}) if int(i) < len(runs) else {}
            out[kernel] = (
                np.concatenate([g, s[f"{i}_golden"]]),
                np.concatenate([d, s[f"{i}_gpu"]]),
                shapes + [shape],
            )
    return out


def recorded_pairs(recs):
    """{rung label: (golden, gpu)} value samples the bench stored beside the records
    (results/*.npz; the largest recorded size of each rung); {} when none were stored."""
    res, samples = load_results() or {}, load_samples()
    runs = res.get("runs", [])
    keys = [str(k) for k in samples.get("run_keys", [])]
    best = {}
    for r in recs.runs:
        if r in runs:
            i = runs.index(r)
            ok = i < len(keys) and keys[i].startswith(f"{i}|{r['stage']}|")
            if ok and f"{i}_golden" in samples:
                label = f"rung {r.get('rung')}: {r['kernel']}"
                if label not in best or r["bytes"] > best[label][0]:
                    best[label] = (r["bytes"], samples[f"{i}_golden"], samples[f"{i}_gpu"])
    return {k: (g, x) for k, (_, g, x) in sorted(best.items())}


def run_samples(run):
    """The (golden, GPU) value samples the bench recorded with this run, or (None, None)."""
    res = load_results() or {}
    for i, r in enumerate(res.get("runs", [])):
        if r == run:
            smp = load_samples()
            return smp.get(f"{i}_golden"), smp.get(f"{i}_gpu")
    return None, None


@dataclasses.dataclass(frozen=True)
class Records:
    """Runs (bench records) with the copy rate of the run that measured them, a line saying
    where and when that was, and the L2 size of that device (None: not recorded)."""

    runs: tuple
    copy_gbps: float
    source: str
    l2_bytes: int | None = None

    def where(self, **fields):
        """The runs whose fields (or shape fields) equal the given values."""

        def ok(r):
            return all(r.get(k, r.get("shape", {}).get(k)) == v for k, v in fields.items())

        return dataclasses.replace(self, runs=tuple(r for r in self.runs if ok(r)))

    def __len__(self):
        return len(self.runs)


def live_wanted(live=None):
    """Measure now? live=None: when a GPU is here and QWENREF_LIVE is not "0"."""
    if live is not None:
        return bool(live)
    if os.environ.get("QWENREF_LIVE", "1") == "0":
        return False
    from .gpu import available

    return available()


def recorded(select, name="nvidia-h200.json"):
    """Records of the results file whose runs satisfy select(run); empty when none recorded."""
    res = load_results(name) or {}
    runs = tuple(r for r in res.get("runs", []) if select(r))
    commits = sorted({str(r.get("commit", res.get("commit")))[:10] for r in runs})
    dates = sorted({str(r.get("date", res.get("date", "?")))[:10] for r in runs})
    src = (
        f"recorded on {res.get('device', '?')} ({', '.join(dates)}) at commit "
        f"{', '.join(commits)}; results/{name}"
        if runs
        else f"no runs recorded in results/{name}"
    )
    return Records(runs, float(res.get("copy_gbps", np.nan)), src, res.get("l2_bytes"))


def _measure(cases, quick=True):
    """Run bench cases [(fn, kwargs)] now on this GPU -> Records (their table lines hidden)."""
    from .bench.context import Context

    ctx = Context(quick)
    with contextlib.redirect_stdout(io.StringIO()):
        for fn, kw in cases:
            fn(ctx, **kw)
    src = f"measured just now on {ctx.device} (quick bench settings)"
    return Records(tuple(ctx.runs), ctx.copy_gbps, src, ctx.l2)


def _is_family(family, sweep=None):
    return lambda r: (
        r.get("bench") == "ladder" and r.get("family") == family and r.get("sweep") == sweep
    )


def ladder_records(family, live=None, sweep=None):
    """Every rung of one kernel family at the ladder's sizes (sweep="n_splits": attention's
    split-count sweep), measured now (live) or as recorded."""
    if not live_wanted(live):
        return recorded(_is_family(family, sweep))
    from .bench.ladder import ladder_cases

    recs = _measure(ladder_cases(family, sweep))
    keep = _is_family(family, sweep)
    return dataclasses.replace(recs, runs=tuple(r for r in recs.runs if keep(r)))


def family_ladders(families, live=None, cases=None):
    """{family: Records} of several ladder families, as recorded, or (live) the ladder cases of
    `cases` (default the last family: one whose cases time them all, as the indexer's select)
    measured once and split by family (ladder_records would run the same cases per family)."""
    if not live_wanted(live):
        return {f: ladder_records(f, live=False) for f in families}
    from .bench.ladder import ladder_cases

    recs = _measure(ladder_cases(cases or families[-1]))
    return {f: recs.where(family=f, bench="ladder") for f in families}


def stage_records(stage, live=None, kernel=None):
    """A stage's bench runs (not the ladder's), kernel text filtered; live runs the stage's
    bench cases at their quick sizes."""

    def keep(r):
        return (
            r.get("stage") == stage
            and r.get("bench") != "ladder"
            and (kernel is None or kernel in str(r.get("kernel")))
        )

    if not live_wanted(live):
        return recorded(keep)
    from .bench.cli import case_list

    cases = [(lambda c, f=f: f(c), {}) for st, _, _, f in case_list(True) if st == stage]
    recs = _measure(cases)
    return dataclasses.replace(recs, runs=tuple(r for r in recs.runs if keep(r)))


def _tag(r):
    sh = r.get("shape", {})
    return sh.get("kind") or sh.get("weights")


def _series(runs):
    """{(label, tag, rung): runs sorted by bytes}: one line per rung and cache kind / weights.
    A rung whose kernel name varies with the size (a variant per shape) is labelled by the
    names' common stem and a *."""
    groups = {}
    for r in sorted(runs, key=lambda r: (r.get("rung", 0), r.get("bytes", 0))):
        groups.setdefault((_tag(r), r.get("rung", 0)), []).append(r)
    out = {}
    for (tag, rung), rs in groups.items():
        names = sorted({str(r.get("kernel")) for r in rs})
        base = names[0] if len(names) == 1 else os.path.commonprefix(names).rstrip("_") + "*"
        label = f"rung {rung}: {base}" + (f" [{tag}]" if tag and tag not in base else "")
        out[(label, tag, rung)] = rs
    return out


_MARKERS = "v^so*Dp"


def _styles(keys):
    """Colour by cache kind / weights when the runs have one (else by rung), marker and line
    style by rung, so a kind's rungs read as one family of lines."""
    tags = list(dict.fromkeys(t for _, t, _ in keys))
    out = {}
    for label, tag, rung in keys:
        c = f"C{tags.index(tag)}" if len(tags) > 1 else f"C{rung}"
        ls = ":" if rung == 0 else "-"
        out[(label, tag, rung)] = dict(color=c, ls=ls, marker=_MARKERS[rung % len(_MARKERS)])
    return out


def _major_ticks_only(ax):
    """A log x axis spanning less than a decade labels its minor ticks, which then collide:
    label the major (power-of-ten) ticks only, with at least one decade in view."""
    from matplotlib.ticker import NullFormatter

    for axis, lim, set_lim in ((ax.xaxis, ax.get_xlim(), ax.set_xlim),):
        axis.set_minor_formatter(NullFormatter())
        lo, hi = lim
        if hi < 10 * lo:
            mid = (lo * hi) ** 0.5
            set_lim(mid / 10**0.5, mid * 10**0.5)


def _finish(ax, recs, title):
    """Title, the records' source under it, the legend outside the data."""
    ax.set_title(title, pad=16)
    ax.text(0, 1.015, recs.source, transform=ax.transAxes, fontsize=7, color="0.35")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def plot_ladder(recs, ax=None, title=None):
    """GB/s against bytes moved (log x) for every rung of the records, with the device copy
    rate and the read floor (one launch that only reads the same bytes) as reference lines."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7.5, 3.6))[1]
    runs = [r for r in recs.runs if r.get("gbps") and r.get("bytes")]
    if not runs:
        ax.text(0.5, 0.5, "no runs: " + recs.source, ha="center", va="center", wrap=True)
        ax.set_axis_off()
        return ax
    series = _series(runs)
    styles = _styles(series)
    for key, rs in series.items():
        ax.plot([r["bytes"] for r in rs], [r["gbps"] for r in rs], label=key[0], **styles[key])
    floor = sorted(
        {(r["bytes"], r["bytes"] / r["floor_us"] / 1e3) for r in runs if r.get("floor_us")}
    )
    if floor:
        ax.plot(*zip(*floor), "k-.", lw=1, label="read floor (same bytes, one launch)")
    ax.axhline(recs.copy_gbps, color="k", ls="--", lw=1, label=f"copy {recs.copy_gbps:.0f} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _major_ticks_only(ax)
    ax.set_xlabel("bytes moved per call")
    ax.set_ylabel("GB/s (log)")
    _finish(ax, recs, title or f"{runs[0].get('family', runs[0].get('stage'))}: every rung")
    return ax


def plot_splits(recs, ax=None):
    """Time against n_splits for each split-T rung; the plan's own count marked."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.4))[1]
    if not recs.runs:
        ax.text(0.5, 0.5, "no runs: " + recs.source, ha="center", va="center", wrap=True)
        ax.set_axis_off()
        return ax
    for (label, _, _), rs in _series(recs.runs).items():
        rs = sorted(rs, key=lambda r: r["shape"]["n_splits"])
        x = [r["shape"]["n_splits"] for r in rs]
        (line,) = ax.plot(x, [r["median_us"] for r in rs], "o-", label=label)
        for r in rs:
            if r["shape"].get("plan"):
                ax.plot(r["shape"]["n_splits"], r["median_us"], "*", ms=14, color=line.get_color())
    fl = [r["floor_us"] for r in recs.runs if r.get("floor_us")]
    if fl:
        ax.axhline(np.median(fl), color="k", ls=":", label="read floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("n_splits (★ = the plan's choice)")
    ax.set_ylabel("µs per decode (log)")
    _finish(ax, recs, "time against the number of splits")
    return ax


def _size(r):
    sh = r.get("shape", {})
    keys = ("rows", "nb", "T", "proj", "kind", "weights", "n_splits")
    return ", ".join(f"{k}={sh[k]}" for k in keys if k in sh)


def print_ladder(recs):
    """One line per run, sizes ascending: rung, kernel, size, µs, % of copy, % of floor,
    × rung 0; a run above its floor is tagged with its reason (qwenref.floor's rule)."""
    print(recs.source)
    v0 = {_size(r): r["median_us"] for r in recs.runs if r.get("rung") == 0}
    order = sorted(recs.runs, key=lambda r: (str(_tag(r)), r.get("bytes", 0), r.get("rung", 0)))
    for r in order:
        base = v0.get(_size(r))
        speed = f"{base / r['median_us']:7.1f}x" if base and r.get("median_us") else "      -"
        pf = r.get("pct_of_floor")
        why = floor.floor_reason(r, recs.l2_bytes)
        print(
            f"rung {r.get('rung')}  {str(r.get('kernel')):<28} {_size(r):<28} "
            f"{r.get('median_us', np.nan):10.2f} us {r.get('pct_of_copy', np.nan):5.1f}% copy "
            + (f"{pf:5.1f}% floor " if pf is not None else "")
            + f"{speed} rung 0"
            + (f"  <- above its floor: {floor.REASONS[why]}" if why else "")
        )


def above_floor(recs):
    """The runs of recs faster than their read floor (qwenref.floor.above_floor)."""
    return floor.above_floor(recs.runs)


def best_rungs(recs):
    """{size: the fastest run at that size}: what a take-away cell quotes."""
    best = {}
    for r in recs.runs:
        k = _size(r)
        if r.get("median_us") and (k not in best or r["median_us"] < best[k]["median_us"]):
            best[k] = r
    return best


def layer_steps(recs):
    """The layer step's records by row count: {nb: {"stages": {stage: run}, "eager": run,
    "graph": run}} from its runs "step: <stage>", "step eager (host launches)" and "step graph
    replay" (a kind not recorded: None), rows ascending; failed or untimed runs left out."""
    out = {}
    for r in recs.runs:
        if r.get("error") or not r.get("median_us"):
            continue
        row = out.setdefault(r["shape"]["nb"], {"stages": {}, "eager": None, "graph": None})
        k = str(r["kernel"])
        if k.startswith("step: "):
            row["stages"][k[len("step: ") :]] = r
        elif k.startswith(("step eager", "step graph")):
            row["eager" if "eager" in k else "graph"] = r
    return dict(sorted(out.items()))
