"""The bench's records (qwenref/bench/records.py), on the CPU: one run's fields, the results
schema, the table, reading / merging / writing results files, and the refusal to record without
a commit."""

import json
import math

import numpy as np
import pytest

from qwenref.bench import records

# ---- records, schema, table ------------------------------------------------------------------


def _run(**kw):
    args = dict(
        stage="gemv",
        kernel="gemv_q8",
        shape={"nb": 1, "n_in": 5120, "n_out": 5120},
        median_us=10.0,
        nbytes=40_000_000,
        copy_gbps=4000.0,
        err=1e-7,
        tol=1e-5,
    )
    args.update(kw)
    return records.make_run(
        args.pop("stage"),
        args.pop("kernel"),
        args.pop("shape"),
        args.pop("median_us"),
        args.pop("nbytes"),
        args.pop("copy_gbps"),
        args.pop("err"),
        args.pop("tol"),
        **args,
    )


def test_make_run_derives_bandwidth_share_and_speedup():
    r = _run(peer="cuBLAS bf16", peer_us=25.0)
    assert r["gbps"] == pytest.approx(4000.0)  # 40 MB in 10 us
    assert r["pct_of_copy"] == pytest.approx(100.0) == 100.0 * r["gbps"] / r["copy_gbps"]
    assert r["speedup"] == pytest.approx(2.5)
    assert r["ok"] is True
    for k in records.RUN_KEYS + records.PEER_KEYS:
        assert k in r
    assert r["peers"] == {"cuBLAS bf16": 25.0}
    r2 = _run(err=1e-3)
    assert r2["ok"] is False and "peer" not in r2 and "peers" not in r2
    r3 = _run(peer="torch 2.9 SDPA bf16 (flash, folded)", peer_us=20.0, peers={"llama.cpp": 30.0})
    assert r3["peers"] == {"torch 2.9 SDPA bf16 (flash, folded)": 20.0, "llama.cpp": 30.0}


def test_error_run_is_recorded_and_printed_not_raised():
    r = records.error_run(
        "attention",
        "decode_attention q8",
        {"T": 4096},
        ImportError("no module named qwenref.gpu.attention"),
    )
    assert r["ok"] is False and "ImportError" in r["error"]
    table = records.format_table([_run(), r])
    lines = table.splitlines()
    assert len(lines) == 2 + 2  # header, rule, two runs
    assert "ERROR ImportError" in lines[-1]


def test_format_table_fixed_width_and_fail_flag():
    runs = [_run(), _run(err=1.0, peer="p", peer_us=5.0), _run(median_us=math.nan)]
    lines = records.format_table(runs, copy_gbps=4000.0).splitlines()
    assert lines[0].startswith("copy ceiling: 4000.0")
    body = lines[3:]
    assert len(body) == 3
    widths = {len(l.split(" | ")[0]) for l in body}
    assert widths == {9}  # stage column is fixed width
    assert "FAIL" in body[1] and "FAIL" not in body[0]
    assert "0.50" in body[1]  # speedup 5 / 10


def _doc(runs, commit="0123abc"):
    return {
        "device": "NVIDIA H200",
        "date": "2026-01-01T00:00:00+00:00",
        "commit": commit,
        "cupy": "14.0",
        "cuda": "13.0",
        "torch": None,
        "copy_gbps": 4000.0,
        "runs": runs,
    }


def test_validate_doc_catches_missing_keys_and_partial_peers():
    records.validate_doc(_doc([_run(), _run(peer="p", peer_us=1.0)]))
    with pytest.raises(ValueError, match="commit"):
        records.validate_doc(_doc([_run()], commit=""))
    bad = _run()
    bad["peer"] = "p"  # peer without its time/speedup
    with pytest.raises(ValueError, match="peer"):
        records.validate_doc(_doc([bad]))
    wrong = _run(peer="p", peer_us=1.0)
    wrong["peers"] = {"q": 1.0}  # peers without the run's peer
    with pytest.raises(ValueError, match="peers lacks"):
        records.validate_doc(_doc([wrong]))
    wrong["peers"] = ["p"]
    with pytest.raises(ValueError, match="peers must map"):
        records.validate_doc(_doc([wrong]))
    old = _run(peer="p", peer_us=1.0)
    del old["peers"]  # a run recorded before the field
    records.validate_doc(_doc([old]))
    d = _doc([_run()])
    del d["copy_gbps"]
    with pytest.raises(ValueError, match="copy_gbps"):
        records.validate_doc(d)


