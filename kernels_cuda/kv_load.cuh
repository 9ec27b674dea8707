// kv_load.cuh — one stored KV-cache value as float32, load_<kind>(side, kv head g, token t,
// dim d), for every side kind of qwenref/golden/kvcache.py (its docstring has the layouts):
//   f32     data float32 [nkv, max_t, hd]                      x
//   bf16    data uint16  [nkv, max_t, hd] (bf16 bits)          bits << 16 as float32
//   q8      q int8 [nkv, max_t, hd], d half [nkv, max_t, hd/32]     q * float(d[d / 32])
//   turboN  codes uint8 [nkv, max_t, hd/16, 2N], d half [nkv, max_t, hd/16]
//           code i of a group of 16 at bits [N*i, N*i + N) of the group's 2N little-endian bytes,
//           value (c - (2^N - 1)/2) * float(d[d / 16])  (still in the WHT-rotated domain)
// Each is bit-exact with golden's dequantization (an int8 or a half-integer level times a half
// scale fits float32's 24 bits). One scalar load per value (plus the scale): the plain form, for
// the v0 kernels; the fast kernels load whole groups instead. load_kv<KIND> picks by kind code.
#ifndef QWENREF_KV_LOAD_CUH
#define QWENREF_KV_LOAD_CUH

#include <cuda_fp16.h>

// One stored side: the data array, its scales (null for f32 / bf16) and the [nkv, max_t, hd]
// shape that indexes it (row = g * max_t + t).
struct KvSide {
    const void* data;
    const __half* scale;
    int max_t;
    int hd;
};

__device__ __forceinline__ size_t kv_row(const KvSide& s, int g, int t) {
    return (size_t)g * s.max_t + t;
}

__device__ __forceinline__ float load_f32(const KvSide& s, int g, int t, int d) {
    return static_cast<const float*>(s.data)[kv_row(s, g, t) * s.hd + d];
}

__device__ __forceinline__ float load_bf16(const KvSide& s, int g, int t, int d) {
    const unsigned short b = static_cast<const unsigned short*>(s.data)[kv_row(s, g, t) * s.hd + d];
    return __uint_as_float((unsigned)b << 16);
}

__device__ __forceinline__ float load_q8(const KvSide& s, int g, int t, int d) {
    const size_t row = kv_row(s, g, t);
    const signed char q = static_cast<const signed char*>(s.data)[row * s.hd + d];
    return (float)q * __half2float(s.scale[row * (s.hd / 32) + d / 32]);
}

template <int N>
__device__ __forceinline__ float load_turbo(const KvSide& s, int g, int t, int d) {
    const size_t group = kv_row(s, g, t) * (s.hd / 16) + d / 16;
    const unsigned char* bytes = static_cast<const unsigned char*>(s.data) + group * (2 * N);
    const int i = d % 16;
    unsigned c = 0;
    for (int k = 0; k < N; ++k) {  // bit k of code i is stream bit N*i + k
        const int bit = N * i + k;
        c |= ((unsigned)(bytes[bit / 8] >> (bit % 8)) & 1u) << k;
    }
    return ((float)c - 0.5f * (float)((1 << N) - 1)) * __half2float(s.scale[group]);
}

// kind codes of every attention rung's template arguments (attention_v0.cu, attention_v1.cu):
// KV_TURBO2..KV_TURBO8 are 10 + N
enum {
    KV_F32 = 0,
    KV_BF16 = 1,
    KV_Q8 = 2,
    KV_TURBO2 = 12,
    KV_TURBO3 = 13,
    KV_TURBO4 = 14,
    KV_TURBO8 = 18
};

template <int KIND>
__device__ __forceinline__ float load_kv(const KvSide& s, int g, int t, int d) {
    static_assert(KIND == KV_F32 || KIND == KV_BF16 || KIND == KV_Q8 || KIND == KV_TURBO2 ||
                      KIND == KV_TURBO3 || KIND == KV_TURBO4 || KIND == KV_TURBO8,
                  "unknown kind");
    if constexpr (KIND == KV_F32)
        return load_f32(s, g, t, d);
    else if constexpr (KIND == KV_BF16)
        return load_bf16(s, g, t, d);
    else if constexpr (KIND == KV_Q8)
        return load_q8(s, g, t, d);
    else
        return load_turbo<KIND - 10>(s, g, t, d);
}

#endif  // QWENREF_KV_LOAD_CUH
