"""The bench's pure parts, on the CPU: byte counting, the results schema, the table, and the
refusal to record without a commit. (The GPU cases themselves run only on the device.)"""
import json
import math

import numpy as np
import pytest

import qwenref
from qwenref import bench, golden
from qwenref.golden.kvcache import CACHE_KINDS


# ---- byte counting ---------------------------------------------------------------------------

def test_kv_bytes_per_token_matches_golden_cache_for_every_kind():
    cfg = qwenref.AttnConfig.qwen35_27b().replace(indexer_n_heads=0, indexer_head_dim=0,
                                                  indexer_compress_ratio=0, indexer_budget=0)
    for kind in CACHE_KINDS:
        got = bench.kv_bytes_per_token(kind, cfg.nkv, cfg.head_dim)
        assert got == golden.KVCache(cfg, max_t=1, kind=kind).nbytes_per_token(), kind
    # by hand for the 27B shape (4 kv heads x 256): q8 = 256 codes + 8 f16 scales per head side
    assert bench.kv_bytes_per_token("q8", 4, 256) == 4 * 2 * (256 + 16)
    assert bench.kv_bytes_per_token("turbo4", 4, 256) == 4 * 2 * 16 * (8 + 2)
    assert bench.kv_bytes_per_token("bf16k-turbo3v", 4, 256) == 4 * (512 + 16 * (6 + 2))


def test_bytes_of_elementwise_stages_by_hand():
    assert bench.bytes_norm(3, 10) == 4 * (2 * 30 + 10)
    assert bench.bytes_norm(3, 10, add=True) == 4 * (4 * 30 + 10)
    assert bench.bytes_wht(5, 256) == 2 * 4 * 5 * 256
    assert bench.bytes_q8_quantize(2, 64) == 2 * 64 * 4 + 2 * 64 + 2 * 2 * 2
    assert bench.bytes_turbo_quantize(1, 32, 3) == 32 * 4 + 2 * (6 + 2)
    # rope reads the q half only (the gate half is not touched by qk_norm_rope)
    assert bench.bytes_rope(2, 4, 2, 64) == 4 * (2 * 2 * 6 * 64 + 2 * 64 + 2)


