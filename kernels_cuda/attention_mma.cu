// attention_mma.cu — split-T decode partials on tensor cores (mma.sync m16n8k16, fp16 or bf16
// operands, fp32 accumulation) for every cache kind: attn_partials_<kind>_mma_n<NT8> (dense
// rows, NT8 = 1..4) and attn_partials_<kind>_mma_sel_n1 (one row that may be selective), plus
// attn_mma_smem_bytes. <kind>: q8, bf16, turbo8/4/3/2, bf16_turbo4/3/2 (bf16 K, turbo V), or
// tq4/3/2 (codebook: golden's tq_codebook(b) times f, then 1/f, float32 [2^b + 1]: f puts the
// codebook's values where fp16 holds them best, gpu.kvcache.tq_fp16_scale; null for the other
// kinds).
// Golden: qwenref/golden/attention.py attn_partials. Same outputs as attention_v1.cu's
// attn_partials_<K>_<V> (m, l [nb, S, nh], o [nb, S, nh, hd], golden's per-row split_bounds;
// attention_combine.cu merges them, and inverse-rotates a turbo V), for all nb rows of a batch
// in ONE CTA per (kv head, split): K/V bytes are read and converted once for every row.
// Launch: grid (nkv, S), block Cfg<NT8>::NW*32 (4 warps; -DMMA_NW=8 allowed at hd 256), dynamic
// shared memory Lay<K, V, NT8>::BYTES (attention_mma.cuh; attn_mma_smem_bytes reports it; > 48
// KB: the wrapper raises the limit; more than a block may opt into on this device: the plan
// runs v1 instead). NT8 = ceil(nb*NREP / 8) column tiles: column c = b*NREP + r (row b, q head
// g*NREP + r) is the MMA's N dimension, padded to 8*NT8. Only hd 128 / 256 (the wrapper uses
// v1 otherwise); shape -DATTN_HD, -DATTN_NREP (attention.cuh); -DMMA_KIND_<kind> builds that
// kind's kernels alone (the wrapper's way; without one, every kind's); knobs -DMMA_NW,
// -DMMA_NSTAGE, -DMMA_UNROLL_G, -DMMA_MINB_N1, -DMMA_TQ2_QUAD. Sparse V uses v1.
// Bytes per kv head, T tokens of the rows' union, for all rows together: K and V stored rows
// (q8 hd + hd/32*2, turboN hd*N/8 + hd/16*2, tqB hd*B/8 + 2, bf16 2*hd; hd 256: 544, 320
// (turbo4), 260 (tq4), 1024 B per token for K+V), plus q (nb*nh*hd*4) and the partials
// nb*S*nh*(hd+2)*4 (read again by the combine).
// Precision (vs golden float64). Scores: q as hi + lo (fp16: ~22 bits, pre-scaled by a power of
// two per CTA putting max|q| in [2^13, 2^14), so neither overflows nor goes subnormal in a way
// that matters; bf16 K: bf16 hi + lo, ~16 bits), K exact (int8, bf16, turbo half-integers),
// fp32 sums: ~2^-22 relative, like v1. P.V, scaled kinds: P = fp16(p * 2^PS) and V' =
// fp16(value) round once each, relative error <= u = 2^-11, so each term p_t v_t is off by <=
// 2u + u^2 and |o - o_golden| <= (2u + u^2) * sum_t p_t |v_t| (+ float32 terms): at most
// ~2^-10 * max|v| on the output, typically far less (independent roundings average out). bf16
// V: V is exact and P goes in as bf16 hi + lo (<= 2^-16 relative per term). Range: |V'| <=
// 65504 for the scaled kinds (a V' below 2^-14 is subnormal, absolute error <= 2^-25 instead);
// bf16 V any finite value.
// Rungs of the attention family:
//   v0    attention_v0.cu: attention_v0_<K>_<V>, a warp per (row, q head), one pass, no partials
//   split attention_split.cu + attention_combine.cu: v0 split over T (a warp per split, plain
//         loads), the partials merged by their log-sum-exp
//   v1    attention_v1.cu + attention_combine.cu: CUDA-core split-T partials, every kind pair
//         (token tiles prefetched into registers, one reduce-scatter per tile, warps merged)
//   mma   attention_mma.cu (this file) + attention_combine.cu: the partials on tensor cores
//
// Per CTA the token range is the union of the rows' split ranges [lo_b, hi_b) (golden's
// split_bounds(base_pos + b + 1, S), so partials equal v1's/golden's); column c only sees tokens
// in its row's range (others are -inf for it). Blocks of BT = 16*NW tokens stream through an
// NSTAGE-deep cp.async pipeline (16-byte copies; rows laid out so that eight tokens reading the
// same chunk hit eight bank groups: kv_tile.cuh RowLayout; tokens past the range are
// zero-filled). Per block (each step one function of attention_mma_steps.cuh):
//  scores      warp w takes tokens [16w, 16w+16): S^T[t, c] = sum_g d_k[t,g] * (K[t, g] . Q^T[g, c])
//              with A = K (the K loader's fragments), B = q hi and lo (two MMAs), one fresh fp32
//              C per scale group, then FFMA by d_k (unscaled K, bf16 and tq: the MMAs accumulate
//              in place, in independent chains). Column max over the warp's 16 tokens.
//  softmax     every thread combines the NW warp maxima of its columns (all warps hold the same
//              running max m), alpha = 2^(m_old - m_new), p = 2^(s - m_new), per-thread partial l,
//              and writes P[t][c] = p * 2^PS (2^PS keeps fp16 P normal) to shared memory.
//  p_dot_v     each warp owns NG/NW units of 32 dims (Cfg::group):
//              O^T[dims, c] += V'^T[dims, t] . P^T[t, c], A = the V loader's fragments (scale
//              folded in), B = P^T via ldmatrix.trans, once per 16 tokens for all units. O^T
//              accumulators stay in registers across blocks (rescaled by alpha).
//              (Folding d_v into P instead, P'[g] = fp16(p * d_v[g]) per group, needs NG times
//              the P buffer and its FMUL/F2FP per group: slower, docs/tuning-log.md.)
// End (write_partials): l summed over lanes and warps; o = O * 2^-PS from the accumulators.
//
// Keep `python -m qwenref.gpu.compile_check` at 0 bytes stack frame: a register array indexed
// inside a partly unrolled loop goes to local memory, and that costs far more than it saves.

