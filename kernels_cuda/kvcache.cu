// kvcache.cu — KV-cache formats: q8 (llama.cpp Q8_0), turbo-n (WHT + uniform n-bit, groups of 16),
// bf16 (round to nearest even), and the append kernels that write nb new tokens into the
// head-major cache (golden: qwenref/golden/kvcache.py; layout in its module docstring).
//
// Formats (per group, all float32, every operation IEEE-rounded as written — no FMA contraction,
// no fast-math reciprocal — so codes and scales are BIT-EXACT with the golden):
//   q8     (32 values)  amax = max|x|, d32 = amax / 127, d = half_rn(d32), id = d32 ? 1/d32 : 0,
//                       q = roundf(x · id)   (roundf: ties away from zero), int8
//   turboN (16 values)  L = (2^N - 1) / 2, d32 = amax / L, d = half_rn(d32), id = d32 ? 1/d32 : 0,
//                       c = clamp(floorf(x · id + 2^(N-1)), 0, 2^N - 1); code i at bits
//                       [N·i, N·i + N) of the group's 2N bytes, little-endian. N = 1..8 (the
//                       cache uses 8, 4, 3, 2).
//   dequant             q · float(d) and (c - L) · float(d): exact in float32 (<= 8 + 11 bits).
//   bf16                round to nearest even on the bits, stored as uint16; NaN -> sign | 0x7fc0
//                       (what ml_dtypes gives; __float2bfloat16_rn would give 0x7fff).
//
// Kernels
//   q8_quantize_f32      8 lanes per group (a float4 each), amax by 3 xor-shuffles; 4 groups per
//                        warp, grid-stride. float4 loads / 4-byte stores when aligned, else scalar.
//   q8_dequantize_f32    one thread per 4 values (char4 -> float4 when aligned).
//   turbo_quantize_f32   one thread per group of 16 (4 float4 loads, 2N bytes + one half out;
//                        a warp's loads are 64-byte strided per instruction, the 4 of them
//                        together cover 2 KiB contiguously, so DRAM sees each sector once).
//   turbo_dequantize_f32 one thread per group of 16.
//   bf16_bits_f32 / bf16_to_f32   elementwise.
//   kv_append_f32 / _bf16 / _q8 / _turbo
//                        ONE launch per cache side per append: one warp per (token b, kv head h)
//                        of src [nb, nkv, hd] (contiguous), writing cache row (h, t0 + b) of
//                        the [nkv, max_t, ...] arrays. q8: the warp handles one group of 32 per
//                        step (lane = element, warp max). turbo: the warp stages the row in
//                        shared memory, rotates it by the WHT over hd (wht_smem_warp, then the
//                        1/sqrt(hd) scale), and lanes quantize one group of 16 each.
// Launch: quantize/dequantize 128 threads, grid-stride (the wrapper sizes the grid to the work);
//   appends 128 threads = 4 rows per block, grid = ceil(nb·nkv / 4); kv_append_turbo takes
//   4 · hd · 4 bytes of dynamic shared memory.
// Bytes that must move (per value): q8 quantize 4 in + 1 + 2/32 out; turbo-N quantize 4 in +
//   N/8 + 2/16 out; the dequantizers the reverse; bf16 4 + 2; an append moves nb·nkv·hd·4 bytes
//   in plus the stored form out.
// Differences from golden: none in the formats (bit-exact), except for groups whose amax is so
//   small (< 127 · 2^-128 ≈ 4e-37, or L · 2^-128 for turbo) that 1/d32 overflows to inf: both
//   models then produce NaN products whose integer conversion is platform-defined (not tested;
//   real K/V never get there). The turbo append's rotation is a
//   float32 WHT (golden: float64, rounded once), so a rotated value can differ from the golden's
//   in the last bits and, if it sits on a code boundary, its code by one. wht_smem_warp uses the
//   same pass order (h = 1, 2, 4, ...) and scale expression as wht.cu, so the rotation here is
//   bit-identical to gpu.wht's output and to float32 butterflies in numpy (tests quantize that
//   emulation with the golden quantizer and compare the stored codes bit for bit).

#include <cuda_fp16.h>

#define FULL_MASK 0xffffffffu
typedef unsigned long long u64;

__device__ __forceinline__ bool aligned(const void* p, unsigned long long a) {
    return (reinterpret_cast<unsigned long long>(p) & (a - 1)) == 0;
}

