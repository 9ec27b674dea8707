"""timing — every way qwenref times GPU work, in one place: the bench, the tuning tools, the
notebooks and the layer's per-stage times all measure through these functions, so their
numbers mean the same thing.

  queued_us(fn)            fn(i) in batches queued behind a spin kernel, CUDA events around
                           each batch: the GPU's time per call, not the host's launch rate
  graph_us(calls)          the calls captured in one CUDA graph (or an already captured graph,
                           gpu.layer.DecodeGraph) and replayed: what a captured decode pays
  torch_graph_us(fn, n)    the same for torch work (torch.cuda.CUDAGraph), so peers compare
  eager_us(fn)             events around one host-launched call, no spin: what a Python loop gets
  stage_us(layer, ...)     one decode step of gpu.FullAttentionLayer, an event after each stage
  copy_gbps()              the ceiling: 2 x bytes / time of a 1 GiB device-to-device copy
  floor_us(nbytes)         the floor of one launch: stream_read over nbytes (gpu/stream.py)
  rotations(ws, l2)        input copies to rotate over so the reads come from memory, not the L2
  spin_wait(ns)            the spin kernel (kernels_cuda/timing.cu)

Times are microseconds: the median over batches, warm-up first. Importing this module needs
neither CuPy nor a GPU; calling a function does (RuntimeError saying what is missing).
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np

from .gpu._runtime import cupy, kernel

__all__ = [
    "Timing",
    "GraphTiming",
    "Floor",
    "spin_wait",
    "queued_us",
    "graph_us",
    "torch_graph_us",
    "eager_us",
    "stage_us",
    "copy_gbps",
    "floor_us",
    "rotations",
    "device_name",
    "l2_bytes",
]


class Timing(NamedTuple):
    us: float  # median microseconds per call
    iqr_us: float  # interquartile range of the batches' per-call times


class GraphTiming(NamedTuple):
    us: float  # median microseconds per call
    sd_us: float  # standard deviation of the batches' per-call times
    mode: str  # "graph", or "loop (<error>)": capture failed, the calls ran plainly


class Floor(NamedTuple):
    us: float  # queued, median microseconds per stream_read launch
    iqr_us: float
    graph_us: float | None  # as graph replays (graph_calls > 0 and the capture worked)
    graph_mode: str | None  # GraphTiming.mode of that attempt; None when not asked


def spin_wait(ns):
    """Hold the GPU for ns nanoseconds on the current stream (one thread on %globaltimer):
    launched before a timed batch, it lets the host queue the batch before the GPU starts it."""
    cp = cupy()
    kernel("timing", "spin_wait")((1,), (1,), (cp.uint64(int(ns)),))


def device_name():
    cp = cupy()
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else name


def l2_bytes():
    cp = cupy()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return int(props.get("l2CacheSize", 50 << 20))


def rotations(working_set, l2, passes=2, cap=64):
    """Copies of the inputs to rotate over so one pass over all of them is >= passes x the L2:
    a streaming kernel then streams from memory, as it would at scale (1 when one set is)."""
    if working_set >= passes * l2:
        return 1
    return min(cap, math.ceil(passes * l2 / max(working_set, 1)))


def queued_us(fn, n_rot=1, batches=25, warmup=3, target_us=300.0, max_inner=64):
    """Timing(us, iqr_us) per call of fn(i), i in range(n_rot) picking the rotated input set.

    Batches of `inner` back-to-back calls (inner sized so a batch runs ~target_us, at most
    max_inner) between two events, each batch after a spin kernel long enough for the host to
    queue the batch: the events time the GPU, not the Python launch rate. Calls fn at most
    warmup + 1 + batches * max_inner times (stateful callers size their buffers for that)."""
    cp = cupy()
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
    # 3x the host's time to queue a batch, within [0.2 ms, 50 ms]
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
    return Timing(float(med), float(q3 - q1))


def _capture(cp, stream, calls):
    """(graph, "graph") of the calls captured on stream and launched once, or (None, "loop
    (<error>)") when capture or that launch failed."""
    try:
        with stream:
            stream.begin_capture()
            for f in calls:
                f()
            graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        return graph, "graph"
    except Exception as e:  # noqa: BLE001 (reported in the mode)
        try:
            stream.end_capture()
        except Exception:  # noqa: BLE001 (not capturing any more)
            pass
        return None, f"loop ({type(e).__name__})"


def graph_us(work, batches=25, per_batch=1, warmup=0):
    """GraphTiming(us, sd_us, mode): microseconds per call as CUDA-graph replays.

    work: a list of zero-argument callables (each one launch sequence), run once each (compiles
    their kernels), captured in one CUDA graph on a fresh stream and launched once; or a graph
    captured already, with replay() and .stream (gpu.layer.DecodeGraph: one call per replay).
    Each batch is `per_batch` back-to-back replays between two events, after `warmup` untimed
    replays; time per call = median batch time / (per_batch x calls). If capture fails, the
    calls run plainly under the same events and mode says why."""
    cp = cupy()
    if hasattr(work, "replay"):
        stream, n_calls, mode = work.stream, 1, "graph"

        def launch():
            work.replay()
    else:
        calls = list(work)
        for f in calls:
            f()
        cp.cuda.Device().synchronize()
        stream = cp.cuda.Stream(non_blocking=True)
        graph, mode = _capture(cp, stream, calls)
        n_calls = len(calls)

        def launch():
            if graph is not None:
                graph.launch(stream)
            else:
                for f in calls:
                    f()

    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    with stream:
        for _ in range(warmup):
            launch()
        for _ in range(batches):
            ev0.record(stream)
            for _ in range(per_batch):
                launch()
            ev1.record(stream)
            ev1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(ev0, ev1) * 1e3 / (per_batch * n_calls))
    return GraphTiming(float(np.median(ts)), float(np.std(ts)), mode)