#include <cuda_fp16.h>

#include "attention.cuh"
#include "mma_ptx.cuh"

#ifndef MMA_NW
#define MMA_NW 0  // warps per CTA; 0 = Cfg's rule (attention_mma.cuh)
#endif
// the mma kernels exist only for hd 128 / 256 (the wrapper uses v1 otherwise)
#if (ATTN_HD == 128 || ATTN_HD == 256) && (MMA_NW == 0 || (ATTN_HD / 32) % MMA_NW == 0)
#include "attention_mma.cuh"
#include "attention_mma_steps.cuh"
#include "kv_tile.cuh"
#include "kv_tile_tq.cuh"

namespace mma_attn {

template <class KL, class VL, int NT8, bool SEL>
__device__ __forceinline__ void partials_mma(
    const float* __restrict__ q, const unsigned char* __restrict__ kq,
    const __half* __restrict__ kd, const unsigned char* __restrict__ vq,
    const __half* __restrict__ vd, int max_t, int base_pos, int nb, const int* __restrict__ sel_idx,
    const int* __restrict__ sel_n, int sel_w, const float* __restrict__ codebook, float qscale,
    float* __restrict__ m_out, float* __restrict__ l_out, float* __restrict__ o_out) {
    using L = Lay<KL, VL, NT8>;
    constexpr int NT = Cfg<NT8>::NT, BT = Cfg<NT8>::BT, GPW = Cfg<NT8>::GPW;
    constexpr int NST = Cfg<NT8>::NST;
    constexpr int KRS = KL::RL::RS, VRS = VL::RL::RS;
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* sK = smem + L::K_OFF;
    unsigned char* sV = smem + L::V_OFF;
    __half* sDk = reinterpret_cast<__half*>(smem + L::DK_OFF);
    __half* sDv = reinterpret_cast<__half*>(smem + L::DV_OFF);
    uint4* sQ = reinterpret_cast<uint4*>(smem + L::Q_OFF);
    __half* sP = reinterpret_cast<__half*>(smem + L::P_OFF);
    float* sRed = reinterpret_cast<float*>(smem + L::RED_OFF);        // [NCOL][NW] warp maxima
    float* sL = reinterpret_cast<float*>(smem + L::L_OFF);            // [NW][NCOL] warp l
    float* sM = reinterpret_cast<float*>(smem + L::M_OFF);            // [NCOL]
    float* sQmax = reinterpret_cast<float*>(smem + L::QMAX_OFF);      // [NW]
    unsigned* sTab = reinterpret_cast<unsigned*>(smem + L::TAB_OFF);  // tq: the codebook's table

    const int g = blockIdx.x, split = blockIdx.y;
    const int nkv = gridDim.x, S = gridDim.y;
    const int nh = nkv * NREP;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int ncv = nb * NREP;  // valid columns

    // A selective row (SEL, nb == 1, the wrapper checks; sel_n[0] > 0) sees the n_vis =
    // min(sel_n[0], sel_w) tokens sel_idx[0, p]: below, t is a position in that list and the token
    // read is sel[t]. A dense row (no list, or sel_n[0] == 0) sees positions = tokens
    // 0 .. base_pos + b. SEL is a template flag so that the dense kernels carry none of this (a
    // runtime test slows the dense nb 4 kernel measurably: docs/tuning-log.md).
    const int n_sel = (SEL && sel_n != nullptr) ? min(sel_n[0], sel_w) : 0;
    const int* sel = (SEL && n_sel > 0) ? sel_idx : nullptr;
    auto row_len = [&](int b) { return sel != nullptr ? n_sel : base_pos + b + 1; };

    const Span sp = row_span(nb, S, split, row_len);
    if (sp.L0 >= sp.L1) {
        write_empty(ncv, S, split, g, nh, m_out, l_out, o_out);
        return;
    }
    const int L0 = sp.L0, L1 = sp.L1;
    const int nblk = (L1 - L0 + BT - 1) / BT;
    const size_t row0 = (size_t)g * max_t;
    const unsigned char* kq_g = kq + row0 * KL::ROWB;
    const unsigned char* vq_g = vq + row0 * VL::ROWB;
    const unsigned char* kd_g = reinterpret_cast<const unsigned char*>(kd + row0 * KL::SC);
    const unsigned char* vd_g = reinterpret_cast<const unsigned char*>(vd + row0 * VL::SC);
    auto load_block = [&](int j) {
        const int buf = j % NST, t0 = L0 + j * BT;
        copy_rows<KL::ROWB, typename KL::RL, BT, NT>(smem_u32(sK + buf * BT * KRS), kq_g, t0, L0,
                                                     L1, sel, tid);
        copy_rows<VL::ROWB, typename VL::RL, BT, NT>(smem_u32(sV + buf * BT * VRS), vq_g, t0, L0,
                                                     L1, sel, tid);
        if constexpr (KL::SC > 0 && !KL::ROW_SCALE)
            copy_rows<KL::SC * 2, Packed<KL::SC * 2>, BT, NT>(smem_u32(sDk + buf * BT * KL::SC),
                                                              kd_g, t0, L0, L1, sel, tid);
        if constexpr (VL::SC > 0 && !VL::ROW_SCALE)
            copy_rows<VL::SC * 2, Packed<VL::SC * 2>, BT, NT>(smem_u32(sDv + buf * BT * VL::SC),
                                                              vd_g, t0, L0, L1, sel, tid);
    };
    // tq: a token's gamma (2 bytes) is too small for cp.async. Thread t < BT loads token t's K
    // and V gammas into registers when its block is issued (load_gammas) and stores them at the
    // top of the next iteration, before the barrier that publishes the block (store_gammas).
    static_assert(KL::ROW_SCALE == VL::ROW_SCALE, "tq on both sides or neither");
    __half gk = __float2half(0.f), gv = __float2half(0.f);
    int gslot = -1;
    auto load_gammas = [&](int j) {
        if constexpr (KL::ROW_SCALE) {
            if (tid < BT) {
                const int pos = L0 + j * BT + tid;
                const bool ok = pos < L1;
                const size_t row = sel != nullptr ? sel[ok ? pos : L0] : (ok ? pos : L0);
                gk = ok ? kd[row0 + row] : __float2half(0.f);
                gv = ok ? vd[row0 + row] : __float2half(0.f);
                gslot = j % NST;
            }
        }
    };
    auto store_gammas = [&]() {
        if constexpr (KL::ROW_SCALE) {
            if (gslot >= 0) {
                sDk[gslot * BT + tid] = gk;
                sDv[gslot * BT + tid] = gv;
                gslot = -1;
            }
        }
    };

    // start the pipeline before the q preparation so the first bytes are already in flight
#pragma unroll
    for (int j = 0; j < NST - 1; ++j) {
        if (j < nblk) {
            load_block(j);
            load_gammas(j);
            store_gammas();
        }
        cp_commit();
    }
    // tq: the codebook's table (kv_tile_tq.cuh's TqTable); codebook[2^B] = 1/f goes into q (K) and
    // P (V), so that scores and O are those of C itself
    float inv_f = 1.f;
    if constexpr (L::TQB > 0) {
        TqTable<L::TQB>::fill(sTab, codebook, tid, NT);
        inv_f = codebook[1 << L::TQB];
    }  // prepare_q's barrier publishes it
    const float sinv =
        prepare_q<KL, NT8>(q, g, nh, ncv, qscale * inv_f, reinterpret_cast<unsigned*>(sQ), sQmax);

    // ---- per-thread column state: columns 8*n8 + 2*tig + j ------------------------------------
    int clo[NT8][2], chi[NT8][2];
    float mrun[NT8][2], lpart[NT8][2];
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int c = n8 * 8 + 2 * tig + j;
            int lo = 0, hi = 0;
            if (c < ncv) split_range(row_len(c / NREP), S, split, lo, hi);
            clo[n8][j] = lo;
            chi[n8][j] = hi;
            mrun[n8][j] = -inf_f();
            lpart[n8][j] = 0.f;
        }
    float O[2 * GPW][NT8][4];
#pragma unroll
    for (int mt = 0; mt < 2 * GPW; ++mt)
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
            for (int i = 0; i < 4; ++i) O[mt][n8][i] = 0.f;

