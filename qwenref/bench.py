"""python -m qwenref.bench [--quick] [--only STAGE[,STAGE...]] [--out DIR] [--dry]

Validate every GPU kernel against the golden model on the same inputs, then time it, and record
the numbers (DESIGN.md, "GPU side"):

  results/<device>.json  {device, date, commit, cupy, cuda, torch, copy_gbps, runs: [...]}
  results/<device>.npz   per run, up to 4096 (golden, gpu) sample pairs: "<i>_golden", "<i>_gpu"

Each run: stage, kernel, shape, median_us, bytes, gbps, pct_of_copy, rel_err (+ tol, ok,
iqr_us), and peer, peer_median_us, speedup where a peer exists (torch SDPA bf16 GQA for
attention, torch rms_norm for norm, cuBLAS bf16 through torch for the Q8 GEMV).

Method (/work/.library/device/METHOD.md): random inputs, never zeros; rel_err = ‖gpu − golden‖ /
‖golden‖ in float64; timing with CUDA events, warm-up first, the median of many batches; before
each batch a spin kernel holds the GPU while the host queues the batch, so the events time the
GPU, not the Python launch rate; inputs rotate among copies when one set would fit in L2, so a
streaming kernel streams from memory; the decode step is also timed as CUDA-graph replays,
and beside the q8 decode runs its floor: stream.cu's stream_read, one launch that reads the same
bytes and nothing else (the best a single launch of that size can do).
`bytes` is what the kernel must move: each input read once, each output written once, counted
from the shapes (functions bytes_* below). copy_gbps = 2 × bytes / time of a device-to-device
copy of 1 GiB in the same run; pct_of_copy = 100 · gbps / copy_gbps.

The device machine has no .git: pass the commit the code was run at in QWENREF_COMMIT; without
it the bench refuses to record (exit 2; --dry prints the table and writes nothing). A stage
that fails is printed as an error row and the bench goes on; the exit status is 1 if any run
failed or missed its tolerance.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from .gpu.attention import TOL_ATTN, TOL_ATTN_MMA    # importing it needs no CuPy

__all__ = ["STAGES", "main", "make_run", "error_run", "rel_err", "validate_doc", "format_table",
           "write_results", "require_commit", "sample_pairs", "bytes_norm", "bytes_rope",
           "bytes_wht", "bytes_q8_quantize", "bytes_turbo_quantize", "bytes_append",
           "bytes_attention", "bytes_gemv_q8", "bytes_linear", "bytes_block_scores",
           "bytes_select", "layer_stage_bytes", "kv_bytes_per_token", "visible_tokens_count"]

STAGES = ("norm", "rope", "wht", "kvcache", "attention", "indexer", "gemv", "layer", "ladder")
RUN_KEYS = ("stage", "kernel", "shape", "median_us", "bytes", "gbps", "pct_of_copy", "rel_err")
PEER_KEYS = ("peer", "peer_median_us", "speedup")
DOC_KEYS = ("device", "date", "commit", "cupy", "cuda", "torch", "copy_gbps", "runs")
N_SAMPLES = 4096

# Tolerances on rel_err, with why (decode attention's, TOL_ATTN for v0 / v1 and TOL_ATTN_MMA for
# the tensor-core rung, live in gpu.attention beside the rungs: each AttentionPlan carries its own)
TOL_F32 = 1e-5      # same float32 math in another order: ~1e-7, 100x margin
TOL_ROPE = 5e-3     # float32 angle pos·inv_freq vs golden's float64: up to ~|angle|·1e-7 rad,
                    # 1.3e-2 rad on the fastest pair at position 131071 -> ~1.5e-3 norm-wise
TOL_CODES = 1e-3    # quantizers: bit-exact by construction; a code that flips on a rounding
                    # boundary moves one value by one step (<= 1e-3 of the norm when rare)
TOL_SELECT = 0.01   # fraction of selected tokens that differ (score ties within float noise)
TOL_LAYER = 2e-3    # whole layer with a q8 cache: a k/v value on a rounding boundary may code
                    # one step apart (kvcache module docstring); float32 RoPE angles at 32k
                    # positions (~3e-3 rad on the fastest pair); float32 elsewhere


# ==== pure parts (no GPU: tested in tests/test_bench.py) ======================================

def kv_bytes_per_token(kind, nkv, hd):
    """Bytes of stored K+V for one token, all kv heads, scales included (golden layout)."""
    from .golden.kvcache import _side_bytes_per_head, _side_kinds
    k, v = _side_kinds(kind)
    return nkv * (_side_bytes_per_head(k, hd) + _side_bytes_per_head(v, hd))


def bytes_norm(rows, n, add=False):
    """rms_norm: x read, weight read, y written; add_rms_norm also reads the residual and
    writes the sum."""
    return 4 * (rows * n * (4 if add else 2) + n)


def bytes_rope(nb, nh, nkv, hd):
    """qk_norm_rope: the q half of qg and k read, q and k written, two norm weights,
    positions."""
    return 4 * (2 * nb * (nh + nkv) * hd + 2 * hd + nb)


def bytes_wht(rows, n):
    return 4 * 2 * rows * n


def bytes_q8_quantize(rows, n):
    """f32 in, int8 codes + one f16 scale per 32 out."""
    return rows * n * 5 + rows * (n // 32) * 2


def bytes_turbo_quantize(rows, n, bits):
    """f32 in, 2·bits bytes of codes + one f16 scale per 16 out."""
    return rows * n * 4 + rows * (n // 16) * (2 * bits + 2)


def bytes_append(nb, nkv, hd, kind, ihd=0):
    """KVCache.append: k and v read as f32, stored K/V written, raw indexer keys copied."""
    return nb * (2 * nkv * hd * 4 + kv_bytes_per_token(kind, nkv, hd) + 2 * ihd * 4)


def visible_tokens_count(t, R=0, kblk=0):
    """Tokens the row at position t attends to: t + 1 dense, kblk·R + tail when selective."""
    if not R or (t + 1) // R <= kblk:
        return t + 1
    return kblk * R + (t + 1) - ((t + 1) // R) * R


def bytes_attention(nb, nh, nkv, hd, kind, base_pos, R=0, kblk=0, gate=False, selective=False):
    """decode_attention: the stored K/V of the tokens read (dense rows share one pass over the
    longest row's tokens; selective rows are counted row by row, an upper bound when rows pick
    the same blocks, plus their int32 indices), q read, gate read, output written."""
    per_tok = kv_bytes_per_token(kind, nkv, hd)
    rows = [base_pos + b for b in range(nb)]
    if selective:
        n_tok = sum(visible_tokens_count(t, R, kblk) for t in rows)
        kv = n_tok * (per_tok + 4)
    else:
        kv = (rows[-1] + 1) * per_tok
    return kv + 4 * nb * nh * hd * (3 if gate else 2)


def bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks):
    """block_scores: block keys read once, queries read, [nb, max_blocks] scores written."""
    return 4 * (n_blocks * ihd + nb * inh * ihd + nb * max_blocks)


def bytes_select(nb, inh, ihd, n_blocks, max_blocks, R, kblk):
    """select_rows: scoring plus sel_idx [nb, kblk·R + R], sel_n [nb], block mask written."""
    return (bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks) - 4 * nb * max_blocks
            + 4 * nb * (kblk * R + R) + 4 * nb + nb * max_blocks)


def bytes_gemv_q8(nb, n_in, n_out):
    """int8 weights + one f16 scale per 32, x read, y written."""
    return n_out * n_in + n_out * (n_in // 32) * 2 + 4 * nb * (n_in + n_out)


def bytes_linear(nb, n_in, n_out, wbytes=4):
    """A dense projection with wbytes-byte weights (4 f32, 2 bf16) and activations."""
    return n_out * n_in * wbytes + wbytes * nb * (n_in + n_out)


def layer_stage_bytes(cfg, nb, base_pos, kind, weight_format="q8", has_mlp=True):
    """Bytes each stage of one decode step must move (gpu.layer.STAGES keys, plus "total")."""
    c = cfg
    H, hd, I = c.hidden_size, c.head_dim, c.intermediate_size
    inh, ihd, R, kblk = c.indexer_n_heads, c.indexer_head_dim, c.indexer_compress_ratio, c.kblk
    n_proj = 2 * c.nh * hd + 2 * c.nkv * hd + ((inh + 1) * ihd if c.has_indexer else 0)

    def proj(n_in, n_out):
        return (bytes_gemv_q8(nb, n_in, n_out) if weight_format == "q8"
                else bytes_linear(nb, n_in, n_out, 4))

    selective = c.has_indexer and (base_pos + nb) // R > kblk
    b = {
        "input_norm": bytes_norm(nb, H),
        "qkv_proj": proj(H, n_proj),
        "qk_norm_rope": bytes_rope(nb, c.nh, c.nkv, hd) + 2 * 4 * nb * c.nh * hd,  # + gate copy
        "kv_append": bytes_append(nb, c.nkv, hd, kind, ihd if c.has_indexer else 0),
        "attention": bytes_attention(nb, c.nh, c.nkv, hd, kind, base_pos, R, kblk, gate=True,
                                     selective=selective),
        "o_proj": proj(c.nh * hd, H),
        "post_norm": bytes_norm(nb, H, add=True),
    }
    if c.has_indexer:
        n_blocks = (base_pos + nb) // R
        b["indexer_q"] = 4 * 2 * nb * inh * ihd + 4 * ihd
        done = (base_pos + nb) // R - base_pos // R              # blocks completing this step
        b["block_keys"] = done * (R * ihd * 4 + ihd * 4)
        if selective:
            b["select"] = bytes_select(nb, inh, ihd, n_blocks, n_blocks, R, kblk)
    if has_mlp:
        if weight_format == "q8":
            b["mlp_gate_up"] = bytes_gemv_q8(nb, H, 2 * I) - 4 * nb * I   # writes act, not g|u
            b["mlp_down"] = bytes_gemv_q8(nb, I, H) + 4 * nb * H            # + residual read
        else:
            b["mlp_gate_up"] = bytes_linear(nb, H, 2 * I) + 4 * nb * 3 * I  # + swiglu pass
            b["mlp_down"] = bytes_linear(nb, I, H) + 4 * nb * 3 * H         # + residual add
    b["total"] = sum(b.values())
    return b


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


def make_run(stage, kernel, shape, median_us, nbytes, copy_gbps, err, tol, peer=None,
             peer_us=None, **extra):
    """One record of `runs`. gbps = bytes / time; speedup = peer time / our time (> 1: faster)."""
    us = float(median_us)
    gbps = nbytes / (us * 1e-6) / 1e9 if us > 0 else math.nan
    run = {"stage": stage, "kernel": kernel, "shape": dict(shape), "median_us": us,
           "bytes": int(nbytes), "gbps": gbps,
           "pct_of_copy": 100.0 * gbps / copy_gbps if copy_gbps else math.nan,
           "rel_err": float(err), "tol": float(tol), "ok": bool(err <= tol)}
    if peer is not None:
        run.update(peer=peer, peer_median_us=float(peer_us), speedup=float(peer_us) / us)
    run["timing"] = "graph" if "graph replay" in str(kernel) else (
        "eager" if "eager" in str(kernel) else "queued")
    run.update(extra)
    return run


def error_run(stage, kernel, shape, exc):
    """A run whose setup, validation or timing raised: printed and recorded, never fatal."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return {"stage": stage, "kernel": kernel, "shape": dict(shape or {}), "median_us": math.nan,
            "bytes": 0, "gbps": math.nan, "pct_of_copy": math.nan, "rel_err": math.nan,
            "ok": False, "error": msg}


