// kvcache_tq.cu — the tq-b format on the GPU (golden: qwenref/golden/tq.py): the cache append
// kv_append_tq_n<hd> (rung v1 of tq_append; v0 is kvcache_v0.cu's tq_append_v0), which the
// standalone tq_quantize launches too, and tq_dequantize_f32.

#include <cuda_fp16.h>

#include "kvcache_rows.cuh"
#include "tq_signs.cuh"
#include "wht_regs.cuh"

// =============================== tq-b: rotation, whole-row scale, Lloyd–Max codes ============
// The row in registers in wht.cu's layout (as the turbo append), the signs of layout.tq_signs
// flipped (sign bit XOR: exact), rotated by wht_regs<N> and the float32 1/sqrt(N) (rotate = 1;
// 0 for the standalone tq_quantize, whose rows are rotated already), then golden/tq.py's
// tq_quantize_core over the row's L lanes:
//   ss = sum y_i^2 (float64: each product exact), norm = sqrt(ss), scale = sqrt(N) / norm,
//   u_i = float32(y_i * scale) (float64 product, one rounding), c_i = #{j : u_i > m_j} with m_j
//   the midpoint (C_j + C_{j+1}) / 2 (exact in float64: one bit more than float32), gamma =
//   half(sum y_i C[c_i] / sum C[c_i]^2) (float64 sums, one float64 -> half rounding:
//   cvt.rn.f16.f64); ss = 0: gamma 0, codes 2^(B-1). Golden sums its float64 terms in numpy's
//   order, these in the lanes' order: the sums can differ in their last float64 bit, which moves
//   u's float32 rounding or gamma's float16 rounding only for a value within ~2^-52 relative of
//   a rounding boundary (never met in the tests; none stored differs otherwise).
// Codes: code i at bits [B i, B i + B) of the row's N B / 8 bytes; a lane's E codes are B E
// consecutive bits, stored by the lane itself when they are whole bytes (one 2-, 4-, 8- or
// 16-byte store where the codes are aligned), else (B = 3, E = 4: 12 bits; B = 1: 4) lane pairs
// combine theirs by one shuffle and the even lane stores them.

template <int L>
__device__ __forceinline__ double row_sum(double x) {
#pragma unroll
    for (int m = 1; m < L; m <<= 1) x += __shfl_xor_sync(FULL_MASK, x, m);
    return x;
}

// ---- the code of u: a search over the positive midpoints ----------------------------------------
// The codebook is symmetric (C[NC-1-j] = -C[j], the middle midpoint 0), so with H = NC / 2 and
// P_i = m_{H+i} (i < H - 1, ascending):
//   u > 0:  c = H + #{i : |u| > P_i}
//   u <= 0: c = H - 1 - #{i : |u| >= P_i}      (u = -0 and +0 included: c = H - 1)
// Both counts are one unsigned compare per midpoint on the integer key
//   k = 2 bits(|u|) + (u <= 0), against theta_i = 2 bits(RD(P_i)) + (P_i not a float32):
// float32 bits order like their values, and the extra bit turns > into >= exactly where P_i is a
// float32 (where it is not, no float32 equals it and the two counts agree). key_of gives k;
// above<M> counts the 2^M - 1 thresholds below k by bisection: one compare per level and the
// other half of the candidates dropped by selects (tq4: 3 compares, 4 selects, not 15 compares).
__device__ __forceinline__ unsigned key_of(float u) {
    const unsigned b = __float_as_uint(u);
    return (b << 1) + ((int)b <= 0 ? 1u : 0u);
}

template <int M>
__device__ __forceinline__ unsigned above(unsigned k, const unsigned* th) {
    if constexpr (M == 0) {
        return 0u;
    } else {
        constexpr int HALF = 1 << (M - 1);  // th[HALF - 1] splits the rest into two halves
        const bool up = k > th[HALF - 1];
        unsigned next[HALF > 1 ? HALF - 1 : 1];
#pragma unroll
        for (int j = 0; j < HALF - 1; ++j) next[j] = up ? th[HALF + j] : th[j];
        return (up ? (unsigned)HALF : 0u) + above<M - 1>(k, next);
    }
}

