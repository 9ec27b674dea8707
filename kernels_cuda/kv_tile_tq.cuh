// kv_tile_tq.cuh — the tile loaders of the tq kinds (tq4, tq3, tq2) for the tensor-core partials
// (attention_mma.cu), beside kv_tile.cuh's: codes that index a Lloyd-Max codebook become fp16
// operands by a table in shared memory (TqTable), filled once per CTA.
#ifndef QWENREF_KV_TILE_TQ_CUH
#define QWENREF_KV_TILE_TQ_CUH

#include "kv_tile.cuh"

namespace mma_attn {

// ---- tq-b (tq4, tq3, tq2): codebook values by a table in shared memory ------------------------
// A tq code is an index into the B-bit Lloyd-Max codebook C (golden/tq.py), one float16 scale
// gamma per token and side. gamma multiplies the fp32 score of a token (K) and its P (V: P' =
// fp16(p 2^PS gamma)); the codes of a token are read as turbo's of the same width (K: the
// thread's codes of a k-step, PERM; V: the thread's four dims of a unit for two tokens,
// VTurbo<B>::token_codes). The table holds fp16(f C) (f: gpu.kvcache.tq_fp16_scale).
//
// Pairs (tq4, tq3; tq2 by default): two codes (a, b) of 2B bits index a half2 (C[a], C[b]):
// 2^(2B) entries (256, 64, 16), each replicated in the 32 banks (entry e at byte 128 e + 4
// lane), so the random indices of a warp never collide. A lookup costs two instructions besides
// the LDS: the index at bit f of a register becomes its byte offset 128 e + 4 lane by a rotation
// that puts bit f at bit 7 (SHF.W) and one LOP3 (mask the 2B bits, OR the lane's 4 lane); the
// table's base is the LDS's uniform operand.
// Quads (tq2 with -DMMA_TQ2_QUAD=1): four codes (8 bits) index two half2, (C[e0], C[e2]) and
// (C[e1], C[e3]) for the codes e_i at bits 2i: 256 entries of 8 bytes, each replicated 16 times
// (entry e at byte 128 e + 8 (lane % 16): a warp's 64-bit LDS takes two wavefronts at least,
// and the 16 lanes of each then hit distinct banks). The same three instructions give two
// fragment registers: the pair (x, y) of one LDS.64, which is where an mma operand wants them
// (a0 a1, or a2 a3). 32 KB, as tq4's pair table.
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
    // pairs: the half2 of the pair index at bits [f, f + 2B) of x (f a compile-time constant)
    template <int F>
    __device__ __forceinline__ unsigned at(unsigned x) const {
        const unsigned off = lop_or_magic<(M2 << 7)>(__funnelshift_l(x, x, (7 - F) & 31), lane_off);
        return *reinterpret_cast<const unsigned*>(base + off);
    }
    // quads: the two half2 of the quad index at bits [f, f + 8) of x
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
// Pairs: dim i = 4k + j takes k-index j of the thread's four in k-step 2gi + k (j 0-1 the pair
// at 2tig, j 2-3 the pair at 2tig + 8), four pair lookups a token. Quads (TqTable): one lookup
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

#endif  // QWENREF_KV_TILE_TQ_CUH
