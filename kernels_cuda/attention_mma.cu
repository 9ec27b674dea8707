// attention_mma.cu — split-T decode partials on tensor cores (mma.sync m16n8k16, fp16 or bf16
// operands, fp32 accumulation) for every cache kind: attn_partials_<kind>_mma_n<NT8> (dense
// rows, NT8 = 1..4) and attn_partials_<kind>_mma_sel_n1 (one row that may be selective), plus
// attn_mma_smem_bytes. <kind>: q8, bf16, turbo8/4/3/2, or bf16_turbo4/3/2 (bf16 K, turbo V).
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
// -DMMA_NSTAGE, -DMMA_UNROLL_G. Sparse V uses v1.
// Bytes per kv head, T tokens of the rows' union, for all rows together: K and V stored rows
// (q8 hd + hd/32*2, turboN hd*N/8 + hd/16*2, bf16 2*hd; hd 256: 544, 320 (turbo4), 1024 B per
// token for K+V), plus q (nb*nh*hd*4) and the partials nb*S*nh*(hd+2)*4 (read again by the
// combine).
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
//   v0   attention_v0.cu: attention_v0_<K>_<V>, a warp per (row, q head), one pass, no partials
//   v1   attention_v1.cu + attention_combine.cu: CUDA-core split-T partials, every kind pair
//   mma  attention_mma.cu (this file) + attention_combine.cu: the partials on tensor cores
//
// Per CTA the token range is the union of the rows' split ranges [lo_b, hi_b) (golden's
// split_bounds(base_pos + b + 1, S), so partials equal v1's/golden's); column c only sees tokens
// in its row's range (others are -inf for it). Blocks of BT = 16*NW tokens stream through an
// NSTAGE-deep cp.async pipeline (16-byte copies; rows laid out so that eight tokens reading the
// same chunk hit eight bank groups: kv_tile.cuh RowLayout; tokens past the range are
// zero-filled). Per block (each step one function below):
//  scores      warp w takes tokens [16w, 16w+16): S^T[t, c] = sum_g d_k[t,g] * (K[t, g] . Q^T[g, c])
//              with A = K (the K loader's fragments), B = q hi and lo (two MMAs), one fresh fp32
//              C per scale group, then FFMA by d_k. Column max over the warp's 16 tokens.
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
#include "wht_regs.cuh"

#ifndef MMA_NW
#define MMA_NW 0  // warps per CTA; 0 = Cfg's rule (attention_mma.cuh)
#endif
// the mma kernels exist only for hd 128 / 256 (the wrapper uses v1 otherwise)
#if (ATTN_HD == 128 || ATTN_HD == 256) && (MMA_NW == 0 || (ATTN_HD / 32) % MMA_NW == 0)
#include "attention_mma.cuh"
#include "kv_tile.cuh"