// the low 8 WB bits of (lo, hi) to p, WB-aligned, in one store (little-endian: byte k = bits 8k..)
template <int WB>
__device__ __forceinline__ void store_bits(unsigned char* p, u64 lo, u64 hi) {
    if constexpr (WB == 2) {
        *reinterpret_cast<unsigned short*>(p) = (unsigned short)lo;
    } else if constexpr (WB == 4) {
        *reinterpret_cast<unsigned*>(p) = (unsigned)lo;
    } else if constexpr (WB == 6) {  // 2-byte aligned: three half-words
        unsigned short* q = reinterpret_cast<unsigned short*>(p);
        q[0] = (unsigned short)lo, q[1] = (unsigned short)(lo >> 16),
        q[2] = (unsigned short)(lo >> 32);
    } else if constexpr (WB == 8) {
        *reinterpret_cast<u64*>(p) = lo;
    } else {
        *reinterpret_cast<ulonglong2*>(p) = make_ulonglong2(lo, hi);
    }
}

// A tq row's layout: wht.cu's, but at N = 256 two rows a warp (16 values a lane, 16 lanes a
// row), so the row's sums take one shuffle level fewer and every per-row step (the square root,
// both divisions, the cache row, the stores) serves two rows an instruction.
template <int N>
struct TqShape {
    static constexpr int E = N == 256 ? 16 : WhtShape<N>::E;
    static constexpr int L = N / E, RPW = 32 / L;
    static constexpr bool FMA = true;
};

