"""Which selection kernel the GPU wrapper launches, checked without a GPU: select_kernel_name is
plain Python over (nblk, kblk), and every name it can produce must be instantiated in
indexer.cu (SELECT_KERNELS(ITEMS) makes indexer_select_i<ITEMS>_q2/_q4/_q8)."""
import re
from pathlib import Path

import pytest

from qwenref.gpu.indexer import MAX_BLOCKS, select_kernel_name

SRC = (Path(__file__).resolve().parent.parent / "kernels_cuda" / "indexer.cu").read_text()
ITEMS = {int(i) for i in re.findall(r"^SELECT_KERNELS\((\d+)\)", SRC, re.M)}


@pytest.mark.parametrize("nblk,kblk,name", [
    (8, 4, "indexer_select_i1_q2"), (256, 33, "indexer_select_i1_q2"),     # 8 words: ITEMS 1
    (257, 34, "indexer_select_i2_q4"), (400, 100, "indexer_select_i2_q8"),
    (1024, 65, "indexer_select_i4_q4"), (2048, 32, "indexer_select_i8_q2"),  # the 27B row
    (2049, 129, "indexer_select_i16_q8"), (8192, 300, "indexer_select_i32_q8")])
def test_select_kernel_name(nblk, kblk, name):
    assert select_kernel_name(nblk, kblk) == name


def test_every_name_is_instantiated():
    assert ITEMS == {1, 2, 4, 8, 16, 32}
    for nblk in range(1, MAX_BLOCKS + 1, 37):
        items = int(select_kernel_name(nblk, 32).split("_")[2][1:])
        assert items in ITEMS and 8 * 32 * items >= nblk > (8 * 32 * items // 2 if items > 1 else 0)


def test_too_many_blocks():
    with pytest.raises(ValueError, match="nblk"):
        select_kernel_name(MAX_BLOCKS + 1, 32)
