// kv_tile.cuh — the tile loaders of the tensor-core partials (attention_mma.cu): one per stored
// side kind, turning a K or V tile in shared memory into mma.m16n8k16 A fragments. The kernel
// body is written once over them; a loader says how many bytes a token row holds, where its
// scales are, and how its codes become fp16 / bf16 operands.
//
// Layouts (qwenref/golden/kvcache.py; per kv head and token):
//   q8      int8 [hd], half scales [hd/32]                     value  q * d
//   bf16    bf16 [hd]                                          value  the bits
//   turboN  codes [hd/16][2N bytes], half scales [hd/16]       value  (c - (2^N - 1)/2) * d
//           code i of a group at bits [N*i, N*i + N) of the group's 2N little-endian bytes
//   tqB     codes [hd*B/8], half gamma [1]                        value  C[c] * gamma (codebook C)
//
// K fragments (A = K rows, 16 tokens x 16 dims per k-step). Any permutation of the dims inside a
// k-step gives the same dot product as long as q's B fragments use the same one: the int8 and
// turbo loaders give thread tig the dims 4tig..4tig+3 of each k-step (PERM: their bits sit
// together), bf16 the natural order of ldmatrix (b0 = dims 2tig, 2tig+1; b1 = 2tig+8, 2tig+9).
// K operands are exact: int8 and bf16 as they are, turbo codes as the half-integers c - (2^N-1)/2
// (turbo2/3/4 times a power of two that q's dim carries inverted: qf); the scale multiplies the
// fp32 sum of each scale group afterwards.
//
// V fragments (A = V^T, 16 dims x 16 tokens): a unit of 32 dims is two m-tiles. The rows of an
// m-tile map to dims by the loader (V_PAIR: rows gid and gid+8 are two adjacent dims, so the
// output is written as float2). V' = fp16(value) with one rounding for the scaled kinds (the
// scale folded into the operand), exact for bf16, whose P goes in as bf16 hi + lo instead.
//
// Code -> fp16 without a conversion instruction: OR a code c, placed at bit o of a 16-bit half,
// into 0x6400 (fp16 1024, whose last mantissa bit is worth 1) gives 1024 + c * 2^o exactly (one
// LOP3: the mask an immediate, 0x6400 6400 a register). K then subtracts 1024 + h * 2^o (h =
// (2^N - 1) / 2) with one HADD2, exact: (c - h) * 2^o, the 2^o undone by q, whose dims are
// scaled by 2^-o (qf below; exact). Every K code sits at o >= 1, where 1024 + h * 2^o fits fp16's
// 11 significant bits (at o = 0, 1031.5 does not). V subtracts 1024 + 2^(N-1) (o = 0: c - 2^(N-1),
// exact) and folds the remaining +1/2 into its scale: V' = fma(c - 2^(N-1), d, d/2), one rounding.
#ifndef QWENREF_KV_TILE_CUH
#define QWENREF_KV_TILE_CUH

#include <cuda_fp16.h>

#include "attention.cuh"
#include "attention_mma.cuh"
#include "mma_ptx.cuh"

namespace mma_attn {

// ---- where a token row of a stage sits in shared memory -----------------------------------------
// Rows of NCH 16-byte chunks. A side read by ldmatrix (LDSM) with NCH a multiple of 8 stores chunk
// c of token t at c ^ (t & 7): eight tokens reading the same chunk hit eight different bank
// groups. Otherwise the row stride is padded to an odd number of chunks, which spreads eight
// consecutive tokens over the banks the same way and keeps every address of a token row its
// base plus a constant (the word loads of the narrow turbo K loaders fold it into the LDS).
template <int ROWB, bool LDSM = true>
struct RowLayout {
    static_assert(ROWB % 16 == 0, "a token row is whole 16-byte chunks");
    static constexpr int NCH = ROWB / 16;
    static constexpr bool SWZ = LDSM && NCH % 8 == 0;
    static constexpr int RS = 16 * (SWZ ? NCH : (NCH | 1));  // row stride in shared memory
    static __device__ __forceinline__ int chunk(int t, int c) { return SWZ ? (c ^ (t & 7)) : c; }
    // byte offset of byte b of token t's row, from the stage's first row
    static __device__ __forceinline__ int at(int t, int b) {
        return t * RS + (chunk(t, b >> 4) << 4) + (b & 15);
    }
};

__device__ __forceinline__ unsigned lds32(const unsigned char* p) {
    return *reinterpret_cast<const unsigned*>(p);
}
__device__ __forceinline__ unsigned h2(__half2 x) { return *reinterpret_cast<unsigned*>(&x); }
__device__ __forceinline__ __half2 as_h2(unsigned x) { return *reinterpret_cast<__half2*>(&x); }
// (x & MASK) | magic in one LOP3 (written in C++, the two constants make it two)
template <unsigned MASK>
__device__ __forceinline__ unsigned lop_or_magic(unsigned x, unsigned magic) {
    unsigned r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(MASK), "r"(magic));
    return r;
}
// fp16 bits of an exact value (integers and half-integers here), for HADD2 immediates
__host__ __device__ constexpr unsigned half_bits(double v) {
    unsigned sign = v < 0 ? 0x8000u : 0u;
    double a = v < 0 ? -v : v;
    int e = 0;
    while (a >= 2.0) a /= 2.0, ++e;
    while (a < 1.0) a *= 2.0, --e;
    return sign | unsigned((e + 15) << 10) | unsigned((a - 1.0) * 1024.0);
}
// x (a half2 of magic-placed codes) minus (off_lo, off_hi) in one HADD2 whose constant is an
// immediate: off = 1024 + (the code offset) * 2^o must be exact in fp16, so the result is too
__device__ __forceinline__ __half2 sub_magic(unsigned x, double off_lo, double off_hi) {
    return __hadd2(as_h2(x), as_h2(half_bits(-off_lo) | (half_bits(-off_hi) << 16)));
}