def validate_doc(doc):
    """Raise ValueError listing what the results document lacks (schema of DESIGN.md)."""
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
    if problems:
        raise ValueError("results document: " + "; ".join(problems))
    return doc


_ABBR = {"head_dim": "hd", "rotary_dim": "rd", "weights": "w", "budget": "B", "proj": ""}


def format_shape(shape):
    return " ".join(f"{_ABBR.get(k, k)}={v}" if _ABBR.get(k, k) else str(v)
                    for k, v in shape.items())


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


_COLS = (("stage", 9), ("kernel", 36), ("shape", 58), ("µs", 10), ("GB/s", 8), ("% copy", 6),
         ("rel_err", 9), ("speedup", 7))


def format_table(runs, copy_gbps=None):
    """Fixed-width table, one line per run (errors say so in place of the numbers)."""
    head = " | ".join(f"{n:<{w}}" if i < 3 else f"{n:>{w}}" for i, (n, w) in enumerate(_COLS))
    lines = [head, "-" * len(head)]
    if copy_gbps:
        lines.insert(0, f"copy ceiling: {copy_gbps:.1f} GB/s (device-to-device, 2 x bytes / time)")
    for r in runs:
        cells = [r["stage"][:9].ljust(9), r["kernel"][:36].ljust(36),
                 format_shape(r.get("shape", {}))[:58].ljust(58)]
        if r.get("error"):
            lines.append(" | ".join(cells) + " | ERROR " + r["error"])
            continue
        flag = "" if r.get("ok", True) else "  FAIL tol " + _fmt(r.get("tol"), ".0e")
        cells += [_fmt(r["median_us"], "10.2f"), _fmt(r["gbps"], "8.1f"),
                  _fmt(r["pct_of_copy"], "6.1f"), _fmt(r["rel_err"], "9.2e"),
                  _fmt(r.get("speedup"), "7.2f").rjust(7)]
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
            "recording.")
    return sha


def merge_results(doc, samples, old_doc, old_samples):
    """Keep old_doc's runs of the stages `doc` did not run (each run carries its own commit),
    then doc's runs; sample keys renumbered to the merged order. -> (doc, samples)."""
    ran = {_bench_stage(r) for r in doc["runs"]}
    kept = [(i, r) for i, r in enumerate(old_doc.get("runs", [])) if _bench_stage(r) not in ran]
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
    if doc.get("only") is not None:        # the file now holds every merged stage, not just doc's
        merged_doc["only"] = sorted({_bench_stage(r) for r in runs})
    return merged_doc, merged


def _bench_stage(run):
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
                    i = int(k[:-len("_golden")])
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

    def clean(v):                          # JSON has no NaN/inf: write null
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
    arrays = {"run_keys": np.array([f"{i}|{r['stage']}|{r['kernel']}"
                                    for i, r in enumerate(doc["runs"])])}
    for i, (ref, got) in samples.items():
        arrays[f"{i}_golden"], arrays[f"{i}_gpu"] = ref, got
    np.savez_compressed(npath, **arrays)
    return jpath, npath