def test_write_results_writes_json_and_npz(tmp_path):
    runs = [_run(), records.error_run("norm", "rms_norm", {"rows": 1}, RuntimeError("x"))]
    ref = np.arange(10000, dtype=np.float32)
    samples = {0: records.sample_pairs(ref, ref + 1, seed=0)}
    j, n = records.write_results(_doc(runs), samples, tmp_path / "res", "nvidia-h200")
    assert j.name == "nvidia-h200.json" and n.name == "nvidia-h200.npz"
    doc = json.loads(j.read_text())  # NaN written as null: valid JSON
    assert doc["commit"] == "0123abc" and len(doc["runs"]) == 2
    assert doc["runs"][1]["median_us"] is None
    z = np.load(n)
    assert list(z["run_keys"]) == ["0|gemv|gemv_q8", "1|norm|rms_norm"]
    assert z["0_golden"].shape == (records.N_SAMPLES,)
    np.testing.assert_array_equal(z["0_gpu"], z["0_golden"] + 1)


def test_write_results_refuses_without_commit(tmp_path):
    with pytest.raises(ValueError, match="commit"):
        records.write_results(_doc([_run()], commit=""), {}, tmp_path, "x")
    assert not any(tmp_path.iterdir())


def test_write_results_merge_replaces_only_the_stages_run(tmp_path):
    def pair(v):
        a = np.full(5, v, np.float32)
        return a, a + 1

    first = [_run(stage="norm", kernel="rms_norm"), _run(stage="gemv", kernel="gemv_q8")]
    records.write_results(_doc(first), {0: pair(0), 1: pair(1)}, tmp_path, "d")
    # a later call that ran only gemv: norm's run and sample are kept, gemv's replaced
    again = [
        _run(stage="gemv", kernel="gemv_q8", median_us=20.0),
        _run(stage="gemv", kernel="linear f32"),
    ]
    records.write_results(
        dict(_doc(again, commit="fedcba9"), only=["gemv"]), {1: pair(7)}, tmp_path, "d", merge=True
    )
    doc, samples = records.read_results(tmp_path, "d")
    assert doc["only"] == ["gemv", "norm"]  # what the merged file holds
    assert [(r["stage"], r["kernel"]) for r in doc["runs"]] == [
        ("norm", "rms_norm"),
        ("gemv", "gemv_q8"),
        ("gemv", "linear f32"),
    ]
    assert doc["runs"][1]["median_us"] == 20.0 and doc["commit"] == "fedcba9"
    assert sorted(samples) == [0, 2]
    assert samples[0][0][0] == 0 and samples[2][0][0] == 7
    # without merge the file holds exactly the new runs
    records.write_results(_doc(again), {}, tmp_path, "d")
    assert len(records.read_results(tmp_path, "d")[0]["runs"]) == 2


def test_sample_pairs_is_bounded_and_deterministic():
    a = np.random.default_rng(0).standard_normal((100, 100)).astype(np.float32)
    r1, g1 = records.sample_pairs(a, a * 2, seed=3)
    r2, _ = records.sample_pairs(a, a * 2, seed=3)
    assert r1.shape == (records.N_SAMPLES,) and np.array_equal(r1, r2)
    np.testing.assert_array_equal(g1, 2 * r1)
    small, _ = records.sample_pairs(a[:2], a[:2])
    assert small.shape == (200,)