namespace mma_attn {

// ---- the CTA's token range ------------------------------------------------------------------
// [L0, L1): the union of the rows' split ranges; [I0, I1): positions inside every row's range
// (empty when a row's split is empty): a warp whose 16 positions all lie there skips the mask.
struct Span {
    int L0, L1, I0, I1;
};

template <class RowLen>
__device__ __forceinline__ Span row_span(int nb, int S, int split, RowLen row_len) {
    Span sp{0x7fffffff, 0, 0, 0x7fffffff};
    for (int b = 0; b < nb; ++b) {
        int lo, hi;
        split_range(row_len(b), S, split, lo, hi);
        if (lo < hi) {
            sp.L0 = min(sp.L0, lo);
            sp.L1 = max(sp.L1, hi);
        }
        sp.I0 = max(sp.I0, lo);
        sp.I1 = min(sp.I1, hi);
    }
    return sp;
}

// every row's split is empty (golden: -inf, 0, 0)
__device__ void write_empty(int ncv, int S, int split, int g, int nh, float* m_out, float* l_out,
                            float* o_out) {
    for (int p = threadIdx.x; p < ncv * HD; p += blockDim.x) {
        const int c = p / HD, b = c / NREP, r = c % NREP;
        o_out[(((size_t)b * S + split) * nh + g * NREP + r) * HD + p % HD] = 0.f;
    }
    for (int c = threadIdx.x; c < ncv; c += blockDim.x) {
        const int b = c / NREP, r = c % NREP;
        m_out[((size_t)b * S + split) * nh + g * NREP + r] = -inf_f();
        l_out[((size_t)b * S + split) * nh + g * NREP + r] = 0.f;
    }
}

// ---- copies: one side's rows (or scale rows) of a block into its stage ------------------------
// Rows of ROWB bytes for positions t0 .. t0 + BT - 1 of the range (token sel[pos] when selective;
// positions past L1 zero-filled). RL places them: a data row as kv_tile.cuh's RowLayout, a scale
// row packed (Packed).
template <int ROWB>
struct Packed {
    static constexpr int RS = ROWB;
    static __device__ __forceinline__ int chunk(int, int c) { return c; }
};

template <int ROWB, class RL, int BT, int NT>
__device__ __forceinline__ void copy_rows(unsigned dst, const unsigned char* src, int t0, int L0,
                                          int L1, const int* sel, int tid) {
    auto at = [](int t, int c) { return t * RL::RS + (RL::chunk(t, c) << 4); };
    if constexpr (ROWB == 8) {  // q8 scales at hd 128: one 8-byte copy per token
        for (int t = tid; t < BT; t += NT) {
            const int pos = t0 + t;
            const bool ok = pos < L1;
            const int p = ok ? pos : L0;
            cp_async8(dst + 8 * t, src + (size_t)(sel != nullptr ? sel[p] : p) * 8, ok);
        }
    } else {
        constexpr int NCK = ROWB / 16;
        if constexpr (NT % NCK == 0 && BT % (NT / NCK) == 0) {
            constexpr int TSTEP = NT / NCK;
            const int ch = tid % NCK, lt = tid / NCK;
            if (sel == nullptr && t0 + BT <= L1) {
                // a dense block inside the range (all but the last): one base address
                const unsigned char* s = src + (size_t)(t0 + lt) * ROWB + 16 * ch;
#pragma unroll
                for (int i = 0; i < BT / TSTEP; ++i)
                    cp_async16(dst + at(lt + i * TSTEP, ch), s + (size_t)i * TSTEP * ROWB, true);
            } else {
#pragma unroll
                for (int i = 0; i < BT / TSTEP; ++i) {
                    const int t = lt + i * TSTEP, pos = t0 + t;
                    const bool ok = pos < L1;
                    const int p = ok ? pos : L0;
                    const size_t row = sel != nullptr ? sel[p] : p;
                    cp_async16(dst + at(t, ch), src + row * ROWB + 16 * ch, ok);
                }
            }
        } else {
            for (int id = tid; id < BT * NCK; id += NT) {
                const int t = id / NCK, ch = id % NCK, pos = t0 + t;
                const bool ok = pos < L1;
                const int p = ok ? pos : L0;
                const size_t row = sel != nullptr ? sel[p] : p;
                cp_async16(dst + at(t, ch), src + row * ROWB + 16 * ch, ok);
            }
        }
    }
}

// ---- q: rotate (turbo K), scale, max, power-of-two pre-scale, hi/lo B fragments ------------------
// Warp w takes columns w, w + NW, ...; lane l holds dims [E l, E l + E) of each (E = HD/32, the
// layout of wht_regs, which rotates them in registers). Fragment entry (k-step, n8, lane
// (c % 8) * 4 + tig) is {hi.b0, hi.b1, lo.b0, lo.b1}: b0 / b1 = the dims KL::PERM assigns to
// k-indices (2tig, 2tig+1) / (2tig+8, 2tig+9). Returns 2^-e, the factor that undoes the scale.
template <class KL, int NT8>
__device__ __forceinline__ float prepare_q(const float* __restrict__ q, int g, int nh, int ncv,
                                           float qscale, unsigned* sQw, float* sQmax) {
    constexpr int NW = Cfg<NT8>::NW, NCOL = 8 * NT8, CPW = NCOL / NW, E = HD / 32;
    static_assert(NCOL % NW == 0, "columns per warp");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float v[CPW][E];
#pragma unroll
    for (int i = 0; i < CPW; ++i) {
        const int c = warp + i * NW;
        const float* src = q + ((size_t)(c / NREP) * nh + g * NREP + c % NREP) * HD + E * lane;
#pragma unroll
        for (int k = 0; k < E / 4; ++k) {
            const float4 x = c < ncv ? *reinterpret_cast<const float4*>(src + 4 * k)
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
            v[i][4 * k] = x.x, v[i][4 * k + 1] = x.y, v[i][4 * k + 2] = x.z, v[i][4 * k + 3] = x.w;
        }
    }
    float qmax = 0.f;
#pragma unroll
    for (int i = 0; i < CPW; ++i) {
        if constexpr (KL::ROT) {
            wht_regs<HD>(v[i], lane);
#pragma unroll
            for (int k = 0; k < E; ++k) v[i][k] *= 1.f / sqrtf(float(HD));  // as gpu.wht
        }
#pragma unroll
        for (int k = 0; k < E; ++k) qmax = fmaxf(qmax, fabsf(v[i][k] * qscale));
    }
    qmax = warp_max(qmax);
    if (lane == 0) sQmax[warp] = qmax;
    __syncthreads();
    qmax = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) qmax = fmaxf(qmax, sQmax[w]);
    int e = 0;
    if (qmax > 0.f) {
        int ex;
        frexpf(qmax, &ex);  // qmax < 2^ex
        e = 14 - ex;
        e = e > 120 ? 120 : (e < -120 ? -120 : e);
    }
    const float qmul = qscale * ldexpf(1.f, e);
#pragma unroll
    for (int i = 0; i < CPW; ++i) {
        const int c = warp + i * NW;
#pragma unroll
        for (int k = 0; k < E; k += 2) {
            const int d = E * lane + k, ks = d / 16, o16 = d % 16;
            const int tig = KL::PERM ? o16 / 4 : (o16 % 8) / 2;
            const int slot = KL::PERM ? (o16 % 4) / 2 : o16 / 8;
            unsigned hi, lo;
            split2<KL::BF16>(v[i][k] * qmul, v[i][k + 1] * qmul, hi, lo);
            unsigned* entry = sQw + 4 * (((ks * NT8 + c / 8) * 32) + (c % 8) * 4 + tig);
            entry[slot] = hi;
            entry[2 + slot] = lo;
        }
    }
    return ldexpf(1.f, -e);
}

