"""The bench's records: one run's fields, the results document and its schema (README.md,
"GPU"), reading, merging and writing results/<device>.json and .npz, and the table printed
while the bench runs. Pure: no GPU (tests/test_bench_records.py).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np

__all__ = [
    "RUN_KEYS",
    "PEER_KEYS",
    "DOC_KEYS",
    "N_SAMPLES",
    "rel_err",
    "sample_pairs",
    "make_run",
    "floor_fields",
    "code_match",
    "error_run",
    "validate_doc",
    "format_shape",
    "format_table",
    "require_commit",
    "bench_stage",
    "merge_results",
    "run_kind",
    "stage_and_kind",
    "read_results",
    "write_results",
    "device_slug",
]

RUN_KEYS = ("stage", "kernel", "shape", "median_us", "bytes", "gbps", "pct_of_copy", "rel_err")
PEER_KEYS = ("peer", "peer_median_us", "speedup")
DOC_KEYS = ("device", "date", "commit", "cupy", "cuda", "torch", "copy_gbps", "runs")
N_SAMPLES = 4096


def rel_err(gpu, ref):
    """‖gpu − ref‖ / ‖ref‖ in float64; inf for NaN/inf or a shape mismatch."""
    a = np.asarray(gpu, np.float64)
    r = np.asarray(ref, np.float64)
    if a.shape != r.shape:
        return math.inf
    num, den = np.linalg.norm(a - r), np.linalg.norm(r)
    if not np.isfinite(num) or not np.isfinite(den):
        return math.inf
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return float(num / den)


def code_match(mine, ref, t0, t1):
    """Fraction of the stored codes and scales of token slots [t0, t1) that two golden caches
    (mine: a GPU cache's to_golden(); ref: the golden cache) hold bit for bit, over both sides'
    arrays."""
    sides = ((mine.k_store, ref.k_store), (mine.v_store, ref.v_store))
    same = [(ms[n][:, t0:t1] == rs[n][:, t0:t1]).mean() for ms, rs in sides for n in rs]
    return float(np.mean(same))


def sample_pairs(ref, gpu, n=N_SAMPLES, seed=0):
    """Up to n (golden, gpu) value pairs drawn uniformly (fixed seed), as float32 arrays."""
    r = np.asarray(ref, np.float32).reshape(-1)
    g = np.asarray(gpu, np.float32).reshape(-1)
    if r.size != g.size:
        raise ValueError(f"ref and gpu differ in size ({r.size} vs {g.size})")
    if r.size > n:
        idx = np.sort(np.random.default_rng(seed).choice(r.size, n, replace=False))
        r, g = r[idx], g[idx]
    return r.copy(), g.copy()


def make_run(
    stage, kernel, shape, median_us, nbytes, copy_gbps, err, tol, peer=None, peer_us=None, **extra
):
    """One record of `runs`. gbps = bytes / time; speedup = peer time / our time (> 1: faster).
    A peer also goes into `peers` ({name: median µs}, beside any peers= given)."""
    us = float(median_us)
    gbps = nbytes / (us * 1e-6) / 1e9 if us > 0 else math.nan
    run = {
        "stage": stage,
        "kernel": kernel,
        "shape": dict(shape),
        "median_us": us,
        "bytes": int(nbytes),
        "gbps": gbps,
        "pct_of_copy": 100.0 * gbps / copy_gbps if copy_gbps else math.nan,
        "copy_gbps": copy_gbps,  # this run's copy rate: a merged file holds several runs
        "rel_err": float(err),
        "tol": float(tol),
        "ok": bool(err <= tol),
    }
    if peer is not None:
        run.update(peer=peer, peer_median_us=float(peer_us), speedup=float(peer_us) / us)
        extra["peers"] = {**extra.get("peers", {}), peer: float(peer_us)}
    run["timing"] = (
        "graph"
        if "graph replay" in str(kernel)
        else ("eager" if "eager" in str(kernel) else "queued")
    )
    run.update(extra)
    return run


def floor_fields(floor_us, us):
    """A run's floor fields: the read floor's time at its bytes and the run's share of it (100:
    at the floor); none when the floor was not measured (floor_us None)."""
    return {"floor_us": floor_us, "pct_of_floor": 100.0 * floor_us / us} if floor_us else {}


def error_run(stage, kernel, shape, exc):
    """A run whose setup, validation or timing raised: printed and recorded, never fatal."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return {
        "stage": stage,
        "kernel": kernel,
        "shape": dict(shape or {}),
        "median_us": math.nan,
        "bytes": 0,
        "gbps": math.nan,
        "pct_of_copy": math.nan,
        "rel_err": math.nan,
        "ok": False,
        "error": msg,
    }