// The A fragments of k-steps 2gi, 2gi+1 from one ldmatrix.x4 of byte codes (q8, turbo8): r0..r3
// hold (tokens 0-7 | 8-15) x (chunk 2gi | 2gi+1); cvt(x, sel) turns bytes sel of x into a half2.
template <class Cvt>
__device__ __forceinline__ void byte_k_frags(unsigned r0, unsigned r1, unsigned r2, unsigned r3,
                                             Cvt cvt, unsigned (&a)[2][4]) {
    a[0][0] = cvt(r0, 0x0504);
    a[0][1] = cvt(r1, 0x0504);
    a[0][2] = cvt(r0, 0x0706);
    a[0][3] = cvt(r1, 0x0706);
    a[1][0] = cvt(r2, 0x0504);
    a[1][1] = cvt(r3, 0x0504);
    a[1][2] = cvt(r2, 0x0706);
    a[1][3] = cvt(r3, 0x0706);
}

// ---- K loaders --------------------------------------------------------------------------------
// frags(tile, gi, a): A fragments of dims [32 gi, 32 gi + 32) (k-steps 2gi and 2gi+1) of the
// warp's 16 tokens; tile = the stage row of the warp's first token (generic and shared-space
// address). KPS: k-steps per scale (the fp32 sum of that many k-steps is multiplied by one
// token scale; 0 = no scale). qpos(d): where dim d sits in the k order; QPAIR: the distance
// between the two dims of one half2 of q (1: dims d, d + 1; tq2's K: d, d + 2).

struct KQ8 {
    static constexpr int ROWB = HD, SC = HD / 32, KPS = 2, TQB = 0;
    static constexpr bool PERM = true, BF16 = false, ROT = false, SIGNS = false, ROW_SCALE = false;
    __host__ __device__ static constexpr float qf(int) { return 1.f; }
    __host__ __device__ static constexpr int qpos(int d) { return d; }
    static constexpr int QPAIR = 1;
    using RL = RowLayout<ROWB>;
    int lrow, lch;
    __device__ KQ8(int lane, const unsigned*)
        : lrow((lane & 7) + ((lane >> 3) & 1) * 8), lch(lane >> 4) {}
    __device__ __forceinline__ void frags(const unsigned char*, unsigned tile, int gi,
                                          unsigned (&a)[2][4]) const {
        unsigned r0, r1, r2, r3;
        ldsm_x4(tile + lrow * RL::RS + (RL::chunk(lrow, 2 * gi + lch) << 4), r0, r1, r2, r3);
        const unsigned f = 0x80808080u;
        byte_k_frags(r0 ^ f, r1 ^ f, r2 ^ f, r3 ^ f, i8x2_to_h2, a);
    }
};

struct KBf16 {
    static constexpr int ROWB = 2 * HD, SC = 0, KPS = 0, TQB = 0;
    static constexpr bool PERM = false, BF16 = true, ROT = false, SIGNS = false, ROW_SCALE = false;
    __host__ __device__ static constexpr float qf(int) { return 1.f; }
    __host__ __device__ static constexpr int qpos(int d) { return d; }
    static constexpr int QPAIR = 1;
    using RL = RowLayout<ROWB>;
    int lrow, lch;
    __device__ KBf16(int lane, const unsigned*)
        : lrow((lane & 7) + ((lane >> 3) & 1) * 8), lch(lane >> 4) {}
    __device__ __forceinline__ void frags(const unsigned char*, unsigned tile, int gi,
                                          unsigned (&a)[2][4]) const {
        // k-step ks = 16 dims = chunks 2ks, 2ks+1; matrices (tokens 0-7 | 8-15) x (chunk +0 | +1)
        // are a0..a3 as they are
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int ch = 2 * (2 * gi + k) + lch;
            ldsm_x4(tile + lrow * RL::RS + (RL::chunk(lrow, ch) << 4), a[k][0], a[k][1], a[k][2],
                    a[k][3]);
        }
    }
};