def test_rel_err_edge_cases():
    x = np.array([3.0, 4.0])
    assert records.rel_err(x, x) == 0.0
    assert records.rel_err(x + [0.0, 5e-3], x) == pytest.approx(1e-3)
    assert records.rel_err([np.nan, 0.0], x) == math.inf  # NaN never passes
    assert records.rel_err(x, np.zeros(2)) == math.inf
    assert records.rel_err(np.zeros(3), np.zeros(2)) == math.inf


def test_device_slug():
    assert records.device_slug("NVIDIA H200") == "nvidia-h200"
    assert records.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


# ---- refusing to record ----------------------------------------------------------------------


def test_require_commit(monkeypatch):
    with pytest.raises(SystemExit, match="QWENREF_COMMIT"):
        records.require_commit({})
    with pytest.raises(SystemExit, match="QWENREF_COMMIT"):
        records.require_commit({"QWENREF_COMMIT": "HEAD"})  # a name, not a sha
    assert records.require_commit({"QWENREF_COMMIT": " 0123abcd \n"}) == "0123abcd"


# ---- the ladder's runs merge apart from their stages ---------------------------------------


def test_write_results_merge_keeps_the_ladder_apart_from_its_stages(tmp_path):
    ladder = dict(
        _run(stage="norm", kernel="rms_norm_v0"),
        bench="ladder",
        family="rms_norm",
        rung=0,
        default=False,
    )
    records.write_results(_doc([_run(stage="norm", kernel="rms_norm"), ladder]), {}, tmp_path, "d")
    # --only norm replaces the norm stage's runs and keeps the ladder's norm rung
    again = [_run(stage="norm", kernel="rms_norm", median_us=9.0)]
    records.write_results(dict(_doc(again), only=["norm"]), {}, tmp_path, "d", merge=True)
    doc, _ = records.read_results(tmp_path, "d")
    assert [(r["kernel"], r.get("bench")) for r in doc["runs"]] == [
        ("rms_norm_v0", "ladder"),
        ("rms_norm", None),
    ]
    assert doc["only"] == ["ladder", "norm"]


def test_context_record_adds_one_run_at_the_runs_copy_rate(capsys):
    from qwenref.bench.context import Context

    ctx = Context.__new__(Context)  # the GPU-free part: no copy rate is measured here
    ctx.runs, ctx.samples, ctx.copy_gbps = [], {}, 2000.0
    ref = np.arange(10, dtype=np.float32)
    run = ctx.record("wht", "wht", {"rows": 2, "n": 5}, 4.0, 8000, 1e-7, 1e-5, ref, ref + 1)
    assert ctx.runs == [run] and run["stage"] == "wht" and run["ok"]
    assert run["gbps"] == pytest.approx(2.0) and run["pct_of_copy"] == pytest.approx(0.1)
    assert np.array_equal(ctx.samples[0][0], ref) and np.array_equal(ctx.samples[0][1], ref + 1)
    ctx.record("wht", "wht", {"rows": 2, "n": 5}, 4.0, 8000, 1e-3, 1e-5, iqr_us=0.5)
    assert ctx.runs[1]["iqr_us"] == 0.5 and not ctx.runs[1]["ok"] and 1 not in ctx.samples
    assert len(capsys.readouterr().out.splitlines()) == 2  # one table line per run


def test_code_match_counts_codes_and_scales_of_the_slots_compared():
    from qwenref import golden
    from qwenref.bench.inputs import dense_cfg
    from qwenref.bench.records import code_match

    cfg = dense_cfg().replace(num_key_value_heads=1, head_dim=64)
    rng = np.random.default_rng(0)
    k, v = rng.standard_normal((2, 3, 1, 64), dtype=np.float32)
    a, b = golden.KVCache(cfg, max_t=3, kind="q8"), golden.KVCache(cfg, max_t=3, kind="q8")
    a.append(k, v)
    b.append(k, v)
    assert code_match(a, b, 0, 3) == 1.0
    b.v_store["q"][0, 2, 0] ^= 1  # one code of the last slot
    assert code_match(a, b, 0, 2) == 1.0 and 0.99 < code_match(a, b, 0, 3) < 1.0