def validate_doc(doc):
    """Raise ValueError listing what the results document lacks (the schema in README.md)."""
    problems = [f"missing top-level key {k!r}" for k in DOC_KEYS if k not in doc]
    if not doc.get("commit"):
        problems.append("commit is empty")
    for i, run in enumerate(doc.get("runs", [])):
        problems += [f"runs[{i}] lacks {k!r}" for k in RUN_KEYS if k not in run]
        if not isinstance(run.get("shape"), dict):
            problems.append(f"runs[{i}].shape must be a dict")
        has = [k in run for k in PEER_KEYS]
        if any(has) and not all(has):
            problems.append(f"runs[{i}] has some peer fields but not all of {PEER_KEYS}")
        problems += _peers_problems(i, run)
    if problems:
        raise ValueError("results document: " + "; ".join(problems))
    return doc


def _peers_problems(i, run):
    """What is wrong with a run's `peers` ({name: median µs}, holding its `peer`), if it has one
    (runs recorded before the field have none)."""
    peers = run.get("peers")
    if peers is None:
        return []
    if not isinstance(peers, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) for k, v in peers.items()
    ):
        return [f"runs[{i}].peers must map peer names to median µs"]
    if "peer" in run and peers.get(run["peer"]) != run["peer_median_us"]:
        return [f"runs[{i}].peers lacks its peer {run['peer']!r} at peer_median_us"]
    return []


_ABBR = {"head_dim": "hd", "rotary_dim": "rd", "weights": "w", "budget": "B", "proj": ""}


def format_shape(shape):
    return " ".join(
        f"{_ABBR.get(k, k)}={v}" if _ABBR.get(k, k) else str(v) for k, v in shape.items()
    )


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


_COLS = (
    ("stage", 9),
    ("kernel", 36),
    ("shape", 58),
    ("µs", 10),
    ("GB/s", 8),
    ("% copy", 6),
    ("rel_err", 9),
    ("speedup", 7),
)


def format_table(runs, copy_gbps=None):
    """Fixed-width table, one line per run (errors say so in place of the numbers)."""
    head = " | ".join(f"{n:<{w}}" if i < 3 else f"{n:>{w}}" for i, (n, w) in enumerate(_COLS))
    lines = [head, "-" * len(head)]
    if copy_gbps:
        lines.insert(0, f"copy ceiling: {copy_gbps:.1f} GB/s (device-to-device, 2 x bytes / time)")
    for r in runs:
        cells = [
            r["stage"][:9].ljust(9),
            r["kernel"][:36].ljust(36),
            format_shape(r.get("shape", {}))[:58].ljust(58),
        ]
        if r.get("error"):
            lines.append(" | ".join(cells) + " | ERROR " + r["error"])
            continue
        flag = "" if r.get("ok", True) else "  FAIL tol " + _fmt(r.get("tol"), ".0e")
        cells += [
            _fmt(r["median_us"], "10.2f"),
            _fmt(r["gbps"], "8.1f"),
            _fmt(r["pct_of_copy"], "6.1f"),
            _fmt(r["rel_err"], "9.2e"),
            _fmt(r.get("speedup"), "7.2f").rjust(7),
        ]
        lines.append(" | ".join(cells) + flag)
    return "\n".join(lines)


_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")


