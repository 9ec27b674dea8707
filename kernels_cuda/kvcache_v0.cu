// kvcache_v0.cu — v0 rungs of the quantized KV-cache appends: the golden formulas of
// qwenref/golden/kvcache.py (q8_quantize; wht then turbo_quantize; signs, wht then tq_quantize:
// tq_append_v0 at the end of the file) written out one thread per
// output, storing nb tokens [nb, nkv, hd] (src row r = b·nkv + h) at cache row h·max_t + t0 + b.
//   q8     per group of 32: amax = max|x|, d32 = amax / 127, d = half_rn(d32),
//          id = d32 ? 1/d32 : 0, q = roundf(x · id)   (roundf: ties away from zero, as golden)
//   turbo  per row: WHT butterflies h = 1, 2, ..., hd/2, (a, b) -> (a + b, a - b), then
//          · float32(1 / sqrt(hd)); per group of 16, L = (2^n - 1)/2: d32 = amax / L, d and id
//          as q8, c = clamp(floor(x · id + 2^(n-1)), 0, 2^n - 1), code i at bits
//          [n·i, n·i + n) of the group's 2n bytes, little-endian. n = 1..8 (a runtime int).
// Launch: 128 threads, grid-stride, one launch per side. q8_append_v0: a thread per (row, kv
//   head, group of 32). turbo_append_v0: a thread per (row, kv head), the row in a 256-float
//   local array (1 KiB of local memory per thread, so hd <= 256: the wrapper refuses more).
// Bytes per (token, kv head): hd·4 in; out hd + 2·hd/32 (q8) or hd·n/8 + 2·hd/16 (turbo).
// Precision: every step is one IEEE float32 op in golden's order (the _rn intrinsics keep the
//   compiler from fusing x·id + 2^(n-1) into an FMA): q8 codes and scales are bit-exact with
//   golden. The turbo rotation is float32 butterflies in wht_regs.cuh's pass order (golden:
//   float64 WHT, rounded once): codes are bit-exact with the golden quantizer applied to that
//   rotation, and a value on a code boundary may code one level from golden's own cache.
// Rungs:
//   q8_append     v0 (this file, q8_append_v0): a thread per group, scalar loads and stores.
//                 v1 (kvcache.cu, kv_append_q8): 4 lanes a group, float4 loads, K+V one launch.
//   turbo_append  v0 (this file, turbo_append_v0): a thread per row, the WHT in local memory.
//                 v1 (kvcache.cu, kv_append_turbo_n<hd>): a row across lanes in registers,
//                 shuffle WHT (wht_regs.cuh), codes combined by shuffles, K+V one launch.
//   tq_append     v0 (this file, tq_append_v0): a thread per row, the signs, the WHT and the
//                 codebook search in local memory and float64, one side per launch.
//                 v1 (kvcache_tq.cu, kv_append_tq_n<hd>): the row across lanes in registers,
//                 the code by bisection over integer keys, sums by shuffles, K+V one launch.
// f32 / bf16 sides use kvcache.cu's kv_append_f32 / kv_append_bf16 for every rung.

#include <cuda_fp16.h>

#include "tq_signs.cuh"

#define V0_MAX_HD 256

// src row r = b * nkv + h  ->  cache row h * max_t + t0 + b
__device__ long long v0_cache_row(long long r, int nkv, int max_t, int t0) {
    return (r % nkv) * max_t + t0 + r / nkv;
}

extern "C" __global__ void q8_append_v0(const float* __restrict__ src, signed char* q, __half* d,
                                        int nb, int nkv, int hd, int max_t, int t0) {
    const int groups = hd / 32;  // per row
    const long long units = (long long)nb * nkv * groups;
    for (long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x; u < units;
         u += (long long)gridDim.x * blockDim.x) {
        const long long r = u / groups;
        const int g = (int)(u - r * groups);
        const float* x = src + r * hd + g * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
        const float d32 = __fdiv_rn(amax, 127.0f);
        const float id = d32 != 0.0f ? __fdiv_rn(1.0f, d32) : 0.0f;
        const long long crow = v0_cache_row(r, nkv, max_t, t0);
        signed char* qo = q + crow * hd + g * 32;
        for (int j = 0; j < 32; ++j) qo[j] = (signed char)(int)roundf(__fmul_rn(x[j], id));
        d[crow * groups + g] = __float2half_rn(d32);
    }
}