def test_bytes_gemv_counts_weights_scales_and_activations():
    nb, n_in, n_out = 4, 5120, 1030
    want = n_out * n_in + n_out * (n_in // 32) * 2 + 4 * nb * n_in + 4 * nb * n_out
    assert bench.bytes_gemv_q8(nb, n_in, n_out) == want
    assert bench.bytes_linear(1, 64, 32, 4) == 64 * 32 * 4 + 4 * (64 + 32)
    assert bench.bytes_linear(1, 64, 32, 2) == 64 * 32 * 2 + 2 * (64 + 32)


@pytest.mark.parametrize("t", [0, 7, 38, 39, 40, 47, 48, 100])
def test_visible_tokens_count_agrees_with_golden_selection(tiny_cfg, rng, t):
    c = tiny_cfg
    R, kblk = c.indexer_compress_ratio, c.kblk
    nc = (t + 1) // R
    q = rng.standard_normal((c.indexer_n_heads, c.indexer_head_dim)).astype(np.float32)
    bkeys = rng.standard_normal((max(nc, 1), c.indexer_head_dim)).astype(np.float32)
    idx, _ = golden.row_selection(t, q, bkeys, R, kblk)
    assert bench.visible_tokens_count(t, R, kblk) == len(idx)
    assert bench.visible_tokens_count(t) == t + 1            # no indexer: dense


def test_bytes_attention_dense_reads_the_longest_row_once():
    per = bench.kv_bytes_per_token("q8", 4, 256)
    got = bench.bytes_attention(4, 24, 4, 256, "q8", base_pos=1000)
    assert got == 1004 * per + 4 * 4 * 24 * 256 * 2          # K/V once + q + out
    gated = bench.bytes_attention(4, 24, 4, 256, "q8", base_pos=1000, gate=True)
    assert gated - got == 4 * 4 * 24 * 256


def test_bytes_attention_selective_counts_the_selected_tokens():
    per = bench.kv_bytes_per_token("q8", 4, 256)
    R, kblk, base = 64, 32, 131071
    got = bench.bytes_attention(1, 24, 4, 256, "q8", base, R, kblk, selective=True)
    n = kblk * R + 0                                          # t + 1 = 131072: no tail
    assert got == n * (per + 4) + 4 * 24 * 256 * 2
    assert got < bench.bytes_attention(1, 24, 4, 256, "q8", base) / 50


def test_layer_stage_bytes_cover_the_stages_and_sum_to_total():
    from qwenref.gpu.layer import STAGES
    cfg = qwenref.AttnConfig.qwen35_27b()
    b = bench.layer_stage_bytes(cfg, 1, 32768, "q8", "q8")
    assert set(b) - {"total"} <= set(STAGES)
    assert {"qkv_proj", "attention", "select", "mlp_gate_up", "mlp_down"} <= set(b)
    assert b["total"] == sum(v for k, v in b.items() if k != "total")
    # the weights dominate a q8 decode step: ~1.06 bytes per parameter
    n_par = (2 * 24 * 256 + 2 * 4 * 256 + 9 * 128) * 5120 + 5120 * 6144 + 3 * 17408 * 5120
    assert 1.0 * n_par < b["total"] < 1.2 * n_par
    dense = cfg.replace(indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0,
                        indexer_budget=0)
    bd = bench.layer_stage_bytes(dense, 1, 32768, "q8", "f32")
    assert "select" not in bd and "indexer_q" not in bd
    assert bd["qkv_proj"] == bench.bytes_linear(1, 5120, 2 * 24 * 256 + 2 * 4 * 256, 4)


# ---- records, schema, table ------------------------------------------------------------------

def _run(**kw):
    args = dict(stage="gemv", kernel="gemv_q8", shape={"nb": 1, "n_in": 5120, "n_out": 5120},
                median_us=10.0, nbytes=40_000_000, copy_gbps=4000.0, err=1e-7, tol=1e-5)
    args.update(kw)
    return bench.make_run(args.pop("stage"), args.pop("kernel"), args.pop("shape"),
                          args.pop("median_us"), args.pop("nbytes"), args.pop("copy_gbps"),
                          args.pop("err"), args.pop("tol"), **args)


def test_attention_tol_follows_the_decode_path():
    """The fp16 P.V tolerance applies exactly where decode_attention takes the tensor-core path
    (q8/q8, hd 256, dense rows or one selective row); v1 keeps the float32 one."""
    import types
    cfg = qwenref.AttnConfig.qwen35_27b()
    cache = types.SimpleNamespace(cfg=cfg, k_kind="q8", v_kind="q8")
    assert bench.attention_tol(cache, 1) == bench.TOL_ATTN_MMA
    assert bench.attention_tol(cache, 4) == bench.TOL_ATTN_MMA
    assert bench.attention_tol(cache, 1, sel_n=np.ones(1, np.int32)) == bench.TOL_ATTN_MMA
    assert bench.attention_tol(cache, 4, sel_n=np.ones(4, np.int32)) == bench.TOL_ATTN
    bf16 = types.SimpleNamespace(cfg=cfg, k_kind="bf16", v_kind="bf16")
    assert bench.attention_tol(bf16, 1) == bench.TOL_ATTN
    # the fp16 bound: two roundings of u = 2^-11 per term
    assert 2 * 2.0 ** -11 + 2.0 ** -22 < bench.TOL_ATTN_MMA < 2 * 2.0 ** -10
    # one source of truth: the plan's tol, whose constants live in gpu.attention
    from qwenref.gpu import attention as A
    assert (bench.TOL_ATTN, bench.TOL_ATTN_MMA) == (A.TOL_ATTN, A.TOL_ATTN_MMA)
    for c, nb, sel in ((cache, 1, None), (cache, 4, np.ones(4, np.int32)), (bf16, 1, None)):
        want = A.plan_rung(c, nb, selective=sel is not None).tol
        assert bench.attention_tol(c, nb, sel_n=sel) == want


def test_selection_match_reads_the_gpu_trace():
    """The layer run's selection_match compares the GPU forward's trace["selection"] (sel_idx,
    sel_n) with golden's trace["selections"]: a dense row (sel_n 0) is all its tokens."""
    gold = {"selections": [(np.arange(5), None), (np.array([0, 2, 5]), None)]}
    si = np.array([[9, 9, 9], [0, 2, 5]], np.int32)
    assert bench._selection_match({"selection": (si, np.array([0, 3], np.int32))}, gold, 4) == 1.0
    si[1, 1] = 3
    assert bench._selection_match({"selection": (si, np.array([0, 3], np.int32))}, gold, 4) == 0.5
    assert bench._selection_match({}, {}, 0) == 1.0


def test_make_run_derives_bandwidth_share_and_speedup():
    r = _run(peer="cuBLAS bf16", peer_us=25.0)
    assert r["gbps"] == pytest.approx(4000.0)                 # 40 MB in 10 us
    assert r["pct_of_copy"] == pytest.approx(100.0)
    assert r["speedup"] == pytest.approx(2.5)
    assert r["ok"] is True
    for k in bench.RUN_KEYS + bench.PEER_KEYS:
        assert k in r
    r2 = _run(err=1e-3)
    assert r2["ok"] is False and "peer" not in r2


def test_error_run_is_recorded_and_printed_not_raised():
    r = bench.error_run("attention", "decode_attention q8", {"T": 4096},
                        ImportError("no module named qwenref.gpu.attention"))
    assert r["ok"] is False and "ImportError" in r["error"]
    table = bench.format_table([_run(), r])
    lines = table.splitlines()
    assert len(lines) == 2 + 2                                # header, rule, two runs
    assert "ERROR ImportError" in lines[-1]


def test_format_table_fixed_width_and_fail_flag():
    runs = [_run(), _run(err=1.0, peer="p", peer_us=5.0), _run(median_us=math.nan)]
    lines = bench.format_table(runs, copy_gbps=4000.0).splitlines()
    assert lines[0].startswith("copy ceiling: 4000.0")
    body = lines[3:]
    assert len(body) == 3
    widths = {len(l.split(" | ")[0]) for l in body}
    assert widths == {9}                                      # stage column is fixed width
    assert "FAIL" in body[1] and "FAIL" not in body[0]
    assert "0.50" in body[1]                                  # speedup 5 / 10


def _doc(runs, commit="0123abc"):
    return {"device": "NVIDIA H200", "date": "2026-01-01T00:00:00+00:00", "commit": commit,
            "cupy": "14.0", "cuda": "13.0", "torch": None, "copy_gbps": 4000.0, "runs": runs}


def test_validate_doc_catches_missing_keys_and_partial_peers():
    bench.validate_doc(_doc([_run(), _run(peer="p", peer_us=1.0)]))
    with pytest.raises(ValueError, match="commit"):
        bench.validate_doc(_doc([_run()], commit=""))
    bad = _run()
    bad["peer"] = "p"                                         # peer without its time/speedup
    with pytest.raises(ValueError, match="peer"):
        bench.validate_doc(_doc([bad]))
    d = _doc([_run()])
    del d["copy_gbps"]
    with pytest.raises(ValueError, match="copy_gbps"):
        bench.validate_doc(d)


def test_write_results_writes_json_and_npz(tmp_path):
    runs = [_run(), bench.error_run("norm", "rms_norm", {"rows": 1}, RuntimeError("x"))]
    ref = np.arange(10000, dtype=np.float32)
    samples = {0: bench.sample_pairs(ref, ref + 1, seed=0)}
    j, n = bench.write_results(_doc(runs), samples, tmp_path / "res", "nvidia-h200")
    assert j.name == "nvidia-h200.json" and n.name == "nvidia-h200.npz"
    doc = json.loads(j.read_text())                           # NaN written as null: valid JSON
    assert doc["commit"] == "0123abc" and len(doc["runs"]) == 2
    assert doc["runs"][1]["median_us"] is None
    z = np.load(n)
    assert list(z["run_keys"]) == ["0|gemv|gemv_q8", "1|norm|rms_norm"]
    assert z["0_golden"].shape == (bench.N_SAMPLES,)
    np.testing.assert_array_equal(z["0_gpu"], z["0_golden"] + 1)


def test_write_results_refuses_without_commit(tmp_path):
    with pytest.raises(ValueError, match="commit"):
        bench.write_results(_doc([_run()], commit=""), {}, tmp_path, "x")
    assert not any(tmp_path.iterdir())


def test_write_results_merge_replaces_only_the_stages_run(tmp_path):
    def pair(v):
        a = np.full(5, v, np.float32)
        return a, a + 1
    first = [_run(stage="norm", kernel="rms_norm"), _run(stage="gemv", kernel="gemv_q8")]
    bench.write_results(_doc(first), {0: pair(0), 1: pair(1)}, tmp_path, "d")
    # a later call that ran only gemv: norm's run and sample are kept, gemv's replaced
    again = [_run(stage="gemv", kernel="gemv_q8", median_us=20.0),
             _run(stage="gemv", kernel="linear f32")]
    bench.write_results(dict(_doc(again, commit="fedcba9"), only=["gemv"]), {1: pair(7)}, tmp_path,
                        "d", merge=True)
    doc, samples = bench.read_results(tmp_path, "d")
    assert doc["only"] == ["gemv", "norm"]             # what the merged file holds
    assert [(r["stage"], r["kernel"]) for r in doc["runs"]] == [
        ("norm", "rms_norm"), ("gemv", "gemv_q8"), ("gemv", "linear f32")]
    assert doc["runs"][1]["median_us"] == 20.0 and doc["commit"] == "fedcba9"
    assert sorted(samples) == [0, 2]
    assert samples[0][0][0] == 0 and samples[2][0][0] == 7
    # without merge the file holds exactly the new runs
    bench.write_results(_doc(again), {}, tmp_path, "d")
    assert len(bench.read_results(tmp_path, "d")[0]["runs"]) == 2


def test_sample_pairs_is_bounded_and_deterministic():
    a = np.random.default_rng(0).standard_normal((100, 100)).astype(np.float32)
    r1, g1 = bench.sample_pairs(a, a * 2, seed=3)
    r2, _ = bench.sample_pairs(a, a * 2, seed=3)
    assert r1.shape == (bench.N_SAMPLES,) and np.array_equal(r1, r2)
    np.testing.assert_array_equal(g1, 2 * r1)
    small, _ = bench.sample_pairs(a[:2], a[:2])
    assert small.shape == (200,)


def test_rel_err_edge_cases():
    x = np.array([3.0, 4.0])
    assert bench.rel_err(x, x) == 0.0
    assert bench.rel_err(x + [0.0, 5e-3], x) == pytest.approx(1e-3)
    assert bench.rel_err([np.nan, 0.0], x) == math.inf       # NaN never passes
    assert bench.rel_err(x, np.zeros(2)) == math.inf
    assert bench.rel_err(np.zeros(3), np.zeros(2)) == math.inf


def test_device_slug():
    assert bench.device_slug("NVIDIA H200") == "nvidia-h200"
    assert bench.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


# ---- refusing to record ----------------------------------------------------------------------

def test_require_commit(monkeypatch):
    with pytest.raises(SystemExit, match="QWENREF_COMMIT"):
        bench.require_commit({})
    with pytest.raises(SystemExit, match="QWENREF_COMMIT"):
        bench.require_commit({"QWENREF_COMMIT": "HEAD"})      # a name, not a sha
    assert bench.require_commit({"QWENREF_COMMIT": " 0123abcd \n"}) == "0123abcd"


def test_main_refuses_to_record_without_commit(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("QWENREF_COMMIT", raising=False)
    out = tmp_path / "results"
    assert bench.main(["--out", str(out)]) == 2
    assert "QWENREF_COMMIT" in capsys.readouterr().err
    assert not out.exists()


def test_main_without_gpu_fails_cleanly_and_records_nothing(monkeypatch, tmp_path, capsys):
    import qwenref.gpu._runtime as rt
    monkeypatch.setattr(rt, "available", lambda: False)
    monkeypatch.setenv("QWENREF_COMMIT", "0123abc")
    out = tmp_path / "results"
    assert bench.main(["--only", "norm", "--out", str(out)]) == 1
    assert bench.main(["--dry", "--quick"]) == 1
    assert not out.exists()
    assert "qwenref.bench" in capsys.readouterr().err


def test_main_rejects_unknown_stage():
    with pytest.raises(SystemExit):
        bench.main(["--only", "nonsense", "--dry"])
    with pytest.raises(SystemExit):
        bench.main(["--only", "norm,nonsense", "--dry"])
    assert bench._stage_list("norm, gemv") == {"norm", "gemv"}


# ---- the run list covers the targets ---------------------------------------------------

def test_cases_cover_every_stage_and_the_target_shapes():
    cases = bench._cases(quick=False)
    assert {s for s, *_ in cases} == set(bench.STAGES)
    attn = {(sh["T"], sh["nb"], k) for s, k, sh, _ in cases if s == "attention"}
    for T in (4096, 32768, 131072):
        assert (T, 1, "decode_attention q8") in attn
    assert (131072, 4, "decode_attention q8") in attn
    kinds_32k = {k.split()[-1] for s, k, sh, _ in cases if s == "attention" and sh["T"] == 32768}
    assert kinds_32k == set(CACHE_KINDS)
    assert any(s == "indexer" and sh["T"] == 131072 for s, k, sh, _ in cases)
    assert len([s for s, *_ in cases if s == "gemv"]) == 4
    assert all(callable(fn) for *_, fn in cases)
    quick = bench._cases(quick=True)
    assert {s for s, *_ in quick} == set(bench.STAGES) and len(quick) < len(cases)


# ---- the ladder ----------------------------------------------------------------------------

def test_write_results_merge_keeps_the_ladder_apart_from_its_stages(tmp_path):
    ladder = dict(_run(stage="norm", kernel="rms_norm_v0"), bench="ladder", family="rms_norm",
                  rung=0, default=False)
    bench.write_results(_doc([_run(stage="norm", kernel="rms_norm"), ladder]), {}, tmp_path, "d")
    # --only norm replaces the norm stage's runs and keeps the ladder's norm rung
    again = [_run(stage="norm", kernel="rms_norm", median_us=9.0)]
    bench.write_results(dict(_doc(again), only=["norm"]), {}, tmp_path, "d", merge=True)
    doc, _ = bench.read_results(tmp_path, "d")
    assert [(r["kernel"], r.get("bench")) for r in doc["runs"]] == [
        ("rms_norm_v0", "ladder"), ("rms_norm", None)]
    assert doc["only"] == ["ladder", "norm"]


# the kernel-choosing shape each ladder case passes for its family
_LADDER_SHAPES = {
    "rms_norm": {}, "add_rms_norm": {}, "qk_norm_rope": {"head_dim": 256}, "wht": {"n": 256},
    "q8_append": {"head_dim": 256, "bits": 8}, "turbo_append": {"head_dim": 256, "bits": 4},
    "update_block_keys": {}, "block_scores": {}, "select": {"nblk": 512, "kblk": 32},
    "attention": {"kind": "q8", "nb": 1, "n_rep": 6}, "gemv": {"kind": "q8", "nb": 1,
                                                                "n_out": 5120}}


def test_the_ladder_covers_every_family():
    assert set(_LADDER_SHAPES) == set(bench._FAMILY_MODULE)
    assert {fn.__name__ for fn in bench.LADDER} <= {n for _, n, *_ in bench._cases(False)}


@pytest.mark.parametrize("family", sorted(bench._FAMILY_MODULE))
def test_every_family_has_a_v0_rung_declared_in_its_kernel_file(family):
    rungs, _ = bench.family_rungs(family)
    assert rungs[0] == "v0" and len(rungs) >= 2 and len(set(rungs)) == len(rungs)
    shape = _LADDER_SHAPES[family]
    fields = bench.rung_fields(family, "v0", "v1", **shape)
    assert fields["rung"] == 0 and fields["default"] is False and fields["family"] == family
    sources = "".join(p.read_text() for p in qwenref.gpu.kernels_dir().glob("*_v0.cu"))
    assert fields["kernel"].endswith("_v0") or "_v0_" in fields["kernel"]
    assert fields["kernel"].split("_v0")[0] + "_v0" in sources
    # the later rungs name kernels too, and the ladder records them in teaching order
    for i, impl in enumerate(rungs[1:], 1):
        later = bench.rung_fields(family, impl, impl, **shape)
        assert later["rung"] == i and later["default"] is True and later["kernel"]
