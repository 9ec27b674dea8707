"""stream.cu's stream_read (the floor of one launch, qwenref/gpu/stream.py): it must read every
byte, or its time says nothing. The XOR of its per-CTA words equals the XOR of the buffer's
uint32 words only if each 16-byte word was read exactly once (a skipped or doubled word flips the
result unless it XORs to zero, which random data makes ~2^-32 likely)."""

import numpy as np
import pytest

from qwenref.gpu.stream import checked_buffers, grid_size, stream_read, xor_words

pytestmark = pytest.mark.gpu


# sizes: smaller than one grid's threads, not a multiple of the grid stride, a 4-load unroll
# remainder, and a few MB
@pytest.mark.parametrize("n16", [1, 37, 4095, 4096 * 16 * 132 + 3, 1 << 18])
def test_stream_read_reads_every_word(cp, rng, n16):
    h = rng.integers(-(2**31), 2**31, size=4 * n16, dtype=np.int64).astype(np.int32)
    buf = cp.asarray(h)
    out = cp.full(grid_size(), 0xDEADBEEF, cp.uint32)  # poisoned
    assert stream_read(buf, out=out) is out
    assert xor_words(out) == xor_words(h)
    # a buffer one bit away gets its own answer (the output is computed, not stale)
    before = xor_words(h)
    h[rng.integers(h.size)] ^= 1 << int(rng.integers(32))
    got = xor_words(stream_read(cp.asarray(h)))
    assert got == xor_words(h) and got != before


def test_stream_read_rejects_bad_buffers(cp):
    with pytest.raises(ValueError, match="buf"):
        stream_read(cp.zeros(5, cp.int32))  # 20 bytes
    with pytest.raises(ValueError, match="buf"):
        stream_read(cp.zeros(9, cp.int32)[1:])  # 32 bytes at offset 4
    with pytest.raises(TypeError, match="buf"):
        stream_read(np.zeros(8, np.int32))
    with pytest.raises(ValueError, match="out"):
        stream_read(cp.zeros(8, cp.int32), out=cp.zeros(3, cp.uint32))


def test_checked_buffers(cp):
    pairs = checked_buffers(4096 * 16 + 8, 3)  # rounded down to 16 bytes
    assert len(pairs) == 3 and all(b.nbytes == 4096 * 16 for b, _ in pairs)
    for b, o in pairs:
        assert xor_words(o) == xor_words(b)
    assert len({xor_words(b) for b, _ in pairs}) == 3  # distinct random contents
