// tq_signs.cuh — the fixed ±1 pattern of the tq-b format (qwenref/layout.py tq_signs): s_i = -1
// iff fmix32(i) is odd. tq_sign_bit(i) is the float sign bit to XOR into element i (exact). The
// tq append (kvcache_tq.cu) flips x before its rotation, the tq decode flips q before its
// rotation (attention_mma_steps.cuh) and the output after the inverse one (attention_combine.cu).
#ifndef QWENREF_TQ_SIGNS_CUH
#define QWENREF_TQ_SIGNS_CUH

__device__ __forceinline__ unsigned tq_sign_bit(unsigned i) {
    i ^= i >> 16;
    i *= 0x85EBCA6Bu;
    i ^= i >> 13;
    i *= 0xC2B2AE35u;
    i ^= i >> 16;
    return (i & 1u) << 31;
}

#endif  // QWENREF_TQ_SIGNS_CUH
