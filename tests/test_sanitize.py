"""qwenref.dev.sanitize on the CPU: the sanitizer's and pytest's summaries are read right from
sample output, a run that did not start is refused and writes nothing, the results file keeps
one entry per tool (and sums shards), and the quick selection covers every parameter value."""

import json
import types
from pathlib import Path

import pytest

from qwenref.dev import sanitize

# What compute-sanitizer prints, trimmed to what the parser reads (the "=========" prefix and
# the report lines around the summary are kept as the tool writes them).
MEMCHECK_LOG = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at rms_norm_f32+0x1b0 in norm.cu:42
=========     by thread (64,0,0) in block (2,0,0)
=========     Address 0x7f1c2e000100 is out of bounds
=========     and is 4 bytes after the nearest allocation at 0x7f1c2e000000 of size 256 bytes
=========
========= ERROR SUMMARY: 1 error
"""
CLEAN_LOG = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
RACECHECK_LOG = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at rope.cu:88
=========     and Read access at rope.cu:95 [512 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""
# two processes followed (--target-processes all): one summary each
TWO_PROCESSES = CLEAN_LOG + "========= ERROR SUMMARY: 3 errors\n"
NOT_STARTED = "========= COMPUTE-SANITIZER\n========= Error: Device not supported\n"

PYTEST_OK = """\
........................s...........F.......                                  [100%]
=========================== short test summary info ============================
SKIPPED [1] tests/test_gpu_timing.py:12: under compute-sanitizer: measures GPU time
SKIPPED [7] tests/conftest.py:92: sanitizer time budget spent
SKIPPED [2] tests/conftest.py:92: sanitizer time budget spent
FAILED tests/test_gpu_norm.py::test_rms_norm[1-64-v0] - AssertionError
1 failed, 40 passed, 10 skipped, 1709 deselected, 1 error in 301.45s (0:05:01)
"""
PYTEST_ALL_SKIPPED = "sssss\n5 skipped, 3 deselected in 2.10s\n"
PYTEST_CRASHED = "....\nFatal Python error: Segmentation fault\n"


def test_sanitizer_summaries():
    assert sanitize.parse_errors(MEMCHECK_LOG) == (1, 0)
    assert sanitize.parse_errors(CLEAN_LOG, "initcheck") == (0, 0)
    assert sanitize.parse_errors(TWO_PROCESSES, "synccheck") == (3, 0)
    assert sanitize.parse_errors(RACECHECK_LOG, "racecheck") == (1, 1)
    assert sanitize.parse_errors(NOT_STARTED) is None
    assert sanitize.parse_errors("") is None


def test_pytest_summary():
    c = sanitize.parse_pytest(PYTEST_OK)
    assert (c["passed"], c["failed"], c["skipped"], c["errors"]) == (40, 1, 10, 1)
    assert c["deselected"] == 1709 and c["budget_skipped"] == 9
    assert sanitize.parse_pytest(PYTEST_ALL_SKIPPED)["passed"] == 0
    assert sanitize.parse_pytest(PYTEST_CRASHED) is None


def test_a_run_counts_only_when_both_finished_and_a_test_ran():
    r = sanitize.tool_record("memcheck", MEMCHECK_LOG, PYTEST_OK, 301.449, 86, "quick")
    assert r == {
        "tests": 40,
        "errors": 1,
        "warnings": 0,
        "seconds": 301.4,
        "failed": 2,  # the failure and the error
        "skipped": 10,
        "budget_skipped": 9,
        "exit_code": 86,
        "selection": "quick",
    }
    bad = [
        (NOT_STARTED, PYTEST_OK, "sanitizer"),
        (CLEAN_LOG, PYTEST_CRASHED, "pytest"),
        (CLEAN_LOG, PYTEST_ALL_SKIPPED, "no test ran"),
    ]
    for log, out, why in bad:
        with pytest.raises(ValueError, match=why):
            sanitize.tool_record("memcheck", log, out, 1.0, 0, "quick")


def _rec(tests, errors, seconds=10.0):
    return dict(
        tests=tests,
        errors=errors,
        warnings=0,
        seconds=seconds,
        failed=0,
        skipped=0,
        budget_skipped=0,
        exit_code=0,
        selection="quick",
    )


def test_merge_keeps_one_entry_per_tool():
    doc = sanitize.merge_record(None, "memcheck", _rec(500, 0), "aaa", "d1", "NVIDIA H200")
    doc = sanitize.merge_record(doc, "racecheck", _rec(480, 2), "bbb", "d2", "NVIDIA H200")
    assert doc["commit"] == "bbb" and doc["date"] == "d2" and doc["device"] == "NVIDIA H200"
    assert doc["memcheck"]["tests"] == 500 and doc["memcheck"]["commit"] == "aaa"
    assert doc["racecheck"]["errors"] == 2 and doc["racecheck"]["commit"] == "bbb"
    doc = sanitize.merge_record(doc, "memcheck", _rec(510, 1), "bbb", "d3", "NVIDIA H200")
    assert doc["memcheck"]["tests"] == 510 and doc["memcheck"]["date"] == "d3"
    assert doc["racecheck"]["tests"] == 480  # untouched


def test_merge_sums_the_shards_of_one_commit():
    doc = sanitize.merge_record(None, "initcheck", _rec(100, 1, 200.0), "c1", "d1", "H", "1/2")
    e = doc["initcheck"]
    assert (e["tests"], e["complete"], e["shard_count"]) == (100, False, 2)
    doc = sanitize.merge_record(doc, "initcheck", _rec(90, 2, 250.0), "c1", "d2", "H", "2/2")
    e = doc["initcheck"]
    assert (e["tests"], e["errors"], e["seconds"], e["complete"]) == (190, 3, 450.0, True)
    assert sorted(e["shards"]) == ["1/2", "2/2"] and e["date"] == "d2"
    # a shard run again replaces its own numbers; a new commit starts the entry afresh
    doc = sanitize.merge_record(doc, "initcheck", _rec(95, 0, 240.0), "c1", "d3", "H", "2/2")
    assert doc["initcheck"]["tests"] == 195
    doc = sanitize.merge_record(doc, "initcheck", _rec(7, 0), "c2", "d4", "H", "1/2")
    assert doc["initcheck"]["tests"] == 7 and list(doc["initcheck"]["shards"]) == ["1/2"]


def test_tool_options_and_the_ones_the_installed_sanitizer_lacks():
    opts = sanitize.tool_options("racecheck", "build/x.log", print_limit=50)
    assert opts[:2] == ["--tool", "racecheck"] and "--racecheck-report" in opts
    assert opts[opts.index("--print-limit") + 1] == "50"
    assert "--padding" in sanitize.tool_options("memcheck", "x.log", padding=32)
    assert "--padding" not in sanitize.tool_options("synccheck", "x.log", padding=32)
    helptext = "--tool --error-exitcode --print-limit --log-file --show-backtrace"
    kept, dropped = sanitize.known_options(opts, helptext)
    assert dropped == ["--racecheck-report", "--racecheck-memcpy-async"]
    gone = ("--racecheck-report", "analysis", "--racecheck-memcpy-async", "yes")
    assert kept == [o for o in opts if o not in gone]
    assert sanitize.known_options(opts, "") == (opts, [])  # no help text: keep everything
    with pytest.raises(ValueError, match="^tool"):
        sanitize.tool_options("leakcheck", "x.log")


def _item(path, name, **params):
    return types.SimpleNamespace(
        path=Path(path), originalname=name, callspec=types.SimpleNamespace(params=params)
    )


def test_quick_selection_runs_every_parameter_value():
    items = [
        _item("t.py", "f", impl=i, n=n, rows=r)
        for i in ("v0", "v1")
        for n in (64, 77)
        for r in (1, 300)
    ]
    items += [types.SimpleNamespace(path=Path("t.py"), originalname="g")]  # not parametrised
    items += [_item("u.py", "f", impl="v0", n=64, rows=1)]  # another file's f
    keep = sanitize.cover_parameters(items)
    f_kept = [it for it in keep if getattr(it, "callspec", None) and it.path.name == "t.py"]
    for name, values in (("impl", {"v0", "v1"}), ("n", {64, 77}), ("rows", {1, 300})):
        assert {it.callspec.params[name] for it in f_kept} == values
    assert len(f_kept) < 8 and items[8] in keep and items[9] in keep
    assert sanitize.shard_of("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "1-3", ""):
        with pytest.raises(ValueError, match="^shard"):
            sanitize.shard_of(bad)


@pytest.fixture
def fake_machine(monkeypatch, tmp_path):
    """sanitize.main on a machine with a sanitizer and a GPU, the run itself replaced by
    `runs`: (exit status, pytest output, sanitizer log) returned in turn."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("QWENREF_COMMIT", "0123abc")
    monkeypatch.setattr(sanitize, "_sanitizer", lambda path=None: "/opt/cuda/compute-sanitizer")
    monkeypatch.setattr(sanitize, "_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(sanitize, "_sanitizer_info", lambda san: ("Version 2025.3.1", ""))
    runs, cmds = [], []

    def run(cmd, env):
        cmds.append((cmd, env))
        code, out, log = runs.pop(0)
        if log is not None:
            Path(cmd[cmd.index("--log-file") + 1]).write_text(log)
        return code, out, 12.5

    monkeypatch.setattr(sanitize, "_run", run)
    return types.SimpleNamespace(runs=runs, cmds=cmds, results=tmp_path / "results")


def test_main_records_each_tool_and_refuses_a_run_that_did_not_start(fake_machine):
    m = fake_machine
    path = m.results / "sanitizer-nvidia-h200.json"
    m.runs.append((0, PYTEST_OK.replace("1 failed, ", "").replace(", 1 error", ""), CLEAN_LOG))
    assert sanitize.main(["--tool", "memcheck", "-k", "norm"]) == 0
    cmd, env = m.cmds[-1]
    assert cmd[:3] == ["/opt/cuda/compute-sanitizer", "--tool", "memcheck"]
    assert env["QWENREF_SANITIZE"] == "1" and env["QWENREF_SANITIZE_SELECT"] == "quick"
    assert cmd[cmd.index("-k") + 1] == "norm" and cmd[cmd.index("gpu") - 1] == "-m"
    doc = json.loads(path.read_text())
    assert doc["commit"] == "0123abc" and doc["device"] == "NVIDIA H200"
    assert doc["memcheck"]["tests"] == 40 and doc["memcheck"]["errors"] == 0
    assert doc["memcheck"]["sanitizer"] == "Version 2025.3.1"

    before = path.read_text()
    m.runs.append((1, PYTEST_OK, NOT_STARTED))  # the sanitizer never summed up
    assert sanitize.main(["--tool", "racecheck"]) == 2
    m.runs.append((0, PYTEST_ALL_SKIPPED, CLEAN_LOG))  # no GPU under the sanitizer
    assert sanitize.main(["--tool", "racecheck"]) == 2
    m.runs.append((139, PYTEST_CRASHED, None))  # killed: no log, no pytest summary
    assert sanitize.main(["--tool", "racecheck"]) == 2
    assert path.read_text() == before  # nothing written by the refused runs

    m.runs.append((86, PYTEST_OK, RACECHECK_LOG))
    assert sanitize.main(["--tool", "racecheck", "--select", "all", "--shard", "1/2"]) == 1
    doc = json.loads(path.read_text())
    assert doc["racecheck"]["errors"] == 1 and doc["racecheck"]["complete"] is False
    assert doc["memcheck"]["tests"] == 40  # kept
    assert m.cmds[-1][1]["QWENREF_SANITIZE_SHARD"] == "1/2"


def test_main_refuses_without_a_commit_a_sanitizer_or_a_gpu(fake_machine, monkeypatch):
    monkeypatch.delenv("QWENREF_COMMIT")
    monkeypatch.setattr(sanitize, "_commit", lambda: None)
    assert sanitize.main(["--tool", "memcheck"]) == 2
    monkeypatch.setenv("QWENREF_COMMIT", "0123abc")
    monkeypatch.setattr(sanitize, "_commit", lambda: "0123abc")
    monkeypatch.setattr(sanitize, "_device_name", lambda: None)
    assert sanitize.main(["--tool", "memcheck"]) == 2
    monkeypatch.setattr(sanitize, "_sanitizer", lambda path=None: None)
    assert sanitize.main(["--tool", "memcheck"]) == 2
    assert sanitize.main(["--tool", "memcheck", "--dry"]) == 0
    assert not fake_machine.results.exists() and fake_machine.cmds == []