def device_slug(name):
    """'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


# ==== GPU side =================================================================================

class _Ctx:
    """What every case needs: cupy, the copy ceiling, L2 size, settings, and the records."""

    def __init__(self, quick):
        from .gpu._runtime import cupy
        self.cp = cupy()
        self.quick = quick
        props = self.cp.cuda.runtime.getDeviceProperties(0)
        self.device = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        self.l2 = int(props.get("l2CacheSize", 50 << 20))
        self.batches = 8 if quick else 25
        self.runs, self.samples = [], {}
        self.torch = _try_torch()
        self.copy_gbps = measure_copy_gbps(self)

    def n_rot(self, working_set):
        """Input copies to rotate so one pass over all of them is >= 2 x L2 (cold cache)."""
        if working_set >= 2 * self.l2:
            return 1
        return min(64, math.ceil(2 * self.l2 / max(working_set, 1)))

    def time(self, fn, n_rot=1, max_inner=64, target_us=300.0, batches=None, warmup=3):
        return time_us(self.cp, fn, n_rot, batches or self.batches, warmup, target_us, max_inner)

    def add(self, run, ref=None, got=None):
        i = len(self.runs)
        self.runs.append(run)
        if ref is not None and got is not None:
            self.samples[i] = sample_pairs(ref, got, seed=i)
        print(format_table([run]).splitlines()[-1], flush=True)


def _try_torch():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def time_us(cp, fn, n_rot=1, batches=25, warmup=3, target_us=300.0, max_inner=64):
    """(median, iqr) microseconds per call of fn(i) (i picks the rotated input set).

    Batches of `inner` back-to-back calls (inner sized so a batch runs ~target_us) between two
    events, each batch after a spin kernel long enough for the host to queue the batch.
    Calls fn at most warmup + 1 + batches · max_inner times (stateful cases size for that)."""
    from .gpu.gemv import spin_wait
    k = 0
    for _ in range(warmup):
        fn(k % n_rot)
        k += 1
    cp.cuda.Device().synchronize()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    t0 = time.perf_counter()
    a.record()
    fn(k % n_rot)
    k += 1
    b.record()
    host_s = time.perf_counter() - t0
    b.synchronize()
    est_us = max(cp.cuda.get_elapsed_time(a, b) * 1e3, 1.0)
    inner = int(min(max_inner, max(1, target_us // est_us)))
    spin_ns = int(min(50e6, max(2e5, 3 * host_s * 1e9 * inner)))
    ts = []
    for _ in range(batches):
        spin_wait(spin_ns)
        a.record()
        for _ in range(inner):
            fn(k % n_rot)
            k += 1
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / inner)
    q1, med, q3 = np.percentile(ts, [25, 50, 75])
    return float(med), float(q3 - q1)


def measure_copy_gbps(ctx, nbytes=1 << 30):
    """2 x bytes / time of a 1 GiB device-to-device copy (read + write), median of batches."""
    cp = ctx.cp
    src = cp.random.random(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)

    def fn(_):
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes,
                                    cp.cuda.runtime.memcpyDeviceToDevice,
                                    cp.cuda.get_current_stream().ptr)
    med, _ = ctx.time(fn, max_inner=1)
    if not bool((dst[:1024] == src[:1024]).all()):
        raise RuntimeError("device copy check failed")
    return 2 * nbytes / (med * 1e-6) / 1e9


def _peer(ctx, name, fn, n_rot=1, max_inner=64):
    """Time a peer; None when it cannot run (no torch, backend refused)."""
    try:
        return name, ctx.time(fn, n_rot=n_rot, max_inner=max_inner)[0]
    except Exception as e:                          # the peer is optional: say why, go on
        print(f"  (peer {name} unavailable: {type(e).__name__}: {str(e)[:120]})")
        return None


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _randn(cp, shape, scale=1.0, outliers=True):
    """Normal values with a few 8x outliers (so normalisation and amax paths see them)."""
    x = cp.random.standard_normal(shape, dtype=cp.float32) * np.float32(scale)
    if outliers and x.size >= 64:
        flat = x.reshape(-1)
        flat[:: max(1, flat.size // 37)] *= np.float32(8)
    return x


# ---- stage cases ----------------------------------------------------------------------------
# Each case function takes the context and returns nothing; it adds runs via ctx.add. The
# driver calls each case under try/except, so one failing case becomes one error row.

def _qwen():
    from .config import AttnConfig
    return AttnConfig.qwen35_27b()


def _dense_cfg():
    return _qwen().replace(indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0,
                           indexer_budget=0)


def case_norm(ctx, rows, n, add):
    from . import golden, gpu
    cp = ctx.cp
    x = _randn(cp, (rows, n))
    w = _randn(cp, (n,), 0.1, outliers=False)
    r = _randn(cp, (rows, n)) if add else None
    ws = bytes_norm(rows, n, add)
    nr = ctx.n_rot(ws)
    xs = [x] + [x.copy() for _ in range(nr - 1)]
    y = cp.full((rows, n), cp.nan, cp.float32)
    if add:
        sm = cp.full((rows, n), cp.nan, cp.float32)
        gpu.add_rms_norm(x, r, w, 1e-6, out=y, sum_out=sm)
        ref_y, ref_s = golden.add_rms_norm(_host(x), _host(r), _host(w), 1e-6)
        err = max(rel_err(_host(y), ref_y), rel_err(_host(sm), ref_s))
        fn = lambda i: gpu.add_rms_norm(xs[i], r, w, 1e-6, out=y, sum_out=sm)
        kname, peer = "add_rms_norm", None
    else:
        gpu.rms_norm(x, w, 1e-6, out=y)
        ref_y = golden.rms_norm(_host(x), _host(w), 1e-6)
        err = rel_err(_host(y), ref_y)
        fn = lambda i: gpu.rms_norm(xs[i], w, 1e-6, out=y)
        kname, peer = "rms_norm", None
        if ctx.torch is not None:
            t = ctx.torch
            txs = [t.from_dlpack(a) for a in xs]
            tw = t.from_dlpack(w) + 1.0                       # zero-centred: x · (1 + w)
            peer = _peer(ctx, "torch rms_norm f32",
                         lambda i: t.nn.functional.rms_norm(txs[i], (n,), tw, 1e-6), nr)
    med, iqr = ctx.time(fn, nr)
    shape = {"rows": rows, "n": n}
    pk = {} if peer is None else {"peer": peer[0], "peer_us": peer[1]}
    ctx.add(make_run("norm", kname, shape, med, ws, ctx.copy_gbps, err, TOL_F32, iqr_us=iqr,
                     **pk), ref_y, _host(y))


def case_rope(ctx, nb):
    from . import golden, gpu
    cp = ctx.cp
    c = _qwen()
    hd = c.head_dim
    qg = _randn(cp, (nb, c.nh, 2 * hd))
    k = _randn(cp, (nb, c.nkv, hd))
    qw, kw = _randn(cp, (hd,), 0.1, False), _randn(cp, (hd,), 0.1, False)
    pos_h = np.random.default_rng(1).integers(0, 131072, nb).astype(np.int32)  # long contexts
    pos = cp.asarray(pos_h)
    ws = bytes_rope(nb, c.nh, c.nkv, hd)
    nr = ctx.n_rot(ws)
    qgs = [qg] + [qg.copy() for _ in range(nr - 1)]
    qo = cp.full((nb, c.nh, hd), cp.nan, cp.float32)
    ko = cp.full((nb, c.nkv, hd), cp.nan, cp.float32)
    gpu.qk_norm_rope(qg, k, qw, kw, pos, c.rotary_dim, c.rope_theta, 1e-6, q_out=qo, k_out=ko)
    rq, rk = golden.qk_norm_rope(_host(qg), _host(k), _host(qw), _host(kw), pos_h, c.rotary_dim,
                                 c.rope_theta, 1e-6)
    err = max(rel_err(_host(qo), rq), rel_err(_host(ko), rk))
    med, iqr = ctx.time(lambda i: gpu.qk_norm_rope(qgs[i], k, qw, kw, pos, c.rotary_dim,
                                                   c.rope_theta, 1e-6, q_out=qo, k_out=ko), nr)
    shape = {"nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": hd, "rotary_dim": c.rotary_dim}
    ctx.add(make_run("rope", "qk_norm_rope", shape, med, ws, ctx.copy_gbps, err, TOL_ROPE,
                     iqr_us=iqr), rq, _host(qo))


def case_wht(ctx, rows, n):
    from . import golden
    from .gpu.wht import wht as gpu_wht     # from its module: `wht` also names the submodule
    cp = ctx.cp
    x = _randn(cp, (rows, n))
    ws = bytes_wht(rows, n)
    nr = ctx.n_rot(ws)
    xs = [x] + [x.copy() for _ in range(nr - 1)]
    y = cp.full((rows, n), cp.nan, cp.float32)
    gpu_wht(x, out=y)
    ref = golden.wht(_host(x))
    err = rel_err(_host(y), ref)
    med, iqr = ctx.time(lambda i: gpu_wht(xs[i], out=y), nr)
    ctx.add(make_run("wht", "wht", {"rows": rows, "n": n}, med, ws, ctx.copy_gbps, err, TOL_F32,
                     iqr_us=iqr), ref, _host(y))


def case_quantize(ctx, rows, n, bits):
    """q8_quantize (bits 8 = Q8_0) or turbo_quantize(bits) over rows of n."""
    from . import golden, gpu
    cp = ctx.cp
    x = _randn(cp, (rows, n))
    if bits == "q8":
        ws = bytes_q8_quantize(rows, n)
        q, d = gpu.q8_quantize(x)
        rq, rd = golden.q8_quantize(_host(x))
        got, ref = golden.q8_dequantize(_host(q), _host(d)), golden.q8_dequantize(rq, rd)
        match = float((_host(q) == rq).mean())
        fn_ = lambda xi: gpu.q8_quantize(xi, q_out=q, d_out=d)
        kname = "q8_quantize"
    else:
        ws = bytes_turbo_quantize(rows, n, bits)
        q, d = gpu.turbo_quantize(x, bits)
        rq, rd = golden.turbo_quantize(_host(x), bits)
        got = golden.turbo_dequantize(_host(q), _host(d), bits)
        ref = golden.turbo_dequantize(rq, rd, bits)
        match = float((_host(q) == rq).mean())
        fn_ = lambda xi: gpu.turbo_quantize(xi, bits, codes_out=q, d_out=d)
        kname = f"turbo_quantize bits={bits}"
    nr = ctx.n_rot(ws)
    xs = [x] + [x.copy() for _ in range(nr - 1)]
    med, iqr = ctx.time(lambda i: fn_(xs[i]), nr)
    ctx.add(make_run("kvcache", kname, {"rows": rows, "n": n}, med, ws, ctx.copy_gbps,
                     rel_err(got, ref), TOL_CODES, iqr_us=iqr, code_match=match), ref, got)


def case_append(ctx, nb, kind):
    """KVCache.append of nb tokens (27B kv shape), repeated at successive positions."""
    from . import golden, gpu
    cp = ctx.cp
    c = _dense_cfg()
    max_inner = 2 if nb >= 1024 else 64
    calls = 3 + 1 + ctx.batches * max_inner + 1
    cache = gpu.KVCache(c, max_t=calls * nb, kind=kind)
    ws = bytes_append(nb, c.nkv, c.head_dim, kind)
    nr = ctx.n_rot(2 * nb * c.nkv * c.head_dim * 4)
    ks = [_randn(cp, (nb, c.nkv, c.head_dim)) for _ in range(nr)]
    vs = [_randn(cp, (nb, c.nkv, c.head_dim)) for _ in range(nr)]
    cache.append(ks[0], vs[0])                                   # validated below
    gc = golden.KVCache(c, max_t=nb, kind=kind)
    gc.append(_host(ks[0]), _host(vs[0]))
    mine = cache.to_golden()
    got = np.concatenate([mine.keys(nb).ravel(), mine.values(nb).ravel()])
    ref = np.concatenate([gc.keys(nb).ravel(), gc.values(nb).ravel()])
    match = float(np.mean([(ms[n][:, :nb] == gs[n]).mean()
                           for ms, gs in ((mine.k_store, gc.k_store), (mine.v_store, gc.v_store))
                           for n in gs]))
    med, iqr = ctx.time(lambda i: cache.append(ks[i], vs[i]), nr, max_inner=max_inner)
    shape = {"nb": nb, "nkv": c.nkv, "head_dim": c.head_dim, "kind": kind}
    ctx.add(make_run("kvcache", f"KVCache.append {kind}", shape, med, ws, ctx.copy_gbps,
                     rel_err(got, ref), TOL_CODES, iqr_us=iqr, code_match=match), ref, got)


def _fill(ctx, caches, T, k_norm_w=None, chunk=8192):
    """Append T random tokens (same values) to each cache; block keys when there's an indexer."""
    from . import gpu
    cp = ctx.cp
    c = caches[0].cfg
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        k = _randn(cp, (n, c.nkv, c.head_dim), outliers=False)
        v = _randn(cp, (n, c.nkv, c.head_dim), outliers=False)
        ik = _randn(cp, (n, c.indexer_head_dim), outliers=False) if c.has_indexer else None
        for cache in caches:
            cache.append(k, v, index_k=ik)
    if c.has_indexer:
        for cache in caches:
            gpu.update_block_keys(cache, k_norm_w, c, 0, T)


def golden_attention_rows(gc, q, base_pos, gate=None, sel=None, sparse_v=0.0):
    """The golden layer's per-row attention on a golden cache as stored: q [nb, nh, hd]; sel[b]
    the row's token indices (None: dense). Returns [nb, nh, hd] float32."""
    from . import golden
    nb = q.shape[0]
    T = base_pos + nb
    K, V = gc.keys(T), gc.values(T)
    qa = golden.wht(q) if gc.k_rotated else q
    out = np.empty(q.shape, np.float32)
    for b in range(nb):
        t = base_pos + b + 1
        idx = None if sel is None else sel[b]
        kk, vv = (K[:, :t], V[:, :t]) if idx is None else (K[:, idx], V[:, idx])
        o = golden.decode_attention(qa[b], kk, vv, None, sparse_v)
        if gc.v_rotated:
            o = golden.wht(o, inverse=True)
        out[b] = o if gate is None else golden.output_gate(o, gate[b])
    return out


