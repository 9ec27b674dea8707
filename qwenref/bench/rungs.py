"""The ladder's machinery: each kernel family's rungs and default as the rung table holds them
(qwenref/gpu/rungs.py), the fields a rung's record carries, and ladder_runs, which checks and
times every rung of one family at one size beside its read floor. The cases that call it live
in ladder.py."""

from __future__ import annotations

import sys
import traceback

import numpy as np

from .. import timing
from ..gpu import rungs as registry
from .records import error_run, make_run, rel_err

__all__ = [
    "FAMILY_MODULE",
    "family_rungs",
    "rung_fields",
    "family_fields",
    "ladder_runs",
    "rotated_copies",
]

# {family: its qwenref.gpu module} of the families the ladder records (a view of the table)
FAMILY_MODULE = registry.ladder_families()


def family_rungs(family):
    """(rung names in teaching order, the stage module) of a kernel family."""
    import importlib

    fam = registry.family(family)
    return fam.rungs, importlib.import_module(f"qwenref.gpu.{fam.module}")


def family_fields(family, impl=None, default=None):
    """family, impl, rung (the rung's index in teaching order, which moves when a rung is
    inserted: impl does not) and default of a run. impl None: the family's default rung, what
    impl=None runs; default: the rung impl=None runs (None: the table's, or, where the call
    picks it (attention), impl itself). A run that is no family's rung (a whole layer step, the
    selective path's four launches, a read floor, cuBLAS) names what it is, with no rung."""
    if family not in registry.FAMILIES:
        return {"family": family, "rung": None, "default": True}
    fam = registry.family(family)
    default = default or fam.default
    impl = impl or default
    if impl is None:
        raise ValueError(f"impl must be given for {family!r}: its rung is chosen per call")
    return {
        "family": family,
        "impl": impl,
        "rung": fam.rungs.index(impl),
        "default": impl == (default or impl),
    }


def rung_fields(family, impl, default, **kshape):
    """The ladder fields of one run: family_fields, its kernel and its bench."""
    _, mod = family_rungs(family)
    kernel = mod.rung_kernel(family, impl, **kshape)
    return {**family_fields(family, impl, default), "kernel": kernel, "bench": "ladder"}


def ladder_runs(
    ctx,
    *,
    stage,
    family,
    shape,
    once,
    launch,
    ref,
    nbytes,
    tol,
    default=None,
    impls=None,
    kshape=None,
    err_fn=None,
    n_rot=1,
    max_inner=64,
    floor_us=None,
    extra=None,
):
    """Each rung of `family` (impls: a subset, in order; None: all of the table's): once(impl)
    -> its output on the host (outputs poisoned first), checked against ref by err_fn
    (rel_err) within tol (a number or {impl: number}); then launch(impl, i) timed queued over
    n_rot rotated copies, up to max_inner calls a sample. One record per rung, each beside the
    read floor at nbytes (measured here unless floor_us is given), with `extra` fields added.
    shape: the record's shape; kshape: the shape keywords rung_kernel names the kernel by.
    default: the rung impl=None runs, marked in the records: the table's default of the family,
    or, where that is chosen per call (attention), the plan's rung, which the caller gives."""
    rungs, _ = family_rungs(family)
    if default is None:
        default = registry.family(family).default
    if default is None:
        raise ValueError(f"default must be given for {family!r}: its rung is chosen per call")
    if floor_us is None:
        floor_us = timing.floor_us(nbytes, ctx.n_rot(nbytes), ctx.batches).us
    for impl in impls or rungs:
        try:
            got = once(impl)
            err = (err_fn or rel_err)(got, ref)
            tol_i = tol[impl] if isinstance(tol, dict) else tol
            med, iqr = ctx.time(lambda i: launch(impl, i), n_rot, max_inner)
            meta = rung_fields(family, impl, default, **(kshape or {}))
            fl = {"floor_us": floor_us, "pct_of_floor": 100.0 * floor_us / med}
            run = make_run(
                stage,
                meta.pop("kernel"),
                shape,
                med,
                nbytes,
                ctx.copy_gbps,
                err,
                tol_i,
                iqr_us=iqr,
                timing="queued",
                **meta,
                **fl,
                **(extra or {}),
            )
            same_size = np.size(got) == np.size(ref)
            ctx.add(run, ref if same_size else None, got if same_size else None)
        except Exception as e:  # one broken rung must not hide the others
            run = error_run(stage, f"{family} {impl}", shape, e)
            run.update(family=family, rung=rungs.index(impl), bench="ladder")
            ctx.add(run)
            traceback.print_exc(limit=3, file=sys.stderr)


def rotated_copies(ctx, nbytes, *arrays):
    """(n, [arrays, copy 1, ...]): enough copies of a call's arrays (inputs and outputs) that
    one pass over them moves >= 2 x L2, so a small size is timed from DRAM, as the floor is."""
    n = ctx.n_rot(nbytes)
    return n, [arrays] + [tuple(a.copy() for a in arrays) for _ in range(n - 1)]