    const KL kl(lane, sTab);
    const VL vl(lane, sTab);
    for (int j = 0; j < nblk; ++j) {
        const int buf = j % NST;
        store_gammas();  // block j + NST - 2's: its slot last held block j - 2's
        cp_wait<NST - 2>();
        __syncthreads();  // block j landed; block j-1 fully consumed
        if (j + NST - 1 < nblk) {
            load_block(j + NST - 1);
            load_gammas(j + NST - 1);
        }
        cp_commit();
        const int t0 = L0 + j * BT;

        float s[NT8][4];
        const unsigned char* ktile = sK + (buf * BT + warp * 16) * KRS;
        scores<KL, NT8>(kl, ktile, smem_u32(ktile), sDk + (buf * BT + warp * 16 + gid) * KL::SC, sQ,
                        lane, s);
        mask_and_max<NT8>(s, t0 + warp * 16, sp, clo, chi, sinv, sRed, warp, lane);
        __syncthreads();

        online_softmax<L, VL, NT8>(s, sRed, mrun, lpart, O, sP,
                                   sDv + (buf * BT + warp * 16 + gid) * VL::SC, inv_f, warp, lane);
        __syncthreads();
        p_dot_v<L, VL, NT8>(vl, sV + buf * BT * VRS, smem_u32(sV + buf * BT * VRS),
                            sDv + buf * BT * VL::SC, sP, warp, lane, O);
    }
    cp_wait<0>();