// ---- scores of the warp's 16 tokens for every column --------------------------------------------
template <class KL, int NT8>
__device__ __forceinline__ void scores(const KL& kl, const unsigned char* ktile, unsigned ktile_u,
                                       const __half* dkr, const uint4* sQ, int lane,
                                       float (&s)[NT8][4]) {
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n8][i] = 0.f;
    // d_k read per scale group from shared memory (where this loop is only partly unrolled, a
    // preloaded register array indexed by gi goes to local memory)
#pragma unroll Cfg < NT8> ::UG
    for (int gi = 0; gi < NG; ++gi) {
        unsigned a[2][4];
        kl.frags(ktile, ktile_u, gi, a);
        float dk0[2] = {1.f, 1.f}, dk1[2] = {1.f, 1.f};  // tokens gid, gid + 8; per k-step
        if constexpr (KL::KPS == 2) {
            dk0[0] = __half2float(dkr[gi]);
            dk1[0] = __half2float(dkr[8 * KL::SC + gi]);
        } else if constexpr (KL::KPS == 1) {
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                dk0[k] = __half2float(dkr[2 * gi + k]);
                dk1[k] = __half2float(dkr[8 * KL::SC + 2 * gi + k]);
            }
        }
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8) {
            const uint4 q0 = sQ[((2 * gi) * NT8 + n8) * 32 + lane];
            const uint4 q1 = sQ[((2 * gi + 1) * NT8 + n8) * 32 + lane];
            float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            constexpr int K1 = KL::KPS == 1 ? 1 : 0;  // the accumulator of k-step 1
            mma16816_t<KL::BF16>(c[0], a[0], q0.x, q0.y);
            mma16816_t<KL::BF16>(c[0], a[0], q0.z, q0.w);
            mma16816_t<KL::BF16>(c[K1], a[1], q1.x, q1.y);
            mma16816_t<KL::BF16>(c[K1], a[1], q1.z, q1.w);
#pragma unroll
            for (int k = 0; k <= K1; ++k) {
                if constexpr (KL::KPS == 0) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) s[n8][i] += c[k][i];
                } else {
                    s[n8][0] = fmaf(dk0[k], c[k][0], s[n8][0]);
                    s[n8][1] = fmaf(dk0[k], c[k][1], s[n8][1]);
                    s[n8][2] = fmaf(dk1[k], c[k][2], s[n8][2]);
                    s[n8][3] = fmaf(dk1[k], c[k][3], s[n8][3]);
                }
            }
        }
    }
}