// float32 -> bf16 bits, round to nearest even; NaN keeps its sign and becomes quiet 0x7fc0.
__device__ __forceinline__ unsigned short bf16_rne(float x) {
    const unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7fc0u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- per-group scale: d32 = amax / L, d = half(d32), id = 1/d32 or 0 (all IEEE-rounded) ----
__device__ __forceinline__ void group_scale(float amax, float L, __half* d16, float* id) {
    const float d32 = __fdiv_rn(amax, L);
    *d16 = __float2half_rn(d32);
    *id = d32 != 0.0f ? __fdiv_rn(1.0f, d32) : 0.0f;
}

__device__ __forceinline__ signed char q8_code(float x, float id) {
    return (signed char)(int)roundf(__fmul_rn(x, id));
}

__device__ __forceinline__ unsigned turbo_code(float x, float id, int bits) {
    const float c = floorf(__fadd_rn(__fmul_rn(x, id), (float)(1 << (bits - 1))));
    return (unsigned)fminf(fmaxf(c, 0.0f), (float)((1 << bits) - 1));
}

// ---- turbo packing: a group's 16·N bits as two little-endian 64-bit words (lo, hi) ----
__device__ __forceinline__ void put_code(u64& lo, u64& hi, unsigned c, int s /* bit offset */,
                                         int bits) {
    if (s < 64) {
        lo |= (u64)c << s;
        if (s + bits > 64) hi |= (u64)c >> (64 - s);          // a code straddling the words
    } else {
        hi |= (u64)c << (s - 64);
    }
}

__device__ __forceinline__ unsigned get_code(u64 lo, u64 hi, int s, int bits) {
    u64 v = s < 64 ? (lo >> s) | (s > 0 ? hi << (64 - s) : 0ull) : hi >> (s - 64);
    return (unsigned)(v & ((1u << bits) - 1u));
}

__device__ __forceinline__ void store_packed(unsigned char* p, u64 lo, u64 hi, int nbytes) {
    if (aligned(p, 8) && (nbytes & 7) == 0) {
        reinterpret_cast<u64*>(p)[0] = lo;
        if (nbytes == 16) reinterpret_cast<u64*>(p)[1] = hi;
    } else if (aligned(p, 2)) {
        for (int k = 0; k < nbytes / 2; ++k)
            reinterpret_cast<unsigned short*>(p)[k] =
                (unsigned short)(k < 4 ? lo >> (16 * k) : hi >> (16 * (k - 4)));
    } else {
        for (int k = 0; k < nbytes; ++k)
            p[k] = (unsigned char)(k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8)));
    }
}

__device__ __forceinline__ void load_packed(const unsigned char* p, int nbytes, u64& lo, u64& hi) {
    lo = hi = 0ull;
    if (aligned(p, 8) && (nbytes & 7) == 0) {
        lo = reinterpret_cast<const u64*>(p)[0];
        if (nbytes == 16) hi = reinterpret_cast<const u64*>(p)[1];
    } else if (aligned(p, 2)) {
        for (int k = 0; k < nbytes / 2; ++k) {
            const u64 w = reinterpret_cast<const unsigned short*>(p)[k];
            if (k < 4) lo |= w << (16 * k); else hi |= w << (16 * (k - 4));
        }
    } else {
        for (int k = 0; k < nbytes; ++k) {
            const u64 w = p[k];
            if (k < 8) lo |= w << (8 * k); else hi |= w << (8 * (k - 8));
        }
    }
}

// Quantize one group of 16 (already rotated if it should be) and store codes + scale.
__device__ __forceinline__ void turbo_group(const float (&v)[16], int bits, unsigned char* codes,
                                            __half* d) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) amax = fmaxf(amax, fabsf(v[j]));
    __half d16;
    float id;
    group_scale(amax, (float)((1 << bits) - 1) * 0.5f, &d16, &id);
    u64 lo = 0ull, hi = 0ull;
#pragma unroll
    for (int j = 0; j < 16; ++j) put_code(lo, hi, turbo_code(v[j], id, bits), bits * j, bits);
    store_packed(codes, lo, hi, 2 * bits);
    *d = d16;
}

