"""The GPU tests under NVIDIA compute-sanitizer, one tool per run, and their summary recorded.

    python -m qwenref.dev.sanitize --tool memcheck            # or racecheck, initcheck, synccheck
    python -m qwenref.dev.sanitize --tool racecheck --select all --shard 1/3
    python -m qwenref.dev.sanitize --tool memcheck -k "norm or wht" --dry

Runs `compute-sanitizer --tool <tool> <its options> python -m pytest -m gpu tests/` with
QWENREF_SANITIZE=1, which tells tests/conftest.py to turn CuPy's memory pool off (every array
its own allocation, so an access past an array's end lands outside any allocation and is seen)
and to skip the tests that only measure time or exist for big shapes (marker no_sanitizer).
The tests run on their own small shapes.

Selection (--select): "quick" (the default) runs each test function with every value of each
of its parameters at least once instead of every combination (cover_parameters: about 40% of
the stage tests; every rung, cache kind and shape value still runs, not in every combination;
every case of test_gpu_bad_input.py runs); "all" runs every GPU test. -k / -m narrow either
further, --shard k/n runs the k-th of n interleaved slices, and --budget s (default 450) skips
the tests that would start after s seconds of the run, so it ends inside a machine's 10-minute
limit (the skipped count is recorded as budget_skipped).

The run is parsed for the sanitizer's summary ("ERROR SUMMARY: N errors"; racecheck's
"RACECHECK SUMMARY: ... (E errors, W warnings)"), summed over the processes it followed, and
pytest's summary line, and merged into results/sanitizer-<device>.json:
{commit, date, device, <tool>: {tests, errors, seconds, failed, skipped, ...}}, one entry per
tool (the other tools' entries are kept, so one tool per call works); with --shard, the
entry keeps each shard and sums them. The commit is QWENREF_COMMIT, else git's HEAD. Nothing is
written when the run failed to start: no sanitizer, no GPU (every test skipped), no summary
from either (a crash, a kill), or no test run. Options the installed sanitizer's --help does
not list are left out (and recorded), so another version still starts.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "TOOLS",
    "tool_options",
    "parse_errors",
    "parse_pytest",
    "tool_record",
    "merge_record",
    "cover_parameters",
    "shard_of",
    "known_options",
    "main",
]

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
ERROR_EXIT = 86  # the sanitizer's exit status when it found errors (pytest uses 0..5)
# What makes each tool meaningful here, beyond the pool being off:
# racecheck: one report per race (analysis) rather than every hazard, and cp.async copies
#   into shared memory tracked (attention_mma.cu's pipeline);
# initcheck: host copies (cupy.asnumpy) of device memory no kernel wrote count as errors too.
_TOOL_OPTIONS = {
    "memcheck": (),
    "racecheck": ("--racecheck-report", "analysis", "--racecheck-memcpy-async", "yes"),
    "initcheck": ("--check-api-memory-access", "yes"),
    "synccheck": (),
}
_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RACES = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?)\b")
_SUMMARY = re.compile(r"\bin [\d.]+s\b")
_BUDGET = re.compile(r"^SKIPPED \[(\d+)\] .*sanitizer time budget spent", re.M)


def tool_options(tool, log_file, print_limit=100, padding=0, extra=()):
    """compute-sanitizer's arguments for one tool (before the program to run)."""
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {TOOLS}, got {tool!r}")
    opts = ["--tool", tool, "--error-exitcode", str(ERROR_EXIT)]
    opts += ["--print-limit", str(print_limit), "--log-file", str(log_file)]
    opts += ["--show-backtrace", "device", *_TOOL_OPTIONS[tool]]
    if padding and tool == "memcheck":
        opts += ["--padding", str(padding)]
    return opts + list(extra)


def parse_errors(log_text, tool="memcheck"):
    """(errors, warnings) the sanitizer reported, summed over the processes it followed:
    racecheck's "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)" lines, the other
    tools' "ERROR SUMMARY: N errors" (no warnings). None when there is no summary line (the
    sanitizer never got to the end)."""
    if tool == "racecheck":
        races = _RACES.findall(log_text)
        if races:
            return sum(int(e) for e, _ in races), sum(int(w) for _, w in races)
    counts = [int(n) for n in _ERRORS.findall(log_text)]
    return (sum(counts), 0) if counts else None


def parse_pytest(output):
    """pytest's final counts from its output: {"passed": n, "failed": n, ...} (missing kinds
    are 0; "error" and "errors" merge), plus "budget_skipped": tests skipped because the time
    budget was spent (from -rs lines). None when there is no summary line."""
    lines = [ln for ln in output.splitlines() if _SUMMARY.search(ln) and _COUNTS.search(ln)]
    if not lines:
        return None
    counts = dict.fromkeys(("passed", "failed", "skipped", "deselected", "errors"), 0)
    for n, kind in _COUNTS.findall(lines[-1]):
        kind = "errors" if kind.startswith("error") else kind
        counts[kind] = counts.get(kind, 0) + int(n)
    counts["budget_skipped"] = sum(int(n) for n in _BUDGET.findall(output))
    return counts


