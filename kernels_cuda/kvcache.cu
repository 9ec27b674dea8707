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
//   turbo_quantize_f32   two lanes per group of 16, 8 consecutive values each (two float4 loads:
//                        a warp reads 1 KiB contiguously); amax by one xor-shuffle, the two
//                        lanes' codes OR-combined by shuffles, the even lane stores 2N bytes +
//                        one half. The width N is a template parameter (switch on `bits`), so
//                        the packing shifts are constants.
//   turbo_dequantize_f32 one thread per group of 16.
//   bf16_bits_f32 / bf16_to_f32   elementwise.
//   kv_append_f32 / _bf16 one launch per cache side: one warp per (token b, kv head h) of src
//                        [nb, nkv, hd] (contiguous), writing cache row (h, t0 + b) of the
//                        [nkv, max_t, ...] arrays.
//   kv_append_q8 / kv_append_turbo_n{16..1024}
//                        K and V in ONE launch when both sides have this kind (sides = 2), else
//                        one per side. q8: 4 lanes per group of 32, 8 values per lane (two
//                        float4 loads, one 8-byte store of codes, amax by 2 xor-shuffles).
//                        turbo: the row in registers in wht.cu's layout (hd = N: max(4, N/32)
//                        values per lane), rotated by wht_regs<N> (wht_regs.cuh, shared with wht.cu) and the
//                        1/sqrt(N) scale, then each group of 16 quantized by the lanes that
//                        hold it (turbo_group_split; the width a template parameter). A warp
//                        loads R = max(1, 16/E) row sets before computing any (more bytes in
//                        flight per warp).
// Launch: quantize/dequantize 128 threads, grid-stride (the wrapper sizes the grid to the work);
//   appends 128 threads: f32/bf16 4 rows per block, grid = ceil(nb·nkv / 4); q8 128 units of 8
//   values per block; turbo 4 warps of R · 32 / (N / max(4, N/32)) rows each. No shared memory.
// H200, 27B kv shape (nb 4096, nkv 4, hd 256, K+V): q8 append 14.5 us (was 40.7; at nb 16384,
//   170 MB: 46.5 us, 86% of copy; 4 units per lane with loads first measured 15.6 / 44.8 us and
//   3.5 vs 2.4 us at nb 1, so one unit per lane stays), turbo4
//   19.5 us (was 71.8); turbo_quantize bits 4, 262144 x 256: 76.7 us, 96% of copy (was 104).
// Bytes that must move (per value): q8 quantize 4 in + 1 + 2/32 out; turbo-N quantize 4 in +
//   N/8 + 2/16 out; the dequantizers the reverse; bf16 4 + 2; an append moves nb·nkv·hd·4 bytes
//   in plus the stored form out.
// Differences from golden: none in the formats (bit-exact), except for groups whose amax is so
//   small (< 127 · 2^-128 ≈ 4e-37, or L · 2^-128 for turbo) that 1/d32 overflows to inf: both
//   models then produce NaN products whose integer conversion is platform-defined (not tested;
//   real K/V never get there). The turbo append's rotation is a
//   float32 WHT (golden: float64, rounded once), so a rotated value can differ from the golden's
//   in the last bits and, if it sits on a code boundary, its code by one. wht_regs is wht.cu's
//   (same pass order h = 1, 2, 4, ... and scale expression), so the rotation here is
//   bit-identical to gpu.wht's output and to float32 butterflies in numpy (tests quantize that
//   emulation with the golden quantizer and compare the stored codes bit for bit).

#include <cuda_fp16.h>

#include "kvcache_rows.cuh"

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

// ---- turbo packing: a group's 16·N bits as two little-endian 64-bit words (lo, hi) ----
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
            if (k < 4)
                lo |= w << (16 * k);
            else
                hi |= w << (16 * (k - 4));
        }
    } else {
        for (int k = 0; k < nbytes; ++k) {
            const u64 w = p[k];
            if (k < 8)
                lo |= w << (8 * k);
            else
                hi |= w << (8 * (k - 8));
        }
    }
}

// c = clamp(floor(x · id + 2^(B-1)), 0, 2^B - 1), as turbo_code but with the floor and the
// conversion in one cvt.rmi.s32 and an integer clamp: the same value for every input (finite t
// floors exactly; |t| >= 2^31 saturates to the same clamp end; NaN converts to 0, as fmaxf(NaN,
// 0) gives 0).
template <int B>
__device__ __forceinline__ unsigned turbo_code_t(float x, float id) {
    const int c = __float2int_rd(__fadd_rn(__fmul_rn(x, id), (float)(1 << (B - 1))));
    return (unsigned)(c < 0 ? 0 : (c > (1 << B) - 1 ? (1 << B) - 1 : c));
}