def torch_graph_us(fn, calls, batches=25):
    """Median microseconds per call of fn(i), i < calls, captured in one torch.cuda.CUDAGraph
    and replayed (torch work cannot join a CuPy capture). Warm-up runs on a side stream, as
    torch's capture needs; a failed capture raises."""
    import torch as t

    side = t.cuda.Stream()
    side.wait_stream(t.cuda.current_stream())
    with t.cuda.stream(side):
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


def eager_us(fn, batches=25):
    """Timing(us, iqr_us) of fn() launched by the host with the GPU idle before each call (no
    spin): the launch gaps count, which is what a Python decode loop gets."""
    cp = cupy()
    ts = []
    for _ in range(batches):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        cp.cuda.Device().synchronize()
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
    q1, med, q3 = np.percentile(ts, [25, 50, 75])
    return Timing(float(med), float(q3 - q1))


def stage_us(layer, x, base_pos, cache, spin_us=5000):
    """Run one step of a gpu.FullAttentionLayer (it appends to `cache` like forward) with a CUDA
    event after each stage, through forward's on_stage hook. The spin kernel goes in when the
    step announces "start" (its inputs uploaded, nothing launched yet) and holds the GPU for
    spin_us while the host queues the whole step: the stage times are GPU times.

    Returns (y, {stage: microseconds}) with the gpu.layer.STAGES that ran, plus "total"."""
    cp = cupy()
    events = []

    def on_stage(name):
        if name == "start":
            spin_wait(int(spin_us * 1000))
        ev = cp.cuda.Event()
        ev.record()
        events.append((name, ev))

    y = layer.forward(x, base_pos, cache, on_stage=on_stage)
    events[-1][1].synchronize()
    times = {
        name: cp.cuda.get_elapsed_time(a, b) * 1e3 for (_, a), (name, b) in zip(events, events[1:])
    }
    times["total"] = cp.cuda.get_elapsed_time(events[0][1], events[-1][1]) * 1e3
    return y, times


def copy_gbps(nbytes=1 << 30, batches=25):
    """The copy ceiling in GB/s: 2 x bytes (read + written) / queued time of one device-to-device
    copy of nbytes of random data; the copy is checked."""
    cp = cupy()
    src = cp.random.random(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    n = src.nbytes

    def fn(_):
        cp.cuda.runtime.memcpyAsync(
            dst.data.ptr,
            src.data.ptr,
            n,
            cp.cuda.runtime.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr,
        )

    us = queued_us(fn, batches=batches, max_inner=1).us
    if not bool((dst[:1024] == src[:1024]).all()):
        raise RuntimeError("device copy check failed")
    return 2 * n / (us * 1e-6) / 1e9


def floor_us(nbytes, n_rot=2, batches=25, graph_calls=0):
    """The floor of one launch at nbytes: Floor(us, iqr_us, graph_us, graph_mode) of
    kernels_cuda/stream.cu's stream_read, which reads nbytes and does nothing else, so no
    kernel that must read them in one launch can be faster. Rotates over max(2, n_rot) random
    buffers, each checked to have been read whole (RuntimeError otherwise); queued like
    queued_us, and with graph_calls > 0 also as replays of a graph of max(graph_calls, buffers)
    launches."""
    from .gpu.stream import checked_buffers, stream_read

    pairs = checked_buffers(nbytes, max(2, n_rot))
    q = queued_us(lambda i: stream_read(*pairs[i]), len(pairs), batches)
    if not graph_calls:
        return Floor(q.us, q.iqr_us, None, None)
    n = max(graph_calls, len(pairs))
    g = graph_us([lambda p=pairs[i % len(pairs)]: stream_read(*p) for i in range(n)], batches)
    return Floor(q.us, q.iqr_us, g.us if g.mode == "graph" else None, g.mode)
