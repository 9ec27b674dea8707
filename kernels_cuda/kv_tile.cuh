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
//           (its loaders: kv_tile_tq.cuh)
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

}  // namespace mma_attn

#endif  // QWENREF_KV_TILE_CUH
