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