def require_commit(env=None):
    """The commit sha from QWENREF_COMMIT, or SystemExit(2) saying how to pass it."""
    sha = (os.environ if env is None else env).get("QWENREF_COMMIT", "").strip()
    if not _SHA.match(sha):
        raise SystemExit(
            "qwenref.bench: refusing to record results without QWENREF_COMMIT=<sha> "
            f"(got {sha!r}). Commit first, then run QWENREF_COMMIT=$(git rev-parse HEAD) "
            "python -m qwenref.bench (the device copy has no .git); --dry prints without "
            "recording."
        )
    return sha


def merge_results(doc, samples, old_doc, old_samples):
    """Keep old_doc's runs of the stages `doc` did not run (each run carries its own commit),
    then doc's runs; sample keys renumbered to the merged order. A doc of some cache kinds alone
    (doc["kinds"], --kinds) replaces only the old runs of its stages and kinds. -> (doc,
    samples)."""
    key = stage_and_kind if doc.get("kinds") else bench_stage
    ran = {key(r) for r in doc["runs"]}
    kept = [(i, r) for i, r in enumerate(old_doc.get("runs", [])) if key(r) not in ran]
    runs, merged = [], {}
    for i, r in kept:
        if i in old_samples:
            merged[len(runs)] = old_samples[i]
        runs.append(r)
    for i, r in enumerate(doc["runs"]):
        if i in samples:
            merged[len(runs)] = samples[i]
        runs.append(r)
    merged_doc = dict(doc, runs=runs)
    if doc.get("only") is not None:  # the file now holds every merged stage, not just doc's
        merged_doc["only"] = sorted({bench_stage(r) for r in runs})
    return merged_doc, merged


def run_kind(run):
    """The cache kind a run measured (its shape's "kind"), or None."""
    return run["shape"].get("kind") if isinstance(run.get("shape"), dict) else None


def stage_and_kind(run):
    """(bench_stage, run_kind) of a run: what a run of some cache kinds replaces."""
    return bench_stage(run), run_kind(run)


def bench_stage(run):
    """The --only group a run belongs to: its stage, or "ladder" for the ladder's runs."""
    return run.get("bench", run["stage"])


def read_results(out_dir, slug):
    """(doc, samples) of results/<slug>.json/.npz, or (None, {}) when there are none."""
    jpath, npath = Path(out_dir) / f"{slug}.json", Path(out_dir) / f"{slug}.npz"
    if not jpath.exists():
        return None, {}
    doc = json.loads(jpath.read_text())
    samples = {}
    if npath.exists():
        with np.load(npath) as z:
            for k in z.files:
                if k.endswith("_golden"):
                    i = int(k[: -len("_golden")])
                    samples[i] = (z[k], z[f"{i}_gpu"])
    return doc, samples


def write_results(doc, samples, out_dir, slug, merge=False):
    """results/<slug>.json and .npz. Refuses (ValueError) a document without a commit. With
    merge, runs of other stages already recorded there are kept (a bench split over several
    device calls with --only)."""
    validate_doc(doc)
    out = Path(out_dir)
    if merge:
        old_doc, old_samples = read_results(out, slug)
        if old_doc is not None:
            doc, samples = merge_results(doc, samples, old_doc, old_samples)
    out.mkdir(parents=True, exist_ok=True)
    jpath, npath = out / f"{slug}.json", out / f"{slug}.npz"

    def clean(v):  # JSON has no NaN/inf: write null
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        if isinstance(v, (np.integer, np.floating)):
            return clean(v.item())
        return v

    jpath.write_text(json.dumps(clean(doc), indent=1) + "\n")
    arrays = {
        "run_keys": np.array([f"{i}|{r['stage']}|{r['kernel']}" for i, r in enumerate(doc["runs"])])
    }
    for i, (ref, got) in samples.items():
        arrays[f"{i}_golden"], arrays[f"{i}_gpu"] = ref, got
    np.savez_compressed(npath, **arrays)
    return jpath, npath


def device_slug(name):
    """'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