template <int N, int B>
__device__ __forceinline__ void tq_rows(const float* __restrict__ src0, unsigned char* c0,
                                        __half* g0, const float* __restrict__ src1,
                                        unsigned char* c1, __half* g1,
                                        const float* __restrict__ codebook, int nb, int nkv,
                                        int max_t, int t0, int sides, int rotate) {
    using SH = TqShape<N>;
    constexpr int E = SH::E, L = SH::L, RPW = SH::RPW;
    constexpr int NC = 1 << B, H = NC / 2, BL = B * E;  // codes; half; bits per lane
    constexpr bool PAIR = BL % 8 != 0;  // 12 or 4 bits (E = 4, B = 3 or 1): lane pairs
    constexpr int WB = BL / 8;          // bytes a lane stores (not PAIR)
    constexpr bool WIDE = !PAIR && (WB == 2 || WB == 4 || WB == 6 || WB == 8 || WB == 16);
    // (C, C^2) in float64 (C^2 of a float32 is exact in float64): both sums' terms by one load
    __shared__ double2 s_cc[NC];
    if (threadIdx.x < NC) {
        const double c = codebook[threadIdx.x];
        s_cc[threadIdx.x] = make_double2(c, c * c);
    }
    __syncthreads();
    unsigned th[H > 1 ? H - 1 : 1];  // theta_i (above); constant indices: registers
#pragma unroll
    for (int i = 0; i < H - 1; ++i) {
        const double p = (s_cc[H + i].x + s_cc[H + i + 1].x) * 0.5;
        const float rd = __double2float_rd(p);
        th[i] = 2u * __float_as_uint(rd) + ((double)rd == p ? 0u : 1u);
    }
    const double sqrt_n = __dsqrt_rn((double)N);
    const float wscale = __fdiv_rn(1.0f, __fsqrt_rn((float)N));
    const int lane = threadIdx.x & 31, sub = lane % L, rsub = lane / L;
    unsigned sgn = 0u;  // bit i: the sign of this lane's dim i, the same in every row
#pragma unroll
    for (int i = 0; i < E; ++i) sgn |= (tq_sign_bit(sub * E + i) >> 31) << i;
    asm volatile("" : "+r"(sgn));  // kept in its register: the hashes are not redone per row
    const long long rows_side = (long long)nb * nkv, rows = sides * rows_side;
    const bool vec = aligned(src0, 16) && aligned(src1, 16);
    const bool wide = WIDE && aligned(c0, 16) && aligned(c1, 16);
    for (long long g = first_warp(); g * RPW < rows; g += warp_stride()) {
        const long long row = g * RPW + rsub;
        const bool live = row < rows;
        const int side = row >= rows_side ? 1 : 0;
        const int r = live ? (int)(row - side * rows_side) : 0;
        const float* x = (side ? src1 : src0) + (long long)r * N + sub * E;
        float v[E];
        if (live && vec) {
#pragma unroll
            for (int i = 0; i < E; i += 4) {
                const float4 q = *reinterpret_cast<const float4*>(x + i);
                v[i] = q.x, v[i + 1] = q.y, v[i + 2] = q.z, v[i + 3] = q.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < E; ++i) v[i] = live ? x[i] : 0.0f;
        }
        if (rotate) {
#pragma unroll
            for (int i = 0; i < E; ++i)
                v[i] = __uint_as_float(__float_as_uint(v[i]) ^ ((sgn << (31 - i)) & 0x80000000u));
            wht_regs<N, SH>(v, sub);
#pragma unroll
            for (int i = 0; i < E; ++i) v[i] = __fmul_rn(v[i], wscale);
        }
        double ss = 0.0;
#pragma unroll
        for (int i = 0; i < E; ++i) ss = __fma_rn((double)v[i], (double)v[i], ss);  // exact product
        ss = row_sum<L>(ss);
        const bool zero = ss == 0.0;
        const double scale = zero ? 0.0 : __ddiv_rn(sqrt_n, __dsqrt_rn(ss));
        unsigned c[E];
        double num = 0.0, den = 0.0;
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const unsigned k = key_of(__double2float_rn(__dmul_rn((double)v[i], scale)));
            const unsigned n = above<B - 1>(k, th);
            c[i] = zero ? (unsigned)H : (k & 1u) ? (unsigned)(H - 1) - n : (unsigned)H + n;
            const double2 cc = s_cc[c[i]];
            num = __fma_rn((double)v[i], cc.x, num);  // y C exact in float64: fma = mul + add
            den = __dadd_rn(den, cc.y);
        }
        num = row_sum<L>(num);
        den = row_sum<L>(den);
        u64 lo = 0ull, hi = 0ull;  // this lane's B E bits (<= 128)
#pragma unroll
        for (int i = 0; i < E; ++i) put_bits(lo, hi, c[i], B * i, B);
        if constexpr (PAIR) {  // the even lane takes its neighbour's bits
            const u64 o = __shfl_xor_sync(FULL_MASK, lo, 1);
            lo |= o << BL;
        }
        if (!live) continue;
        const long long crow = cache_row(r, nkv, max_t, t0);
        unsigned char* cb = (side ? c1 : c0) + crow * (N * B / 8);
        if constexpr (PAIR) {
            if ((sub & 1) == 0) {
                unsigned char* p = cb + (sub / 2) * (BL / 4);  // 2 BL bits = BL / 4 bytes
#pragma unroll
                for (int k = 0; k < BL / 4; ++k) p[k] = (unsigned char)(lo >> (8 * k));
            }
        } else {
            unsigned char* p = cb + sub * WB;
            if (wide) {
                store_bits<WB>(p, lo, hi);
            } else {
#pragma unroll
                for (int k = 0; k < WB; ++k)
                    p[k] = (unsigned char)(k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8)));
            }
        }
        if (sub == 0) (side ? g1 : g0)[crow] = __double2half(zero ? 0.0 : __ddiv_rn(num, den));
    }
}