// ---- shared-memory WHT of one row by one warp (same passes and scale as wht.cu) ----
// s: n floats (n a power of two); all 32 lanes call; unscaled. Pass h maps (s[i], s[i+h]) to
// (a + b, a - b) for every i with bit h clear — the order of wht.cu's wht_regs.
__device__ __forceinline__ void wht_smem_warp(float* s, int n) {
    const int lane = threadIdx.x & 31;
    for (int h = 1; h < n; h <<= 1) {
        for (int p = lane; p < n / 2; p += 32) {
            const int i = ((p & ~(h - 1)) << 1) | (p & (h - 1));
            const float a = s[i], b = s[i + h];
            s[i] = a + b;
            s[i + h] = a - b;
        }
        __syncwarp();
    }
}

__device__ __forceinline__ float warp_max(float v, int width) {
    for (int o = width >> 1; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// =============================== standalone formats =========================================

extern "C" __global__ void q8_quantize_f32(const float* __restrict__ x, signed char* q, __half* d,
                                           long long groups) {
    const int lane = threadIdx.x & 31, sub = lane & 7;
    const int warps = blockDim.x >> 5;
    const bool vec = aligned(x, 16) && aligned(q, 4);
    for (long long g0 = ((long long)blockIdx.x * warps + (threadIdx.x >> 5)) * 4; g0 < groups;
         g0 += (long long)gridDim.x * warps * 4) {
        const long long g = g0 + (lane >> 3);
        const bool live = g < groups;
        const long long off = g * 32 + sub * 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) {
            if (vec) {
                const float4 t = *reinterpret_cast<const float4*>(x + off);
                v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
            } else {
                for (int j = 0; j < 4; ++j) v[j] = x[off + j];
            }
        }
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
        amax = warp_max(amax, 8);
        __half d16;
        float id;
        group_scale(amax, 127.0f, &d16, &id);
        if (live) {
            const signed char c0 = q8_code(v[0], id), c1 = q8_code(v[1], id),
                              c2 = q8_code(v[2], id), c3 = q8_code(v[3], id);
            if (vec) {
                *reinterpret_cast<char4*>(q + off) = make_char4(c0, c1, c2, c3);
            } else {
                q[off] = c0; q[off + 1] = c1; q[off + 2] = c2; q[off + 3] = c3;
            }
            if (sub == 0) d[g] = d16;
        }
    }
}

extern "C" __global__ void q8_dequantize_f32(const signed char* __restrict__ q,
                                             const __half* __restrict__ d, float* y,
                                             long long n4 /* values / 4 */) {
    const bool vec = aligned(q, 4) && aligned(y, 16);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        const float s = __half2float(d[i >> 3]);          // 8 quads per group of 32
        if (vec) {
            const char4 c = reinterpret_cast<const char4*>(q)[i];
            reinterpret_cast<float4*>(y)[i] =
                make_float4((float)c.x * s, (float)c.y * s, (float)c.z * s, (float)c.w * s);
        } else {
            for (int j = 0; j < 4; ++j) y[4 * i + j] = (float)q[4 * i + j] * s;
        }
    }
}

extern "C" __global__ void turbo_quantize_f32(const float* __restrict__ x, unsigned char* codes,
                                              __half* d, long long groups, int bits) {
    const bool vec = aligned(x, 16);
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (long long)gridDim.x * blockDim.x) {
        float v[16];
        if (vec) {
#pragma unroll
            for (int j = 0; j < 16; j += 4) {
                const float4 t = *reinterpret_cast<const float4*>(x + g * 16 + j);
                v[j] = t.x; v[j + 1] = t.y; v[j + 2] = t.z; v[j + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) v[j] = x[g * 16 + j];
        }
        turbo_group(v, bits, codes + g * 2 * bits, d + g);
    }
}

extern "C" __global__ void turbo_dequantize_f32(const unsigned char* __restrict__ codes,
                                                const __half* __restrict__ d, float* y,
                                                long long groups, int bits) {
    const bool vec = aligned(y, 16);
    const float L = (float)((1 << bits) - 1) * 0.5f;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (long long)gridDim.x * blockDim.x) {
        u64 lo, hi;
        load_packed(codes + g * 2 * bits, 2 * bits, lo, hi);
        const float s = __half2float(d[g]);
        float v[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) v[j] = ((float)get_code(lo, hi, bits * j, bits) - L) * s;
        if (vec) {
#pragma unroll
            for (int j = 0; j < 16; j += 4)
                *reinterpret_cast<float4*>(y + g * 16 + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) y[g * 16 + j] = v[j];
        }
    }
}