// turbo K: thread tig takes codes 4tig..4tig+3 of each group (PERM); a group is one k-step and
// has its own scale (KPS = 1). N = 2, 3, 4: code i of the four (dim % 4 = i) lands at bit o(i)
// of its half (o >= 1, see above) and q's dim is scaled by qf(i) = 2^-o(i).
template <int N>
struct KTurbo {
    static_assert(N == 2 || N == 3 || N == 4 || N == 8, "turbo K: N in {2, 3, 4, 8}");
    static constexpr int ROWB = HD * N / 8, SC = HD / 16, KPS = 1, TQB = 0;
    static constexpr bool PERM = true, BF16 = false, ROT = true, SIGNS = false, ROW_SCALE = false;
    using RL = RowLayout<ROWB, N == 8>;
    static constexpr double H = ((1 << N) - 1) / 2.0;  // the code offset
    // N = 4: (y << 1, y >> 7) & 0x01E0001E -> bits 1, 5; N = 2: (y << 1) & 0x00180006 -> 1, 3
    // and y & 0x00C00030 -> 4, 6; N = 3: (y, y >> 6) & 0x0038000E -> 1, 3
    __host__ __device__ static constexpr int o(int i) {
        return N == 4   ? (i % 2 ? 5 : 1)
               : N == 2 ? (i == 0   ? 1
                           : i == 1 ? 3
                           : i == 2 ? 4
                                    : 6)
               : N == 3 ? (i % 2 ? 3 : 1)
                        : 0;
    }
    __host__ __device__ static constexpr float qf(int i) { return 1.0f / float(1 << o(i)); }
    __host__ __device__ static constexpr int qpos(int d) { return d; }
    static constexpr int QPAIR = 1;
    int gid, tig, lrow, lch;
    unsigned sel;        // N = 4: PRMT of the thread's two bytes; N = 2: its byte, twice
    int woff[2], sh[2];  // N = 3: word and shift of the thread's 12 bits in group 2gi + k
    unsigned magic;
    __device__ KTurbo(int lane, const unsigned*)
        : gid(lane >> 2),
          tig(lane & 3),
          lrow((lane & 7) + ((lane >> 3) & 1) * 8),
          lch(lane >> 4),
          magic(0x64006400u) {
        if constexpr (N == 4) {
            const int b = 2 * (tig & 1);  // the thread's 16 bits: bytes b, b+1 of its word
            sel = b | ((b + 1) << 4) | (b << 8) | ((b + 1) << 12);
        } else if constexpr (N == 2) {
            sel = tig | (tig << 8);
        } else if constexpr (N == 3) {
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const int p = 48 * k + 12 * tig;  // bit of the thread's field from group 2gi
                woff[k] = 4 * (p >> 5);
                sh[k] = p & 31;
            }
        }
    }
    // the register of codes (i, i + 1) at their bits -> (c - H) * 2^o, exact
    static __device__ __forceinline__ unsigned op(unsigned x, int i) {
        return h2(sub_magic(x, 1024.0 + H * (1 << o(i)), 1024.0 + H * (1 << o(i + 1))));
    }
    __device__ __forceinline__ void frags(const unsigned char* tile, unsigned tile_u32, int gi,
                                          unsigned (&a)[2][4]) const {
        if constexpr (N == 8) {
            // a 16-byte chunk is one group: as q8, unsigned codes, each chunk its own k-step
            unsigned r0, r1, r2, r3;
            ldsm_x4(tile_u32 + lrow * RL::RS + (RL::chunk(lrow, 2 * gi + lch) << 4), r0, r1, r2,
                    r3);
            const __half2 s = __float2half2_rn(1152.f), h = __float2half2_rn(0.5f);
            auto op8 = [&](unsigned x, unsigned sl) {
                const unsigned u = __byte_perm(0x64646464u, x, sl);
                return h2(__hadd2(__hsub2(as_h2(u), s), h));
            };
            byte_k_frags(r0, r1, r2, r3, op8, a);
        } else {
#pragma unroll
            for (int k = 0; k < 2; ++k)
#pragma unroll
                for (int r = 0; r < 2; ++r) {  // tokens gid, gid + 8
                    const int t = gid + 8 * r;
                    unsigned lo, hi;  // codes (0, 1) and (2, 3) of the thread's four
                    if constexpr (N == 4) {
                        const unsigned w =
                            lds32(tile + RL::at(t, 16 * gi + 8 * k + 4 * (tig >> 1)));
                        const unsigned y = __byte_perm(w, w, sel);  // bytes (b0, b1, b0, b1)
                        lo = lop_or_magic<0x01E0001Eu>(y << 1, magic);
                        hi = lop_or_magic<0x01E0001Eu>(y >> 7, magic);
                    } else if constexpr (N == 2) {
                        const unsigned w = lds32(tile + RL::at(t, 8 * gi + 4 * k));
                        const unsigned y = __byte_perm(w, w, sel);  // the byte at 0 and 16
                        lo = lop_or_magic<0x00180006u>(y << 1, magic);
                        hi = lop_or_magic<0x00C00030u>(y, magic);
                    } else {  // N == 3: 12 bits, possibly across two words
                        const unsigned char* row = tile + RL::at(t, 0);
                        const unsigned w0 = lds32(row + 12 * gi + woff[k]);
                        const unsigned w1 = lds32(row + 12 * gi + woff[k] + 4);
                        const unsigned x = __funnelshift_r(w0, w1, sh[k]) & 0xFFFu;
                        const unsigned y = x * 0x00010002u;  // x << 1 | x << 16, disjoint
                        lo = lop_or_magic<0x0038000Eu>(y, magic);
                        hi = lop_or_magic<0x0038000Eu>(y >> 6, magic);
                    }
                    a[k][r] = op(lo, 0);
                    a[k][2 + r] = op(hi, 2);
                }
        }
    }
};