// One group of 16 held by 16 / PER consecutive lanes, PER values each (PER in 4, 8, 16; value
// j of lane `part` is the group's element part·PER + j). amax by xor-shuffles, scale as
// group_scale, codes OR-combined across the lanes into the group's (lo, hi); lane part 0 stores
// codes and scale when `live`. Every lane of the warp must call it (full-warp shuffles).
template <int B, int PER>
__device__ __forceinline__ void turbo_group_split(const float (&v)[PER], int part, bool live,
                                                  unsigned char* codes, __half* d) {
    constexpr int GL = 16 / PER;
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
    for (int m = 1; m < GL; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, m));
    __half d16;
    float id;
    group_scale(amax, (float)((1 << B) - 1) * 0.5f, &d16, &id);
    u64 lo = 0ull, hi = 0ull;
    if constexpr (PER == 16) {
#pragma unroll
        for (int j = 0; j < 16; ++j) put_bits(lo, hi, turbo_code_t<B>(v[j], id), B * j, B);
    } else {
        u64 w = 0ull;  // PER * B <= 64 bits
#pragma unroll
        for (int j = 0; j < PER; ++j) w |= (u64)turbo_code_t<B>(v[j], id) << (B * j);
        put_bits(lo, hi, w, part * PER * B, PER * B);
#pragma unroll
        for (int m = 1; m < GL; m <<= 1) {
            lo |= __shfl_xor_sync(FULL_MASK, lo, m);
            hi |= __shfl_xor_sync(FULL_MASK, hi, m);
        }
    }
    if (live && part == 0) {
        store_packed(codes, lo, hi, 2 * B);
        *d = d16;
    }
}

// ---- register WHT: wht.cu's, from the shared header (same layout, passes and operations) ----
#include "wht_regs.cuh"

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
                v[0] = t.x;
                v[1] = t.y;
                v[2] = t.z;
                v[3] = t.w;
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
                q[off] = c0;
                q[off + 1] = c1;
                q[off + 2] = c2;
                q[off + 3] = c3;
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
        const float s = __half2float(d[i >> 3]);  // 8 quads per group of 32
        if (vec) {
            const char4 c = reinterpret_cast<const char4*>(q)[i];
            reinterpret_cast<float4*>(y)[i] =
                make_float4((float)c.x * s, (float)c.y * s, (float)c.z * s, (float)c.w * s);
        } else {
            for (int j = 0; j < 4; ++j) y[4 * i + j] = (float)q[4 * i + j] * s;
        }
    }
}

template <int B>
__device__ __forceinline__ void turbo_quantize_body(const float* __restrict__ x,
                                                    unsigned char* codes, __half* d,
                                                    long long groups) {
    // two lanes per group of 16, 8 consecutive values each (two float4 loads): a warp reads
    // 1 KiB contiguously, 16 groups per step
    const int lane = threadIdx.x & 31, part = lane & 1;
    const int warps = blockDim.x >> 5;
    const bool vec = aligned(x, 16);
    const long long halves = 2 * groups;
    for (long long h0 = ((long long)blockIdx.x * warps + (threadIdx.x >> 5)) * 32; h0 < halves;
         h0 += (long long)gridDim.x * warps * 32) {
        const long long h = h0 + lane, g = h >> 1;
        const bool live = h < halves;
        float v[8];
        if (live && vec) {
            const float4 a = *reinterpret_cast<const float4*>(x + h * 8);
            const float4 b = *reinterpret_cast<const float4*>(x + h * 8 + 4);
            v[0] = a.x;
            v[1] = a.y;
            v[2] = a.z;
            v[3] = a.w;
            v[4] = b.x;
            v[5] = b.y;
            v[6] = b.z;
            v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = live ? x[h * 8 + j] : 0.0f;
        }
        turbo_group_split<B, 8>(v, part, live, codes + g * 2 * B, d + g);
    }
}