// ---- V scales of one 16-token step, and this thread's share of a unit's -------------------------
// dg[0..1]: group gid's half2s of tokens (2tig, 2tig+1), (2tig+8, 2tig+9); dg[2..3]: group
// 8 + gid's (ldmatrix.trans of the step's [16 tokens][SC] scales), gathered per unit by shuffles.
template <class VL>
__device__ __forceinline__ void step_scales(const __half* dvs, int lane, unsigned (&dg)[4]) {
    if constexpr (VL::SC == 8) {
        ldsm_x2_t(smem_u32(dvs + (lane & 15) * 8), dg[0], dg[1]);
        dg[2] = dg[0], dg[3] = dg[1];
    } else if constexpr (VL::SC == 16) {
        ldsm_x4_t(smem_u32(dvs + (lane & 15) * 16 + 8 * (lane >> 4)), dg[0], dg[1], dg[2], dg[3]);
    }
}

template <class VL>
__device__ __forceinline__ VScales unit_scales(const VL& vl, const __half* dvs,
                                               const unsigned (&dg)[4], int u, int lane) {
    VScales ds;
    const int tig = lane & 3;
#pragma unroll
    for (int j = 0; j < VL::NSG; ++j) {
        const int G = vl.group(u, j, lane);
        if constexpr (VL::SC == 8 || VL::SC == 16) {
            // the upper half (groups 8..15) is the same for every lane of the warp (kv_tile.cuh)
            const bool up = G >= 8;
            const int src = (G & 7) * 4 + tig;
            ds.d01[j] = __shfl_sync(0xffffffffu, up ? dg[2] : dg[0], src);
            ds.d89[j] = __shfl_sync(0xffffffffu, up ? dg[3] : dg[1], src);
        } else {
            const unsigned short* du = reinterpret_cast<const unsigned short*>(dvs) + G;
            ds.d01[j] = du[(2 * tig) * VL::SC] | ((unsigned)du[(2 * tig + 1) * VL::SC] << 16);
            ds.d89[j] = du[(2 * tig + 8) * VL::SC] | ((unsigned)du[(2 * tig + 9) * VL::SC] << 16);
        }
        ds.h01[j] = __hmul2(as_h2(ds.d01[j]), __float2half2_rn(0.5f));
        ds.h89[j] = __hmul2(as_h2(ds.d89[j]), __float2half2_rn(0.5f));
    }
    return ds;
}

