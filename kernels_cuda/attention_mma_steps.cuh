// attention_mma_steps.cuh — the steps of the tensor-core partials (attention_mma.cu), each one
// function the kernel body calls in order: the CTA's token range (row_span, write_empty), the
// cp.async copies of a block's rows (copy_rows), q's B fragments (prepare_q), the scores of a
// warp's 16 tokens (scores), their mask and column maxima (mask_and_max), the online softmax
// with P to shared memory (online_softmax), O += V'^T P^T (p_dot_v with the V scales of
// step_scales / unit_scales) and the partials written out (write_partials). The tile loaders
// they take (KL, VL) are kv_tile.cuh's. attention_mma.cu includes it inside its guard.
#ifndef QWENREF_ATTENTION_MMA_STEPS_CUH
#define QWENREF_ATTENTION_MMA_STEPS_CUH

#include <cuda_fp16.h>

#include "attention.cuh"
#include "attention_mma.cuh"
#include "kv_tile.cuh"
#include "mma_ptx.cuh"
#include "tq_signs.cuh"
#include "wht_regs.cuh"

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
// k-indices (2tig, 2tig+1) / (2tig+8, 2tig+9), a dim d taking the place KL::qpos(d) of that
// order. Returns 2^-e, the factor that undoes the scale.
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
            if constexpr (KL::SIGNS)  // tq: q' = wht(s ⊙ q)
#pragma unroll
                for (int k = 0; k < E; ++k)
                    v[i][k] = __uint_as_float(__float_as_uint(v[i][k]) ^ tq_sign_bit(E * lane + k));
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
        for (int m = 0; m < E / 2; ++m) {  // the half2 of dims k, k + QPAIR
            const int k = m % KL::QPAIR + 2 * KL::QPAIR * (m / KL::QPAIR);
            const int k2 = k + KL::QPAIR;
            const int d = KL::qpos(E * lane + k), ks = d / 16, o16 = d % 16;
            const int tig = KL::PERM ? o16 / 4 : (o16 % 8) / 2;
            const int slot = KL::PERM ? (o16 % 4) / 2 : o16 / 8;
            unsigned hi, lo;
            // KL::qf: the power of two a K loader's operand carries for dim % 4 (E % 4 == 0)
            split2<KL::BF16>(v[i][k] * (qmul * KL::qf(k % 4)), v[i][k2] * (qmul * KL::qf(k2 % 4)),
                             hi, lo);
            unsigned* entry = sQw + 4 * (((ks * NT8 + c / 8) * 32) + (c % 8) * 4 + tig);
            entry[slot] = hi;
            entry[2 + slot] = lo;
        }
    }
    return ldexpf(1.f, -e);
}

// ---- scores of the warp's 16 tokens for every column --------------------------------------------
// K without a scale per group (bf16, tq): the MMAs accumulate in place, in NA chains per column
// tile taken by the units in turn (independent chains keep the tensor pipe issuing; one fresh C
// per unit summed by FADDs cost 4 NT8 FADDs a unit), summed at the end. NA * NT8 chains: 4 at one
// tile, 4 or 6 at two or three, 4 at four (no more: NT8 = 4 is at the register limit).
template <class KL, int NT8>
__device__ __forceinline__ void scores_unscaled(const KL& kl, const unsigned char* ktile,
                                                unsigned ktile_u, const uint4* sQ, int lane,
                                                float (&s)[NT8][4]) {
    constexpr int NA = NT8 == 1 ? 4 : (NT8 <= 3 ? 2 : 1);
    static_assert(Cfg<NT8>::UG % NA == 0, "the chain of a unit must be known at compile time");
    float acc[NT8][NA][4];
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int c = 0; c < NA; ++c)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[n8][c][i] = 0.f;
#pragma unroll Cfg < NT8> ::UG
    for (int gi = 0; gi < NG; ++gi) {
        unsigned a[2][4];
        kl.frags(ktile, ktile_u, gi, a);
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8) {
            const uint4 q0 = sQ[((2 * gi) * NT8 + n8) * 32 + lane];
            const uint4 q1 = sQ[((2 * gi + 1) * NT8 + n8) * 32 + lane];
            float (&c)[4] = acc[n8][gi % NA];
            mma16816_t<KL::BF16>(c, a[0], q0.x, q0.y);
            mma16816_t<KL::BF16>(c, a[0], q0.z, q0.w);
            mma16816_t<KL::BF16>(c, a[1], q1.x, q1.y);
            mma16816_t<KL::BF16>(c, a[1], q1.z, q1.w);
        }
    }
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float t = acc[n8][0][i];
#pragma unroll
            for (int c = 1; c < NA; ++c) t += acc[n8][c][i];
            s[n8][i] = t;
        }
}