// ---- V loaders --------------------------------------------------------------------------------
// frags(step, su, u, ds, a): the two m-tiles of dim unit u (dims [32u, 32u + 32)) for the 16
// tokens of a P.V step (step / su: the stage row of its first token, generic and shared-space
// address), scaled by ds (Scales below). dim(u, j): the dim of row gid of m-tile j; row gid + 8
// holds dim(u, j) + (V_PAIR ? 1 : 8).
//
// V scales of a step: the NSG scale groups of a unit this thread needs (group(u, j, ...) for
// j < NSG); for each, its half2s of tokens (2tig, 2tig+1) and (2tig+8, 2tig+9), and half of each
// (V' = fma(x, d, d/2)).
struct VScales {
    unsigned d01[2], d89[2];
    __half2 h01[2], h89[2];
};

struct VQ8 {
    static constexpr int ROWB = HD, SC = HD / 32, NSG = 1, TQB = 0;
    static constexpr bool V_PAIR = true, BF16 = false, ROW_SCALE = false;
    using RL = RowLayout<ROWB>;
    int lrow, lch, gid;
    __device__ VQ8(int lane, const unsigned*)
        : lrow((lane & 7) + ((lane >> 3) & 1) * 8), lch(lane >> 4), gid(lane >> 2) {}
    static __device__ __forceinline__ int group(int u, int, int) { return u; }
    __device__ __forceinline__ int dim(int u, int j) const { return 32 * u + 16 * j + 2 * gid; }
    __device__ __forceinline__ void frags(const unsigned char*, unsigned su, int u,
                                          const VScales& ds, unsigned (&a)[2][4]) const {
        unsigned r0, r1, r2, r3;
        ldsm_x4_t(su + lrow * RL::RS + (RL::chunk(lrow, 2 * u + lch) << 4), r0, r1, r2, r3);
        r0 ^= 0x80808080u;
        r1 ^= 0x80808080u;
        r2 ^= 0x80808080u;
        r3 ^= 0x80808080u;
        a[0][0] = i8x2_to_h2_scaled(r0, 0x0604, ds.d01[0]);
        a[0][1] = i8x2_to_h2_scaled(r0, 0x0705, ds.d01[0]);
        a[0][2] = i8x2_to_h2_scaled(r1, 0x0604, ds.d89[0]);
        a[0][3] = i8x2_to_h2_scaled(r1, 0x0705, ds.d89[0]);
        a[1][0] = i8x2_to_h2_scaled(r2, 0x0604, ds.d01[0]);
        a[1][1] = i8x2_to_h2_scaled(r2, 0x0705, ds.d01[0]);
        a[1][2] = i8x2_to_h2_scaled(r3, 0x0604, ds.d89[0]);
        a[1][3] = i8x2_to_h2_scaled(r3, 0x0705, ds.d89[0]);
    }
};

struct VBf16 {
    static constexpr int ROWB = 2 * HD, SC = 0, NSG = 0, TQB = 0;
    static constexpr bool V_PAIR = false, BF16 = true, ROW_SCALE = false;
    using RL = RowLayout<ROWB>;
    int vrow, vch, gid;
    // ldmatrix.trans matrices (tokens 0-7, dims +0) (tokens 0-7, dims +8) (tokens 8-15, +0)
    // (tokens 8-15, +8) are the A fragment's four registers as they are
    __device__ VBf16(int lane, const unsigned*)
        : vrow((lane & 7) + ((lane >> 4) & 1) * 8), vch((lane >> 3) & 1), gid(lane >> 2) {}
    static __device__ __forceinline__ int group(int, int, int) { return 0; }
    __device__ __forceinline__ int dim(int u, int j) const { return 32 * u + 16 * j + gid; }
    __device__ __forceinline__ void frags(const unsigned char*, unsigned su, int u, const VScales&,
                                          unsigned (&a)[2][4]) const {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int ch = 4 * u + 2 * j + vch;
            ldsm_x4_t(su + vrow * RL::RS + (RL::chunk(vrow, ch) << 4), a[j][0], a[j][1], a[j][2],
                      a[j][3]);
        }
    }
};

