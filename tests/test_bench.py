"""The bench's driver on the CPU: the tolerances it holds kernels to, the layer case's selection
check, the command line (refusing to record without a commit, failing cleanly without a GPU),
the run list and the ladder's coverage. (The GPU cases themselves run only on the device.)"""

import inspect

import numpy as np
import pytest

import qwenref
from qwenref import bench
from qwenref.bench import cli, ladder
from qwenref.bench.cases_layer import selection_match
from qwenref.bench.tolerances import TOL_ATTN, TOL_ATTN_MMA, attention_tol
from qwenref.layout import CACHE_KINDS

# ---- tolerances and checks -------------------------------------------------------------------


def test_attention_tol_follows_the_decode_path():
    """The mma tolerance applies exactly where decode_attention takes the tensor-core path (every
    kind but f32 at hd 256, dense rows or one selective row); v1 keeps the float32 one."""
    import types

    from qwenref.gpu import attention as A

    cfg = qwenref.AttnConfig.qwen35_27b()
    cache = types.SimpleNamespace(cfg=cfg, k_kind="q8", v_kind="q8")
    assert attention_tol(cache, 1) == TOL_ATTN_MMA
    assert attention_tol(cache, 4) == TOL_ATTN_MMA
    assert attention_tol(cache, 1, sel_n=np.ones(1, np.int32)) == TOL_ATTN_MMA
    assert attention_tol(cache, 4, sel_n=np.ones(4, np.int32)) == TOL_ATTN
    bf16 = types.SimpleNamespace(cfg=cfg, k_kind="bf16", v_kind="bf16")
    assert attention_tol(bf16, 1) == TOL_ATTN_MMA
    tq4 = types.SimpleNamespace(cfg=cfg, k_kind="tq4", v_kind="tq4")
    assert attention_tol(tq4, 4, sel_n=np.ones(4, np.int32)) == TOL_ATTN_MMA  # rows one at a time
    f32 = types.SimpleNamespace(cfg=cfg, k_kind="f32", v_kind="f32")
    assert attention_tol(f32, 1) == TOL_ATTN
    # the fp16 bound: two roundings of u = 2^-11 per term
    assert 2 * 2.0**-11 + 2.0**-22 < TOL_ATTN_MMA < 2 * 2.0**-10
    # one source of truth: the plan's tol, whose constants live in gpu.attention
    assert (TOL_ATTN, TOL_ATTN_MMA) == (A.TOL_ATTN, A.TOL_ATTN_MMA)
    for c, nb, sel in ((cache, 1, None), (cache, 4, np.ones(4, np.int32)), (f32, 1, None)):
        want = A.plan_rung(c, nb, selective=sel is not None).tol
        assert attention_tol(c, nb, sel_n=sel) == want


def test_selection_match_reads_the_gpu_trace():
    """The layer run's selection_match compares the GPU forward's trace["selection"] (sel_idx,
    sel_n) with golden's trace["selections"]: a dense row (sel_n 0) is all its tokens."""
    gold = {"selections": [(np.arange(5), None), (np.array([0, 2, 5]), None)]}
    si = np.array([[9, 9, 9], [0, 2, 5]], np.int32)
    assert selection_match({"selection": (si, np.array([0, 3], np.int32))}, gold, 4) == 1.0
    si[1, 1] = 3
    assert selection_match({"selection": (si, np.array([0, 3], np.int32))}, gold, 4) == 0.5
    assert selection_match({}, {}, 0) == 1.0


# ---- refusing to record ----------------------------------------------------------------------


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


