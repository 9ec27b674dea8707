"""What every bench case works with: CuPy, the device, the copy ceiling measured at the start
of the run, the L2 size (inputs rotate past it), the repeat counts, torch when it can run
peers, and the records the cases add."""

from __future__ import annotations

from .. import timing
from ..gpu._runtime import cupy
from .records import format_table, make_run, sample_pairs

__all__ = ["Context", "try_torch"]


def try_torch():
    """torch when it imports and sees a GPU (the peers need it), else None."""
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:  # any import failure: the peers are optional
        return None


class Context:
    """Context(quick): the run's shared state; cases call ctx.time, ctx.n_rot, ctx.peer,
    ctx.record (or ctx.add of a run they built).
    Measures the copy ceiling on construction (a GPU is needed)."""

    def __init__(self, quick):
        self.cp = cupy()
        self.quick = quick
        self.device = timing.device_name()
        self.l2 = timing.l2_bytes()
        self.batches = 8 if quick else 25
        self.runs, self.samples = [], {}
        self.memo = {}  # what a case measures once per run (sdpa_peer's peers)
        self.torch = try_torch()
        self.copy_gbps = timing.copy_gbps(batches=self.batches)

    def n_rot(self, working_set):
        """Input copies to rotate so one pass over all of them is >= 2 x L2 (cold cache)."""
        return timing.rotations(working_set, self.l2)

    def time(self, fn, n_rot=1, max_inner=64, target_us=300.0, batches=None, warmup=3):
        """timing.queued_us with this run's batch count: Timing(us, iqr_us) per call of fn(i)."""
        return timing.queued_us(fn, n_rot, batches or self.batches, warmup, target_us, max_inner)

    def peer(self, name, fn, n_rot=1, max_inner=64):
        """(name, us) of a peer timed like our kernels; None when it cannot run (no torch, the
        backend refused), saying why: a peer is optional."""
        try:
            return name, self.time(fn, n_rot=n_rot, max_inner=max_inner)[0]
        except Exception as e:
            print(f"  (peer {name} unavailable: {type(e).__name__}: {str(e)[:120]})")
            return None

    def record(self, stage, kernel, shape, us, nbytes, err, tol, ref=None, got=None, **extra):
        """Add make_run(...) of this run's copy rate, with (ref, got) sampled: the one call a
        case makes per measured kernel. extra: make_run's keywords (iqr_us, peer, ...)."""
        run = make_run(stage, kernel, shape, us, nbytes, self.copy_gbps, err, tol, **extra)
        self.add(run, ref, got)
        return run

    def add(self, run, ref=None, got=None):
        """Record a run (and up to N_SAMPLES (golden, gpu) pairs) and print its table line."""
        i = len(self.runs)
        self.runs.append(run)
        if ref is not None and got is not None:
            self.samples[i] = sample_pairs(ref, got, seed=i)
        print(format_table([run]).splitlines()[-1], flush=True)