// ---- O^T[dims of this warp, cols] += V'^T . P^T over the block's BT tokens -----------------------
template <class L, class VL, int NT8>
__device__ __forceinline__ void p_dot_v(const VL& vl, const unsigned char* vstage,
                                        unsigned vstage_u, const __half* dvstage, const __half* sP,
                                        int warp, int lane, float (&O)[2 * Cfg<NT8>::GPW][NT8][4]) {
    constexpr int NW = Cfg<NT8>::NW, GPW = Cfg<NT8>::GPW, PPLANE = Cfg<NT8>::BT * L::PST;
#pragma unroll
    for (int ks = 0; ks < NW; ++ks) {
        // P^T fragments of this 16-token step (hi, and lo for bf16 V), shared by all units
        unsigned pf[2][2][NT8];
        const unsigned pbase = smem_u32(sP + (ks * 16 + (lane & 15)) * L::PST);
#pragma unroll
        for (int pl = 0; pl < (VL::BF16 ? 2 : 1); ++pl)
#pragma unroll
            for (int n8 = 0; n8 < NT8; ++n8)
                ldsm_x2_t(pbase + 2 * pl * PPLANE + n8 * 16, pf[pl][0][n8], pf[pl][1][n8]);
        const __half* dvs = dvstage + ks * 16 * VL::SC;  // the step's 16 scale rows
        unsigned dg[4] = {0u, 0u, 0u, 0u};
        step_scales<VL>(dvs, lane, dg);
        const unsigned char* step = vstage + ks * 16 * VL::RL::RS;
        const unsigned step_u = vstage_u + ks * 16 * VL::RL::RS;
#pragma unroll
        for (int gl = 0; gl < GPW; ++gl) {
            const int u = Cfg<NT8>::group(warp, gl);
            const VScales ds = unit_scales(vl, dvs, dg, u, lane);
            unsigned a[2][4];
            vl.frags(step, step_u, u, ds, a);
#pragma unroll
            for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    mma16816_t<VL::BF16>(O[2 * gl + j][n8], a[j], pf[0][0][n8], pf[0][1][n8]);
                    if constexpr (VL::BF16)
                        mma16816_t<true>(O[2 * gl + j][n8], a[j], pf[1][0][n8], pf[1][1][n8]);
                }
        }
    }
}

template <class KL, class VL, int NT8, bool SEL>
__device__ __forceinline__ void partials_mma(
    const float* __restrict__ q, const unsigned char* __restrict__ kq,
    const __half* __restrict__ kd, const unsigned char* __restrict__ vq,
    const __half* __restrict__ vd, int max_t, int base_pos, int nb, const int* __restrict__ sel_idx,
    const int* __restrict__ sel_n, int sel_w, float qscale, float* __restrict__ m_out,
    float* __restrict__ l_out, float* __restrict__ o_out) {
    using L = Lay<KL, VL, NT8>;
    constexpr int NCOL = L::NCOL;
    constexpr int NW = Cfg<NT8>::NW, NT = Cfg<NT8>::NT, BT = Cfg<NT8>::BT, GPW = Cfg<NT8>::GPW;
    constexpr int NST = Cfg<NT8>::NST;
    constexpr int KRS = KL::RL::RS, VRS = VL::RL::RS;
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* sK = smem + L::K_OFF;
    unsigned char* sV = smem + L::V_OFF;
    __half* sDk = reinterpret_cast<__half*>(smem + L::DK_OFF);
    __half* sDv = reinterpret_cast<__half*>(smem + L::DV_OFF);
    uint4* sQ = reinterpret_cast<uint4*>(smem + L::Q_OFF);
    __half* sP = reinterpret_cast<__half*>(smem + L::P_OFF);
    float* sRed = reinterpret_cast<float*>(smem + L::RED_OFF);    // [NCOL][NW] warp maxima
    float* sL = reinterpret_cast<float*>(smem + L::L_OFF);        // [NW][NCOL] warp l
    float* sM = reinterpret_cast<float*>(smem + L::M_OFF);        // [NCOL]
    float* sQmax = reinterpret_cast<float*>(smem + L::QMAX_OFF);  // [NW]

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
        if constexpr (KL::SC > 0)
            copy_rows<KL::SC * 2, Packed<KL::SC * 2>, BT, NT>(smem_u32(sDk + buf * BT * KL::SC),
                                                              kd_g, t0, L0, L1, sel, tid);
        if constexpr (VL::SC > 0)
            copy_rows<VL::SC * 2, Packed<VL::SC * 2>, BT, NT>(smem_u32(sDv + buf * BT * VL::SC),
                                                              vd_g, t0, L0, L1, sel, tid);
    };

    // start the pipeline before the q preparation so the first bytes are already in flight