def _sdpa_peer(ctx, nb, nh, nkv, hd, T, cache_key, graph_calls=0):
    """torch SDPA bf16 GQA decode [1, nh, nb, hd] x [1, nkv, T, hd]: (name, us) of the faster of
    the flash and cuDNN backends, or None. Queued like our kernels (ctx.time), or, with
    graph_calls > 0, as replays of a torch.cuda.CUDAGraph of that many decodes (for a peer of
    our graph-replay runs). Rotates over K/V copies when they fit the L2. Memoised per shape."""
    memo = ctx.__dict__.setdefault("_sdpa", {})
    if (cache_key, graph_calls) in memo:
        return memo[(cache_key, graph_calls)]
    t = ctx.torch
    if t is None:
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = t.nn.functional
    nr = ctx.n_rot(2 * nkv * T * hd * 2)
    q = t.randn(1, nh, nb, hd, device="cuda", dtype=t.bfloat16)
    kv = [(t.randn(1, nkv, T, hd, device="cuda", dtype=t.bfloat16),
           t.randn(1, nkv, T, hd, device="cuda", dtype=t.bfloat16)) for _ in range(nr)]

    def fn(i):
        return F.scaled_dot_product_attention(q, kv[i % nr][0], kv[i % nr][1], enable_gqa=True)
    best = None
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                fn(0)
                t.cuda.synchronize()
                us = _torch_graph_us(t, fn, graph_calls, ctx.batches) if graph_calls else \
                    ctx.time(fn, nr)[0]
        except Exception as e:
            print(f"  (SDPA {name} backend unavailable: {type(e).__name__}: {str(e)[:100]})")
            continue
        if best is None or us < best[1]:
            best = (f"torch SDPA bf16 GQA ({name}{', graph replay' if graph_calls else ''})", us)
    memo[(cache_key, graph_calls)] = best
    return best


def _torch_graph_us(t, fn, calls, batches):
    """Median us per call of fn(i), i < calls, captured in one torch CUDA graph and replayed."""
    side = t.cuda.Stream()
    side.wait_stream(t.cuda.current_stream())
    with t.cuda.stream(side):                         # warm-up off the legacy stream
        for i in range(calls):
            fn(i)
    t.cuda.current_stream().wait_stream(side)
    t.cuda.synchronize()
    g = t.cuda.CUDAGraph()
    with t.cuda.graph(g):
        for i in range(calls):
            fn(i)
    g.replay()
    t.cuda.synchronize()
    a, b = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(batches):
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / calls)
    return float(np.median(ts))


def case_attention(ctx, T, nb, kind, peer=True):
    """Dense split-T decode on a cache of T tokens: rows at T-nb .. T-1 (the last row sees T)."""
    from . import gpu
    cp = ctx.cp
    c = _dense_cfg()
    per_cache = T * kv_bytes_per_token(kind, c.nkv, c.head_dim)
    nr = ctx.n_rot(per_cache)
    caches = [gpu.KVCache(c, max_t=T, kind=kind) for _ in range(nr)]
    _fill(ctx, caches, T)
    base = T - nb
    q = _randn(cp, (nb, c.nh, c.head_dim), 2.0)                 # x2: peaked softmax
    out = cp.full((nb, c.nh, c.head_dim), cp.nan, cp.float32)
    gpu.decode_attention(q, caches[0], base, out=out)
    ref = golden_attention_rows(caches[0].to_golden(), _host(q), base)
    err = rel_err(_host(out), ref)
    med, iqr = ctx.time(lambda i: gpu.decode_attention(q, caches[i], base, out=out), nr)
    nbytes = bytes_attention(nb, c.nh, c.nkv, c.head_dim, kind, base)
    pk = {}
    if peer:
        p = _sdpa_peer(ctx, nb, c.nh, c.nkv, c.head_dim, T, ("dense", T, nb))
        if p:
            pk = {"peer": p[0], "peer_us": p[1]}
    shape = {"T": T, "nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": c.head_dim, "kind": kind}
    tol = attention_tol(caches[0], nb)
    ctx.add(make_run("attention", f"decode_attention {kind}", shape, med, nbytes, ctx.copy_gbps,
                     err, tol, iqr_us=iqr, **pk), ref, _host(out))
    if kind == "q8":
        _attention_graph_run(ctx, caches, q, base, ref, shape, nbytes, tol)
        if nb == 1:
            del caches                          # the floor's buffers take their place
            _floor_runs(ctx, T, nb, nbytes)


def _floor_runs(ctx, T, nb, nbytes, calls_per_graph=8):
    """The floor of one launch at the decode's size: stream.cu's stream_read over nbytes (it
    reads them and nothing else), queued and as graph replays like the decode, over rotated
    buffers. checked_buffers raises (an error row) if a launch missed a byte; err is then 0."""
    from .gpu.stream import checked_buffers, stream_read
    from .tune_attention import time_graph
    nr = max(2, ctx.n_rot(nbytes))
    pairs = checked_buffers(nbytes, nr)
    shape = {"T": T, "nb": nb, "bytes": nbytes}
    name = "stream_read floor (one launch reading the decode's bytes)"
    med, iqr = ctx.time(lambda i: stream_read(*pairs[i]), nr)
    ctx.add(make_run("attention", name, shape, med, nbytes, ctx.copy_gbps, 0.0, 0.0,
                     iqr_us=iqr))
    n = max(calls_per_graph, nr)
    t, _, mode = time_graph(ctx.cp, [lambda p=pairs[i % nr]: stream_read(*p) for i in range(n)],
                            ctx.batches)
    if mode == "graph":
        ctx.add(make_run("attention", f"{name} (graph replay, {n} per graph)", shape, t * 1e6,
                         nbytes, ctx.copy_gbps, 0.0, 0.0))


def attention_tol(cache, nb, sel_n=None):
    """The tolerance of the plan decode_attention runs on these rows (TOL_ATTN_MMA on the
    tensor-core path, else TOL_ATTN): its GPU-free part, so no GPU is needed here."""
    from .gpu.attention import plan_rung
    return plan_rung(cache, nb, selective=sel_n is not None).tol


def _attention_graph_run(ctx, caches, q, base, ref, shape, nbytes, tol, calls_per_graph=8):
    """The same decode as CUDA-graph replays (what a captured decode step runs): a graph of
    calls_per_graph decodes rotating over the caches, replayed; time per decode = median replay
    / calls. The gap between the partials and the combine is then a graph's, not the host's
    queue's. The output after the replays is checked against golden (every cache holds the
    same tokens)."""
    from . import gpu
    from .tune_attention import time_graph
    cp = ctx.cp
    m, l, o = gpu.attn_partials(q, caches[0], base)               # buffers at the auto split count
    out = cp.full(q.shape, cp.nan, cp.float32)
    n = max(calls_per_graph, len(caches))
    calls = [lambda c=caches[i % len(caches)]: gpu.decode_attention(q, c, base, out=out,
                                                                     partials=(m, l, o))
             for i in range(n)]
    t, _, mode = time_graph(cp, calls, ctx.batches)
    if mode != "graph":
        print(f"  (decode graph capture failed: {mode}; no graph run recorded)")
        return
    ctx.add(make_run("attention", f"decode_attention q8 (graph replay, {n} per graph)", shape,
                     t * 1e6, nbytes, ctx.copy_gbps, rel_err(_host(out), ref), tol))


