"""qwenref.status: the performance page from a results file (a synthetic one, then the real one:
docs/performance.md must be what the generator makes of results/nvidia-h200.json, so whoever
re-records results re-runs `python -m qwenref.status`)."""

from pathlib import Path

import pytest

from qwenref import status

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results" / "nvidia-h200.json"
PAGE = ROOT / "docs" / "performance.md"


def _run(stage, kernel, us, pct, commit, **extra):
    gbps = 4000.0 * pct / 100.0  # copy rate 4000 GB/s in this "run"
    run = {
        "stage": stage,
        "kernel": kernel,
        "shape": extra.pop("shape", {"nb": 1, "n": 64}),
        "median_us": us,
        "bytes": int(gbps * us * 1e3),
        "gbps": gbps,
        "pct_of_copy": pct,
        "rel_err": 1.5e-7,
        "tol": 1e-5,
        "ok": True,
        "commit": commit,
    }
    run.update(extra)
    return run


DOC = {
    "device": "Test GPU",
    "date": "2026-01-02T03:04:05+00:00",
    "commit": "abcdef0123456",
    "cupy": "1.0",
    "cuda": "9.9",
    "torch": "0.1",
    "copy_gbps": 4000.0,
    "runs": [
        _run(
            "norm",
            "rms_norm",
            10.0,
            80.0,
            "1111111aaaa",
            peer="torch x|y",
            peer_median_us=20.0,
            speedup=2.0,
        ),
        _run(  # a stage run names its family and rung too: still not a ladder run
            "norm", "add_rms_norm", 12.5, 90.0, "1111111aaaa", family="add_rms_norm", rung=1
        ),
        _run(
            "attention",
            "decode q8 (graph replay, 8 per graph)",
            70.0,
            91.6,
            "2222222bbbb",
            shape={"T": 131072, "proj": "gate|up"},
        ),
        _run(
            "attention",
            "decode q8",
            75.0,
            86.0,
            "2222222bbbb",
            shape={"T": 131072, "proj": "gate|up"},
            ok=False,
            rel_err=0.5,
            tol=1e-3,
        ),
        {
            "stage": "attention",
            "kernel": "broken",
            "shape": {"T": 131072, "proj": "gate|up"},
            "median_us": None,
            "bytes": 0,
            "gbps": None,
            "pct_of_copy": None,
            "rel_err": None,
            "ok": False,
            "error": "boom",
            "commit": "2222222bbbb",
        },  # as the bench records one
        # a ladder, out of order: rungs must come out ascending, per shape, with the default marked
        _run(
            "attention",
            "attn_mma",
            30.0,
            60.0,
            "3333333",
            family="attention",
            rung=2,
            default=True,
            bench="ladder",
            timing="queued",
            floor_us=20.0,
            pct_of_floor=66.7,
            shape={"T": 32768, "kind": "q8"},
        ),
        _run(
            "attention",
            "attn_v0",
            3000.0,
            0.6,
            "3333333",
            family="attention",
            rung=0,
            default=False,
            bench="ladder",
            timing="queued",
            floor_us=20.0,
            pct_of_floor=0.67,
            shape={"T": 32768, "kind": "q8"},
        ),
        _run(
            "attention",
            "attn_v1",
            100.0,
            18.0,
            "3333333",
            family="attention",
            rung=1,
            default=False,
            bench="ladder",
            timing="queued",
            floor_us=20.0,
            pct_of_floor=20.0,
            shape={"T": 32768, "kind": "q8"},
        ),
        _run(
            "norm",
            "rms_norm_v0",
            400.0,
            2.0,
            "3333333",
            family="rms_norm",
            rung=0,
            default=False,
            bench="ladder",
            timing="queued",
        ),
        _run(
            "norm",
            "rms_norm_f32",
            10.0,
            80.0,
            "3333333",
            family="rms_norm",
            rung=1,
            default=True,
            bench="ladder",
            timing="queued",
        ),
    ],
}


@pytest.fixture(scope="module")
def page():
    return status.render(DOC)


def _section(page, title):
    """The lines of a section, from its heading to the next heading of the same or higher level."""
    lines = page.splitlines()
    level = title.split(" ")[0]
    i = lines.index(title)
    end = next(
        (
            j
            for j in range(i + 1, len(lines))
            if lines[j].startswith("#")
            and lines[j].split(" ")[0] <= level
            and len(lines[j].split(" ")[0]) <= len(level)
        ),
        len(lines),
    )
    return lines[i:end]


def _rows(section):
    return [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in section
        if line.startswith("| ") and not line.startswith("|---")
    ]


def test_header_names_device_software_date_and_commit(page):
    assert page.startswith("# Performance status\n")
    assert "Test GPU (CUDA 9.9, CuPy 1.0, torch 0.1)" in page
    assert "2026-01-02T03:04:05+00:00, at commit abcdef0" in page
    assert "4000.0 GB/s" in page