#pragma unroll
    for (int j = 0; j < NST - 1; ++j) {
        if (j < nblk) load_block(j);
        cp_commit();
    }
    const float sinv =
        prepare_q<KL, NT8>(q, g, nh, ncv, qscale, reinterpret_cast<unsigned*>(sQ), sQmax);

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

    const KL kl(lane);
    const VL vl(lane);
    for (int j = 0; j < nblk; ++j) {
        const int buf = j % NST;
        cp_wait<NST - 2>();
        __syncthreads();  // block j landed; block j-1 fully consumed
        if (j + NST - 1 < nblk) load_block(j + NST - 1);
        cp_commit();
        const int t0 = L0 + j * BT;

        float s[NT8][4];
        const unsigned char* ktile = sK + (buf * BT + warp * 16) * KRS;
        scores<KL, NT8>(kl, ktile, smem_u32(ktile), sDk + (buf * BT + warp * 16 + gid) * KL::SC, sQ,
                        lane, s);
        // mask per column (not needed where the warp's 16 positions are inside every row's range:
        // columns past ncv then see finite scores of a zero q, and nothing of theirs is written),
        // then the column max over the warp's 16 tokens
        const int tw = t0 + warp * 16;
        if (tw >= sp.I0 && tw + 16 <= sp.I1) {
#pragma unroll
            for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
                for (int i = 0; i < 4; ++i) s[n8][i] *= sinv;
        } else {
            const int ta = tw + gid, tb = ta + 8;
#pragma unroll
            for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
                for (int jj = 0; jj < 2; ++jj) {
                    const bool va = ta >= clo[n8][jj] && ta < chi[n8][jj];
                    const bool vb = tb >= clo[n8][jj] && tb < chi[n8][jj];
                    s[n8][jj] = va ? s[n8][jj] * sinv : -inf_f();
                    s[n8][2 + jj] = vb ? s[n8][2 + jj] * sinv : -inf_f();
                }
        }
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                float mx = fmaxf(s[n8][jj], s[n8][2 + jj]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                if (gid == 0) sRed[(n8 * 8 + 2 * tig + jj) * NW + warp] = mx;
            }
        __syncthreads();

        // ---- online softmax; P = p * 2^PS to shared memory ------------------------------------
        float alpha[NT8][2], pa[NT8][2], pb[NT8][2];
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const float* red = sRed + (n8 * 8 + 2 * tig + jj) * NW;
                float mb = red[0];
#pragma unroll
                for (int w = 1; w < NW; ++w) mb = fmaxf(mb, red[w]);
                const float mo = mrun[n8][jj];
                const float mn = fmaxf(mo, mb);
                alpha[n8][jj] = mo == mn ? 1.f : ex2(mo - mn);
                // ex2(-inf) = 0 covers masked scores; mn = -inf only when all of them are
                const float mz = mn == -inf_f() ? 0.f : mn;
                const float p0 = ex2(s[n8][jj] - mz), p1 = ex2(s[n8][2 + jj] - mz);
                lpart[n8][jj] = fmaf(lpart[n8][jj], alpha[n8][jj], p0 + p1);
                mrun[n8][jj] = mn;
                pa[n8][jj] = p0 * float(1 << MMA_PS);  // exact: the P scale 2^PS
                pb[n8][jj] = p1 * float(1 << MMA_PS);
            }
        // rescale O only when some column's max moved (late in a split it rarely does: the
        // multiplies by 1 are skipped, warp-uniformly, and the result is the same bit for bit)
        bool moved = false;
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8) moved |= alpha[n8][0] != 1.f || alpha[n8][1] != 1.f;
        if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
            for (int mt = 0; mt < 2 * GPW; ++mt)
