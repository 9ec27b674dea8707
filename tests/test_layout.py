"""qwenref.layout (the cache kinds, stored arrays and bytes per token) and qwenref.kvcache_base
(the one class body of the golden and the GPU cache), checked without either cache's formats."""

import numpy as np
import pytest

import qwenref
from qwenref import golden, layout
from qwenref.kvcache_base import KVCacheBase

# the table of layout's docstring, written out again: {side: {name: (dtype, shape at nkv 2,
# max_t 5, hd 64)}}
TABLE = {
    "f32": {"data": (np.float32, (2, 5, 64))},
    "bf16": {"data": (np.uint16, (2, 5, 64))},
    "q8": {"q": (np.int8, (2, 5, 64)), "d": (np.float16, (2, 5, 2))},
    **{
        f"turbo{n}": {"codes": (np.uint8, (2, 5, 4, 2 * n)), "d": (np.float16, (2, 5, 4))}
        for n in (8, 4, 3, 2)
    },
    # tq-b: hd·b/8 bytes of codes and one float16 γ per vector
    **{
        f"tq{b}": {"codes": (np.uint8, (2, 5, 64 * b // 8)), "gamma": (np.float16, (2, 5))}
        for b in (4, 3, 2)
    },
}


def test_side_arrays_follow_the_table():
    assert set(TABLE) == set(layout.SIDE_KINDS)
    for side, want in TABLE.items():
        got = layout.side_arrays(side, 2, 5, 64)
        assert list(got) == list(want), side  # data first, then the scales
        for name, (dt, shape) in want.items():
            assert got[name] == (shape, np.dtype(dt)), (side, name)


def test_side_kinds_and_bits():
    assert layout.side_kinds("q8") == ("q8", "q8")
    assert layout.side_kinds("bf16k-turbo3v") == ("bf16", "turbo3")
    for kind in layout.CACHE_KINDS:
        assert all(s in layout.SIDE_KINDS for s in layout.side_kinds(kind))
    assert [layout.turbo_bits(s) for s in layout.SIDE_KINDS] == [0, 0, 0, 8, 4, 3, 2, 0, 0, 0]
    assert [layout.tq_bits(s) for s in layout.SIDE_KINDS] == [0] * 7 + [4, 3, 2]
    assert layout.side_kinds("tq3") == ("tq3", "tq3")
    # the tq kinds are every kind without GPU attention kernels
    assert layout.TQ_KINDS == ("tq4", "tq3", "tq2")
    assert layout.CACHE_KINDS == layout.LADDER_KINDS + layout.TQ_KINDS
    with pytest.raises(ValueError, match="^kind"):
        layout.side_kinds("q4")
    with pytest.raises(TypeError, match="^kind"):
        layout.side_kinds(["q8"])
    with pytest.raises(ValueError, match="^side"):
        layout.turbo_bits("turbo5")
    with pytest.raises(ValueError, match="^side"):
        layout.side_arrays("bf16k-turbo4v", 1, 1, 64)  # a cache kind, not a side kind


def test_bytes_per_token():
    # hd 256: f32 1024, bf16 512, q8 256 + 8 scales · 2 B, turboN 16 groups · (2N + 2) B
    hd = 256
    assert [layout.side_bytes_per_head(s, hd) for s in layout.SIDE_KINDS] == [
        1024,
        512,
        272,
        16 * 18,
        16 * 10,
        16 * 8,
        16 * 6,
        128 + 2,  # tq4: 256 · 4 / 8 bytes of codes + a float16 γ
        96 + 2,
        64 + 2,
    ]
    assert layout.bytes_per_token("tq4", 4, 256) == 4 * 2 * 130
    assert layout.bytes_per_token("q8", 4, 256) == 4 * 2 * 272
    assert layout.bytes_per_token("bf16k-turbo3v", 4, 256) == 4 * (512 + 16 * 8)
    cfg = qwenref.AttnConfig.tiny()
    for kind in layout.CACHE_KINDS:
        c = golden.KVCache(cfg, max_t=3, kind=kind)
        stored = sum(a.nbytes for s in (c.k_store, c.v_store) for a in s.values())
        assert stored == 3 * layout.bytes_per_token(kind, cfg.nkv, cfg.head_dim), kind


def test_indexer_arrays_and_limits():
    assert layout.indexer_arrays(21, 32, 4) == {
        "idx_keys": ((21, 32), np.dtype(np.float32)),
        "blk_keys": ((5, 32), np.dtype(np.float32)),
    }
    # the largest group max |x| whose scale is finite in float16, and the next float32 above
    for limit, div in ((layout.Q8_LIMIT, 127), (layout.turbo_limit(4), 7.5)):
        below = np.nextafter(np.float32(limit), np.float32(0))
        assert np.isfinite((below / np.float32(div)).astype(np.float16))
        with np.errstate(over="ignore"):
            assert np.isinf((np.float32(limit) / np.float32(div)).astype(np.float16))


def test_golden_names_stay():
    assert golden.CACHE_KINDS is layout.CACHE_KINDS
    assert isinstance(golden.KVCache(qwenref.AttnConfig.tiny(), 4), KVCacheBase)


class ToyCache(KVCacheBase):
    """The smallest subclass: numpy arrays, f32 sides only, an encode step that can fail."""

    xp = np
    fail = False

    def _check_append(self, k, v, index_k):
        self._index_k_given(index_k)
        return np.asarray(k, np.float32), np.asarray(v, np.float32), index_k

    def _store(self, k, v, t0):
        if self.fail:
            raise ValueError("k: cannot store")
        for store, x in ((self.k_store, k), (self.v_store, v)):
            store["data"][:, t0 : t0 + len(x)] = x.transpose(1, 0, 2)

    @staticmethod
    def _decode(side, stored):
        return stored["data"].copy()


def test_the_base_class_body():
    cfg = qwenref.AttnConfig.tiny()
    c = ToyCache(cfg, max_t=4, kind="f32")
    assert repr(c) == "KVCache(kind='f32', len=0, max_t=4, nkv=2, head_dim=64)"
    k = np.arange(2 * 2 * 64, dtype=np.float32).reshape(2, 2, 64)
    ik = np.ones((2, cfg.indexer_head_dim), np.float32)
    c.append(k, -k, index_k=ik)
    assert len(c) == 2 and np.array_equal(c.keys(), k.transpose(1, 0, 2))
    assert np.array_equal(c.values(1), -k[:1].transpose(1, 0, 2))
    assert np.array_equal(c.idx_keys[:2], ik) and not c.idx_keys[2:].any()
    assert c.nbytes_per_token() == layout.bytes_per_token("f32", 2, 64)
    twin = c.copy()
    assert type(twin) is ToyCache and twin.k_store["data"] is not c.k_store["data"]
    c.fail = True  # a failing encode step writes nothing
    with pytest.raises(ValueError, match="^k"):
        c.append(k, k, index_k=ik)
    assert len(c) == 2 and np.array_equal(c.k_store["data"], twin.k_store["data"])
    assert not c.idx_keys[2:].any()
    c.fail = False
    with pytest.raises(ValueError, match="max_t"):
        c.append(np.concatenate([k, k]), np.concatenate([k, k]), index_k=np.concatenate([ik, ik]))
    with pytest.raises(ValueError, match="^index_k"):
        c.append(k, k)
    with pytest.raises(ValueError, match="^t_len"):
        c.keys(3)
    with pytest.raises(TypeError, match="^t_len"):
        c.values(1.0)
    with pytest.raises(ValueError, match="head_dim"):
        type("Capped", (ToyCache,), {"max_turbo_head_dim": 32})(cfg, 4, kind="turbo4")


def test_rotated_sides_carry_their_sign_pattern():
    for side in layout.SIDE_KINDS:
        s = layout.rotation_signs(side, 64)
        if side.startswith("turbo"):  # turbo stores wht(x): the pattern of all +1
            assert np.array_equal(s, np.ones(64, np.float32))
        elif side.startswith("tq"):  # tq stores wht(s ⊙ x)
            assert np.array_equal(s, layout.tq_signs(64))
        else:
            assert s is None
        assert s is None or (s.dtype == np.float32 and not s.flags.writeable)
    cfg = qwenref.AttnConfig.tiny()
    c = ToyCache(cfg, max_t=2, kind="bf16k-turbo3v")
    assert c.k_signs is None and not c.k_rotated
    assert c.v_rotated and np.array_equal(c.v_signs, np.ones(64, np.float32))
    c = ToyCache(cfg, max_t=2, kind="tq2")
    assert c.k_rotated and c.v_rotated
    assert np.array_equal(c.k_signs, layout.tq_signs(64)) and c.k_signs is not c.v_signs
    # the WHT needs a power of two; the codes of a vector fill whole bytes
    for hd, kind in ((48, "tq4"), (4, "tq3")):
        small = cfg.replace(head_dim=hd, partial_rotary_factor=0.0)
        with pytest.raises(ValueError, match=rf"^head_dim \({hd}\) must be a power of two"):
            ToyCache(small, 2, kind=kind)
    ToyCache(cfg.replace(head_dim=8, partial_rotary_factor=0.0), 2, kind="tq3")  # 3 B a vector