// turbo V. N = 8: as q8 (chunk 2u + j is group 2u + j, m-tile j). N = 2, 3, 4: thread gid takes
// dims 4gid..4gid+3 of the unit (one group: 2u + gid / 4): m-tile j rows gid, gid + 8 are dims
// 4gid + 2j, 4gid + 2j + 1. N = 4 reads them with ldmatrix.trans (a 16-byte chunk is one unit:
// thread gid receives bytes 2gid, 2gid+1 of tokens 2tig, 2tig+1 in one register); N = 2, 3 read
// words and pair the two tokens with a PRMT. Either way code i of the four sits at bits N*i of
// each token's half, shifted down to bit 0 (o = 0) before the LOP3.
template <int N>
struct VTurbo {
    static_assert(N == 2 || N == 3 || N == 4 || N == 8, "turbo V: N in {2, 3, 4, 8}");
    static constexpr int ROWB = HD * N / 8, SC = HD / 16, NSG = N == 8 ? 2 : 1, TQB = 0;
    static constexpr bool V_PAIR = true, BF16 = false, ROW_SCALE = false;
    using RL = RowLayout<ROWB, N == 8 || N == 4>;
    static constexpr unsigned MASK = (N == 2) ? 0x00030003u : (N == 3 ? 0x00070007u : 0x000F000Fu);
    int lrow, lch, gid, tig;
    unsigned sel;  // N = 2: the thread's byte of both tokens
    int woff, sh;  // N = 3: word and shift of the thread's 12 bits
    unsigned magic;
    __device__ VTurbo(int lane, const unsigned*)
        : lrow((lane & 7) + ((lane >> 3) & 1) * 8),
          lch(lane >> 4),
          gid(lane >> 2),
          tig(lane & 3),
          magic(0x64006400u) {
        if constexpr (N == 2) {
            const int b = gid & 3;
            sel = b | (b << 4) | ((4 + b) << 8) | ((4 + b) << 12);
        } else if constexpr (N == 3) {
            const int p = 12 * gid;
            woff = 4 * (p >> 5);
            sh = p & 31;
        }
    }
    // the scale group of m-tile j of unit u for this thread
    __device__ __forceinline__ int group(int u, int j, int) const {
        return N == 8 ? 2 * u + j : 2 * u + (gid >> 2);
    }
    __device__ __forceinline__ int dim(int u, int j) const {
        return N == 8 ? 32 * u + 16 * j + 2 * gid : 32 * u + 4 * gid + 2 * j;
    }
    // code i of both tokens (bits N*i of each half of y) -> V' = fma(c - 2^(N-1), d, d/2)
    __device__ __forceinline__ unsigned v_op(unsigned y, int i, __half2 d, __half2 dh) const {
        const unsigned x = lop_or_magic<MASK>(y >> (N * i), magic);
        const double off = 1024.0 + (1 << (N - 1));
        return h2(__hfma2(sub_magic(x, off, off), d, dh));
    }
    // N = 2, 3, 4: y[p] = the thread's N * 4 bits of token pair p ((2tig, 2tig+1), (2tig+8,
    // 2tig+9)) of unit u, the first token's in bits [0, 16), the second's in [16, 32)
    __device__ __forceinline__ void token_codes(const unsigned char* step, unsigned su, int u,
                                                unsigned (&y)[2]) const {
        if constexpr (N == 4) {
            ldsm_x2_t(su + lrow * RL::RS + (RL::chunk(lrow, u) << 4), y[0], y[1]);
        } else {
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int t0 = 2 * tig + 8 * p, t1 = t0 + 1;
                if constexpr (N == 2) {
                    const int b = 8 * u + 4 * (gid >> 2);
                    y[p] =
                        __byte_perm(lds32(step + RL::at(t0, b)), lds32(step + RL::at(t1, b)), sel);
                } else {
                    auto field = [&](int t) {
                        const unsigned char* w = step + RL::at(t, 0) + 12 * u + woff;
                        return __funnelshift_r(lds32(w), lds32(w + 4), sh) & 0xFFFu;
                    };
                    y[p] = __byte_perm(field(t0), field(t1), 0x5410);
                }
            }
        }
    }
    __device__ __forceinline__ void frags(const unsigned char* step, unsigned su, int u,
                                          const VScales& ds, unsigned (&a)[2][4]) const {
        if constexpr (N == 8) {
            unsigned r0, r1, r2, r3;
            ldsm_x4_t(su + lrow * RL::RS + (RL::chunk(lrow, 2 * u + lch) << 4), r0, r1, r2, r3);
            const __half2 s = __float2half2_rn(1152.f);
            auto op = [&](unsigned x, unsigned sl, int j, bool hi) {
                const unsigned h = __byte_perm(0x64646464u, x, sl);
                const __half2 c = __hsub2(as_h2(h), s);
                return hi ? h2(__hfma2(c, as_h2(ds.d89[j]), ds.h89[j]))
                          : h2(__hfma2(c, as_h2(ds.d01[j]), ds.h01[j]));
            };
            a[0][0] = op(r0, 0x0604, 0, false);
            a[0][1] = op(r0, 0x0705, 0, false);
            a[0][2] = op(r1, 0x0604, 0, true);
            a[0][3] = op(r1, 0x0705, 0, true);
            a[1][0] = op(r2, 0x0604, 1, false);
            a[1][1] = op(r2, 0x0705, 1, false);
            a[1][2] = op(r3, 0x0604, 1, true);
            a[1][3] = op(r3, 0x0705, 1, true);
        } else {
            unsigned y[2];
            token_codes(step, su, u, y);
            const __half2 d01 = as_h2(ds.d01[0]), d89 = as_h2(ds.d89[0]);
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const __half2 d = p ? d89 : d01;
                const __half2 dh = p ? ds.h89[0] : ds.h01[0];
                a[0][2 * p] = v_op(y[p], 0, d, dh);
                a[0][2 * p + 1] = v_op(y[p], 1, d, dh);
                a[1][2 * p] = v_op(y[p], 2, d, dh);
                a[1][2 * p + 1] = v_op(y[p], 3, d, dh);
            }
        }
    }
};