    write_partials<L, NT8>(vl, mrun, lpart, O, sL, sM, ncv, S, split, g, nh, m_out, l_out, o_out);
}

}  // namespace mma_attn

// attn_partials_<kind>_mma_n<NT8>: dense rows (sel_idx, sel_n, sel_w are ignored);
// attn_partials_<kind>_mma_sel_n1: one row that may be selective (the wrapper's choice for nb = 1
// with sel_n given). Same parameters, so the wrapper launches all alike; scales are null for bf16.
#define ATTN_PARTIALS_MMA(KIND, KL, VL, SFX, NT8, SEL)                                             \
    extern "C" __global__ void __launch_bounds__(mma_attn::Cfg<NT8>::NT,                           \
                                                 NT8 == 1 ? mma_attn::minb_n1<KL>() : 1)           \
        attn_partials_##KIND##_mma_##SFX(                                                          \
            const float* q, const void* kq, const __half* kd, const void* vq, const __half* vd,    \
            int max_t, int base_pos, int nb, const int* sel_idx, const int* sel_n, int sel_w,      \
            const float* codebook, float qscale, float* m_out, float* l_out, float* o_out) {       \
        mma_attn::partials_mma<KL, VL, NT8, SEL>(q, static_cast<const unsigned char*>(kq), kd,     \
                                                 static_cast<const unsigned char*>(vq), vd, max_t, \
                                                 base_pos, nb, sel_idx, sel_n, sel_w, codebook,    \
                                                 qscale, m_out, l_out, o_out);                     \
    }