extern "C" __global__ void turbo_append_v0(const float* __restrict__ src, unsigned char* codes,
                                           __half* d, int nb, int nkv, int hd, int max_t, int t0,
                                           int bits) {
    if (hd > V0_MAX_HD || bits < 1 || bits > 8) return;  // refused by the wrapper
    const float L = (float)((1 << bits) - 1) * 0.5f;
    const float off = (float)(1 << (bits - 1));
    const float cmax = (float)((1 << bits) - 1);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)hd));
    const int groups = hd / 16, nbytes = 2 * bits;  // per row; per group
    const long long rows = (long long)nb * nkv;
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (long long)gridDim.x * blockDim.x) {
        float v[V0_MAX_HD];
        for (int i = 0; i < hd; ++i) v[i] = src[r * hd + i];
        for (int h = 1; h < hd; h <<= 1) {  // same passes as wht_regs.cuh
            for (int i = 0; i < hd; ++i) {
                if ((i & h) == 0) {
                    const float a = v[i], b = v[i + h];
                    v[i] = a + b;
                    v[i + h] = a - b;
                }
            }
        }
        const long long crow = v0_cache_row(r, nkv, max_t, t0);
        for (int g = 0; g < groups; ++g) {
            float p[16];
            float amax = 0.0f;
            for (int j = 0; j < 16; ++j) {
                p[j] = __fmul_rn(v[16 * g + j], scale);
                amax = fmaxf(amax, fabsf(p[j]));
            }
            const float d32 = __fdiv_rn(amax, L);
            const float id = d32 != 0.0f ? __fdiv_rn(1.0f, d32) : 0.0f;
            unsigned c[16];
            for (int j = 0; j < 16; ++j) {
                const float t = floorf(__fadd_rn(__fmul_rn(p[j], id), off));
                c[j] = (unsigned)fminf(fmaxf(t, 0.0f), cmax);  // fmaxf(NaN, 0) = 0
            }
            // bit s of the group's stream is bit s % bits of code s / bits (golden.turbo_pack)
            unsigned char* out = codes + (crow * groups + g) * nbytes;
            for (int k = 0; k < nbytes; ++k) {
                unsigned byte = 0;
                for (int b = 0; b < 8; ++b) {
                    const int s = 8 * k + b;
                    byte |= ((c[s / bits] >> (s % bits)) & 1u) << b;
                }
                out[k] = (unsigned char)byte;
            }
            d[crow * groups + g] = __float2half_rn(d32);
        }
    }
}

// tq_append_v0: golden's tq quantizer (qwenref/golden/tq.py) written out, a thread per (row, kv
// head): y = float32 WHT of s ⊙ x (the butterflies above, s = layout.tq_signs: the sign of
// element i is flipped iff fmix32(i) is odd), ss, scale and u in float64 as golden, the code of
// u_i = how many codebook midpoints (C_j + C_{j+1}) / 2 (exact in float64) lie strictly below u_i,
// gamma = half(sum y_i C[c_i] / sum C[c_i]^2) (float64 sums in index order), ss = 0: gamma 0 and
// codes 2^(bits-1). codebook = golden's tq_codebook(bits), float32 [2^bits].
extern "C" __global__ void tq_append_v0(const float* __restrict__ src, unsigned char* codes,
                                        __half* gamma, const float* __restrict__ codebook, int nb,
                                        int nkv, int hd, int max_t, int t0, int bits) {
    if (hd > V0_MAX_HD || bits < 1 || bits > 4) return;  // refused by the wrapper
    const int nc = 1 << bits;
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)hd));
    const long long rows = (long long)nb * nkv;
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (long long)gridDim.x * blockDim.x) {
        float v[V0_MAX_HD];
        for (int i = 0; i < hd; ++i)
            v[i] = __uint_as_float(__float_as_uint(src[r * hd + i]) ^ tq_sign_bit(i));
        for (int h = 1; h < hd; h <<= 1) {  // same passes as wht_regs.cuh
            for (int i = 0; i < hd; ++i) {
                if ((i & h) == 0) {
                    const float a = v[i], b = v[i + h];
                    v[i] = a + b;
                    v[i + h] = a - b;
                }
            }
        }
        double ss = 0.0;
        for (int i = 0; i < hd; ++i) {
            v[i] = __fmul_rn(v[i], scale);
            ss += (double)v[i] * (double)v[i];
        }
        const double sc = ss == 0.0 ? 0.0 : sqrt((double)hd) / sqrt(ss);
        double num = 0.0, den = 0.0;
        const long long crow = v0_cache_row(r, nkv, max_t, t0);
        unsigned char* out = codes + crow * (hd * bits / 8);
        for (int k = 0; k < hd * bits / 8; ++k) out[k] = 0;
        for (int i = 0; i < hd; ++i) {
            const double u = (double)(float)((double)v[i] * sc);  // float32(y · scale)
            int c = 0;
            for (int j = 0; j + 1 < nc; ++j)
                c += u > ((double)codebook[j] + (double)codebook[j + 1]) / 2 ? 1 : 0;
            if (ss == 0.0) c = nc / 2;
            num += (double)v[i] * (double)codebook[c];
            den += (double)codebook[c] * (double)codebook[c];
            for (int b = 0; b < bits; ++b)  // bit b of code i is bit bits·i + b of the row
                out[(bits * i + b) >> 3] |= (unsigned char)(((c >> b) & 1) << ((bits * i + b) & 7));
        }
        gamma[crow] = __double2half(ss == 0.0 ? 0.0 : num / den);
    }
}