// kv_append_tq_n<N>: K and V (sides = 2) or one side into the [nkv, max_t, N B / 8] codes and
// [nkv, max_t] gamma arrays; codebook = golden's tq_codebook(bits) (float32 [2^bits]). The
// standalone tq_quantize launches it with nkv = 1, max_t = rows, t0 = 0, rotate = 0.
template <int N>
__device__ __forceinline__ void append_tq_n(const float* src0, unsigned char* c0, __half* g0,
                                            const float* src1, unsigned char* c1, __half* g1,
                                            const float* codebook, int nb, int nkv, int max_t,
                                            int t0, int bits, int sides, int rotate) {
    switch (bits) {  // 1..4; others are refused by the wrapper
        case 4:
            tq_rows<N, 4>(src0, c0, g0, src1, c1, g1, codebook, nb, nkv, max_t, t0, sides, rotate);
            break;
        case 3:
            tq_rows<N, 3>(src0, c0, g0, src1, c1, g1, codebook, nb, nkv, max_t, t0, sides, rotate);
            break;
        case 2:
            tq_rows<N, 2>(src0, c0, g0, src1, c1, g1, codebook, nb, nkv, max_t, t0, sides, rotate);
            break;
        case 1:
            tq_rows<N, 1>(src0, c0, g0, src1, c1, g1, codebook, nb, nkv, max_t, t0, sides, rotate);
            break;
        default:
            break;
    }
}

// rows of 512 and 1024 hold 16 and 32 values a lane: built for one block an SM, so that ptxas gives
// them the registers they need; 256 (16 a lane, two rows a warp): TQ_MINB_256 blocks, 6 (80
// registers) measured faster than 3, 4 or 8 (docs/tuning-log.md); the others eight, 64 registers
#ifndef TQ_MINB_256
#define TQ_MINB_256 6
#endif
#define KV_APPEND_TQ(NN)                                                                           \
    extern "C" __global__ void __launch_bounds__(128, NN >= 512   ? 1                              \
                                                      : NN == 256 ? TQ_MINB_256                    \
                                                                  : 8)                             \
        kv_append_tq_n##NN(const float* __restrict__ src0, unsigned char* c0, __half* g0,          \
                           const float* __restrict__ src1, unsigned char* c1, __half* g1,          \
                           const float* codebook, int nb, int nkv, int max_t, int t0, int bits,    \
                           int sides, int rotate) {                                                \
        append_tq_n<NN>(src0, c0, g0, src1, c1, g1, codebook, nb, nkv, max_t, t0, bits, sides,     \
                        rotate);                                                                   \
    }
KV_APPEND_TQ(16)
KV_APPEND_TQ(32)
KV_APPEND_TQ(64)
KV_APPEND_TQ(128)
KV_APPEND_TQ(256)
KV_APPEND_TQ(512)
KV_APPEND_TQ(1024)

// tq_dequantize_f32: one thread per row of n values (n B / 8 bytes): C[c_i] * float32(gamma)
extern "C" __global__ void tq_dequantize_f32(const unsigned char* __restrict__ codes,
                                             const __half* __restrict__ gamma,
                                             const float* __restrict__ codebook, float* y,
                                             long long rows, int n, int bits) {
    __shared__ float s_cb[16];
    if (threadIdx.x < (1 << bits)) s_cb[threadIdx.x] = codebook[threadIdx.x];
    __syncthreads();
    const long long nbytes = (long long)n * bits / 8;
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (long long)gridDim.x * blockDim.x) {
        const unsigned char* p = codes + r * nbytes;
        const float g = __half2float(gamma[r]);
        for (int i = 0; i < n; ++i) {
            const int s = bits * i;  // the code's bits may straddle two bytes (bits = 3)
            unsigned w = p[s >> 3];
            if ((s & 7) + bits > 8) w |= (unsigned)p[(s >> 3) + 1] << 8;
            y[r * n + i] = __fmul_rn(s_cb[(w >> (s & 7)) & ((1u << bits) - 1u)], g);
        }
    }
}