def case_qsa(ctx, T, nb, kind="q8"):
    """QSA selective decode at T tokens (27B indexer: R 64, budget 2048, 8 heads x 128):
    block scores, select_rows (scores + selection), selective attention, and the three
    together against dense SDPA."""
    from . import golden, gpu
    cp = ctx.cp
    c = _qwen()
    R, kblk, inh, ihd = c.indexer_compress_ratio, c.kblk, c.indexer_n_heads, c.indexer_head_dim
    cache = gpu.KVCache(c, max_t=T, kind=kind)
    knw = _randn(cp, (ihd,), 0.1, False)
    _fill(ctx, [cache], T, knw)
    base = T - nb
    iq = _randn(cp, (nb, inh, ihd), outliers=False)              # indexer queries (normed)
    q = _randn(cp, (nb, c.nh, c.head_dim), 2.0)
    gc = cache.to_golden()
    n_blocks = T // R
    shape = {"T": T, "nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": c.head_dim, "kind": kind,
             "R": R, "budget": c.indexer_budget, "inh": inh, "ihd": ihd}

    # block keys from the raw keys (prefill-time; idempotent, so it can be re-run and timed);
    # the stages below score the GPU's block keys on both sides, so they compare like for like
    gpu_bk = gc.blk_keys[:n_blocks].copy()
    golden.update_block_keys(gc, _host(knw), c, 0, T)
    err = rel_err(gpu_bk, gc.blk_keys[:n_blocks])
    med, iqr = ctx.time(lambda i: gpu.update_block_keys(cache, knw, c, 0, T), max_inner=4)
    bk_bytes = 4 * (T * ihd + n_blocks * ihd)
    ctx.add(make_run("indexer", "update_block_keys (all blocks)", shape, med, bk_bytes,
                     ctx.copy_gbps, err, TOL_ROPE, iqr_us=iqr), gc.blk_keys[:n_blocks], gpu_bk)

    # scoring (row b scores its (base+b+1)//R complete blocks; the rest of the row is -inf)
    max_blocks = cache.blk_keys.shape[0]
    sc = gpu.block_scores(iq, cache, base)
    iq_h, sc_h = _host(iq), _host(sc)
    ncs = [(base + b + 1) // R for b in range(nb)]
    ref_sc = np.concatenate([golden.block_scores(iq_h[b], gpu_bk[:ncs[b]]) for b in range(nb)])
    got_sc = np.concatenate([sc_h[b, :ncs[b]] for b in range(nb)])
    med, iqr = ctx.time(lambda i: gpu.block_scores(iq, cache, base, out=sc))
    ctx.add(make_run("indexer", "block_scores", shape, med,
                     bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks), ctx.copy_gbps,
                     rel_err(got_sc, ref_sc), TOL_F32, iqr_us=iqr), ref_sc, got_sc)

    # selection (scores + top-k + token list)
    sel_idx, sel_n, _ = gpu.select_rows(iq, cache, base, c)
    si, sn = _host(sel_idx), _host(sel_n)
    sel, diff = [], []
    for b in range(nb):
        t = base + b
        ridx, _ = golden.row_selection(t, iq_h[b], gpu_bk, R, kblk)
        mine = si[b, :sn[b]] if sn[b] > 0 else np.arange(t + 1)
        sel.append(mine if sn[b] > 0 else None)
        diff.append(len(np.setxor1d(mine, ridx)) / (2 * len(ridx)))
    med_sel, iqr = ctx.time(lambda i: gpu.select_rows(iq, cache, base, c))
    ctx.add(make_run("indexer", "select_rows (err: tokens differing)", shape, med_sel,
                     bytes_select(nb, inh, ihd, n_blocks, max_blocks, R, kblk), ctx.copy_gbps,
                     float(np.mean(diff)), TOL_SELECT, iqr_us=iqr))

    # selective attention on the GPU's own selection
    out = cp.full((nb, c.nh, c.head_dim), cp.nan, cp.float32)
    gpu.decode_attention(q, cache, base, sel_idx=sel_idx, sel_n=sel_n, out=out)
    ref = golden_attention_rows(gc, _host(q), base, sel=sel)
    err = rel_err(_host(out), ref)
    med_att, iqr = ctx.time(lambda i: gpu.decode_attention(q, cache, base, sel_idx=sel_idx,
                                                           sel_n=sel_n, out=out))
    att_bytes = bytes_attention(nb, c.nh, c.nkv, c.head_dim, kind, base, R, kblk,
                                selective=True)
    tol = attention_tol(cache, nb, sel_n)
    ctx.add(make_run("indexer", f"decode_attention selective {kind}", shape, med_att, att_bytes,
                     ctx.copy_gbps, err, tol, iqr_us=iqr), ref, _host(out))

    # the whole selective path vs dense SDPA over all T tokens
    def qsa(i):
        s_idx, s_n, _ = gpu.select_rows(iq, cache, base, c)
        gpu.decode_attention(q, cache, base, sel_idx=s_idx, sel_n=s_n, out=out)
    med, iqr = ctx.time(qsa)
    p = _sdpa_peer(ctx, nb, c.nh, c.nkv, c.head_dim, T, ("dense", T, nb))
    pk = {"peer": p[0] + " dense", "peer_us": p[1]} if p else {}
    qsa_bytes = bytes_select(nb, inh, ihd, n_blocks, max_blocks, R, kblk) + att_bytes
    ctx.add(make_run("indexer", f"QSA select+attention {kind}", shape, med, qsa_bytes,
                     ctx.copy_gbps, err, tol, iqr_us=iqr, **pk))
    _qsa_graph_run(ctx, iq, q, cache, base, c, ref, shape, qsa_bytes, tol)


def _qsa_graph_run(ctx, iq, q, cache, base, c, ref, shape, nbytes, tol, calls_per_graph=8):
    """The selective path as CUDA-graph replays (how a captured decode step runs its four
    launches: block scores, selection, partials, combine), against dense SDPA also replayed
    from a graph (torch.cuda.CUDAGraph, its faster backend): both sides timed the same way."""
    from . import gpu
    from .tune_attention import time_graph
    cp = ctx.cp
    s_idx, s_n, mask = gpu.select_rows(iq, cache, base, c)
    scores = cp.empty(mask.shape, cp.float32)
    m, l, o = gpu.attn_partials(q, cache, base, sel_idx=s_idx, sel_n=s_n)
    out = cp.full(q.shape, cp.nan, cp.float32)

    def qsa():
        gpu.select_rows(iq, cache, base, c, sel_idx_out=s_idx, sel_n_out=s_n, mask_out=mask,
                        scores_out=scores)
        gpu.decode_attention(q, cache, base, sel_idx=s_idx, sel_n=s_n, out=out,
                             partials=(m, l, o))
    t, _, mode = time_graph(cp, [qsa] * calls_per_graph, ctx.batches)
    if mode != "graph":
        print(f"  (QSA graph capture failed: {mode}; no graph run recorded)")
        return
    nb = q.shape[0]
    pg = _sdpa_peer(ctx, nb, c.nh, c.nkv, c.head_dim, shape["T"], ("dense", shape["T"], nb),
                    graph_calls=calls_per_graph)
    pk = {"peer": pg[0] + " dense", "peer_us": pg[1]} if pg else {}
    ctx.add(make_run("indexer", f"QSA select+attention {shape['kind']} (graph replay, "
                     f"{calls_per_graph} per graph)", shape, t * 1e6, nbytes, ctx.copy_gbps,
                     rel_err(_host(out), ref), tol, **pk))


_PROJS = (("qkv+indexer (fused)", 2 * 24 * 256 + 2 * 4 * 256 + 9 * 128, 5120),
          ("o_proj", 5120, 24 * 256),
          ("gate|up (fused)", 2 * 17408, 5120),
          ("down_proj", 5120, 17408))


