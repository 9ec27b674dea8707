"""Bench case of the whole layer: one decode step of the 27B layer on random weights at T cached
tokens, validated against the golden layer (output, stored codes, the indexer's selection),
then timed per stage (timing.stage_us), eager end to end, and as CUDA-graph replays."""

from __future__ import annotations

import numpy as np

from .. import timing
from .counting import layer_stage_bytes
from .inputs import decode_shape, dense_cfg, fill_caches, host, qwen_cfg, randn, random_weights
from .records import code_match, floor_fields, rel_err
from .rungs import family_fields
from .tolerances import TOL_LAYER

__all__ = ["case_layer", "selection_match"]


def case_layer(ctx, T, nbs, kind="q8", weight_format="q8", dense=False):
    """One decode step of the 27B layer at T cached tokens (dense: the config without the
    indexer, every row attending to all tokens): validated against the golden layer, then per
    stage (events), eager end to end, and as CUDA-graph replays beside the read floor of the
    step's bytes (weights, the cache, activations: one launch reading that many)."""
    from .. import golden, gpu
    from ..gpu.layer import STAGES as LSTAGES

    cp = ctx.cp
    c = dense_cfg() if dense else qwen_cfg()
    w = random_weights(c)
    layer = gpu.FullAttentionLayer(c, w, weight_format=weight_format)
    glayer = golden.FullAttentionLayer(c, w, weight_format=weight_format)
    del w
    reps = ctx.batches
    # per nb: 1 checked step + reps staged + reps eager + 1 graph (+ slack)
    slack = sum(nbs) * (2 * reps + 4) + 16
    cache = gpu.KVCache(c, max_t=T + slack, kind=kind)
    knw = cp.asarray(glayer.w["self_attn.indexer.k_norm.weight"]) if c.has_indexer else None
    fill_caches([cache], T, knw)
    wb = layer.weight_bytes()
    pre = "dense " if dense else ""  # the kernel names of notebook 08's rows stay its own
    for nb in nbs:
        qsa = {"R": c.indexer_compress_ratio, "budget": c.indexer_budget} if c.has_indexer else {}
        base_shape = decode_shape(T, nb, c, kind, weights=weight_format, **qsa)
        x = randn(cp, (nb, c.hidden_size), outliers=False)
        # validate one eager step against the golden layer on the same cache contents
        base = len(cache)
        gc = cache.to_golden()
        utrace, trace = {}, {}
        y = layer.forward(x, base, cache, trace=utrace)
        ref = glayer.forward(host(x), base, gc, trace=trace)
        err = rel_err(host(y), ref)
        mine = cache.to_golden()
        codes = code_match(mine, gc, base, base + nb)
        sel_match = selection_match(utrace, trace, base)
        # per stage, GPU time (spin first): median over reps steps at successive positions
        per = {}
        for _ in range(reps):
            _, tms = timing.stage_us(layer, x, len(cache), cache)
            for k_, v_ in tms.items():
                per.setdefault(k_, []).append(v_)
        sb = layer_stage_bytes(c, nb, len(cache) - nb, kind, weight_format)
        for st in list(LSTAGES) + ["total"]:
            if st not in per:
                continue
            times = per[st]
            us, iqr = float(np.median(times)), float(np.subtract(*np.percentile(times, [75, 25])))
            kname = f"{pre}step: {st}"
            fam = family_fields("layer")
            ctx.record(
                "layer", kname, base_shape, us, sb.get(st, 0), err, TOL_LAYER, iqr_us=iqr, **fam
            )
        # eager: host-launched, no spin (what a Python decode loop gets)
        eager = timing.eager_us(lambda: layer.forward(x, len(cache), cache), reps)
        nbytes, got = sb["total"], host(y)
        extra = {"weight_bytes": wb, "code_match": codes, "selection_match": sel_match}
        extra.update(family_fields("layer"))
        kname = f"{pre}step eager (host launches)"
        ctx.record("layer", kname, base_shape, eager.us, nbytes, err, TOL_LAYER, ref, got, **extra)
        # graph: capture at the current length, check one replay against golden, time replays
        base = len(cache)
        gc = cache.to_golden()
        g = layer.capture(x, base, cache)
        gerr = rel_err(host(g.out), glayer.forward(host(x), base, gc))
        med = timing.graph_us(g, batches=max(10, reps), per_batch=10, warmup=5).us
        fl = timing.floor_us(sb["total"], ctx.n_rot(sb["total"]), ctx.batches, graph_calls=10)
        extra = {"weight_bytes": wb, **floor_fields(fl.graph_us, med), **family_fields("layer")}
        kname = f"{pre}step graph replay"
        ctx.record("layer", kname, base_shape, med, sb["total"], gerr, TOL_LAYER, **extra)
        del g


def selection_match(gpu_trace, trace, base):
    """Fraction of rows whose GPU selection (gpu_trace, filled by the GPU layer's forward)
    equals the golden layer's (trace); 1.0 when all dense."""
    sel = gpu_trace.get("selection")
    gold = trace.get("selections") or []
    if sel is None or not gold:
        return 1.0
    si, sn = host(sel[0]), host(sel[1])
    same = []
    for b, (idx, _) in enumerate(gold):
        mine = si[b, : sn[b]] if sn[b] > 0 else np.arange(base + b + 1)
        same.append(mine.shape == idx.shape and bool((mine == idx).all()))
    return float(np.mean(same))