def test_commit_table_gives_each_run_its_own_copy_rate(page):
    rows = _rows(_section(page, "## Commits"))
    assert rows[0] == ["commit", "runs", "stages", "copy rate (GB/s)"]
    by = {r[0]: r for r in rows[1:]}
    assert by["1111111"][1:] == ["2", "norm", "4000.0"]
    assert by["2222222"][2] == "attention"
    assert by["3333333"][2] == "attention (ladder), norm (ladder)"


def test_stage_tables_in_pipeline_order_without_ladder_runs(page):
    heads = [l for l in page.splitlines() if l.startswith("## ")]
    assert heads == ["## Commits", "## norm", "## attention", "## Ladders"]
    norm = _rows(_section(page, "## norm"))
    assert [r[0] for r in norm[1:]] == ["rms_norm", "add_rms_norm"]  # no rms_norm_v0
    assert norm[0] == [
        "kernel",
        "shape",
        "µs",
        "GB/s",
        "% of copy",
        "rel_err",
        "peer",
        "peer µs",
        "speedup",
        "timing",
    ]
    assert norm[1] == [
        "rms_norm",
        "-",
        "10.00",
        "3200",
        "80.0",
        "1.5e-07",
        "torch x\\|y",
        "20.00",
        "2.00×",
        "queued",
    ]
    assert "Every run has nb=1 n=64." in _section(page, "## norm")[2]


def test_stage_table_timing_errors_and_escaping(page):
    sec = _section(page, "## attention")
    rows = _rows(sec)
    assert "peer" not in rows[0] and "% of floor" not in rows[0]
    graph, queued, broken = rows[1:]
    assert graph[-1] == "graph" and queued[-1] == "queued"
    assert queued[5] == "5.0e-01 (over tol 1.0e-03)"
    assert broken[2] == "ERROR: boom"
    assert sec[2].endswith("Every run has T=131072 proj=gate|up.")  # the shared shape
    assert all(line.count(" | ") == sec[4].count(" | ") for line in sec if line.startswith("| "))


def test_ladders_sorted_by_family_then_rung_with_default_marked(page):
    sec = _section(page, "## Ladders")
    fams = [l for l in sec if l.startswith("### ")]
    assert fams == ["### rms_norm (norm)", "### attention"]  # pipeline order of stages
    rows = _rows(_section(page, "### attention"))
    assert rows[0] == [
        "rung",
        "kernel",
        "shape",
        "µs",
        "% of copy",
        "% of floor",
        "× rung 0",
        "rel_err",
        "default",
    ]
    assert [r[:2] for r in rows[1:]] == [["0", "attn_v0"], ["1", "attn_v1"], ["2", "attn_mma"]]
    assert [r[-1] for r in rows[1:]] == ["", "", "✓"]
    assert [r[6] for r in rows[1:]] == ["1.00×", "30.00×", "100×"]
    assert rows[3][5] == "66.7"
    norm = _rows(_section(page, "### rms_norm (norm)"))
    assert "% of floor" not in norm[0] and norm[2][-1] == "✓"


def test_timing_falls_back_on_the_kernel_name():
    assert status.run_timing({"kernel": "x (graph replay, 8 per graph)"}) == "graph"
    assert status.run_timing({"kernel": "step eager (host launches)"}) == "eager"
    assert status.run_timing({"kernel": "x"}) == "queued"
    assert status.run_timing({"kernel": "x", "timing": "graph"}) == "graph"
    assert status.copy_rate({"gbps": 2000.0, "pct_of_copy": 50.0}) == pytest.approx(4000.0)
    assert status.copy_rate({"gbps": float("nan"), "pct_of_copy": 50.0}) is None
    run = {"gbps": 2000.0, "pct_of_copy": 50.0001, "copy_gbps": 4000.0}  # the run's own field
    assert status.copy_rate(run) == 4000.0


def test_cli_writes_and_checks(tmp_path):
    import json

    src, out = tmp_path / "nvidia-test.json", tmp_path / "docs" / "performance.md"
    src.write_text(json.dumps(DOC))
    assert status.main(["--results", str(src), "--out", str(out), "--check"]) == 1
    assert status.main(["--results", str(src), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == status.render(DOC, "results/nvidia-test.json")
    assert status.main(["--results", str(src), "--out", str(out), "--check"]) == 0


@pytest.mark.skipif(not RESULTS.is_file(), reason="no recorded results")
def test_performance_page_is_up_to_date():
    want = status.render(status.load(RESULTS), source="results/nvidia-h200.json")
    assert PAGE.is_file(), "docs/performance.md is missing: run python -m qwenref.status"
    assert PAGE.read_text(encoding="utf-8") == want, (
        "docs/performance.md is out of date with results/nvidia-h200.json: "
        "run python -m qwenref.status"
    )


def test_the_h100_page_is_up_to_date():
    """docs/performance-h100.md: the same page for the H100 records (runs made where no H200
    could be had), generated the same way."""
    src = "results/nvidia-h100-80gb-hbm3.json"
    want = status.render(status.load(PAGE.parent.parent / src), source=src)
    page = PAGE.parent / "performance-h100.md"
    assert page.read_text(encoding="utf-8") == want, (
        f"docs/performance-h100.md is out of date with {src}: run python -m qwenref.status "
        f"--results {src} --out docs/performance-h100.md"
    )
