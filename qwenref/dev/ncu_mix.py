"""Instruction mix and stall shares of one kernel, from Nsight Compute's source page (SASS).

    ncu --import prof.ncu-rep --csv --page source --print-source sass -k KERNEL > k.csv
    python -m qwenref.dev.ncu_mix k.csv [--per N] [--top 30]

docs/tuning-log.md's per-block instruction counts come from this: `--per` divides the executed
counts by N (for a loop kernel, warps x loop trips, e.g. 1056 warps x 31.5 blocks), so the
table reads as instructions per warp per trip. The stall shares are over all warp-state
samples, so a profile taken with --warp-sampling-interval 0 gives the finest split. ncu may
list an address twice (one row per source view); each address counts once.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io

__all__ = ["read_source_csv", "opcode", "instruction_mix", "stall_shares", "main"]


def _num(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def read_source_csv(text: str) -> list[dict]:
    """Rows of the source page, one per SASS address. The export starts with a
    `"Kernel Name","<name>",` line before the header; it is skipped when present."""
    lines = text.splitlines()
    if lines and lines[0].startswith('"Kernel Name"'):
        lines = lines[1:]
    seen, rows = set(), []
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        if r.get("Address") in seen or not r.get("Source", "").strip():
            continue
        seen.add(r["Address"])
        rows.append(r)
    return rows


def opcode(source: str) -> str:
    """`@!P0 FMUL.FTZ R1, R2, R3` -> `FMUL.FTZ` (predicate dropped, modifiers kept)."""
    parts = source.split()
    return parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]


def instruction_mix(rows: list[dict], per: float = 1.0) -> list[tuple[str, float, float]]:
    """[(opcode, executed warp instructions / per, warp-state samples)], most executed first."""
    n, samples = collections.Counter(), collections.Counter()
    for r in rows:
        op = opcode(r["Source"])
        n[op] += _num(r.get("Instructions Executed", ""))
        samples[op] += _num(r.get("Warp Stall Sampling (All Samples)", ""))
    return [(op, c / per, samples[op]) for op, c in n.most_common()]


def stall_shares(rows: list[dict]) -> list[tuple[str, float]]:
    """[(reason, share of all samples)], largest first; reasons from the stall_* columns."""
    cols = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k] if rows else []
    tot = collections.Counter()
    for r in rows:
        for k in cols:
            tot[k[len("stall_") :]] += _num(r[k])
    s = sum(tot.values()) or 1.0
    return [(k, v / s) for k, v in tot.most_common()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--per", type=float, default=1.0, help="divide executed counts by this")
    ap.add_argument("--top", type=int, default=30, help="opcodes to list")
    args = ap.parse_args(argv)
    with open(args.csv, encoding="utf-8") as f:
        rows = read_source_csv(f.read())
    if not rows:
        ap.error(f"{args.csv}: no SASS rows (was it exported with --page source?)")
    mix = instruction_mix(rows, args.per)
    total = sum(c for _, c, _ in mix)
    print(
        f"{len(rows)} SASS instructions; executed {total:,.1f}"
        + (f" per {args.per:g}" if args.per != 1.0 else "")
    )
    for op, c, smp in mix[: args.top]:
        print(f"  {op:28s} {c:12,.1f}  {100 * c / total:5.1f}%  samples {smp:8.0f}")
    print("stalls: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in stall_shares(rows)[:10]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
