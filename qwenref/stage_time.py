"""stage_time — where the time of one decode step of the layer goes, stage by stage, under the
GPU step's stage names (qwenref.gpu.layer.STAGES):

  golden_stage_us(layer, cache, x)   a golden step on the CPU: the functions golden.layer calls
                                     (and the cache's append, keys, values) wrapped with a
                                     clock, the layer's code unchanged, each timed step checked
                                     against an untimed one
  host_stage_us(layer, x, cache)     an eager step of gpu.FullAttentionLayer: the host's time
                                     between the layer's on_stage marks (needs a GPU)

The GPU's own time per stage is qwenref.timing.stage_us. Times are microseconds.
"""

from __future__ import annotations

import contextlib
import functools
import time

import numpy as np

__all__ = ["STAGE_OF", "StageTimer", "golden_stage_us", "host_stage_us"]

# golden.layer's functions -> their stage, under the GPU step's names (golden's mlp is the GPU's
# mlp_gate_up + mlp_down). "kv_read" is golden's alone: golden dequantizes the whole cache each
# step, a kernel dequantizes as it reads. linear's stage is its weight's (_PROJ_STAGE).
STAGE_OF = {
    "rms_norm": "input_norm",
    "qk_norm_rope": "qk_norm_rope",
    "indexer_project": "qkv_proj",
    "indexer_queries": "indexer_q",
    "update_block_keys": "block_keys",
    "row_selection": "select",
    "decode_attention": "attention",
    "wht_signed": "attention",
    "output_gate": "attention",
    "add_rms_norm": "post_norm",
    "mlp": "mlp",
}
_PROJ_STAGE = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "o_proj": "o_proj"}
_CACHE_STAGE = (("append", "kv_append"), ("keys", "kv_read"), ("values", "kv_read"))


class StageTimer:
    """Times the functions golden.layer calls, by stage (the outermost call only), into
    self.t {stage: seconds}; the layer's code runs unchanged."""

    def __init__(self, layer):
        self.proj = {id(a): _PROJ_STAGE.get(n.split(".")[-2], n) for n, a in layer.w.items()}
        self.t, self.depth = {}, 0

    def _wrap(self, fn, label):
        @functools.wraps(fn)
        def inner(*args, **kw):
            if self.depth:
                return fn(*args, **kw)
            lab = label(*args) if callable(label) else label
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.depth -= 1
                self.t[lab] = self.t.get(lab, 0.0) + time.perf_counter() - t0

        return inner

    @contextlib.contextmanager
    def timing(self, cache):
        from .golden import layer as golden_layer

        plan = dict(STAGE_OF, linear=lambda x, w: self.proj.get(id(w), "linear"))
        saved = {n: getattr(golden_layer, n) for n in plan}
        try:
            for n, lab in plan.items():
                setattr(golden_layer, n, self._wrap(saved[n], lab))
            for meth, lab in _CACHE_STAGE:
                setattr(cache, meth, self._wrap(getattr(type(cache), meth).__get__(cache), lab))
            yield self
        finally:
            for n, f in saved.items():
                setattr(golden_layer, n, f)
            for meth, _ in _CACHE_STAGE:
                delattr(cache, meth)


def golden_stage_us(layer, cache, x, steps=5):
    """Best-of-`steps` microseconds per stage of a golden decode step (one row of x per step,
    the cache growing by one each), each step checked against an untimed one on a copy of the
    cache. -> ({stage: us} in call order, whether every timed output equals the untimed)."""
    times, same = [], True
    for s in range(steps):
        pos = len(cache)
        untimed = layer.forward(x[s : s + 1], pos, cache.copy())
        st = StageTimer(layer)
        with st.timing(cache):
            y = layer.forward(x[s : s + 1], pos, cache)
        same &= bool(np.array_equal(y, untimed))
        times.append(st.t)
    return {n: 1e6 * min(t[n] for t in times) for n in times[0]}, same


def host_stage_us(layer, x, cache, reps=10):
    """Host microseconds from each on_stage mark of an eager gpu.FullAttentionLayer step to the
    next (the GPU idle before the step), median over reps steps; "before start" is the step's
    argument checks and position upload, "after the last stage" its return. The cache grows by
    len(x) a step."""
    from .gpu._runtime import cupy

    cp, per = cupy(), {}
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        marks = []
        t0 = time.perf_counter()
        layer.forward(
            x, len(cache), cache, on_stage=lambda n: marks.append((n, time.perf_counter()))
        )
        t_end = time.perf_counter()
        cp.cuda.Device().synchronize()
        prev = t0
        for name, t in marks:
            per.setdefault("before start" if name == "start" else name, []).append(t - prev)
            prev = t
        per.setdefault("after the last stage", []).append(t_end - prev)
    return {n: 1e6 * float(np.median(v)) for n, v in per.items()}
