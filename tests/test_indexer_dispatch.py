"""Which selection kernel the GPU wrapper launches, checked without a GPU: select_kernel_name is
plain Python over (nblk, kblk), and every name it can produce must be instantiated in the module
the wrapper loads it from, indexer_select.cu (SELECT_KERNELS(ITEMS) makes
indexer_select_i<ITEMS>_q2/_q4/_q8); the other v1 kernels are in indexer.cu."""

import re
from pathlib import Path

import pytest

from qwenref.gpu import indexer as I
from qwenref.gpu.indexer import MAX_BLOCKS, select_kernel_name
from qwenref.gpu.rungs import kernel_module

KDIR = Path(__file__).resolve().parent.parent / "kernels_cuda"
SRC = (KDIR / f"{kernel_module('select', 'v1')}.cu").read_text()
SRC_V1 = (KDIR / f"{kernel_module('block_scores', 'v1')}.cu").read_text()
ITEMS = {int(i) for i in re.findall(r"^SELECT_KERNELS\((\d+)\)", SRC, re.M)}


@pytest.mark.parametrize(
    "nblk,kblk,name",
    [
        (8, 4, "indexer_select_i1_q2"),
        (256, 33, "indexer_select_i1_q2"),  # 8 words: ITEMS 1
        (257, 34, "indexer_select_i2_q4"),
        (400, 100, "indexer_select_i2_q8"),
        (1024, 65, "indexer_select_i4_q4"),
        (2048, 32, "indexer_select_i8_q2"),  # the 27B row
        (2049, 129, "indexer_select_i16_q8"),
        (8192, 300, "indexer_select_i32_q8"),
    ],
)
def test_select_kernel_name(nblk, kblk, name):
    assert select_kernel_name(nblk, kblk) == name


def test_every_name_is_instantiated():
    assert ITEMS == {1, 2, 4, 8, 16, 32}
    for nblk in range(1, MAX_BLOCKS + 1, 37):
        items = int(select_kernel_name(nblk, 32).split("_")[2][1:])
        assert items in ITEMS and 8 * 32 * items >= nblk > (8 * 32 * items // 2 if items > 1 else 0)


def test_v1_kernels_are_in_their_modules():
    """NVRTC compiles each module alone: the selection kernels only in indexer_select.cu, the
    queries, block keys and scores in indexer.cu (kernel("indexer", ...))."""
    for family in ("update_block_keys", "block_scores"):
        name = I.rung_kernel(family, "v1")
        assert re.search(
            rf'extern "C" __global__ void __launch_bounds__\([^)]*\)\s+{name}\(', SRC_V1
        ), name
    assert re.search(r"indexer_norm_rope\(", SRC_V1)
    assert not re.search(r"^SELECT_KERNELS\(", SRC_V1, re.M)
    assert "indexer_block_scores(" not in SRC


def test_too_many_blocks():
    with pytest.raises(ValueError, match="nblk"):
        select_kernel_name(MAX_BLOCKS + 1, 32)


# ---- rungs (impl=): checked without a GPU ---------------------------------------------------
V0_SRC = (Path(__file__).resolve().parent.parent / "kernels_cuda" / "indexer_v0.cu").read_text()


def test_rungs_and_defaults():
    from qwenref.gpu.indexer import DEFAULT_RUNG, RUNGS

    assert RUNGS == {
        "update_block_keys": ("v0", "v1"),
        "block_scores": ("v0", "v1"),
        "select": ("v0", "v1"),
    }
    assert DEFAULT_RUNG == {"update_block_keys": "v1", "block_scores": "v1", "select": "v1"}


@pytest.mark.parametrize(
    "family,impl,shape,name",
    [
        ("update_block_keys", "v0", {}, "update_block_keys_v0"),
        ("update_block_keys", "v1", {}, "indexer_block_keys"),
        ("update_block_keys", None, {}, "indexer_block_keys"),
        ("block_scores", "v0", {}, "block_scores_v0"),
        ("block_scores", None, {"nblk": 64}, "indexer_block_scores"),
        ("select", "v0", {"nblk": 2048, "kblk": 32}, "select_v0"),
        ("select", "v0", {}, "select_v0"),
        ("select", "v1", {"nblk": 2048, "kblk": 32}, "indexer_select_i8_q2"),
        ("select", None, {"nblk": 400, "kblk": 100}, "indexer_select_i2_q8"),
    ],
)
def test_rung_kernel(family, impl, shape, name):
    from qwenref.gpu.indexer import rung_kernel

    assert rung_kernel(family, impl, **shape) == name


def test_rung_kernel_rejects():
    from qwenref.gpu.indexer import rung_kernel

    with pytest.raises(ValueError, match="impl"):
        rung_kernel("select", "bogus", nblk=64, kblk=4)
    with pytest.raises(ValueError, match="family"):
        rung_kernel("attention", "v0")
    with pytest.raises(TypeError, match="nblk"):
        rung_kernel("select", "v1")


def test_v0_kernels_are_declared():
    """Every v0 name rung_kernel returns is an extern "C" kernel of indexer_v0.cu."""
    from qwenref.gpu.indexer import RUNGS, rung_kernel

    for family in RUNGS:
        name = rung_kernel(family, "v0")
        assert re.search(rf'extern "C" __global__ void {name}\(', V0_SRC), name


@pytest.mark.parametrize("impl", ["bogus", "v2", "V0", "", 0, ("v0",)])
def test_bad_impl_is_rejected_before_anything_runs(impl):
    """The rung is checked first: no CuPy, no cache, no config needed to see the ValueError."""
    from qwenref.gpu.indexer import block_scores, select_rows, update_block_keys

    with pytest.raises(ValueError, match="impl"):
        update_block_keys(None, None, None, 0, 0, impl=impl)
    with pytest.raises(ValueError, match="impl"):
        block_scores(None, None, 0, impl=impl)
    with pytest.raises(ValueError, match="impl"):
        select_rows(None, None, 0, None, impl=impl)