// ---- tq-b (tq4, tq3, tq2): codebook values by a table in shared memory ------------------------
// A tq code is an index into the B-bit Lloyd-Max codebook C (golden/tq.py), one float16 scale
// gamma per token and side. gamma multiplies the fp32 score of a token (K) and its P (V: P' =
// fp16(p 2^PS gamma)); the codes of a token are read as turbo's of the same width (K: the
// thread's codes of a k-step, PERM; V: the thread's four dims of a unit for two tokens,
// VTurbo<B>::token_codes). The table holds fp16(f C) (f: gpu.kvcache.tq_fp16_scale).
//
// tq4, tq3: two codes (a, b) of 2B bits index a half2 (C[a], C[b]): 2^(2B) entries (256, 64),
// each replicated in the 32 banks (entry e at byte 128 e + 4 lane), so the random indices of a
// warp never collide. A lookup costs two instructions besides the LDS: the index at bit f of a
// register becomes its byte offset 128 e + 4 lane by a rotation that puts bit f at bit 7 (SHF.W)
// and one LOP3 (mask the 2B bits, OR the lane's 4 lane); the table's base is the LDS's uniform
// operand.
// tq2 with -DMMA_TQ2_QUAD=1 (pairs without it): four codes (8 bits) index two half2, (C[e0],
// C[e2]) and (C[e1], C[e3]) for the codes e_i at bits 2i: 256 entries of 8 bytes, each
// replicated 16 times (entry e at byte 128 e + 8 (lane % 16): a 64-bit LDS serves a half-warp at
// a time, whose 16 lanes then hit distinct banks). The same three instructions give two fragment
// registers: the pair (x, y) of one LDS.64, which is where an mma operand wants them (a0 a1, or
// a2 a3). 32 KB, as tq4's pair table.
template <int B>
struct TqTable {
    static constexpr bool QUAD = B == 2 && MMA_TQ2_QUAD;
    static constexpr unsigned M2 = (1u << (2 * B)) - 1;
    static constexpr int ENTRIES = QUAD ? 256 : 1 << (2 * B), BYTES = 128 * ENTRIES;
    const unsigned char* base;  // entry 0, lane 0 (shared memory)
    unsigned lane_off;
    __device__ TqTable(int lane, const unsigned* table)
        : base(reinterpret_cast<const unsigned char*>(table)),
          lane_off(QUAD ? 8u * (lane & 15) : 4u * lane) {}
    // tq4, tq3: the half2 of the pair index at bits [f, f + 2B) of x (f a compile-time constant)
    template <int F>
    __device__ __forceinline__ unsigned at(unsigned x) const {
        const unsigned off = lop_or_magic<(M2 << 7)>(__funnelshift_l(x, x, (7 - F) & 31), lane_off);
        return *reinterpret_cast<const unsigned*>(base + off);
    }
    // tq2: the two half2 of the quad index at bits [f, f + 8) of x
    template <int F>
    __device__ __forceinline__ uint2 quad(unsigned x) const {
        const unsigned off =
            lop_or_magic<(0xFFu << 7)>(__funnelshift_l(x, x, (7 - F) & 31), lane_off);
        return *reinterpret_cast<const uint2*>(base + off);
    }
    // the table from the codebook cb (f C, float32), the CTA's threads striding over its words
    // (pairs) or its 16-byte chunks (quads: two copies of an entry)
    static __device__ __forceinline__ void fill(unsigned* table, const float* cb, int tid, int nt) {
        constexpr int NC = 1 << B;
        if constexpr (QUAD) {
            for (int i = tid; i < ENTRIES * 8; i += nt) {
                const int e = i >> 3;
                uint4 w;
                w.x = w.z = pack_h2(cb[e & 3], cb[(e >> 4) & 3]);
                w.y = w.w = pack_h2(cb[(e >> 2) & 3], cb[e >> 6]);
                reinterpret_cast<uint4*>(table)[i] = w;
            }
        } else {
            for (int i = tid; i < ENTRIES * 32; i += nt) {
                const int e = i >> 5;
                table[i] = pack_h2(cb[e & (NC - 1)], cb[e >> B]);
            }
        }
    }
};