#define ATTN_PARTIALS_MMA_KIND(KIND, KL, VL)                                                       \
    ATTN_PARTIALS_MMA(KIND, KL, VL, n1, 1, false)                                                  \
    ATTN_PARTIALS_MMA(KIND, KL, VL, n2, 2, false)                                                  \
    ATTN_PARTIALS_MMA(KIND, KL, VL, n3, 3, false)                                                  \
    ATTN_PARTIALS_MMA(KIND, KL, VL, n4, 4, false)                                                  \
    ATTN_PARTIALS_MMA(KIND, KL, VL, sel_n1, 1, true)                                               \
    extern "C" __global__ void attn_mma_smem_bytes_##KIND(int* out) {                              \
        out[0] = mma_attn::Lay<KL, VL, 1>::BYTES;                                                  \
        out[1] = mma_attn::Lay<KL, VL, 2>::BYTES;                                                  \
        out[2] = mma_attn::Lay<KL, VL, 3>::BYTES;                                                  \
        out[3] = mma_attn::Lay<KL, VL, 4>::BYTES;                                                  \
    }

// -DMMA_KIND_<kind> picks one kind (the wrapper compiles one module per kind); without one, every
// kind
#if defined(MMA_KIND_q8) || defined(MMA_KIND_bf16) || defined(MMA_KIND_turbo8) ||                  \
    defined(MMA_KIND_turbo4) || defined(MMA_KIND_turbo3) || defined(MMA_KIND_turbo2) ||            \
    defined(MMA_KIND_bf16_turbo4) || defined(MMA_KIND_bf16_turbo3) ||                              \
    defined(MMA_KIND_bf16_turbo2) || defined(MMA_KIND_tq4) || defined(MMA_KIND_tq3) ||             \
    defined(MMA_KIND_tq2)
#define MMA_ONE_KIND
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_q8)
ATTN_PARTIALS_MMA_KIND(q8, mma_attn::KQ8, mma_attn::VQ8)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_bf16)
ATTN_PARTIALS_MMA_KIND(bf16, mma_attn::KBf16, mma_attn::VBf16)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_turbo8)
ATTN_PARTIALS_MMA_KIND(turbo8, mma_attn::KTurbo<8>, mma_attn::VTurbo<8>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_turbo4)
ATTN_PARTIALS_MMA_KIND(turbo4, mma_attn::KTurbo<4>, mma_attn::VTurbo<4>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_turbo3)
ATTN_PARTIALS_MMA_KIND(turbo3, mma_attn::KTurbo<3>, mma_attn::VTurbo<3>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_turbo2)
ATTN_PARTIALS_MMA_KIND(turbo2, mma_attn::KTurbo<2>, mma_attn::VTurbo<2>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_bf16_turbo4)
ATTN_PARTIALS_MMA_KIND(bf16_turbo4, mma_attn::KBf16, mma_attn::VTurbo<4>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_bf16_turbo3)
ATTN_PARTIALS_MMA_KIND(bf16_turbo3, mma_attn::KBf16, mma_attn::VTurbo<3>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_bf16_turbo2)
ATTN_PARTIALS_MMA_KIND(bf16_turbo2, mma_attn::KBf16, mma_attn::VTurbo<2>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_tq4)
ATTN_PARTIALS_MMA_KIND(tq4, mma_attn::KTq<4>, mma_attn::VTq<4>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_tq3)
ATTN_PARTIALS_MMA_KIND(tq3, mma_attn::KTq<3>, mma_attn::VTq<3>)
#endif
#if !defined(MMA_ONE_KIND) || defined(MMA_KIND_tq2)
ATTN_PARTIALS_MMA_KIND(tq2, mma_attn::KTq<2>, mma_attn::VTq<2>)
#endif
#endif  // ATTN_HD 128 / 256