def tool_record(tool, log_text, pytest_output, seconds, exit_code, selection):
    """The entry of one run, or ValueError saying why the run does not count (did not start)."""
    found = parse_errors(log_text, tool)
    counts = parse_pytest(pytest_output)
    if found is None:
        raise ValueError("the sanitizer printed no summary: it did not start or was killed")
    if counts is None:
        raise ValueError("pytest printed no summary line: it did not start or was killed")
    if counts["passed"] + counts["failed"] == 0:
        raise ValueError(f"no test ran (pytest: {counts}): no GPU, or nothing selected")
    return {
        "tests": counts["passed"],
        "errors": found[0],
        "warnings": found[1],
        "seconds": round(seconds, 1),
        "failed": counts["failed"] + counts["errors"],
        "skipped": counts["skipped"],
        "budget_skipped": counts["budget_skipped"],
        "exit_code": exit_code,
        "selection": selection,
    }


def merge_record(doc, tool, record, commit, date, device, shard=None):
    """doc (the results file's content, or None) with `record` as the entry of `tool`; the
    other tools' entries are kept. Each entry names its commit and date; the top level names
    the latest run's. With shard "k/n", the tool's entry keeps each shard of the same commit,
    selection and n under "shards" and sums them (a new commit starts the entry afresh)."""
    doc = dict(doc or {})
    record = dict(record, commit=commit, date=date)
    if shard is not None:
        k, n = shard_of(shard)
        old = doc.get(tool) or {}
        same = (
            old.get("commit") == commit
            and old.get("selection") == record["selection"]
            and old.get("shard_count") == n
        )
        shards = dict(old.get("shards", {})) if same else {}
        shards[f"{k}/{n}"] = record
        record = _sum_shards(shards, n)
    doc.update(commit=commit, date=date, device=device)
    doc[tool] = record
    return doc


def _sum_shards(shards, n):
    total = {key: sum(s[key] for s in shards.values()) for key in _SUMMED}
    last = shards[max(shards, key=lambda s: shards[s]["date"])]
    total["seconds"] = round(total["seconds"], 1)
    total.update(
        exit_code=max(s["exit_code"] for s in shards.values()),
        selection=last["selection"],
        commit=last["commit"],
        date=last["date"],
        shard_count=n,
        complete=len(shards) == n,
        shards=shards,
    )
    return total


_SUMMED = ("tests", "errors", "warnings", "seconds", "failed", "skipped", "budget_skipped")