// (a & MASK) | (b & ~MASK) in one LOP3
template <unsigned MASK>
__device__ __forceinline__ unsigned bit_select(unsigned a, unsigned b) {
    unsigned r;
    asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(r) : "r"(a), "r"(b), "n"(MASK));
    return r;
}

// K: thread tig takes in k-steps 2gi and 2gi + 1 the eight dims 32gi + 8tig + i, so its codes of
// both k-steps of a gi sit together (4B bits from bit 32B gi + 8B tig: a word for tq4, a
// half-word for tq2, 24 bits across two words for tq3): one load (two for tq3) gives them all.
// tq4, tq3: dim i = 4k + j takes k-index j of the thread's four in k-step 2gi + k (j 0-1 the
// pair at 2tig, j 2-3 the pair at 2tig + 8), four pair lookups a token; tq2 too, but with
// -DMMA_TQ2_QUAD=1 (TqTable) one quad lookup
// gives a pair of BOTH tokens of the thread (gid, gid + 8), the registers a[k][0..1] or
// a[k][2..3]: the two tokens' codes are interleaved (one shift and one bit-select for two
// quads), and a pair holds dims i and i + 2 (j 0-1: i 0, 2; j 2-3: i 1, 3; k-step 2gi + 1: i + 4).
// qpos tells prepare_q where a dim sits (k-step 2gi + k, thread tig, j), so q's fragments match.
// Rows of whole multiples of 8 chunks (tq4 at hd 256) are swizzled, not padded: a thread's chunk
// gi of token gid + 8r is then gi ^ gid (one LOP3 a gi), and the 2 KB of padding saved is what
// lets three CTAs share an SM (75,568 B of shared memory each).
template <int B>
struct KTq {
    static_assert(B == 2 || B == 3 || B == 4, "tq K: B in {2, 3, 4}");
    static constexpr int ROWB = HD * B / 8, SC = 1, KPS = 0, TQB = B;
    static constexpr bool PERM = true, BF16 = false, ROT = true, SIGNS = true, ROW_SCALE = true;
    __host__ __device__ static constexpr float qf(int) { return 1.f; }
    // 32gi + 8tig + 4k + i' -> 32gi + 16k + 4tig + j; j = i' (tq4, tq3), i' = 2 (j % 2) + j / 2
    // (tq2)
    static constexpr bool QUAD = TqTable<B>::QUAD;
    __host__ __device__ static constexpr int qpos(int d) {
        return (d & ~31) | ((d & 4) << 2) | ((d & 24) >> 1) |
               (QUAD ? ((d & 2) >> 1) | ((d & 1) << 1) : (d & 3));
    }
    static constexpr int QPAIR = QUAD ? 2 : 1;
    using RL = RowLayout<ROWB, true>;
    int gid, woff, sh;  // the byte (tq3: word) and bit where the thread's codes of a gi start
    TqTable<B> tab;
    __device__ KTq(int lane, const unsigned* table) : gid(lane >> 2), tab(lane, table) {
        const int tig = lane & 3;
        if constexpr (B == 4) {  // word tig of the gi's 16 bytes, all of it
            woff = 4 * tig;
            sh = 0;
        } else if constexpr (B == 2) {  // half-word tig of the gi's 8 bytes
            woff = 2 * tig;
            sh = 0;
        } else {  // 24 bits at bit 24tig of the gi's 12 bytes
            woff = 4 * ((24 * tig) >> 5);
            sh = (24 * tig) & 31;
        }
    }
    __device__ __forceinline__ void frags(const unsigned char* tile, unsigned, int gi,
                                          unsigned (&a)[2][4]) const {
        if constexpr (QUAD) {
            const int b = 4 * B * gi + woff;  // the thread's half-word of the gi's 8 bytes
            const unsigned x0 = *reinterpret_cast<const unsigned short*>(tile + RL::at(gid, b));
            const unsigned x1 = *reinterpret_cast<const unsigned short*>(tile + RL::at(gid + 8, b));
            // x0, x1: code i of token gid, gid + 8 at bit 2i. w: codes 2m of both tokens in
            // nibble m (gid at bit 4m, gid + 8 at 4m + 2); w2: codes 2m + 1
            const unsigned w = bit_select<0x33333333u>(x0, x1 << 2);
            const unsigned w2 = bit_select<0x33333333u>(x0 >> 2, x1);
            const uint2 k0 = tab.template quad<0>(w), k1 = tab.template quad<8>(w);
            const uint2 k2 = tab.template quad<0>(w2), k3 = tab.template quad<8>(w2);
            a[0][0] = k0.x, a[0][1] = k0.y, a[1][0] = k1.x, a[1][1] = k1.y;
            a[0][2] = k2.x, a[0][3] = k2.y, a[1][2] = k3.x, a[1][3] = k3.y;
        } else {
#pragma unroll
            for (int r = 0; r < 2; ++r) {  // tokens gid, gid + 8
                // x: the pair indices of dims (j 0-1, j 2-3) of k-step 2gi at bits 0, 2B, of
                // k-step 2gi + 1 at 4B, 6B
                const unsigned char* row = tile + RL::at(gid + 8 * r, 4 * B * gi + woff);
                unsigned x;
                if constexpr (B == 4) {
                    x = lds32(row);
                } else if constexpr (B == 2) {
                    x = *reinterpret_cast<const unsigned short*>(row);
                } else {
                    x = __funnelshift_r(lds32(row), lds32(row + 4), sh);
                }
                a[0][r] = tab.template at<0>(x);
                a[0][2 + r] = tab.template at<2 * B>(x);
                a[1][r] = tab.template at<4 * B>(x);
                a[1][2 + r] = tab.template at<6 * B>(x);
            }
        }
    }
};