def test_python_m_qwenref_bench_is_the_entry_point():
    """`python -m qwenref.bench` runs the package's __main__: --help exits 0, and a dry run on a
    machine without a GPU fails cleanly, saying why."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, "-m", "qwenref.bench", "--help"], capture_output=True, text=True, cwd=root
    )
    assert r.returncode == 0 and "--only STAGE" in r.stdout and "--dry" in r.stdout, r.stderr
    if not qwenref.gpu.available():
        r = subprocess.run(
            [sys.executable, "-m", "qwenref.bench", "--dry"],
            capture_output=True,
            text=True,
            cwd=root,
        )
        assert r.returncode == 1 and "qwenref.bench:" in r.stderr, r.stdout + r.stderr
        assert "Traceback" not in r.stderr


def test_main_rejects_unknown_stage():
    with pytest.raises(SystemExit):
        bench.main(["--only", "nonsense", "--dry"])
    with pytest.raises(SystemExit):
        bench.main(["--only", "norm,nonsense", "--dry"])
    assert cli.stage_list("norm, gemv") == {"norm", "gemv"}


# ---- the run list covers the target shapes ------------------------------------------------


def test_cases_cover_every_stage_and_the_target_shapes():
    cases = cli.case_list(quick=False)
    assert {s for s, *_ in cases} == set(bench.STAGES)
    attn = {(sh["T"], sh["nb"], k) for s, k, sh, _ in cases if s == "attention"}
    for T in (4096, 32768, 131072):
        assert (T, 1, "decode_attention q8") in attn
    assert (131072, 4, "decode_attention q8") in attn
    for T in (32768, 131072):  # every format at both lengths, with 1 and 4 rows
        for nb in (1, 4):
            kinds = {
                k.split()[-1]
                for s, k, sh, _ in cases
                if s == "attention" and sh == {"T": T, "nb": nb}
            }
            assert kinds == set(CACHE_KINDS), (T, nb)
    qsa = {
        k.split()[-1] for s, k, sh, _ in cases if s == "indexer" and sh == {"T": 131072, "nb": 1}
    }
    assert qsa == set(CACHE_KINDS)  # the selective path on every format with kernels
    dense = {sh.get("kind") for s, k, sh, _ in cases if s == "layer" and k.startswith("dense")}
    assert dense == {"q8", "turbo4"}
    assert len([s for s, *_ in cases if s == "gemv"]) == 4
    assert all(callable(fn) for *_, fn in cases)
    quick = cli.case_list(quick=True)
    assert {s for s, *_ in quick} == set(bench.STAGES) and len(quick) < len(cases)


# ---- the ladder ----------------------------------------------------------------------------

# the kernel-choosing shape each ladder case passes for its family
_LADDER_SHAPES = {
    "rms_norm": {},
    "add_rms_norm": {},
    "qk_norm_rope": {"head_dim": 256},
    "wht": {"n": 256},
    "q8_append": {"head_dim": 256, "bits": 8},
    "turbo_append": {"head_dim": 256, "bits": 4},
    "tq_append": {"head_dim": 256, "bits": 4},
    "update_block_keys": {},
    "block_scores": {},
    "select": {"nblk": 512, "kblk": 32},
    "attention": {"kind": "q8", "nb": 1, "n_rep": 6},
    "gemv": {"kind": "q8", "nb": 1, "n_out": 5120},
}


def test_the_ladder_covers_every_family():
    assert set(_LADDER_SHAPES) == set(ladder.FAMILY_MODULE)
    assert {fn.__name__ for fn, _ in ladder.LADDER} <= {n for _, n, *_ in cli.case_list(False)}


@pytest.mark.parametrize("fn, sizes", ladder.LADDER, ids=lambda v: getattr(v, "__name__", ""))
def test_every_ladder_size_names_parameters_of_its_case(fn, sizes):
    params = inspect.signature(fn).parameters
    assert sizes and all(set(kw) <= set(params) - {"ctx"} for kw in sizes)
    # each family is swept small to large, so its plot against bytes moved has a direction
    first = [next(iter(kw.values())) for kw in sizes]
    assert len(sizes) == 1 or first == sorted(first) or "proj" in sizes[0]


@pytest.mark.parametrize("family", sorted(ladder.FAMILY_MODULE))
def test_every_family_has_a_v0_rung_declared_in_its_kernel_file(family):
    rungs, _ = ladder.family_rungs(family)
    assert rungs[0] == "v0" and len(rungs) >= 2 and len(set(rungs)) == len(rungs)
    shape = _LADDER_SHAPES[family]
    fields = ladder.rung_fields(family, "v0", "v1", **shape)
    assert fields["rung"] == 0 and fields["default"] is False and fields["family"] == family
    sources = "".join(p.read_text() for p in qwenref.gpu.kernels_dir().glob("*_v0.cu"))
    assert fields["kernel"].endswith("_v0") or "_v0_" in fields["kernel"]
    assert fields["kernel"].split("_v0")[0] + "_v0" in sources
    # the later rungs name kernels too, and the ladder records them in teaching order
    for i, impl in enumerate(rungs[1:], 1):
        later = ladder.rung_fields(family, impl, impl, **shape)
        assert later["rung"] == i and later["default"] is True and later["kernel"]


# ---- the SDPA peer's search, with a stand-in for torch -----------------------------------------
class _FakeTorch:
    """What sdpa_peer touches of torch: tensors are their shapes; a call records the backend in
    force, the query's shape and the keywords; `refuse` lists (backend, layout) that raise."""

    __version__ = "9.9.9"
    bfloat16 = "bf16"

    def __init__(self, refuse=()):
        import contextlib
        import types

        self.calls, self.backend, self.refuse = [], None, set(refuse)
        fake = self

        @contextlib.contextmanager
        def sdpa_kernel(backends):
            fake.backend = backends[0]
            yield
            fake.backend = None

        def sdpa(q, k, v, **kw):
            layout = "enable_gqa" if kw.get("enable_gqa") else "folded"
            if (fake.backend or "default", layout) in fake.refuse:
                raise RuntimeError("no kernel for these inputs")
            fake.calls.append((fake.backend or "default", layout, q, k, kw))

        self.attention = types.SimpleNamespace(
            SDPBackend=types.SimpleNamespace(
                FLASH_ATTENTION="flash", CUDNN_ATTENTION="cudnn", EFFICIENT_ATTENTION="efficient"
            ),
            sdpa_kernel=sdpa_kernel,
        )
        self.nn = types.SimpleNamespace(
            functional=types.SimpleNamespace(scaled_dot_product_attention=sdpa),
            attention=self.attention,
        )
        self.cuda = types.SimpleNamespace(synchronize=lambda: None)

    def randn(self, *shape, device, dtype):
        return shape