extern "C" __global__ void turbo_quantize_f32(const float* __restrict__ x, unsigned char* codes,
                                              __half* d, long long groups, int bits) {
    switch (bits) {  // block-uniform: each case is a compile-time width
        case 1:
            turbo_quantize_body<1>(x, codes, d, groups);
            break;
        case 2:
            turbo_quantize_body<2>(x, codes, d, groups);
            break;
        case 3:
            turbo_quantize_body<3>(x, codes, d, groups);
            break;
        case 4:
            turbo_quantize_body<4>(x, codes, d, groups);
            break;
        case 5:
            turbo_quantize_body<5>(x, codes, d, groups);
            break;
        case 6:
            turbo_quantize_body<6>(x, codes, d, groups);
            break;
        case 7:
            turbo_quantize_body<7>(x, codes, d, groups);
            break;
        case 8:
            turbo_quantize_body<8>(x, codes, d, groups);
            break;
        default:
            break;
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
                *reinterpret_cast<float4*>(y + g * 16 + j) =
                    make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
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

extern "C" __global__ void bf16_to_f32(const unsigned short* __restrict__ b, float* y,
                                       long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = __uint_as_float((unsigned)b[i] << 16);
}

// ==================================== appends ===============================================
// A warp per (token, kv head) row, grid-stride: kvcache_rows.cuh (first_warp, cache_row).

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

// q8 and turbo appends take both sides (src0 -> side 0 arrays, src1 -> side 1) and `sides`
// (1 or 2): rows r < nb·nkv are side 0's, the next nb·nkv side 1's, so K and V of the same
// kind go in ONE launch (the wrapper passes side 0's arrays twice when sides = 1).

// q8: 4 lanes per group of 32, 8 consecutive values per lane (two float4 loads, one 8-byte
// store of codes); a warp covers 1 KiB of src per step. amax over the 4 lanes by 2 xor-shuffles
// (max is order-free, so the scale is the golden's bit for bit).
extern "C" __global__ void kv_append_q8(const float* __restrict__ src0, signed char* q0, __half* d0,
                                        const float* __restrict__ src1, signed char* q1, __half* d1,
                                        int nb, int nkv, int hd, int max_t, int t0, int sides) {
    const int lane = threadIdx.x & 31, sub = lane & 3;
    const int upr = hd >> 3;  // units of 8 per row
    const long long rows_side = (long long)nb * nkv;
    const long long units = sides * rows_side * upr;
    const bool vec = aligned(src0, 16) && aligned(src1, 16) && aligned(q0, 8) && aligned(q1, 8);
    for (long long u0 = (long long)first_warp() * 32; u0 < units;
         u0 += (long long)warp_stride() * 32) {
        const long long u = u0 + lane;
        const bool live = u < units;
        const long long row = u / upr;
        const int e = (int)(u - row * upr) * 8;  // first value of this lane's 8
        const int side = row >= rows_side ? 1 : 0;
        const int r = (int)(row - side * rows_side);
        const float* x = (side ? src1 : src0) + (long long)r * hd + e;
        float v[8];
        if (live && vec) {
            const float4 a = *reinterpret_cast<const float4*>(x);
            const float4 b = *reinterpret_cast<const float4*>(x + 4);
            v[0] = a.x;
            v[1] = a.y;
            v[2] = a.z;
            v[3] = a.w;
            v[4] = b.x;
            v[5] = b.y;
            v[6] = b.z;
            v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = live ? x[j] : 0.0f;
        }
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
        amax = warp_max(amax, 4);
        __half d16;
        float id;
        group_scale(amax, 127.0f, &d16, &id);
        if (live) {
            const long long crow = cache_row(r, nkv, max_t, t0);
            signed char* qd = (side ? q1 : q0) + crow * hd + e;
            unsigned w[2] = {0u, 0u};
#pragma unroll
            for (int j = 0; j < 8; ++j)
                w[j >> 2] |= (unsigned)(unsigned char)q8_code(v[j], id) << (8 * (j & 3));
            if (vec) {
                *reinterpret_cast<uint2*>(qd) = make_uint2(w[0], w[1]);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) qd[j] = (signed char)(w[j >> 2] >> (8 * (j & 3)));
            }
            if (sub == 0) (side ? d1 : d0)[crow * (hd >> 5) + (e >> 5)] = d16;
        }
    }
}

// turbo: the row in registers in wht.cu's layout (E = max(4, N/32) values per lane, RPW rows
// per warp), rotated by wht_regs<N> + the 1/sqrt(N) scale (bit-identical to gpu.wht), then each
// group of 16 quantized by the 16/E lanes holding it (E >= 16: one or two whole groups per lane).
template <int N, int B>
__device__ __forceinline__ void append_turbo_rows(const float* __restrict__ src0, unsigned char* c0,
                                                  __half* d0, const float* __restrict__ src1,
                                                  unsigned char* c1, __half* d1, int nb, int nkv,
                                                  int max_t, int t0, int sides) {
    constexpr int E = WhtShape<N>::E, L = WhtShape<N>::L, RPW = WhtShape<N>::RPW;
    constexpr int G = N / 16;  // groups per row
    constexpr int PER = E < 16 ? E : 16, GPL = E / PER, GL = 16 / PER;
    constexpr int R = E >= 16 ? 1 : 16 / E;  // row sets per warp step, all loads issued first
    const int lane = threadIdx.x & 31, sub = lane % L, rsub = lane / L;
    const long long rows_side = (long long)nb * nkv, rows = sides * rows_side;
    const bool vec = aligned(src0, 16) && aligned(src1, 16);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)N));
    for (long long g0 = (long long)first_warp() * R; g0 * RPW < rows;
         g0 += (long long)warp_stride() * R) {
        float v[R][E];
        int side[R], r[R];
        bool live[R];
#pragma unroll
        for (int k = 0; k < R; ++k) {
            const long long row = (g0 + k) * RPW + rsub;
            live[k] = row < rows;
            side[k] = row >= rows_side ? 1 : 0;
            r[k] = live[k] ? (int)(row - side[k] * rows_side) : 0;
            const float* x = (side[k] ? src1 : src0) + (long long)r[k] * N + sub * E;
            if (live[k] && vec) {
#pragma unroll
                for (int i = 0; i < E; i += 4) {
                    const float4 t = *reinterpret_cast<const float4*>(x + i);
                    v[k][i] = t.x;
                    v[k][i + 1] = t.y;
                    v[k][i + 2] = t.z;
                    v[k][i + 3] = t.w;
                }
            } else {
#pragma unroll
                for (int i = 0; i < E; ++i) v[k][i] = live[k] ? x[i] : 0.0f;
            }
        }
#pragma unroll
        for (int k = 0; k < R; ++k) {
            wht_regs<N>(v[k], sub);
            const long long crow = cache_row(r[k], nkv, max_t, t0);
            unsigned char* cb = (side[k] ? c1 : c0) + crow * G * 2 * B;
            __half* db = (side[k] ? d1 : d0) + crow * G;
#pragma unroll
            for (int q = 0; q < GPL; ++q) {
                float p[PER];
#pragma unroll
                for (int j = 0; j < PER; ++j) p[j] = __fmul_rn(v[k][q * PER + j], scale);
                const int gi = (sub * E) / 16 + q;  // group within the row
                turbo_group_split<B, PER>(p, sub % GL, live[k], cb + gi * 2 * B, db + gi);
            }
        }
    }
}

