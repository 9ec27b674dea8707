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
//
// K fragments (A = K rows, 16 tokens x 16 dims per k-step). Any permutation of the dims inside a
// k-step gives the same dot product as long as q's B fragments use the same one: the int8 and
// turbo loaders give thread tig the dims 4tig..4tig+3 of each k-step (PERM: their bits sit
// together), bf16 the natural order of ldmatrix (b0 = dims 2tig, 2tig+1; b1 = 2tig+8, 2tig+9).
// K operands are exact: int8 and bf16 as they are, turbo codes as the half-integers c - (2^N-1)/2
// (fp16 holds them exactly); the scale multiplies the fp32 sum of each scale group afterwards.
//
// V fragments (A = V^T, 16 dims x 16 tokens): a unit of 32 dims is two m-tiles. The rows of an
// m-tile map to dims by the loader (V_PAIR: rows gid and gid+8 are two adjacent dims, so the
// output is written as float2). V' = fp16(value) with one rounding for the scaled kinds (the
// scale folded into the operand), exact for bf16, whose P goes in as bf16 hi + lo instead.
//
// Code -> fp16 without a conversion instruction: OR a code c, placed at bit o of a 16-bit half,
// into 0x6400 (fp16 1024, whose last mantissa bit is worth 1) gives 1024 + c * 2^o exactly; one
// HFMA2 by 2^-o minus (2^(10-o) + 2^(N-1)) gives the integer c - 2^(N-1), exact. The remaining
// +1/2 cannot ride in the same constant (1024 + 7.5 needs 12 significant bits), so K adds it
// (HADD2, exact) and V folds it into the scale: V' = fma(c - 2^(N-1), d, d/2), one rounding.
#ifndef QWENREF_KV_TILE_CUH
#define QWENREF_KV_TILE_CUH

#include <cuda_fp16.h>

#include "attention.cuh"
#include "attention_mma.cuh"
#include "mma_ptx.cuh"