class _FakeCtx:
    """ctx.time gives each configuration the time in `us` (by backend and layout)."""

    def __init__(self, torch, us):
        self.torch, self.us, self.memo, self.batches, self.timed = torch, us, {}, 3, 0

    def n_rot(self, nbytes):
        return 1

    def time(self, fn, n_rot=1):
        fn(0)
        self.timed += 1
        backend, layout = self.torch.calls[-1][:2]
        return (self.us[(backend, layout)],)


def test_sdpa_peer_takes_the_fastest_backend_and_gqa_layout(monkeypatch):
    import sys

    from qwenref.bench import cases_attention as ca

    fake = _FakeTorch(refuse={("efficient", "enable_gqa")})
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setitem(sys.modules, "torch.nn", fake.nn)
    monkeypatch.setitem(sys.modules, "torch.nn.attention", fake.attention)
    us = {(b, lay): 50.0 for b in ca.SDPA_BACKENDS for lay in ca.SDPA_LAYOUTS}
    us[("cudnn", "folded")] = 20.0  # the fastest, unless a refused one were counted
    us[("efficient", "enable_gqa")] = 1.0
    ctx = _FakeCtx(fake, us)
    nb, nh, nkv, hd, T = 2, 24, 4, 256, 1024
    got = ca.sdpa_peer(ctx, nb, nh, nkv, hd, T, ("dense", T, nb))
    assert got == ("torch 9.9.9 SDPA bf16 (cudnn, folded)", 20.0)
    assert ctx.timed == 7  # eight configurations, one refused
    shapes = {(c[1], c[2], tuple(sorted(c[4]))) for c in fake.calls}
    assert shapes == {
        ("enable_gqa", (1, nh, nb, hd), ("enable_gqa",)),
        ("folded", (1, nkv, nh // nkv * nb, hd), ()),
    }
    assert {c[3] for c in fake.calls} == {(1, nkv, T, hd)}
    assert ca.sdpa_peer(ctx, nb, nh, nkv, hd, T, ("dense", T, nb)) == got and ctx.timed == 7
    ctx.torch = None  # no torch: no peer
    assert ca.sdpa_peer(ctx, nb, nh, nkv, hd, T, ("other", T, nb)) is None