template <int N>
__device__ __forceinline__ void append_turbo_n(const float* src0, unsigned char* c0, __half* d0,
                                               const float* src1, unsigned char* c1, __half* d1,
                                               int nb, int nkv, int max_t, int t0, int bits,
                                               int sides) {
    switch (bits) {  // the cache's widths; others are refused by the wrapper
        case 8:
            append_turbo_rows<N, 8>(src0, c0, d0, src1, c1, d1, nb, nkv, max_t, t0, sides);
            break;
        case 4:
            append_turbo_rows<N, 4>(src0, c0, d0, src1, c1, d1, nb, nkv, max_t, t0, sides);
            break;
        case 3:
            append_turbo_rows<N, 3>(src0, c0, d0, src1, c1, d1, nb, nkv, max_t, t0, sides);
            break;
        case 2:
            append_turbo_rows<N, 2>(src0, c0, d0, src1, c1, d1, nb, nkv, max_t, t0, sides);
            break;
        default:
            break;
    }
}

#define KV_APPEND_TURBO(NN)                                                                        \
    extern "C" __global__ void __launch_bounds__(128)                                              \
        kv_append_turbo_n##NN(const float* __restrict__ src0, unsigned char* c0, __half* d0,       \
                              const float* __restrict__ src1, unsigned char* c1, __half* d1,       \
                              int nb, int nkv, int max_t, int t0, int bits, int sides) {           \
        append_turbo_n<NN>(src0, c0, d0, src1, c1, d1, nb, nkv, max_t, t0, bits, sides);           \
    }
KV_APPEND_TURBO(16)
KV_APPEND_TURBO(32)
KV_APPEND_TURBO(64)
KV_APPEND_TURBO(128)
KV_APPEND_TURBO(256)
KV_APPEND_TURBO(512)
KV_APPEND_TURBO(1024)