namespace mma_attn {

// ---- where a token row of a stage sits in shared memory -----------------------------------------
// Rows of NCH 16-byte chunks. With NCH a multiple of 8, chunk c of token t is stored at c ^ (t & 7):
// eight tokens reading the same chunk (ldmatrix, or the turbo loaders' word loads) hit eight
// different bank groups. Otherwise the row stride is padded to an odd number of chunks, which
// spreads eight consecutive tokens over the banks the same way.
template <int ROWB>
struct RowLayout {
    static_assert(ROWB % 16 == 0, "a token row is whole 16-byte chunks");
    static constexpr int NCH = ROWB / 16;
    static constexpr bool SWZ = NCH % 8 == 0;
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
__device__ __forceinline__ unsigned lop_or_magic(unsigned x, unsigned mask) {
    return (x & mask) | 0x64006400u;  // one LOP3
}
__device__ __forceinline__ unsigned h2(__half2 x) { return *reinterpret_cast<unsigned*>(&x); }
__device__ __forceinline__ __half2 as_h2(unsigned x) { return *reinterpret_cast<__half2*>(&x); }
// 1024 + c * 2^o per half -> c - 2^(N-1) (exact): fma by 2^-o minus 2^(10-o) + 2^(N-1)
__device__ __forceinline__ __half2 code_int(unsigned r, __half2 mul, __half2 sub) {
    return __hfma2(as_h2(r), mul, sub);
}
__device__ __forceinline__ unsigned k_op(unsigned r, __half2 mul, __half2 sub) {
    return h2(__hadd2(code_int(r, mul, sub), __float2half2_rn(0.5f)));
}
__device__ __forceinline__ unsigned v_op(unsigned r, __half2 mul, __half2 sub, __half2 d,
                                         __half2 dh) {
    return h2(__hfma2(code_int(r, mul, sub), d, dh));
}
// HFMA2 constants of a code at bits (o_lo, o_hi) of the two halves, N-bit codes
__device__ __forceinline__ void code_consts(int o_lo, int o_hi, int n, __half2& mul, __half2& sub) {
    mul = __floats2half2_rn(ldexpf(1.f, -o_lo), ldexpf(1.f, -o_hi));
    sub = __floats2half2_rn(-(ldexpf(1.f, 10 - o_lo) + float(1 << (n - 1))),
                            -(ldexpf(1.f, 10 - o_hi) + float(1 << (n - 1))));
}

// ---- K loaders --------------------------------------------------------------------------------
// frags(tile, gi, a): A fragments of dims [32 gi, 32 gi + 32) (k-steps 2gi and 2gi+1) of the
// warp's 16 tokens; tile = the stage row of the warp's first token (generic and shared-space
// address). KPS: k-steps per scale (the fp32 sum of that many k-steps is multiplied by one
// token scale; 0 = no scale).

struct KQ8 {
    static constexpr int ROWB = HD, SC = HD / 32, KPS = 2;
    static constexpr bool PERM = true, BF16 = false, ROT = false;
    using RL = RowLayout<ROWB>;
    int lrow, lch;
    __device__ explicit KQ8(int lane) : lrow((lane & 7) + ((lane >> 3) & 1) * 8), lch(lane >> 4) {}
    __device__ __forceinline__ void frags(const unsigned char*, unsigned tile, int gi,
                                          unsigned (&a)[2][4]) const {
        unsigned r0, r1, r2, r3;
        ldsm_x4(tile + lrow * RL::RS + (RL::chunk(lrow, 2 * gi + lch) << 4), r0, r1, r2, r3);
        r0 ^= 0x80808080u;
        r1 ^= 0x80808080u;
        r2 ^= 0x80808080u;
        r3 ^= 0x80808080u;
        a[0][0] = i8x2_to_h2(r0, 0x0504);
        a[0][1] = i8x2_to_h2(r1, 0x0504);
        a[0][2] = i8x2_to_h2(r0, 0x0706);
        a[0][3] = i8x2_to_h2(r1, 0x0706);
        a[1][0] = i8x2_to_h2(r2, 0x0504);
        a[1][1] = i8x2_to_h2(r3, 0x0504);
        a[1][2] = i8x2_to_h2(r2, 0x0706);
        a[1][3] = i8x2_to_h2(r3, 0x0706);
    }
};

struct KBf16 {
    static constexpr int ROWB = 2 * HD, SC = 0, KPS = 0;
    static constexpr bool PERM = false, BF16 = true, ROT = false;
    using RL = RowLayout<ROWB>;
    int lrow, lch;
    __device__ explicit KBf16(int lane)
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
// has its own scale (KPS = 1)
template <int N>
struct KTurbo {
    static_assert(N == 2 || N == 3 || N == 4 || N == 8, "turbo K: N in {2, 3, 4, 8}");
    static constexpr int ROWB = HD * N / 8, SC = HD / 16, KPS = 1;
    static constexpr bool PERM = true, BF16 = false, ROT = true;
    using RL = RowLayout<ROWB>;
    int gid, tig, lrow, lch;
    unsigned sel;        // N = 4: PRMT of the thread's two bytes; N = 2: its byte, twice
    int woff[2], sh[2];  // N = 3: word and shift of the thread's 12 bits in group 2gi + k
    __half2 mul0, sub0, mul1, sub1;  // HFMA2 constants of the two registers of a k-step half
    __device__ explicit KTurbo(int lane)
        : gid(lane >> 2), tig(lane & 3), lrow((lane & 7) + ((lane >> 3) & 1) * 8), lch(lane >> 4) {
        if constexpr (N == 4) {
            const int b = 2 * (tig & 1);  // the thread's 16 bits: bytes b, b+1 of its word
            sel = b | ((b + 1) << 4) | (b << 8) | ((b + 1) << 12);
            code_consts(0, 4, N, mul0, sub0);  // low nibble of byte 0 / high nibble of byte 2
            mul1 = mul0;
            sub1 = sub0;
        } else if constexpr (N == 2) {
            sel = tig | (tig << 8);
            code_consts(0, 2, N, mul0, sub0);  // codes 4tig, 4tig+1
            code_consts(4, 6, N, mul1, sub1);  // codes 4tig+2, 4tig+3
        } else if constexpr (N == 3) {
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const int p = 48 * k + 12 * tig;  // bit of the thread's field from group 2gi
                woff[k] = 4 * (p >> 5);
                sh[k] = p & 31;
            }
            code_consts(0, 3, N, mul0, sub0);
            mul1 = mul0;
            sub1 = sub0;
        }
    }
    __device__ __forceinline__ void frags(const unsigned char* tile, unsigned tile_u32, int gi,
                                          unsigned (&a)[2][4]) const {
        if constexpr (N == 8) {
            // a 16-byte chunk is one group: as q8, unsigned codes, each chunk its own k-step
            unsigned r0, r1, r2, r3;
            ldsm_x4(tile_u32 + lrow * RL::RS + (RL::chunk(lrow, 2 * gi + lch) << 4), r0, r1, r2,
                    r3);
            const __half2 s = __float2half2_rn(1152.f), h = __float2half2_rn(0.5f);
            auto op = [&](unsigned x, unsigned sl) {
                const unsigned u = __byte_perm(0x64646464u, x, sl);
                return h2(__hadd2(__hsub2(as_h2(u), s), h));
            };
            a[0][0] = op(r0, 0x0504);
            a[0][1] = op(r1, 0x0504);
            a[0][2] = op(r0, 0x0706);
            a[0][3] = op(r1, 0x0706);
            a[1][0] = op(r2, 0x0504);
            a[1][1] = op(r3, 0x0504);
            a[1][2] = op(r2, 0x0706);
            a[1][3] = op(r3, 0x0706);
        } else {
#pragma unroll
            for (int k = 0; k < 2; ++k)
#pragma unroll
                for (int r = 0; r < 2; ++r) {  // tokens gid, gid + 8
                    const int t = gid + 8 * r;
                    unsigned lo, hi;
                    if constexpr (N == 4) {
                        const unsigned w =
                            lds32(tile + RL::at(t, 16 * gi + 8 * k + 4 * (tig >> 1)));
                        const unsigned y = __byte_perm(w, w, sel);
                        lo = lop_or_magic(y, 0x00F0000Fu);
                        hi = lop_or_magic(y >> 8, 0x00F0000Fu);
                    } else if constexpr (N == 2) {
                        const unsigned w = lds32(tile + RL::at(t, 8 * gi + 4 * k));
                        const unsigned y = __byte_perm(w, w, sel);
                        lo = lop_or_magic(y, 0x000C0003u);
                        hi = lop_or_magic(y, 0x00C00030u);
                    } else {  // N == 3: 12 bits, possibly across two words
                        const unsigned char* row = tile + RL::at(t, 0);
                        const unsigned w0 = lds32(row + 12 * gi + woff[k]);
                        const unsigned w1 = lds32(row + 12 * gi + woff[k] + 4);
                        const unsigned x = __funnelshift_r(w0, w1, sh[k]) & 0xFFFu;
                        const unsigned y = __byte_perm(x, 0, 0x1010);
                        lo = lop_or_magic(y, 0x00380007u);
                        hi = lop_or_magic(y >> 6, 0x00380007u);
                    }
                    a[k][r] = k_op(lo, mul0, sub0);
                    a[k][2 + r] = k_op(hi, mul1, sub1);
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
    static constexpr int ROWB = HD, SC = HD / 32, NSG = 1;
    static constexpr bool V_PAIR = true, BF16 = false;
    using RL = RowLayout<ROWB>;
    int lrow, lch, gid;
    __device__ explicit VQ8(int lane)
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
    static constexpr int ROWB = 2 * HD, SC = 0, NSG = 0;
    static constexpr bool V_PAIR = false, BF16 = true;
    using RL = RowLayout<ROWB>;
    int vrow, vch, gid;
    // ldmatrix.trans matrices (tokens 0-7, dims +0) (tokens 0-7, dims +8) (tokens 8-15, +0)
    // (tokens 8-15, +8) are the A fragment's four registers as they are
    __device__ explicit VBf16(int lane)
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
// 4gid + 2j, 4gid + 2j + 1.
template <int N>
struct VTurbo {
    static_assert(N == 2 || N == 3 || N == 4 || N == 8, "turbo V: N in {2, 3, 4, 8}");
    static constexpr int ROWB = HD * N / 8, SC = HD / 16, NSG = N == 8 ? 2 : 1;
    static constexpr bool V_PAIR = true, BF16 = false;
    using RL = RowLayout<ROWB>;
    int lrow, lch, gid, tig;
    unsigned sel;
    int woff, sh;            // N = 3: word and shift of the thread's 12 bits
    __half2 mul[4], sub[4];  // per register (m-tile j, row r): 2j + r
    __device__ explicit VTurbo(int lane)
        : lrow((lane & 7) + ((lane >> 3) & 1) * 8), lch(lane >> 4), gid(lane >> 2), tig(lane & 3) {
        int o[4] = {0, 4, 0, 4};  // N = 4: nibbles of bytes (b, b+1): y and y >> 8
        if constexpr (N == 4) {
            const int b = 2 * (gid & 1);
            sel = b | ((b + 1) << 4) | ((4 + b) << 8) | ((5 + b) << 12);
        } else if constexpr (N == 2) {
            const int b = gid & 3;
            sel = b | (b << 4) | ((4 + b) << 8) | ((4 + b) << 12);
            o[1] = 2, o[2] = 4, o[3] = 6;
        } else if constexpr (N == 3) {
            const int p = 12 * gid;
            woff = 4 * (p >> 5);
            sh = p & 31;
            o[1] = 3, o[2] = 0, o[3] = 3;  // y, y, y >> 6, y >> 6
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) code_consts(o[i], o[i], N, mul[i], sub[i]);
    }
    // the scale group of m-tile j of unit u for this thread
    __device__ __forceinline__ int group(int u, int j, int) const {
        return N == 8 ? 2 * u + j : 2 * u + (gid >> 2);
    }
    __device__ __forceinline__ int dim(int u, int j) const {
        return N == 8 ? 32 * u + 16 * j + 2 * gid : 32 * u + 4 * gid + 2 * j;
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
            const __half2 d01 = as_h2(ds.d01[0]), d89 = as_h2(ds.d89[0]);
#pragma unroll
            for (int p = 0; p < 2; ++p) {  // token pairs (2tig, 2tig+1), (2tig+8, 2tig+9)
                const int t0 = 2 * tig + 8 * p, t1 = t0 + 1;
                unsigned y0, y1;  // registers (j 0: rows gid, gid+8), (j 1: ...) come from these
                if constexpr (N == 4) {
                    const int b = 16 * u + 4 * (gid >> 1);
                    const unsigned y =
                        __byte_perm(lds32(step + RL::at(t0, b)), lds32(step + RL::at(t1, b)), sel);
                    y0 = y;
                    y1 = y >> 8;
                } else if constexpr (N == 2) {
                    const int b = 8 * u + 4 * (gid >> 2);
                    y0 = y1 =
                        __byte_perm(lds32(step + RL::at(t0, b)), lds32(step + RL::at(t1, b)), sel);
                } else {
                    auto field = [&](int t) {
                        const unsigned char* w = step + RL::at(t, 0) + 12 * u + woff;
                        return __funnelshift_r(lds32(w), lds32(w + 4), sh) & 0xFFFu;
                    };
                    y0 = __byte_perm(field(t0), field(t1), 0x5410);
                    y1 = y0 >> 6;
                }
                const unsigned m0 = (N == 2) ? 0x00030003u : (N == 3 ? 0x00070007u : 0x000F000Fu);
                const unsigned m1 = (N == 2) ? 0x000C000Cu : (N == 3 ? 0x00380038u : 0x00F000F0u);
                const unsigned m2 = (N == 2) ? 0x00300030u : m0;
                const unsigned m3 = (N == 2) ? 0x00C000C0u : m1;
                const __half2 d = p ? d89 : d01;
                const __half2 dh = p ? ds.h89[0] : ds.h01[0];
                a[0][2 * p] = v_op(lop_or_magic(y0, m0), mul[0], sub[0], d, dh);
                a[0][2 * p + 1] = v_op(lop_or_magic(y0, m1), mul[1], sub[1], d, dh);
                a[1][2 * p] = v_op(lop_or_magic(y1, m2), mul[2], sub[2], d, dh);
                a[1][2 * p + 1] = v_op(lop_or_magic(y1, m3), mul[3], sub[3], d, dh);
            }
        }
    }
};

}  // namespace mma_attn

#endif  // QWENREF_KV_TILE_CUH