extern "C" __global__ void bf16_bits_f32(const float* __restrict__ x, unsigned short* out,
                                         long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        out[i] = bf16_rne(x[i]);
}

extern "C" __global__ void bf16_to_f32(const unsigned short* __restrict__ b, float* y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = __uint_as_float((unsigned)b[i] << 16);
}

// ==================================== appends ===============================================
// src [nb, nkv, hd] contiguous; token b of head h goes to cache row h * max_t + t0 + b.
// One warp per (b, h): warp index r = b * nkv + h (so src row r), 4 warps per block, grid-stride
// (the loop bound is warp-uniform, so whole warps run every shuffle).

__device__ __forceinline__ int first_warp() { return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); }
__device__ __forceinline__ int warp_stride() { return gridDim.x * (blockDim.x >> 5); }
__device__ __forceinline__ long long cache_row(int r, int nkv, int max_t, int t0) {
    return (long long)(r % nkv) * max_t + t0 + r / nkv;
}

extern "C" __global__ void kv_append_f32(const float* __restrict__ src, float* data, int nb,
                                         int nkv, int hd, int max_t, int t0) {
    const int lane = threadIdx.x & 31;
    const bool vec = (hd & 3) == 0 && aligned(src, 16) && aligned(data, 16);
    for (int r = first_warp(); r < nb * nkv; r += warp_stride()) {
        const float* xr = src + (long long)r * hd;
        float* dr = data + cache_row(r, nkv, max_t, t0) * hd;
        if (vec) {
            for (int i = 4 * lane; i < hd; i += 128)
                *reinterpret_cast<float4*>(dr + i) = *reinterpret_cast<const float4*>(xr + i);
        } else {
            for (int i = lane; i < hd; i += 32) dr[i] = xr[i];
        }
    }
}

extern "C" __global__ void kv_append_bf16(const float* __restrict__ src, unsigned short* data,
                                          int nb, int nkv, int hd, int max_t, int t0) {
    const int lane = threadIdx.x & 31;
    for (int r = first_warp(); r < nb * nkv; r += warp_stride()) {
        const float* xr = src + (long long)r * hd;
        unsigned short* dr = data + cache_row(r, nkv, max_t, t0) * hd;
        for (int i = lane; i < hd; i += 32) dr[i] = bf16_rne(xr[i]);
    }
}

extern "C" __global__ void kv_append_q8(const float* __restrict__ src, signed char* q, __half* d,
                                        int nb, int nkv, int hd, int max_t, int t0) {
    const int lane = threadIdx.x & 31;
    for (int r = first_warp(); r < nb * nkv; r += warp_stride()) {
        const float* xr = src + (long long)r * hd;
        const long long row = cache_row(r, nkv, max_t, t0);
        for (int g = 0; g < hd / 32; ++g) {                    // one group of 32 per step
            const float v = xr[g * 32 + lane];
            __half d16;
            float id;
            group_scale(warp_max(fabsf(v), 32), 127.0f, &d16, &id);
            q[row * hd + g * 32 + lane] = q8_code(v, id);
            if (lane == 0) d[row * (hd / 32) + g] = d16;
        }
    }
}

extern "C" __global__ void kv_append_turbo(const float* __restrict__ src, unsigned char* codes,
                                           __half* d, int nb, int nkv, int hd, int max_t, int t0,
                                           int bits) {
    extern __shared__ __align__(16) float sm[];
    const int lane = threadIdx.x & 31;
    float* s = sm + (threadIdx.x >> 5) * hd;                   // this warp's row
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)hd));
    const int G = hd / 16;
    for (int r = first_warp(); r < nb * nkv; r += warp_stride()) {
        const float* xr = src + (long long)r * hd;
        const long long row = cache_row(r, nkv, max_t, t0);
        __syncwarp();                                          // previous row fully consumed
        for (int i = lane; i < hd; i += 32) s[i] = xr[i];
        __syncwarp();
        wht_smem_warp(s, hd);
        for (int g = lane; g < G; g += 32) {
            float v[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) v[j] = __fmul_rn(s[g * 16 + j], scale);
            turbo_group(v, bits, codes + (row * G + g) * 2 * bits, d + row * G + g);
        }
    }
}