def shard_of(text):
    """ "k/n" -> (k, n), 1 <= k <= n (ValueError naming shard otherwise)."""
    m = re.fullmatch(r"(\d+)/(\d+)", str(text))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ValueError(f"shard must be k/n with 1 <= k <= n, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def cover_parameters(items):
    """Of each test function's parametrised items (pytest items: path, originalname,
    callspec.params), in collection order, those that bring a value of some parameter not seen
    yet: every value of every parameter runs at least once. Unparametrised items are kept."""
    seen, keep = {}, []
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec is None:
            keep.append(item)
            continue
        pairs = {(name, _hashable(v)) for name, v in spec.params.items()}
        done = seen.setdefault((item.path, item.originalname), set())
        if pairs - done:
            done |= pairs
            keep.append(item)
    return keep


def _hashable(value):
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


# ---- running --------------------------------------------------------------------------------
def _sanitizer(path=None):
    for cand in (
        path,
        os.environ.get("QWENREF_SANITIZER"),
        shutil.which("compute-sanitizer"),
        *(
            Path(os.environ[v]) / "bin" / "compute-sanitizer"
            for v in ("CUDA_HOME", "CUDA_PATH")
            if os.environ.get(v)
        ),
        "/usr/local/cuda/bin/compute-sanitizer",
    ):
        if cand and Path(cand).is_file():
            return str(cand)
    return None


def _commit():
    sha = os.environ.get("QWENREF_COMMIT", "").strip()
    if sha:
        return sha
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _device_name():
    """The GPU's name, from a child Python outside the sanitizer (None: no GPU)."""
    code = (
        "import cupy; p = cupy.cuda.runtime.getDeviceProperties(0); "
        "n = p['name']; print(n.decode() if isinstance(n, bytes) else n)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def _sanitizer_info(san):
    """(version line, --help text) of the installed compute-sanitizer."""
    version = subprocess.run([san, "--version"], capture_output=True, text=True).stdout
    helptext = subprocess.run([san, "--help"], capture_output=True, text=True).stdout
    lines = [ln.strip() for ln in version.splitlines() if ln.strip()]
    return (lines[-1] if lines else "unknown"), helptext


def known_options(opts, helptext):
    """(opts without the "--name value" pairs the installed sanitizer's --help does not list,
    the dropped names): an option a newer or older version lacks would stop it at start. A help
    text that does not list --tool is no list: then nothing is dropped."""
    if "--tool" not in helptext:
        return list(opts), []
    kept, dropped, i = [], [], 0
    while i < len(opts):
        name = opts[i]
        has_value = i + 1 < len(opts) and not opts[i + 1].startswith("--")
        if name.startswith("--") and name not in helptext:
            dropped.append(name)
        else:
            kept += opts[i : i + 1 + has_value]
        i += 1 + has_value
    return kept, dropped


def _pytest_args(args):
    marks = "gpu" if not args.m else f"gpu and ({args.m})"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", marks]
    if args.k:
        cmd += ["-k", args.k]
    return cmd + (args.paths or ["tests/"])


def _selection(args):
    parts = [args.select] + [f"{o} {v}" for o, v in (("-k", args.k), ("-m", args.m)) if v]
    return " ".join(parts + list(args.paths or []))


def _parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", required=True, choices=TOOLS)
    ap.add_argument("--select", choices=("quick", "all"), default="quick")
    ap.add_argument("-k", help="pytest -k expression (narrows the selection)")
    ap.add_argument("-m", help="a pytest marker expression, and-ed with 'gpu'")
    ap.add_argument("--shard", help="k/n: the k-th of n interleaved slices of the selection")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds; 0: no budget")
    ap.add_argument("--print-limit", type=int, default=100)
    ap.add_argument("--padding", type=int, default=0, help="memcheck: bytes after each array")
    ap.add_argument("--sanitizer", help="compute-sanitizer's path (else found on PATH/CUDA)")
    ap.add_argument("--extra", default="", help="more compute-sanitizer options, one string")
    ap.add_argument("--results", help="results file (default results/sanitizer-<device>.json)")
    ap.add_argument("--dry", action="store_true", help="print the command, run nothing")
    ap.add_argument("paths", nargs="*", help="test files or directories (default tests/)")
    return ap


def _env(args):
    env = dict(os.environ, QWENREF_SANITIZE="1", QWENREF_SANITIZE_SELECT=args.select)
    env["PYTHONUNBUFFERED"] = "1"
    if args.shard:
        env["QWENREF_SANITIZE_SHARD"] = args.shard
    if args.budget:
        env["QWENREF_SANITIZE_BUDGET"] = str(args.budget)
    return env


def _run(cmd, env):
    """(exit status, stdout + stderr, seconds) of the sanitized pytest run."""
    t0 = time.monotonic()
    run = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return run.returncode, run.stdout, time.monotonic() - t0


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.shard:
        shard_of(args.shard)
    san = _sanitizer(args.sanitizer)
    log = Path("build/sanitize") / f"{args.tool}.log"
    opts = tool_options(args.tool, log, args.print_limit, args.padding, args.extra.split())
    if args.dry or san is None:
        print(" ".join([san or "compute-sanitizer", *opts, *_pytest_args(args)]), flush=True)
        if args.dry:
            return 0
        return _refuse("compute-sanitizer not found (PATH, CUDA_HOME, /usr/local/cuda)")
    commit = _commit()
    if not commit:
        return _refuse("no commit: set QWENREF_COMMIT=<sha> (the device copy has no .git)")
    device = _device_name()
    if device is None:
        return _refuse("no GPU: CuPy could not read device 0's name")
    version, helptext = _sanitizer_info(san)
    opts, dropped = known_options(opts, helptext)
    if dropped:
        print(f"qwenref.dev.sanitize: {version} does not know {dropped}: left out", flush=True)
    cmd = [san, *opts, *_pytest_args(args)]
    print(" ".join(cmd), flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    code, output, seconds = _run(cmd, _env(args))
    print(output, end="", flush=True)
    # the sanitizer writes to stdout when it cannot open its log file
    log_text = log.read_text(errors="replace") if log.exists() else output
    try:
        record = tool_record(args.tool, log_text, output, seconds, code, _selection(args))
    except ValueError as e:
        print(log_text[-4000:], file=sys.stderr)
        return _refuse(f"{e} (exit status {code}; sanitizer log {log})")
    record.update(sanitizer=version, options=opts, left_out=dropped)
    out = Path(args.results or f"results/sanitizer-{_slug(device)}.json")
    old = json.loads(out.read_text()) if out.exists() else None
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = merge_record(old, args.tool, record, commit, date, device, args.shard)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(
        f"{args.tool}: {record['tests']} passed, {record['failed']} failed, "
        f"{record['errors']} sanitizer errors, {record['seconds']} s -> {out}"
    )
    return 0 if record["errors"] == 0 and record["failed"] == 0 else 1


def _refuse(why):
    print(f"qwenref.dev.sanitize: nothing recorded: {why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
