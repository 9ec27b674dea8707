"""bitpack — b-bit codes packed into little-endian bytes, the packing of the turbo-n and tq-b
formats: code i of a run occupies bits [b·i, b·i + b) of the run's bytes, bit j of the stream
being bit j % 8 of byte j // 8.

Both functions take checked arguments (their callers, turbo_pack / tq_quantize and the
unpacking dequantizers, check shapes and dtypes and name their own arguments).
"""

import numpy as np

__all__ = ["pack_codes", "unpack_codes"]


def pack_codes(c, bits):
    """codes uint8 [..., m] (values < 2**bits, m·bits a multiple of 8) -> uint8
    [..., m·bits / 8]."""
    shifts = np.arange(bits, dtype=np.uint8)
    b = (c.astype(np.uint8)[..., None] >> shifts) & 1  # [..., m, bits]
    b = b.reshape(c.shape[:-1] + (c.shape[-1] * bits,))  # stream bit bits*i + j
    return np.packbits(b, axis=-1, bitorder="little")


def unpack_codes(packed, bits):
    """uint8 [..., nbytes] (nbytes·8 a multiple of bits) -> codes uint8 [..., nbytes·8 / bits]."""
    b = np.unpackbits(packed, axis=-1, bitorder="little")  # [..., 8·nbytes]
    b = b.reshape(packed.shape[:-1] + (b.shape[-1] // bits, bits))  # [..., m, bits]
    weights = (1 << np.arange(bits)).astype(np.uint8)
    return (b * weights).sum(axis=-1, dtype=np.uint16).astype(np.uint8)