#pragma unroll
                for (int n8 = 0; n8 < NT8; ++n8) {
                    O[mt][n8][0] *= alpha[n8][0];
                    O[mt][n8][1] *= alpha[n8][1];
                    O[mt][n8][2] *= alpha[n8][0];
                    O[mt][n8][3] *= alpha[n8][1];
                }
        }
        {
            // P once for every unit (the V scale goes into the A operand instead); bf16 V: the
            // hi plane, then the lo plane BT * PST halves further
            unsigned* pr = reinterpret_cast<unsigned*>(sP + (warp * 16 + gid) * L::PST + 2 * tig);
            constexpr int PPLANE = BT * L::PST / 2;  // in words
#pragma unroll
            for (int n8 = 0; n8 < NT8; ++n8) {
                if constexpr (VL::BF16) {
                    unsigned hi, lo;
                    split2<true>(pa[n8][0], pa[n8][1], hi, lo);
                    pr[n8 * 4] = hi;
                    pr[PPLANE + n8 * 4] = lo;
                    split2<true>(pb[n8][0], pb[n8][1], hi, lo);
                    pr[8 * L::PST / 2 + n8 * 4] = hi;
                    pr[PPLANE + 8 * L::PST / 2 + n8 * 4] = lo;
                } else {
                    pr[n8 * 4] = pack_h2(pa[n8][0], pa[n8][1]);
                    pr[8 * L::PST / 2 + n8 * 4] = pack_h2(pb[n8][0], pb[n8][1]);
                }
            }
        }
        __syncthreads();
        p_dot_v<L, VL, NT8>(vl, sV + buf * BT * VRS, smem_u32(sV + buf * BT * VRS),
                            sDv + buf * BT * VL::SC, sP, warp, lane, O);
    }
    cp_wait<0>();

    // ---- write m, l, o ------------------------------------------------------------------------
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
            float lv = lpart[n8][jj];
            lv += __shfl_xor_sync(0xffffffffu, lv, 4);
            lv += __shfl_xor_sync(0xffffffffu, lv, 8);
            lv += __shfl_xor_sync(0xffffffffu, lv, 16);
            if (gid == 0) {
                sL[warp * NCOL + n8 * 8 + 2 * tig + jj] = lv;
                if (warp == 0) sM[n8 * 8 + 2 * tig + jj] = mrun[n8][jj];
            }
        }
    __syncthreads();
    for (int c = tid; c < ncv; c += NT) {
        float lv = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) lv += sL[w * NCOL + c];
        const size_t at = ((size_t)(c / NREP) * S + split) * nh + g * NREP + c % NREP;
        m_out[at] = sM[c];
        l_out[at] = lv;
    }
    const float ounscale = 1.f / float(1 << MMA_PS);
#pragma unroll
    for (int mt = 0; mt < 2 * GPW; ++mt) {
        const int d = vl.dim(Cfg<NT8>::group(warp, mt / 2), mt & 1);
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const int c = n8 * 8 + 2 * tig + jj;
                if (c < ncv) {
                    float* dst =
                        o_out + (((size_t)(c / NREP) * S + split) * nh + g * NREP + c % NREP) * HD +
                        d;
                    const float lo = O[mt][n8][jj] * ounscale, hi = O[mt][n8][2 + jj] * ounscale;
                    if constexpr (VL::V_PAIR) {
                        *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
                    } else {
                        dst[0] = lo;
                        dst[8] = hi;
                    }
                }
            }
    }
}

}  // namespace mma_attn

// attn_partials_<kind>_mma_n<NT8>: dense rows (sel_idx, sel_n, sel_w are ignored);
// attn_partials_<kind>_mma_sel_n1: one row that may be selective (the wrapper's choice for nb = 1
// with sel_n given). Same parameters, so the wrapper launches all alike; scales are null for bf16.
#define ATTN_PARTIALS_MMA(KIND, KL, VL, SFX, NT8, SEL)                                             \
    extern "C" __global__ void __launch_bounds__(mma_attn::Cfg<NT8>::NT, 1)                        \
        attn_partials_##KIND##_mma_##SFX(                                                          \
            const float* q, const void* kq, const __half* kd, const void* vq, const __half* vd,    \
            int max_t, int base_pos, int nb, const int* sel_idx, const int* sel_n, int sel_w,      \
            float qscale, float* m_out, float* l_out, float* o_out) {                              \
        mma_attn::partials_mma<KL, VL, NT8, SEL>(                                                  \
            q, static_cast<const unsigned char*>(kq), kd, static_cast<const unsigned char*>(vq),   \
            vd, max_t, base_pos, nb, sel_idx, sel_n, sel_w, qscale, m_out, l_out, o_out);          \
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
    defined(MMA_KIND_bf16_turbo2)
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
#endif  // ATTN_HD 128 / 256
