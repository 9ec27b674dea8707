"""Runs above their read floor, and why: the one rule the notebooks, the ladder tables
(`nbrecords.print_ladder`) and the status page (`qwenref.status`) all apply. Pure Python.

The read floor (`timing.floor_us`) is one launch that only reads a run's bytes, with buffers
rotated past twice the L2, so it reads them from memory (DRAM). A run faster than its floor
(`pct_of_floor` > 100) gets one reason, from its bytes and the L2's size alone:

* "L2": its bytes fit in the L2 (bytes <= L2 size), so some of them likely came from there;
* "noise": more bytes than the L2, at most NOISE_PCT % above the floor: within the noise of
  two separate timings (the floor is a measured launch too);
* "unexplained": more bytes than the L2 and further above: a run to look at;
* "L2 unknown": the L2's size was not recorded.

The rule does not know whether a run's inputs rotated past the L2 (most ladders rotate them,
the indexer's does not), so for a rotated run whose bytes fit, "L2" is the likelier reason, not
a certain one.
"""

from __future__ import annotations

__all__ = ["NOISE_PCT", "REASONS", "is_above_floor", "above_floor", "floor_reason", "floor_note"]

NOISE_PCT = 3.0  # how far above 100 % of its floor a run larger than the L2 may come by noise

# each reason's short tag, as the ladder tables print it
REASONS = {
    "L2": "bytes from the L2",
    "noise": "timing spread",
    "unexplained": "not explained by the L2",
    "L2 unknown": "L2 size not recorded",
}

_MIB = 1 << 20


def is_above_floor(run) -> bool:
    """True when the run is faster than its read floor (pct_of_floor > 100)."""
    return (run.get("pct_of_floor") or 0) > 100.0


def above_floor(runs) -> list:
    """The runs of `runs` faster than their read floor, in their order."""
    return [r for r in runs if is_above_floor(r)]


def floor_reason(run, l2_bytes) -> str | None:
    """The rule above: None for a run at or below its floor, else a key of REASONS. l2_bytes:
    the L2 size of the device the run was measured on (None or 0: not known)."""
    if not is_above_floor(run):
        return None
    if not l2_bytes:
        return "L2 unknown"
    if (run.get("bytes") or 0) <= l2_bytes:
        return "L2"
    return "noise" if run["pct_of_floor"] <= 100.0 + NOISE_PCT else "unexplained"


def floor_note(run, l2_bytes) -> str:
    """The reason in a sentence, with the run's bytes beside the L2's size ("" at or below the
    floor)."""
    why = floor_reason(run, l2_bytes)
    if why is None:
        return ""
    mib = (run.get("bytes") or 0) / _MIB
    if why == "L2":
        return f"{mib:.1f} MiB fit in the {l2_bytes / _MIB:.0f} MiB L2: partly served from it"
    if why == "noise":
        return f"{mib:.0f} MiB, more than the L2: the noise of two timings"
    if why == "unexplained":
        return f"{mib:.0f} MiB, more than the L2: not explained by the L2, look at this run"
    return "the L2 size is not recorded"
