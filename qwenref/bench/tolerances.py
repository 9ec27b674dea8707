"""The bench's tolerances on rel_err = ‖gpu − golden‖ / ‖golden‖, each with why. Decode
attention's (TOL_ATTN for v0 / v1, TOL_ATTN_MMA for the tensor-core rung) live in gpu.attention
beside the rungs: each AttentionPlan carries its own, and attention_tol reads it."""

from __future__ import annotations

from ..gpu.attention import TOL_ATTN, TOL_ATTN_MMA  # importing it needs no CuPy

__all__ = [
    "TOL_F32",
    "TOL_ROPE",
    "TOL_CODES",
    "TOL_SELECT",
    "TOL_LAYER",
    "TOL_ATTN",
    "TOL_ATTN_MMA",
    "attention_tol",
]

TOL_F32 = 1e-5  # same float32 math in another order: ~1e-7, 100x margin
TOL_ROPE = 5e-3  # float32 angle pos·inv_freq vs golden's float64: up to ~|angle|·1e-7 rad,
# 1.3e-2 rad on the fastest pair at position 131071 -> ~1.5e-3 norm-wise
TOL_CODES = 1e-3  # quantizers: bit-exact by construction; a code that flips on a rounding
# boundary moves one value by one step (<= 1e-3 of the norm when rare)
TOL_SELECT = 0.01  # fraction of selected tokens that differ (score ties within float noise)
TOL_LAYER = 2e-3  # whole layer with a q8 cache: a k/v value on a rounding boundary may code
# one step apart (kvcache module docstring); float32 RoPE angles at 32k
# positions (~3e-3 rad on the fastest pair); float32 elsewhere


def attention_tol(cache, nb, sel_n=None):
    """The tolerance of the plan decode_attention runs on these rows (TOL_ATTN_MMA on the
    tensor-core path, else TOL_ATTN): its GPU-free part, so no GPU is needed here."""
    from ..gpu.attention import plan

    return plan(cache, nb, selective=sel_n is not None, gpu=False).tol
