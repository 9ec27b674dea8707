"""Which decode-partials kernel the GPU wrapper picks, checked without a GPU: choose_impl and
mma_kernel_name are plain Python over the cache's kinds and the config (a golden cache has the
same attributes), and every kernel name they can produce must exist in attention.cu."""
import re
from pathlib import Path

import pytest

import qwenref
from qwenref import golden
from qwenref.gpu import attention as A

SRC = (Path(__file__).resolve().parent.parent / "kernels_cuda" / "attention.cu").read_text()


def cache(n_rep, kind="q8", hd=256):
    cfg = qwenref.AttnConfig(hidden_size=64, num_attention_heads=2 * n_rep, num_key_value_heads=2,
                             head_dim=hd, intermediate_size=128)
    return golden.KVCache(cfg, max_t=64, kind=kind)


@pytest.mark.parametrize("nb,n_rep,sel,name", [
    (1, 6, False, "attn_partials_q8_mma_n1"), (4, 6, False, "attn_partials_q8_mma_n3"),
    (5, 6, False, "attn_partials_q8_mma_n4"), (1, 8, False, "attn_partials_q8_mma_n1"),
    (1, 6, True, "attn_partials_q8_mma_sel_n1"), (1, 2, True, "attn_partials_q8_mma_sel_n1")])
def test_mma_kernel_name(nb, n_rep, sel, name):
    assert A.mma_kernel_name(nb, n_rep, sel) == name
    # attention.cu declares it: ATTN_PARTIALS_MMA(<suffix>, ...) makes attn_partials_q8_mma_<suffix>
    suffix = name[len("attn_partials_q8_mma_"):]
    assert re.search(rf"^ATTN_PARTIALS_MMA\({suffix},", SRC, re.M), name


def test_selective_mma_kernel_takes_one_row_of_at_most_8_heads():
    with pytest.raises(ValueError, match="one row"):
        A.mma_kernel_name(2, 6, True)
    with pytest.raises(ValueError, match="one row"):
        A.mma_kernel_name(1, 12, True)
    with pytest.raises(ValueError, match="one row"):     # 2 x 2 heads fit one tile, but each
        A.mma_kernel_name(2, 2, True)                      # row has its own token list


@pytest.mark.parametrize("nb,n_rep,selective,sparse_v,want", [
    (1, 6, False, 0.0, "mma"), (4, 6, False, 0.0, "mma"), (6, 6, False, 0.0, "v1"),
    (1, 6, True, 0.0, "mma"), (2, 6, True, 0.0, "v1"), (1, 12, True, 0.0, "v1"),
    (2, 2, True, 0.0, "v1"), (1, 2, True, 0.0, "mma"),
    (1, 6, False, 1e-3, "v1")])
def test_choose_impl(nb, n_rep, selective, sparse_v, want):
    sel_n = object() if selective else None       # choose_impl only asks whether it is given
    got = A.choose_impl(cache(n_rep), nb, sparse_v, sel_n)
    assert got == want
    if got == "mma":                              # every choice has a kernel to launch
        A.mma_kernel_name(nb, n_rep, selective)


def test_choose_impl_other_kinds_and_forcing():
    assert A.choose_impl(cache(6, kind="bf16"), 1) == "v1"
    assert A.choose_impl(cache(6, hd=64), 1) == "v1"
    assert A.choose_impl(cache(6), 1, impl="v1") == "v1"
    with pytest.raises(ValueError, match="impl='mma' does not apply"):
        A.choose_impl(cache(6, kind="bf16"), 1, impl="mma")


# ---- rungs: v0 (attention_v0.cu), v1, mma ------------------------------------------------------
SRC_V0 = (Path(__file__).resolve().parent.parent / "kernels_cuda" / "attention_v0.cu").read_text()


def test_rungs():
    assert A.RUNGS == {"attention": ("v0", "v1", "mma")}
    assert A.DEFAULT_RUNG == {"attention": None}          # None: choose_impl decides per call
    assert A.choose_impl(cache(6), 1, impl="v0") == "v0"
    assert A.choose_impl(cache(6, kind="turbo3"), 9, 1e-3, object(), impl="v0") == "v0"


@pytest.mark.parametrize("kind", golden.CACHE_KINDS)
def test_every_kind_has_a_kernel_on_each_rung(kind):
    """v0 and v1 cover every cache kind; the names exist in their sources (ATTENTION_V0(<pair>,
    ...) makes attention_v0_<pair>, ATTN_PARTIALS(<pair>, ...) attn_partials_<pair>)."""
    v0 = A.rung_kernel("attention", "v0", kind=kind, nb=3, n_rep=4, hd=64)
    v1 = A.rung_kernel("attention", "v1", kind=kind, nb=3, n_rep=4, hd=64)
    pair = v0[len("attention_v0_"):]
    assert v1 == "attn_partials_" + pair
    assert re.search(rf"^ATTENTION_V0\({pair},", SRC_V0, re.MULTILINE), v0
    assert re.search(rf"^ATTN_PARTIALS\({pair},", SRC, re.MULTILINE), v1


@pytest.mark.parametrize("impl,shape,name", [
    ("v0", {"kind": "q8"}, "attention_v0_q8_q8"),
    ("v0", {"kind": "bf16k-turbo2v"}, "attention_v0_bf16_turbo2"),
    ("v1", {"kind": "q8"}, "attn_partials_q8_q8"),
    ("mma", {"kind": "q8", "nb": 4, "n_rep": 6}, "attn_partials_q8_mma_n3"),
    ("mma", {"kind": "q8", "n_rep": 2, "selective": True}, "attn_partials_q8_mma_sel_n1"),
    (None, {"kind": "q8", "nb": 1, "n_rep": 6, "hd": 256}, "attn_partials_q8_mma_n1"),
    (None, {"kind": "q8", "nb": 6, "n_rep": 6}, "attn_partials_q8_q8"),
    (None, {"kind": "q8", "sparse_v": 1e-3}, "attn_partials_q8_q8"),
    (None, {"kind": "q8", "hd": 64}, "attn_partials_q8_q8"),
    (None, {"kind": "turbo4"}, "attn_partials_turbo4_turbo4")])
def test_rung_kernel(impl, shape, name):
    assert A.rung_kernel("attention", impl, **shape) == name


def test_rung_kernel_refuses():
    with pytest.raises(ValueError, match="family"):
        A.rung_kernel("norm", "v0")
    with pytest.raises(ValueError, match="impl"):
        A.rung_kernel("attention", "v2")
    with pytest.raises(ValueError, match="kind"):
        A.rung_kernel("attention", "v0", kind="q4")
    with pytest.raises(ValueError, match="impl='mma' does not apply"):
        A.rung_kernel("attention", "mma", kind="bf16")


def test_bad_impl_is_refused_before_anything_runs():
    """Checked first, so no GPU (and no argument) is needed to see it; attn_partials has no v0."""
    for bad in ("bogus", "V0", 0):
        with pytest.raises(ValueError, match="impl"):
            A.decode_attention(None, None, 0, impl=bad)
        with pytest.raises(ValueError, match="impl"):
            A.attn_partials(None, None, 0, impl=bad)
    with pytest.raises(ValueError, match="impl='v0' has no partials"):
        A.attn_partials(None, None, 0, impl="v0")