// K with a scale per group (q8, turbo): one fresh C per group, then FFMA by d_k
template <class KL, int NT8>
__device__ __forceinline__ void scores_scaled(const KL& kl, const unsigned char* ktile,
                                              unsigned ktile_u, const __half* dkr, const uint4* sQ,
                                              int lane, float (&s)[NT8][4]) {
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
                s[n8][0] = fmaf(dk0[k], c[k][0], s[n8][0]);
                s[n8][1] = fmaf(dk0[k], c[k][1], s[n8][1]);
                s[n8][2] = fmaf(dk1[k], c[k][2], s[n8][2]);
                s[n8][3] = fmaf(dk1[k], c[k][3], s[n8][3]);
            }
        }
    }
}

template <class KL, int NT8>
__device__ __forceinline__ void scores(const KL& kl, const unsigned char* ktile, unsigned ktile_u,
                                       const __half* dkr, const uint4* sQ, int lane,
                                       float (&s)[NT8][4]) {
    if constexpr (KL::KPS == 0) {
        scores_unscaled<KL, NT8>(kl, ktile, ktile_u, sQ, lane, s);
    } else {
        scores_scaled<KL, NT8>(kl, ktile, ktile_u, dkr, sQ, lane, s);
    }
    if constexpr (KL::ROW_SCALE) {  // tq: one gamma per token multiplies its whole score
        const float g0 = __half2float(dkr[0]), g1 = __half2float(dkr[8 * KL::SC]);
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8) {
            s[n8][0] *= g0;
            s[n8][1] *= g0;
            s[n8][2] *= g1;
            s[n8][3] *= g1;
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

// ---- scores to log2 units, -inf outside each column's range; column maxima to sRed ----------------
// The mask is not needed where the warp's 16 positions (from tw) are inside every row's range:
// columns past ncv then see finite scores of a zero q, and nothing of theirs is written.
template <int NT8>
__device__ __forceinline__ void mask_and_max(float (&s)[NT8][4], int tw, const Span& sp,
                                             const int (&clo)[NT8][2], const int (&chi)[NT8][2],
                                             float sinv, float* sRed, int warp, int lane) {
    constexpr int NW = Cfg<NT8>::NW;
    const int gid = lane >> 2, tig = lane & 3;
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
}

// ---- online softmax: running max and l per column, O rescaled, P = p * 2^PS to shared memory --
// Every thread combines the NW warp maxima of its columns (all warps hold the same running max),
// alpha = 2^(m_old - m_new), p = 2^(s - m_new); bf16 V: P as bf16 hi and lo planes; a tq V:
// P times the token's gamma (dvr: the V scale row of the thread's token gid) and vinv (1/f: the
// table holds f times the codebook).
template <class L, class VL, int NT8>
__device__ __forceinline__ void online_softmax(const float (&s)[NT8][4], const float* sRed,
                                               float (&mrun)[NT8][2], float (&lpart)[NT8][2],
                                               float (&O)[2 * Cfg<NT8>::GPW][NT8][4], __half* sP,
                                               const __half* dvr, float vinv, int warp, int lane) {
    constexpr int NW = Cfg<NT8>::NW, GPW = Cfg<NT8>::GPW, BT = Cfg<NT8>::BT;
    const int gid = lane >> 2, tig = lane & 3;
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
            if constexpr (VL::ROW_SCALE) {  // tq: V's gamma of tokens gid, gid + 8 goes into P
                pa[n8][jj] *= __half2float(dvr[0]) * vinv;
                pb[n8][jj] *= __half2float(dvr[8 * VL::SC]) * vinv;
            }
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
}

// ---- m, l and o of every valid column ----------------------------------------------------------
template <class L, int NT8, class VL>
__device__ __forceinline__ void write_partials(const VL& vl, const float (&mrun)[NT8][2],
                                               const float (&lpart)[NT8][2],
                                               const float (&O)[2 * Cfg<NT8>::GPW][NT8][4],
                                               float* sL, float* sM, int ncv, int S, int split,
                                               int g, int nh, float* __restrict__ m_out,
                                               float* __restrict__ l_out,
                                               float* __restrict__ o_out) {
    constexpr int NW = Cfg<NT8>::NW, NT = Cfg<NT8>::NT, GPW = Cfg<NT8>::GPW, NCOL = L::NCOL;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
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

#endif  // QWENREF_ATTENTION_MMA_STEPS_CUH