def test_floor_fields_share_of_the_floor_and_none_without_one():
    assert records.floor_fields(20.0, 25.0) == {"floor_us": 20.0, "pct_of_floor": 80.0}
    assert records.floor_fields(None, 25.0) == {}  # a floor whose graph capture failed


def _attention_rung_by_name(kernel):
    """The attention rung a kernel name belongs to (attention_v0_*, *_split_*, *_mma_*, else
    v1's attn_partials_<K>_<V>)."""
    if kernel.startswith("attention_v0"):
        return "v0"
    return "mma" if "_mma" in kernel else "split" if "_split" in kernel else "v1"


def test_recorded_ladder_runs_name_their_rung_by_todays_table():
    """A ladder record's rung index is its place in today's rung table (qwenref.gpu.rungs): a
    rung inserted in the middle moves the later ones, and the records must move with it."""
    from qwenref.gpu.rungs import family
    from qwenref.nbrecords import load_results

    runs = [r for r in (load_results() or {}).get("runs", []) if r.get("bench") == "ladder"]
    assert runs, "no ladder records in results/"
    for r in runs:
        rungs = family(r["family"]).rungs
        if "impl" in r:
            assert rungs[r["rung"]] == r["impl"], r
        if r["family"] == "attention":
            assert rungs[r["rung"]] == _attention_rung_by_name(r["kernel"]), r


def test_write_results_merge_by_kind_replaces_only_those_kinds(tmp_path):
    """A run of some cache kinds (--kinds) replaces the old runs of its stages and kinds; other
    kinds of the same stage, and other stages, stay."""

    def att(kind, us):
        shape = {"T": 8, "nb": 1, "kind": kind}
        return _run(stage="attention", kernel=f"decode_attention {kind}", shape=shape, median_us=us)

    first = [att("q8", 1.0), att("tq4", 2.0), _run(stage="norm", kernel="rms_norm")]
    records.write_results(_doc(first), {}, tmp_path, "d")
    again = [att("tq4", 3.0), att("tq2", 4.0)]
    doc = dict(_doc(again, commit="fedcba9"), only=["attention"], kinds=["tq2", "tq4"])
    records.write_results(doc, {}, tmp_path, "d", merge=True)
    got, _ = records.read_results(tmp_path, "d")
    assert [(r["kernel"], r["median_us"]) for r in got["runs"]] == [
        ("decode_attention q8", 1.0),
        ("rms_norm", 10.0),
        ("decode_attention tq4", 3.0),
        ("decode_attention tq2", 4.0),
    ]
    assert records.stage_and_kind(got["runs"][0]) == ("attention", "q8")
    assert records.run_kind(got["runs"][1]) is None


def test_case_kind_and_kind_list():
    import argparse

    from qwenref.bench import cli

    assert cli.case_kind("decode_attention tq4", {"T": 1, "nb": 1}) == "tq4"
    assert cli.case_kind("dense decode step q8", {"T": 1, "kind": "q8"}) == "q8"
    assert cli.case_kind("rms_norm", {"rows": 1}) is None
    assert cli.kind_list("tq4, tq2") == {"tq4", "tq2"}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown cache kind"):
        cli.kind_list("tq5")
    kinds = {cli.case_kind(k, sh) for _, k, sh, _ in cli.case_list(quick=False)}
    assert {"tq4", "tq3", "tq2", None} <= kinds


def test_family_fields_of_stage_runs():
    """What impl=None runs, as the records name it: a family's default rung, attention's at the
    plan's rung, and runs that are no family's rung (a layer step) without one."""
    from qwenref.bench.rungs import family_fields
    from qwenref.gpu.rungs import family

    assert family_fields("wht") == {"family": "wht", "impl": "v1", "rung": 1, "default": True}
    mma = family("attention").rungs.index("mma")
    assert family_fields("attention", "mma") == {
        "family": "attention",
        "impl": "mma",
        "rung": mma,
        "default": True,
    }
    with pytest.raises(ValueError, match="impl"):
        family_fields("attention")
    assert family_fields("layer") == {"family": "layer", "rung": None, "default": True}