template <int B>
struct VTq {
    static_assert(B == 2 || B == 3 || B == 4, "tq V: B in {2, 3, 4}");
    static constexpr int ROWB = HD * B / 8, SC = 1, NSG = 0, TQB = B;
    static constexpr bool V_PAIR = true, BF16 = false, ROW_SCALE = true;
    using RL = typename VTurbo<B>::RL;
    static constexpr unsigned M = (1u << B) - 1;
    static constexpr unsigned MB = M | (M << (2 * B));  // codes of dims 0 and 2 (or 1 and 3)
    VTurbo<B> codes;                                    // the token pairs' codes, as turbo's
    TqTable<B> tab;
    __device__ VTq(int lane, const unsigned* table) : codes(lane, table), tab(lane, table) {}
    static __device__ __forceinline__ int group(int, int, int) { return 0; }
    __device__ __forceinline__ int dim(int u, int j) const { return codes.dim(u, j); }
    __device__ __forceinline__ void frags(const unsigned char* step, unsigned su, int u,
                                          const VScales&, unsigned (&a)[2][4]) const {
        unsigned y[2];
        codes.token_codes(step, su, u, y);
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            if constexpr (TqTable<B>::QUAD) {
                // y: code i of token 0 at bit 2i, of token 1 at 16 + 2i. One quad a two dims:
                // token 0's codes of dims 0, 1 beside token 1's (bits 0-7), the same for dims 2,
                // 3 (bits 4-11); a quad's (x, y) are the (t0, t1) pairs of its two dims
                const unsigned z = y[p] >> 12;
                const uint2 d01 = tab.template quad<0>(bit_select<0x0Fu>(y[p], z));
                const uint2 d23 = tab.template quad<4>(bit_select<0xF0u>(y[p], z));
                a[0][2 * p] = d01.x, a[0][2 * p + 1] = d01.y;
                a[1][2 * p] = d23.x, a[1][2 * p + 1] = d23.y;
                continue;
            }
            // y: code i of token 0 at bit B i, of token 1 at 16 + B i. Pair them: e02 holds the
            // pair indices (c0 | c1 << B) of dims 0 and 2 at bits 0 and 2B, e13 those of 1 and 3.
            const unsigned e02 = bit_select<MB>(y[p], y[p] >> (16 - B));
            const unsigned e13 = bit_select<MB>(y[p] >> B, y[p] >> 16);
            // dim 4gid + i: m-tile i / 2, row gid (+ 8 if i is odd)
            a[0][2 * p] = tab.template at<0>(e02);
            a[0][2 * p + 1] = tab.template at<0>(e13);
            a[1][2 * p] = tab.template at<2 * B>(e02);
            a[1][2 * p + 1] = tab.template at<2 * B>(e13);
        }
    }
};

}  // namespace mma_attn

#endif  // QWENREF_KV_TILE_CUH