def case_gemv(ctx, name, n_out, n_in, nbs):
    """Q8_0 GEMV for one of the 27B layer's projections vs cuBLAS f32 and bf16."""
    from . import golden, gpu
    from .gpu.gemv import gemv_q8_swiglu
    cp = ctx.cp
    w = cp.random.standard_normal((n_out, n_in), dtype=cp.float32) * np.float32(0.02)
    q, d = gpu.q8_weight(w)
    rows = slice(0, 64)                                       # golden quantizer on a sample
    rq, rd = golden.q8_quantize(_host(w[rows]))
    qmatch = min(float((_host(q[rows]) == rq).mean()), float((_host(d[rows]) == rd).mean()))
    ws = bytes_gemv_q8(1, n_in, n_out)
    nr = ctx.n_rot(ws)
    qs = [(q, d)] + [(q.copy(), d.copy()) for _ in range(nr - 1)]
    wdq = golden.q8_dequantize(_host(q), _host(d))           # [n_out, n_in] f32 on the host
    t = ctx.torch
    tw = None
    if t is not None:
        wb = t.from_dlpack(w).to(t.bfloat16)
        nrb = ctx.n_rot(wb.numel() * 2)
        tw = [wb] + [wb.clone() for _ in range(nrb - 1)]
    for nb in nbs:
        x = _randn(cp, (nb, n_in), outliers=False)
        y = cp.full((nb, n_out), cp.nan, cp.float32)
        gpu.gemv_q8(x, q, d, out=y)
        ref = golden.linear(_host(x), wdq)
        err = rel_err(_host(y), ref)
        med, iqr = ctx.time(lambda i: gpu.gemv_q8(x, qs[i][0], qs[i][1], out=y), nr)
        pk = {}
        if tw is not None:
            xb = t.from_dlpack(x).to(t.bfloat16)
            p = _peer(ctx, "cuBLAS bf16 (torch.matmul)", lambda i: t.matmul(xb, tw[i].T),
                      len(tw))
            if p:
                pk = {"peer": p[0], "peer_us": p[1]}
        shape = {"nb": nb, "n_in": n_in, "n_out": n_out, "proj": name}
        run = make_run("gemv", "gemv_q8", shape, med, bytes_gemv_q8(nb, n_in, n_out),
                       ctx.copy_gbps, err, TOL_F32, iqr_us=iqr, q8_weight_match=qmatch, **pk)
        run["ok"] = run["ok"] and qmatch == 1.0             # q8_weight must be bit-exact
        ctx.add(run, ref, _host(y))
        if name.startswith("gate|up"):                      # rows read as (gate_i, up_i) pairs
            act = cp.full((nb, n_out // 2), cp.nan, cp.float32)
            gemv_q8_swiglu(x, q, d, out=act)
            ref_a = golden.silu(ref[:, 0::2]) * ref[:, 1::2]
            med, iqr = ctx.time(lambda i: gemv_q8_swiglu(x, qs[i][0], qs[i][1],
                                                                  out=act), nr)
            ctx.add(make_run("gemv", "gemv_q8 + SwiGLU epilogue", shape, med,
                             bytes_gemv_q8(nb, n_in, n_out) - 4 * nb * n_out // 2,
                             ctx.copy_gbps, rel_err(_host(act), ref_a), TOL_F32, iqr_us=iqr),
                    ref_a, _host(act))
        # the f32 path (cuBLAS sgemm) as its own row: 4-byte weights
        wsf = bytes_linear(nb, n_in, n_out, 4)
        nrf = ctx.n_rot(wsf)
        wfs = [w] + [w.copy() for _ in range(nrf - 1)]
        gpu.linear(x, w, out=y)
        ref_f = golden.linear(_host(x), _host(w))
        med, iqr = ctx.time(lambda i: gpu.linear(x, wfs[i], out=y), nrf)
        ctx.add(make_run("gemv", "linear f32 (cuBLAS sgemm)", shape, med, wsf, ctx.copy_gbps,
                         rel_err(_host(y), ref_f), TOL_F32, iqr_us=iqr))


def _random_weights(cfg, seed=0):
    """LayerWeights-like dict of float32 numpy arrays at cfg's shapes (projections ~ N(0, 0.02),
    norm weights ~ N(0, 0.1) around the zero-centred 1)."""
    rng = np.random.default_rng(seed)
    c = cfg
    hd, H, I = c.head_dim, c.hidden_size, c.intermediate_size
    shapes = {
        "input_layernorm.weight": (H,), "post_attention_layernorm.weight": (H,),
        "self_attn.q_proj.weight": (2 * c.nh * hd, H), "self_attn.k_proj.weight": (c.nkv * hd, H),
        "self_attn.v_proj.weight": (c.nkv * hd, H), "self_attn.o_proj.weight": (H, c.nh * hd),
        "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
        "mlp.gate_proj.weight": (I, H), "mlp.up_proj.weight": (I, H), "mlp.down_proj.weight": (H, I),
    }
    if c.has_indexer:
        ihd = c.indexer_head_dim
        shapes.update({"self_attn.indexer.qk_proj.weight": ((c.indexer_n_heads + 1) * ihd, H),
                       "self_attn.indexer.q_norm.weight": (ihd,),
                       "self_attn.indexer.k_norm.weight": (ihd,)})
    w = {}
    for name, shp in shapes.items():
        scale = 0.1 if len(shp) == 1 else 0.02
        w[name] = (rng.standard_normal(shp, dtype=np.float32) * np.float32(scale))
    return w


def case_layer(ctx, T, nbs, kind="q8", weight_format="q8"):
    """One decode step of the 27B layer at T cached tokens: validated against the golden layer,
    then per stage (events), eager end to end, and as CUDA-graph replays."""
    from . import golden, gpu
    from .gpu.layer import STAGES as LSTAGES
    cp = ctx.cp
    c = _qwen()
    w = _random_weights(c)
    layer = gpu.FullAttentionLayer(c, w, weight_format=weight_format)
    glayer = golden.FullAttentionLayer(c, w, weight_format=weight_format)
    del w
    reps = ctx.batches
    extra = sum(nbs) * (2 * reps + 4) + 16      # per nb: 1 checked + reps staged + reps eager + 1 graph
    cache = gpu.KVCache(c, max_t=T + extra, kind=kind)
    knw = cp.asarray(glayer.w["self_attn.indexer.k_norm.weight"])
    _fill(ctx, [cache], T, knw)
    wb = layer.weight_bytes()
    for nb in nbs:
        base_shape = {"T": T, "nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": c.head_dim,
                      "kind": kind, "weights": weight_format, "R": c.indexer_compress_ratio,
                      "budget": c.indexer_budget}
        x = _randn(cp, (nb, c.hidden_size), outliers=False)
        # validate one eager step against the golden layer on the same cache contents
        base = len(cache)
        gc = cache.to_golden()
        utrace, trace = {}, {}
        y = layer.forward(x, base, cache, trace=utrace)
        ref = glayer.forward(_host(x), base, gc, trace=trace)
        err = rel_err(_host(y), ref)
        mine = cache.to_golden()
        codes = float(np.mean(
            [(ms[n][:, base:base + nb] == gs[n][:, base:base + nb]).mean()
             for ms, gs in ((mine.k_store, gc.k_store), (mine.v_store, gc.v_store)) for n in gs]))
        sel_match = _selection_match(utrace, trace, base)
        # per stage, GPU time (spin first): median over reps steps at successive positions
        per = {}
        for _ in range(reps):
            _, tms = layer.stage_times(x, len(cache), cache)
            for k_, v_ in tms.items():
                per.setdefault(k_, []).append(v_)
        sb = layer_stage_bytes(c, nb, len(cache) - nb, kind, weight_format)
        for st in list(LSTAGES) + ["total"]:
            if st not in per:
                continue
            ctx.add(make_run("layer", f"step: {st}", base_shape, float(np.median(per[st])),
                             sb.get(st, 0), ctx.copy_gbps, err, TOL_LAYER,
                             iqr_us=float(np.subtract(*np.percentile(per[st], [75, 25])))))
        # eager: host-launched, no spin (what a Python decode loop gets)
        ts = []
        for _ in range(reps):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            cp.cuda.Device().synchronize()
            a.record()
            layer.forward(x, len(cache), cache)
            b.record()
            b.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
        ctx.add(make_run("layer", "step eager (host launches)", base_shape, float(np.median(ts)),
                         sb["total"], ctx.copy_gbps, err, TOL_LAYER, weight_bytes=wb,
                         code_match=codes, selection_match=sel_match), ref, _host(y))
        # graph: capture at the current length, check one replay against golden, time replays
        base = len(cache)
        gc = cache.to_golden()
        g = layer.capture(x, base, cache)
        gerr = rel_err(_host(g.out), glayer.forward(_host(x), base, gc))
        med = g.time_us(batches=max(10, reps))
        ctx.add(make_run("layer", "step graph replay", base_shape, med, sb["total"],
                         ctx.copy_gbps, gerr, TOL_LAYER, weight_bytes=wb))
        del g


def _selection_match(gpu_trace, trace, base):
    """Fraction of rows whose GPU selection (gpu_trace, filled by the GPU layer's forward)
    equals the golden layer's (trace); 1.0 when all dense."""
    sel = gpu_trace.get("selection")
    gold = trace.get("selections") or []
    if sel is None or not gold:
        return 1.0
    si, sn = _host(sel[0]), _host(sel[1])
    same = []
    for b, (idx, _) in enumerate(gold):
        mine = si[b, :sn[b]] if sn[b] > 0 else np.arange(base + b + 1)
        same.append(mine.shape == idx.shape and bool((mine == idx).all()))
    return float(np.mean(same))


# ---- the ladder: every rung of every kernel family -----------------------------------------
# `python -m qwenref.bench --only ladder` validates and times each rung (v0 = the direct
# translation of the golden formula, then each faster idea) at one shape per family, and
# records family, rung, default and the rung's own kernel name. The records keep their
# pipeline stage in `stage` and carry bench="ladder", which --only merges by.

_FAMILY_MODULE = {"rms_norm": "norm", "add_rms_norm": "norm", "qk_norm_rope": "rope",
                  "wht": "wht", "q8_append": "kvcache", "turbo_append": "kvcache",
                  "update_block_keys": "indexer", "block_scores": "indexer",
                  "select": "indexer", "attention": "attention", "gemv": "gemv"}


def family_rungs(family):
    """(rung names in teaching order, the stage module) of a kernel family."""
    import importlib
    mod = importlib.import_module(f".gpu.{_FAMILY_MODULE[family]}", __package__)
    return tuple(mod.RUNGS[family]), mod


def rung_fields(family, impl, default, **kshape):
    """The ladder fields of one run: family, rung (index in teaching order), default, kernel."""
    rungs, mod = family_rungs(family)
    return {"family": family, "rung": rungs.index(impl), "default": impl == default,
            "kernel": mod.rung_kernel(family, impl, **kshape), "bench": "ladder"}


def _ladder_runs(ctx, stage, family, shape, default, once, launch, ref, nbytes, tol,
                 n_rot=1, max_inner=64, kshape=None, floor_us=None, impls=None, err_fn=None):
    """Each rung of `family`: once(impl) -> its output on the host (outputs poisoned first),
    checked against ref by err_fn (rel_err); then launch(impl, i) timed queued. tol: a number
    or {impl: number}. One record per rung."""
    rungs, _ = family_rungs(family)
    for impl in impls or rungs:
        try:
            got = once(impl)
            err = (err_fn or rel_err)(got, ref)
            tol_i = tol[impl] if isinstance(tol, dict) else tol
            med, iqr = ctx.time(lambda i: launch(impl, i), n_rot, max_inner)
            meta = rung_fields(family, impl, default, **(kshape or {}))
            fl = ({} if floor_us is None else
                  {"floor_us": floor_us, "pct_of_floor": 100.0 * floor_us / med})
            run = make_run(stage, meta.pop("kernel"), shape, med, nbytes, ctx.copy_gbps, err,
                           tol_i, iqr_us=iqr, timing="queued", **meta, **fl)
            same_size = np.size(got) == np.size(ref)
            ctx.add(run, ref if same_size else None, got if same_size else None)
        except Exception as e:                  # one broken rung must not hide the others
            run = error_run(stage, f"{family} {impl}", shape, e)
            run.update(family=family, rung=rungs.index(impl), bench="ladder")
            ctx.add(run)
            traceback.print_exc(limit=3, file=sys.stderr)


def _poisoned(cp, shape):
    return cp.full(shape, cp.nan, cp.float32)


def ladder_norm(ctx, rows=8192, n=5120):
    from . import golden, gpu
    cp = ctx.cp
    x, r = _randn(cp, (rows, n)), _randn(cp, (rows, n))
    w = _randn(cp, (n,), 0.1, outliers=False)
    y, s = _poisoned(cp, (rows, n)), _poisoned(cp, (rows, n))
    shape = {"rows": rows, "n": n}

    def once_n(impl):
        y.fill(cp.nan)
        return _host(gpu.rms_norm(x, w, 1e-6, out=y, impl=impl))
    ref = golden.rms_norm(_host(x), _host(w), 1e-6)
    _ladder_runs(ctx, "norm", "rms_norm", shape, "v1", once_n,
                 lambda impl, i: gpu.rms_norm(x, w, 1e-6, out=y, impl=impl), ref,
                 bytes_norm(rows, n), TOL_F32, max_inner=8)

    def once_a(impl):
        y.fill(cp.nan)
        s.fill(cp.nan)
        gpu.add_rms_norm(x, r, w, 1e-6, out=y, sum_out=s, impl=impl)
        return np.concatenate([_host(y).ravel(), _host(s).ravel()])
    ry, rs = golden.add_rms_norm(_host(x), _host(r), _host(w), 1e-6)
    _ladder_runs(ctx, "norm", "add_rms_norm", shape, "v1", once_a,
                 lambda impl, i: gpu.add_rms_norm(x, r, w, 1e-6, out=y, sum_out=s, impl=impl),
                 np.concatenate([ry.ravel(), rs.ravel()]), bytes_norm(rows, n, True), TOL_F32,
                 max_inner=8)


def ladder_rope(ctx, nb=4096):
    from . import golden, gpu
    cp = ctx.cp
    c = _qwen()
    hd = c.head_dim
    qg, k = _randn(cp, (nb, c.nh, 2 * hd)), _randn(cp, (nb, c.nkv, hd))
    qw, kw = _randn(cp, (hd,), 0.1, False), _randn(cp, (hd,), 0.1, False)
    pos_h = np.random.default_rng(1).integers(0, 131072, nb).astype(np.int32)
    pos = cp.asarray(pos_h)
    qo, ko = _poisoned(cp, (nb, c.nh, hd)), _poisoned(cp, (nb, c.nkv, hd))
    args = (qg, k, qw, kw, pos, c.rotary_dim, c.rope_theta, 1e-6)

    def once(impl):
        qo.fill(cp.nan)
        ko.fill(cp.nan)
        gpu.qk_norm_rope(*args, q_out=qo, k_out=ko, impl=impl)
        return np.concatenate([_host(qo).ravel(), _host(ko).ravel()])
    rq, rk = golden.qk_norm_rope(_host(qg), _host(k), _host(qw), _host(kw), pos_h,
                                 c.rotary_dim, c.rope_theta, 1e-6)
    shape = {"nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": hd, "rotary_dim": c.rotary_dim}
    from .gpu.rope import DEFAULT_RUNG
    _ladder_runs(ctx, "rope", "qk_norm_rope", shape, DEFAULT_RUNG["qk_norm_rope"], once,
                 lambda impl, i: gpu.qk_norm_rope(*args, q_out=qo, k_out=ko, impl=impl),
                 np.concatenate([rq.ravel(), rk.ravel()]), bytes_rope(nb, c.nh, c.nkv, hd),
                 TOL_ROPE, max_inner=8, kshape={"head_dim": hd})


def ladder_wht(ctx, rows=65536, n=256):
    from . import golden
    from .gpu.wht import wht as gpu_wht
    cp = ctx.cp
    x = _randn(cp, (rows, n))
    y = _poisoned(cp, (rows, n))

    def once(impl):
        y.fill(cp.nan)
        return _host(gpu_wht(x, out=y, impl=impl))
    _ladder_runs(ctx, "wht", "wht", {"rows": rows, "n": n}, "v1", once,
                 lambda impl, i: gpu_wht(x, out=y, impl=impl), golden.wht(_host(x)),
                 bytes_wht(rows, n), TOL_F32, max_inner=8, kshape={"n": n})


def ladder_append(ctx, nb=4096, kinds=("q8", "turbo4", "turbo2")):
    """KVCache.append of nb tokens at successive positions; the stored bytes are compared."""
    from . import golden, gpu
    cp = ctx.cp
    c = _dense_cfg()
    max_inner = 2
    calls = 3 + 1 + ctx.batches * max_inner + 2
    k, v = _randn(cp, (nb, c.nkv, c.head_dim)), _randn(cp, (nb, c.nkv, c.head_dim))
    for kind in kinds:
        family = "q8_append" if kind == "q8" else "turbo_append"
        gc = golden.KVCache(c, max_t=nb, kind=kind)
        gc.append(_host(k), _host(v))
        ref = np.concatenate([gc.keys(nb).ravel(), gc.values(nb).ravel()])
        state = {}

        def once(impl, kind=kind, gc=gc):
            state["cache"] = cache = gpu.KVCache(c, max_t=calls * nb, kind=kind)
            cache.append(k, v, impl=impl)
            mine = cache.to_golden()
            # q8 codes are bit-exact by construction; turbo's rotation is float32 butterflies
            # against golden's float64 WHT, so a code on a rounding boundary may differ by one
            # step (TOL_CODES), which the dequantized comparison below measures
            pairs = ((mine.k_store, gc.k_store), (mine.v_store, gc.v_store))
            if kind == "q8" and not all((ms[n][:, :nb] == gs[n]).all()
                                        for ms, gs in pairs for n in gs):
                raise AssertionError(f"q8 append ({impl}): stored bytes differ from golden")
            return np.concatenate([mine.keys(nb).ravel(), mine.values(nb).ravel()])
        bits = 8 if kind == "q8" else int(kind[len("turbo"):])
        _ladder_runs(ctx, "kvcache", family, {"nb": nb, "nkv": c.nkv, "head_dim": c.head_dim,
                                              "kind": kind}, "v1", once,
                     lambda impl, i: state["cache"].append(k, v, impl=impl), ref,
                     bytes_append(nb, c.nkv, c.head_dim, kind), TOL_CODES, max_inner=max_inner,
                     kshape={"head_dim": c.head_dim, "bits": bits})
        del state


def ladder_indexer(ctx, T=32768, nb=1):
    """update_block_keys, block_scores and select at T tokens (27B indexer, R 64, budget 2048)."""
    from . import golden, gpu
    cp = ctx.cp
    c = _qwen()
    R, kblk, inh, ihd = c.indexer_compress_ratio, c.kblk, c.indexer_n_heads, c.indexer_head_dim
    cache = gpu.KVCache(c, max_t=T, kind="q8")
    knw = _randn(cp, (ihd,), 0.1, False)
    _fill(ctx, [cache], T, knw)
    base, n_blocks = T - nb, T // R
    iq = _randn(cp, (nb, inh, ihd), outliers=False)
    shape = {"T": T, "nb": nb, "R": R, "budget": c.indexer_budget, "inh": inh, "ihd": ihd}
    gc = cache.to_golden()
    gpu_bk = gc.blk_keys[:n_blocks].copy()
    golden.update_block_keys(gc, _host(knw), c, 0, T)

    def once_keys(impl):
        cache.blk_keys.fill(cp.nan)
        gpu.update_block_keys(cache, knw, c, 0, T, impl=impl)
        return _host(cache.blk_keys[:n_blocks])
    _ladder_runs(ctx, "indexer", "update_block_keys", shape, "v1", once_keys,
                 lambda impl, i: gpu.update_block_keys(cache, knw, c, 0, T, impl=impl),
                 gc.blk_keys[:n_blocks], 4 * (T * ihd + n_blocks * ihd), TOL_ROPE, max_inner=4)
    gpu.update_block_keys(cache, knw, c, 0, T)          # the default rung's keys for the rest

    max_blocks = cache.blk_keys.shape[0]
    iq_h = _host(iq)
    ncs = [(base + b + 1) // R for b in range(nb)]
    ref_sc = np.concatenate([golden.block_scores(iq_h[b], gpu_bk[:ncs[b]]) for b in range(nb)])
    sc = _poisoned(cp, (nb, max_blocks))

    def once_scores(impl):
        sc.fill(cp.nan)
        h = _host(gpu.block_scores(iq, cache, base, out=sc, impl=impl))
        return np.concatenate([h[b, :ncs[b]] for b in range(nb)])
    _ladder_runs(ctx, "indexer", "block_scores", shape, "v1", once_scores,
                 lambda impl, i: gpu.block_scores(iq, cache, base, out=sc, impl=impl), ref_sc,
                 bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks), TOL_F32)

    ref_sel = [golden.row_selection(base + b, iq_h[b], gpu_bk, R, kblk)[0] for b in range(nb)]

    def once_select(impl):
        si, sn, _ = gpu.select_rows(iq, cache, base, c, impl=impl)
        si, sn = _host(si), _host(sn)
        return [si[b, :sn[b]] if sn[b] > 0 else np.arange(base + b + 1) for b in range(nb)]

    def differing(got, ref):
        return float(np.mean([len(np.setxor1d(g, r)) / (2 * len(r)) for g, r in zip(got, ref)]))
    _ladder_runs(ctx, "indexer", "select", shape, "v1", once_select,
                 lambda impl, i: gpu.select_rows(iq, cache, base, c, impl=impl), ref_sel,
                 bytes_select(nb, inh, ihd, n_blocks, max_blocks, R, kblk), TOL_SELECT,
                 err_fn=differing, kshape={"nblk": n_blocks, "kblk": kblk})


def _floor_us(ctx, nbytes):
    """Queued time of one stream_read launch over nbytes (rotated buffers): the read floor."""
    from .gpu.stream import checked_buffers, stream_read
    nr = max(2, ctx.n_rot(nbytes))
    pairs = checked_buffers(nbytes, nr)
    med, _ = ctx.time(lambda i: stream_read(*pairs[i]), nr)
    return med


def ladder_attention(ctx, T=32768, nb=1, kinds=("q8", "bf16", "turbo4")):
    """Dense decode at T tokens on each rung (v0 one warp per (row, head) over all tokens, v1
    split-T on CUDA cores, mma tensor cores where the cache is q8), beside the read floor."""
    from . import gpu
    from .gpu.attention import choose_impl
    cp = ctx.cp
    c = _dense_cfg()
    for kind in kinds:
        nbytes = bytes_attention(nb, c.nh, c.nkv, c.head_dim, kind, T - nb)
        floor = _floor_us(ctx, nbytes)
        nr = ctx.n_rot(T * kv_bytes_per_token(kind, c.nkv, c.head_dim))
        caches = [gpu.KVCache(c, max_t=T, kind=kind) for _ in range(nr)]
        _fill(ctx, caches, T)
        base = T - nb
        q = _randn(cp, (nb, c.nh, c.head_dim), 2.0)
        out = _poisoned(cp, (nb, c.nh, c.head_dim))
        ref = golden_attention_rows(caches[0].to_golden(), _host(q), base)

        def once(impl):
            out.fill(cp.nan)
            return _host(gpu.decode_attention(q, caches[0], base, out=out, impl=impl))
        impls = ("v0", "v1", "mma") if kind == "q8" else ("v0", "v1")
        shape = {"T": T, "nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": c.head_dim,
                 "kind": kind}
        _ladder_runs(ctx, "attention", "attention", shape, choose_impl(caches[0], nb), once,
                     lambda impl, i: gpu.decode_attention(q, caches[i], base, out=out,
                                                          impl=impl),
                     ref, nbytes, {"v0": TOL_ATTN, "v1": TOL_ATTN, "mma": TOL_ATTN_MMA},
                     n_rot=nr, max_inner=8, floor_us=floor, impls=impls,
                     kshape={"kind": kind, "nb": nb, "n_rep": c.n_rep})
        del caches


def ladder_gemv(ctx, nb=1, n_out=5120, n_in=6144):
    """The o_proj GEMV (27B) with q8 and f32 weights on each rung."""
    from . import golden, gpu
    cp = ctx.cp
    w = cp.random.standard_normal((n_out, n_in), dtype=cp.float32) * np.float32(0.02)
    q, d = gpu.q8_weight(w)
    x = _randn(cp, (nb, n_in), outliers=False)
    y = _poisoned(cp, (nb, n_out))
    shape = {"nb": nb, "n_in": n_in, "n_out": n_out, "proj": "o_proj"}
    for kind in ("q8", "f32"):
        if kind == "q8":
            ws = bytes_gemv_q8(nb, n_in, n_out)
            nr = ctx.n_rot(ws)
            mats = [(q, d)] + [(q.copy(), d.copy()) for _ in range(nr - 1)]
            ref = golden.linear(_host(x), golden.q8_dequantize(_host(q), _host(d)))
            call = lambda impl, i: gpu.gemv_q8(x, *mats[i], out=y, impl=impl)
        else:
            ws = bytes_linear(nb, n_in, n_out, 4)
            nr = ctx.n_rot(ws)
            mats = [w] + [w.copy() for _ in range(nr - 1)]
            ref = golden.linear(_host(x), _host(w))
            call = lambda impl, i: gpu.gemv_f32(x, mats[i], out=y, impl=impl)

        def once(impl, call=call):
            y.fill(cp.nan)
            call(impl, 0)
            return _host(y)
        _ladder_runs(ctx, "gemv", "gemv", dict(shape, weights=kind), "v1", once, call, ref, ws,
                     TOL_F32, n_rot=nr, kshape={"kind": kind, "nb": nb, "n_out": n_out})


LADDER = (ladder_norm, ladder_rope, ladder_wht, ladder_append, ladder_indexer, ladder_attention,
          ladder_gemv)


def _cases(quick):
    """(stage, kernel, shape, callable) in run order; quick = fewer and smaller."""
    K = 1024
    qk = quick
    cases = [
        ("norm", "rms_norm", {"rows": 8192, "n": 5120}, lambda c: case_norm(c, 8192, 5120, False)),
        ("norm", "add_rms_norm", {"rows": 8192, "n": 5120}, lambda c: case_norm(c, 8192, 5120, True)),
        ("norm", "rms_norm", {"rows": 1, "n": 5120}, lambda c: case_norm(c, 1, 5120, False)),
        ("rope", "qk_norm_rope", {"nb": 4096}, lambda c: case_rope(c, 4096)),
        ("rope", "qk_norm_rope", {"nb": 1}, lambda c: case_rope(c, 1)),
        ("wht", "wht", {"rows": 262144, "n": 256}, lambda c: case_wht(c, 262144, 256)),
        ("wht", "wht", {"rows": 524288, "n": 128}, lambda c: case_wht(c, 524288, 128)),
        ("kvcache", "q8_quantize", {"rows": 262144, "n": 256},
         lambda c: case_quantize(c, 262144, 256, "q8")),
        ("kvcache", "turbo_quantize bits=4", {"rows": 262144, "n": 256},
         lambda c: case_quantize(c, 262144, 256, 4)),
        ("kvcache", "KVCache.append q8", {"nb": 4096}, lambda c: case_append(c, 4096, "q8")),
    ] + ([] if qk else [
        # a 16k-token prefill chunk: 170 MB, a size where launch and tail are a small share
        ("kvcache", "KVCache.append q8", {"nb": 16384}, lambda c: case_append(c, 16384, "q8")),
    ]) + [
        ("kvcache", "KVCache.append turbo4", {"nb": 4096},
         lambda c: case_append(c, 4096, "turbo4")),
        ("kvcache", "KVCache.append q8", {"nb": 1}, lambda c: case_append(c, 1, "q8")),
    ]
    for T, nb in ([(4 * K, 1), (32 * K, 1)] if qk else
                  [(4 * K, 1), (32 * K, 1), (128 * K, 1), (128 * K, 4)]):
        cases.append(("attention", "decode_attention q8", {"T": T, "nb": nb},
                      lambda c, T=T, nb=nb: case_attention(c, T, nb, "q8")))
    from .golden.kvcache import CACHE_KINDS
    for kind in CACHE_KINDS:
        if kind == "q8" or (qk and kind not in ("f32", "turbo4", "bf16k-turbo4v")):
            continue
        cases.append(("attention", f"decode_attention {kind}", {"T": 32 * K, "nb": 1},
                      lambda c, kind=kind: case_attention(c, 32 * K, 1, kind)))
    for nb in ([1] if qk else [1, 4]):
        T = 32 * K if qk else 128 * K
        cases.append(("indexer", "QSA selective", {"T": T, "nb": nb},
                      lambda c, T=T, nb=nb: case_qsa(c, T, nb)))
    for name, n_out, n_in in _PROJS:
        nbs = [1] if qk else [1, 4, 8]
        cases.append(("gemv", f"gemv_q8 {name}", {"n_in": n_in, "n_out": n_out},
                      lambda c, a=(name, n_out, n_in, nbs): case_gemv(c, *a)))
    T = (4 if qk else 32) * K
    cases.append(("layer", "decode step q8", {"T": T},
                  lambda c: case_layer(c, T, [1] if qk else [1, 4])))
    for fn in LADDER:
        cases.append(("ladder", fn.__name__, {}, lambda c, fn=fn: fn(c)))
    return cases


def run_all(quick=False, only=None):
    """Run the cases (all, or those of the stages in `only`) -> (ctx, n_failed)."""
    ctx = _Ctx(quick)
    print(f"{ctx.device}: copy ceiling {ctx.copy_gbps:.1f} GB/s, L2 {ctx.l2 / 2**20:.0f} MiB")
    print(format_table([]).splitlines()[0])
    for stage, kernel, shape, fn in _cases(quick):
        if only and stage not in only:
            continue
        n0 = len(ctx.runs)
        try:
            fn(ctx)
        except Exception as e:                     # one broken stage must not stop the bench
            ctx.add(error_run(stage, kernel, shape, e))
            traceback.print_exc(limit=3, file=sys.stderr)
        if len(ctx.runs) == n0:
            ctx.add(error_run(stage, kernel, shape, RuntimeError("case added no run")))
        try:                                       # the case's arrays are gone: give memory back
            ctx.cp.get_default_memory_pool().free_all_blocks()
            if ctx.torch is not None:
                ctx.torch.cuda.empty_cache()
        except Exception:
            pass
    failed = sum(1 for r in ctx.runs if not r.get("ok", False))
    return ctx, failed


def _versions(ctx):
    cp = ctx.cp
    v = cp.cuda.runtime.runtimeGetVersion()
    return {"cupy": cp.__version__, "cuda": f"{v // 1000}.{(v % 1000) // 10}",
            "torch": getattr(ctx.torch, "__version__", None)}


def _stage_list(text):
    stages = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in stages if t not in STAGES]
    if bad or not stages:
        raise argparse.ArgumentTypeError(f"unknown stage(s) {bad or text!r}; choose from "
                                         f"{', '.join(STAGES)}")
    return set(stages)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m qwenref.bench",
        description="Validate every GPU kernel against the golden model, time it, and record "
                    "results/<device>.json and .npz (needs QWENREF_COMMIT=<sha> unless --dry).")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller runs and fewer repeats")
    ap.add_argument("--only", type=_stage_list, metavar="STAGE[,STAGE...]",
                    help=f"run these stages of {','.join(STAGES)} (their runs replace those "
                         f"stages' runs in an existing results file)")
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
    from .gpu._runtime import available
    if not available():
        try:
            from .gpu._runtime import cupy
            cupy()
        except RuntimeError as e:
            print(f"qwenref.bench: {e}", file=sys.stderr)
        return 1
    ctx, failed = run_all(args.quick, args.only)
    print()
    print(format_table(ctx.runs, ctx.copy_gbps))
    doc = {"device": ctx.device, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"), "commit": commit or "", **_versions(ctx),
        "copy_gbps": ctx.copy_gbps, "l2_bytes": ctx.l2, "quick": bool(args.quick),
        "only": sorted(args.only) if args.only else None, "runs": ctx.runs}
    if args.dry:
        print("\n--dry: nothing recorded")
    else:
        for r in ctx.runs:
            r["commit"] = commit
        j, n = write_results(doc, ctx.samples, args.out, device_slug(ctx.device),
                             merge=args.only is not None)
        print(f"\nwrote {j} and {n}")
    if failed:
        print(f"{failed} run(s) failed or missed their tolerance", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
