// attention_mma.cu — q8/q8 split-T decode partials on tensor cores (mma.sync m16n8k16, fp16
// operands, fp32 accumulation): attn_partials_q8_mma_n<NT8> (dense rows, NT8 = 1..4) and
// attn_partials_q8_mma_sel_n1 (one row that may be selective), plus attn_mma_smem_bytes.
// Golden: qwenref/golden/attention.py attn_partials. Same outputs as attention_v1.cu's
// attn_partials_q8_q8 (m, l [nb, S, nh], o [nb, S, nh, hd], golden's per-row split_bounds;
// attention_combine.cu merges them), for all nb rows of a batch in ONE CTA per (kv head, split):
// K/V bytes are read and converted once for every row.
// Launch: grid (nkv, S), block Cfg<NT8>::NW*32 (4 warps; -DMMA_NW=8 allowed at hd 256), dynamic
// shared memory Lay<NT8>::BYTES (Cfg, Lay: attention_mma.cuh; attn_mma_smem_bytes reports it;
// > 48 KB: the wrapper raises the limit; more than a block may opt into on this device: the
// plan runs v1 instead). NT8 = ceil(nb*NREP / 8) column tiles: column c = b*NREP + r (row b,
// q head g*NREP + r) is the MMA's N dimension, padded to 8*NT8. Only hd 128 / 256 (the wrapper
// uses v1 otherwise); shape -DATTN_HD, -DATTN_NREP (attention.cuh); knobs -DMMA_NW,
// -DMMA_NSTAGE, -DMMA_UNROLL_G. Sparse V uses v1.
// Bytes per kv head, T tokens of the rows' union, for all rows together: K+V int8 2*T*hd and
// scales 2*T*(hd/32)*2 (hd 256: 544 B per token), plus q (nb*nh*hd*4) and the partials
// nb*S*nh*(hd+2)*4 (read again by the combine). At nb 1 the kernel runs at the copy rate.
// Precision (vs golden float64): scores ~2^-22 relative (q as fp16 hi + lo; int8 exact; fp32
// sums), like v1. P.V rounds twice to fp16, p * 2^PS and code * d_v, each with relative error
// <= u = 2^-11, so each term p_t v_t is off by <= 2u + u^2 relative and |o - o_golden| <=
// (2u + u^2) * sum_t p_t |v_t| (+ float32 terms): at most ~2^-10 * max|v| on the output,
// typically far less (independent roundings average out). Range: |code * d_v| <= 65504 (|v| up
// to ~65000 before quantization); a V' below 2^-14 (groups with max|v| < 127 * 2^-14 ~ 0.0078)
// is subnormal, with an absolute error <= 2^-25 instead.
// Rungs of the attention family:
//   v0   attention_v0.cu: attention_v0_<K>_<V>, a warp per (row, q head), one pass, no partials
//   v1   attention_v1.cu + attention_combine.cu: CUDA-core split-T partials, every kind pair
//   mma  attention_mma.cu (this file) + attention_combine.cu: q8/q8 partials on tensor cores

#include <cuda_fp16.h>

#include "attention.cuh"
#include "mma_ptx.cuh"

// =============================================================================================
// Per CTA the token range is the union of the rows' split ranges [lo_b, hi_b) (golden's
// split_bounds(base_pos + b + 1, S), so partials equal v1's/golden's); column c only sees tokens
// in its row's range (others are -inf for it). Blocks of BT = 16*NW tokens stream through an
// NSTAGE-deep cp.async pipeline (16-byte copies, 16-byte chunks XOR-swizzled by token & 7 so the
// ldmatrix reads are bank-conflict free; tokens past the range are zero-filled). Per block:
//  A (scores)  warp w takes tokens [16w, 16w+16):
//              S^T[t, c] = sum_g d_k[t,g] * (K[t, g] . Q^T[g, c])
//              with A = K (ldmatrix, int8 -> fp16 exact by PRMT(x ^ 0x80, 0x64) - 1152), B = q as
//              fp16 hi + lo (two MMAs, ~22 bits; q pre-scaled by hd^-0.5*log2e*2^e, e a power of
//              two per CTA putting max|q| in [2^13, 2^14): no fp16 overflow, lo never subnormal
//              in a way that matters), one fresh fp32 C per 32-dim group, then FFMA by d_k.
//              Column max over the warp's 16 tokens -> shared memory.
//  B (softmax) every thread combines the NW warp maxima of its columns (all warps hold the same
//              running max m), alpha = 2^(m_old - m_new), p = 2^(s - m_new), per-thread partial l,
//              and writes P[t][c] = fp16(p * 2^PS) (2^PS keeps P normal) to shared memory.
//  C (P.V)     each warp owns NG/NW groups of dims (Cfg::group):
//              O^T[dims, c] += V'^T[dims, t] . P^T[t, c],
//              A = V'^T via ldmatrix.trans (token pairs per dim), int8 -> fp16 by PRMT, then times
//              the half2 of the two tokens' scales (HMUL2: V' = fp16(code * d_v), the V scale
//              folded into the A operand), B = P^T via ldmatrix.trans, once per 16 tokens for all
//              groups. O^T accumulators stay in registers across blocks (rescaled by alpha).
//              (Folding d_v into P instead, P'[g] = fp16(p * d_v[g]) per group, needs NG times
//              the P buffer and its FMUL/F2FP per group: slower, docs/tuning-log.md.)
// End: l summed over lanes and warps; o = O * 2^-PS written straight from the accumulators.
//
// Keep `python -m qwenref.gpu.compile_check` at 0 bytes stack frame: a register array indexed
// inside a partly unrolled group loop goes to local memory, and that costs far more than it
// saves. One selective row (nb 1) reads its token list through sel_idx in
// attn_partials_q8_mma_sel_n1.
// =============================================================================================

#ifndef MMA_NW
#define MMA_NW 0  // warps per CTA; 0 = Cfg's rule (attention_mma.cuh)
#endif
// the mma kernels exist only for hd 128 / 256 (the wrapper uses v1 otherwise)
#if (ATTN_HD == 128 || ATTN_HD == 256) && (MMA_NW == 0 || (ATTN_HD / 32) % MMA_NW == 0)
#include "attention_mma.cuh"

namespace mma_attn {

template <int NT8, bool SEL>
__device__ __forceinline__ void partials_q8_mma(
    const float* __restrict__ q, const signed char* __restrict__ kq, const __half* __restrict__ kd,
    const signed char* __restrict__ vq, const __half* __restrict__ vd, int max_t, int base_pos,
    int nb, const int* __restrict__ sel_idx, const int* __restrict__ sel_n, int sel_w, float qscale,
    float* __restrict__ m_out, float* __restrict__ l_out, float* __restrict__ o_out) {
    using L = Lay<NT8>;
    constexpr int NCOL = L::NCOL;
    constexpr int NW = Cfg<NT8>::NW, NT = Cfg<NT8>::NT, BT = Cfg<NT8>::BT, GPW = Cfg<NT8>::GPW;
    constexpr int NST = Cfg<NT8>::NST;
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

    // ---- per-row split ranges and their union -------------------------------------------------
    // [I0, I1): positions inside every row's range (empty when a row's split is empty); a warp
    // whose 16 positions all lie there skips the mask
    int L0 = 0x7fffffff, L1 = 0, I0 = 0, I1 = 0x7fffffff;
    for (int b = 0; b < nb; ++b) {
        int lo, hi;
        split_range(row_len(b), S, split, lo, hi);
        if (lo < hi) {
            L0 = min(L0, lo);
            L1 = max(L1, hi);
        }
        I0 = max(I0, lo);
        I1 = min(I1, hi);
    }
    if (L0 >= L1) {  // every row's split is empty (golden: -inf, 0, 0)
        for (int p = tid; p < ncv * HD; p += NT) {
            const int c = p / HD, b = c / NREP, r = c % NREP;
            o_out[(((size_t)b * S + split) * nh + g * NREP + r) * HD + p % HD] = 0.f;
        }
        for (int c = tid; c < ncv; c += NT) {
            const int b = c / NREP, r = c % NREP;
            m_out[((size_t)b * S + split) * nh + g * NREP + r] = -inf_f();
            l_out[((size_t)b * S + split) * nh + g * NREP + r] = 0.f;
        }
        return;
    }
    const int nblk = (L1 - L0 + BT - 1) / BT;
    const size_t row0 = (size_t)g * max_t;

    // this thread's copies: chunk lch_ of tokens ltok0 + i*TSTEP (TSTEP a multiple of 8, so the
    // swizzle is the same for all of them); the scale row of token tid (tid < BT)
    constexpr int TSTEP = NT / NCH;
    static_assert(NT % NCH == 0 && TSTEP % 8 == 0 && BT % TSTEP == 0, "copy layout");
    const int lch_ = tid % NCH, ltok0 = tid / NCH;
    const signed char* kq_t = kq + row0 * HD + lch_ * 16;
    const signed char* vq_t = vq + row0 * HD + lch_ * 16;
    const unsigned sK_t = smem_u32(sK) + ltok0 * HD + ((lch_ ^ (ltok0 & 7)) << 4);
    const unsigned sV_t = smem_u32(sV) + ltok0 * HD + ((lch_ ^ (ltok0 & 7)) << 4);
    const __half* kd_t = kd + row0 * NG;
    const __half* vd_t = vd + row0 * NG;
    const unsigned sDk_t = smem_u32(sDk + tid * NG), sDv_t = smem_u32(sDv + tid * NG);
    auto load_block = [&](int j) {
        const int buf = j % NST;
        const int t0 = L0 + j * BT;
        if (sel == nullptr && t0 + BT <= L1) {
            // a dense block inside the range (all but the last): one base address per side and
            // constant offsets (the general path below costs ~100 integer instructions per block)
            const size_t off = (size_t)(t0 + ltok0) * HD;
            const unsigned dst = buf * BT * HD;
#pragma unroll
            for (int i = 0; i < BT / TSTEP; ++i) {
                cp_async16(sK_t + dst + i * TSTEP * HD, kq_t + off + i * TSTEP * HD, true);
                cp_async16(sV_t + dst + i * TSTEP * HD, vq_t + off + i * TSTEP * HD, true);
            }
        } else {
#pragma unroll
            for (int i = 0; i < BT / TSTEP; ++i) {
                const int t = t0 + ltok0 + i * TSTEP;
                const bool ok = t < L1;
                const int pos = ok ? t : L0;
                const size_t off = (size_t)(sel != nullptr ? sel[pos] : pos) * HD;
                const unsigned dst = (buf * BT + i * TSTEP) * HD;
                cp_async16(sK_t + dst, kq_t + off, ok);
                cp_async16(sV_t + dst, vq_t + off, ok);
            }
        }
        if (tid < BT) {
            const int t = t0 + tid;
            const bool ok = t < L1;
            const int pos = ok ? t : L0;
            const size_t off = (size_t)(sel != nullptr ? sel[pos] : pos) * NG;
            const unsigned dst = buf * BT * NG * 2;
            if constexpr (NG == 8) {
                cp_async16(sDk_t + dst, kd_t + off, ok);
                cp_async16(sDv_t + dst, vd_t + off, ok);
            } else {
                cp_async8(sDk_t + dst, kd_t + off, ok);
                cp_async8(sDv_t + dst, vd_t + off, ok);
            }
        }
    };

    // start the pipeline before the q preparation so the first bytes are already in flight
#pragma unroll
    for (int j = 0; j < NST - 1; ++j) {
        if (j < nblk) load_block(j);
        cp_commit();
    }

    // ---- q: scale, max, power-of-two pre-scale, fp16 hi/lo fragments --------------------------
    // One pass over global memory with every load in flight: a thread holds NQ4 float4s of q
    // (column c, dims 4*d4 .. 4*d4+3), and each float4 is exactly one fragment entry sQ[p], so
    // the same thread writes it after the max (not two strided loops with one load per round
    // trip: docs/tuning-log.md).
    const float* qg = q + (size_t)g * NREP * HD;  // row b: + b*nh*HD
    constexpr int NQ4 = NCOL * HD / 4 / NT;
    static_assert((NCOL * HD / 4) % NT == 0, "q float4 layout");
    float4 qv[NQ4];
#pragma unroll
    for (int i = 0; i < NQ4; ++i) {
        const int p4 = tid + i * NT, c = p4 / (HD / 4), d4 = p4 % (HD / 4);
        qv[i] = c < ncv ? *reinterpret_cast<const float4*>(
                              qg + ((size_t)(c / NREP) * nh + c % NREP) * HD + 4 * d4)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float qmax = 0.f;
#pragma unroll
    for (int i = 0; i < NQ4; ++i)
        qmax = fmaxf(fmaxf(fmaxf(qmax, fabsf(qv[i].x * qscale)), fabsf(qv[i].y * qscale)),
                     fmaxf(fabsf(qv[i].z * qscale), fabsf(qv[i].w * qscale)));
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
    const float sinv = ldexpf(1.f, -e);  // scores = (accumulated) * 2^-e
#pragma unroll
    for (int i = 0; i < NQ4; ++i) {
        // fragment entry of (c, d4): chunk d4 / 4, n8 = c / 8, lane (c % 8) * 4 + d4 % 4
        const int p4 = tid + i * NT, c = p4 / (HD / 4), d4 = p4 % (HD / 4);
        const float x[4] = {qv[i].x * qmul, qv[i].y * qmul, qv[i].z * qmul, qv[i].w * qmul};
        float hi[4], lo[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            hi[k] = __half2float(__float2half_rn(x[k]));
            lo[k] = x[k] - hi[k];  // exact in fp32
        }
        sQ[((d4 / 4) * NT8 + c / 8) * 32 + (c % 8) * 4 + d4 % 4] =
            make_uint4(pack_h2(hi[0], hi[1]), pack_h2(hi[2], hi[3]), pack_h2(lo[0], lo[1]),
                       pack_h2(lo[2], lo[3]));
    }

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

    // ldmatrix row of this lane inside a 16-token step: matrices (tokens 0-7 | 8-15) x (chunk
    // c | c+1); its swizzle key is row & 7 = lane & 7
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;
    const int lch = lane >> 4;
    const int swz = lane & 7;

    for (int j = 0; j < nblk; ++j) {
        const int buf = j % NST;
        cp_wait<NST - 2>();
        __syncthreads();  // block j landed; block j-1 fully consumed
        if (j + NST - 1 < nblk) load_block(j + NST - 1);
        cp_commit();
        const int t0 = L0 + j * BT;

        // ---- A: scores of this warp's 16 tokens ------------------------------------------------
        float s[NT8][4];
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[n8][i] = 0.f;
        {
            const int trow = warp * 16 + lrow;
            const unsigned kbase = smem_u32(sK + (buf * BT + trow) * HD);
            // d_k read per group from shared memory (where this loop is only partly unrolled, a
            // preloaded register array indexed by gi goes to local memory)
            const __half* dkr = sDk + (buf * BT + warp * 16 + gid) * NG;
#pragma unroll Cfg < NT8> ::UG
            for (int gi = 0; gi < NG; ++gi) {
                unsigned r0, r1, r2, r3;
                ldsm_x4(kbase + (((2 * gi + lch) ^ swz) << 4), r0, r1, r2, r3);
                r0 ^= 0x80808080u;
                r1 ^= 0x80808080u;
                r2 ^= 0x80808080u;
                r3 ^= 0x80808080u;
                const unsigned a00 = i8x2_to_h2(r0, 0x0504), a01 = i8x2_to_h2(r1, 0x0504),
                               a02 = i8x2_to_h2(r0, 0x0706), a03 = i8x2_to_h2(r1, 0x0706);
                const unsigned a10 = i8x2_to_h2(r2, 0x0504), a11 = i8x2_to_h2(r3, 0x0504),
                               a12 = i8x2_to_h2(r2, 0x0706), a13 = i8x2_to_h2(r3, 0x0706);
                const float dk0 = __half2float(dkr[gi]), dk1 = __half2float(dkr[8 * NG + gi]);
#pragma unroll
                for (int n8 = 0; n8 < NT8; ++n8) {
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
                    const uint4 q0 = sQ[((2 * gi) * NT8 + n8) * 32 + lane];
                    const uint4 q1 = sQ[((2 * gi + 1) * NT8 + n8) * 32 + lane];
                    mma16816(c, a00, a01, a02, a03, q0.x, q0.y);
                    mma16816(c, a00, a01, a02, a03, q0.z, q0.w);
                    mma16816(c, a10, a11, a12, a13, q1.x, q1.y);
                    mma16816(c, a10, a11, a12, a13, q1.z, q1.w);
                    s[n8][0] = fmaf(dk0, c[0], s[n8][0]);
                    s[n8][1] = fmaf(dk0, c[1], s[n8][1]);
                    s[n8][2] = fmaf(dk1, c[2], s[n8][2]);
                    s[n8][3] = fmaf(dk1, c[3], s[n8][3]);
                }
            }
        }
        // mask per column (not needed where the warp's 16 positions are inside every row's range:
        // columns past ncv then see finite scores of a zero q, and nothing of theirs is written),
        // then the column max over the warp's 16 tokens
        const int tw = t0 + warp * 16;
        if (tw >= I0 && tw + 16 <= I1) {
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

        // ---- B: online softmax; P = fp16(p * 2^PS) to shared memory ------------------------------
        // ---- C: O^T[dims of this warp, cols] += V'^T . P^T, V' = fp16(code * d_v) ----------------
        float alpha[NT8][2];
        float pa[NT8][2], pb[NT8][2];
        {
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
            // P = fp16(p * 2^PS) once for every group: the V scale goes into the A operand instead
            unsigned* pr = reinterpret_cast<unsigned*>(sP + (warp * 16 + gid) * L::PST + 2 * tig);
#pragma unroll
            for (int n8 = 0; n8 < NT8; ++n8) {
                pr[n8 * 4] = pack_h2(pa[n8][0], pa[n8][1]);
                pr[8 * L::PST / 2 + n8 * 4] = pack_h2(pb[n8][0], pb[n8][1]);
            }
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < NW; ++ks) {
            const unsigned vbase = smem_u32(sV + (buf * BT + ks * 16 + lrow) * HD);
            // P^T fragments of this 16-token step, shared by all of the warp's groups
            unsigned pf0[NT8], pf1[NT8];
            const unsigned pbase = smem_u32(sP + (ks * 16 + (lane & 15)) * L::PST);
#pragma unroll
            for (int n8 = 0; n8 < NT8; ++n8) ldsm_x2_t(pbase + n8 * 16, pf0[n8], pf1[n8]);
            const __half* dvs = sDv + (buf * BT + ks * 16) * NG;  // the step's 16 scale rows
            unsigned dg0 = 0u, dg1 = 0u;
            if constexpr (NG == 8) {
                // ldmatrix.trans of the [16 tokens][8 groups] scales: this lane gets group gid's
                // half2 of tokens (2tig, 2tig+1) in dg0 and (8+2tig, 9+2tig) in dg1
                ldsm_x2_t(smem_u32(dvs + (lane & 15) * NG), dg0, dg1);
            }
#pragma unroll
            for (int gl = 0; gl < GPW; ++gl) {
                const int G = Cfg<NT8>::group(warp, gl);
                // half2 V scales of tokens (2tig, 2tig+1) and (8+2tig, 9+2tig) of group G: the A
                // fragment's k pairs (lower token in the lower half, as ldmatrix.trans puts it)
                unsigned d01, d89;
                if constexpr (NG == 8) {
                    d01 = __shfl_sync(0xffffffffu, dg0, G * 4 + tig);
                    d89 = __shfl_sync(0xffffffffu, dg1, G * 4 + tig);
                } else {
                    const unsigned short* du = reinterpret_cast<const unsigned short*>(dvs) + G;
                    d01 = du[(2 * tig) * NG] | ((unsigned)du[(2 * tig + 1) * NG] << 16);
                    d89 = du[(2 * tig + 8) * NG] | ((unsigned)du[(2 * tig + 9) * NG] << 16);
                }
                unsigned r0, r1, r2, r3;
                ldsm_x4_t(vbase + (((2 * G + lch) ^ swz) << 4), r0, r1, r2, r3);
                r0 ^= 0x80808080u;
                r1 ^= 0x80808080u;
                r2 ^= 0x80808080u;
                r3 ^= 0x80808080u;
                const unsigned a00 = i8x2_to_h2_scaled(r0, 0x0604, d01),
                               a01 = i8x2_to_h2_scaled(r0, 0x0705, d01),
                               a02 = i8x2_to_h2_scaled(r1, 0x0604, d89),
                               a03 = i8x2_to_h2_scaled(r1, 0x0705, d89);
                const unsigned a10 = i8x2_to_h2_scaled(r2, 0x0604, d01),
                               a11 = i8x2_to_h2_scaled(r2, 0x0705, d01),
                               a12 = i8x2_to_h2_scaled(r3, 0x0604, d89),
                               a13 = i8x2_to_h2_scaled(r3, 0x0705, d89);
#pragma unroll
                for (int n8 = 0; n8 < NT8; ++n8) {
                    mma16816(O[2 * gl][n8], a00, a01, a02, a03, pf0[n8], pf1[n8]);
                    mma16816(O[2 * gl + 1][n8], a10, a11, a12, a13, pf0[n8], pf1[n8]);
                }
            }
        }
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
        const int d = 16 * (2 * Cfg<NT8>::group(warp, mt / 2) + (mt & 1)) + 2 * gid;
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const int c = n8 * 8 + 2 * tig + jj;
                if (c < ncv) {
                    float* dst =
                        o_out + (((size_t)(c / NREP) * S + split) * nh + g * NREP + c % NREP) * HD +
                        d;
                    *reinterpret_cast<float2*>(dst) =
                        make_float2(O[mt][n8][jj] * ounscale, O[mt][n8][2 + jj] * ounscale);
                }
            }
    }
}

}  // namespace mma_attn

// attn_partials_q8_mma_n<NT8>: dense rows (sel_idx, sel_n, sel_w are ignored);
// attn_partials_q8_mma_sel_n1: one row that may be selective (the wrapper's choice for nb = 1
// with sel_n given). Same parameters, so the wrapper launches both alike.
#define ATTN_PARTIALS_MMA(SFX, NT8, SEL)                                                           \
    extern "C" __global__ void __launch_bounds__(mma_attn::Cfg<NT8>::NT, 1)                        \
        attn_partials_q8_mma_##SFX(                                                                \
            const float* q, const signed char* kq, const __half* kd, const signed char* vq,        \
            const __half* vd, int max_t, int base_pos, int nb, const int* sel_idx,                 \
            const int* sel_n, int sel_w, float qscale, float* m_out, float* l_out, float* o_out) { \
        mma_attn::partials_q8_mma<NT8, SEL>(q, kq, kd, vq, vd, max_t, base_pos, nb, sel_idx,       \
                                            sel_n, sel_w, qscale, m_out, l_out, o_out);            \
    }
ATTN_PARTIALS_MMA(n1, 1, false)
ATTN_PARTIALS_MMA(n2, 2, false)
ATTN_PARTIALS_MMA(n3, 3, false)
ATTN_PARTIALS_MMA(n4, 4, false)
ATTN_PARTIALS_MMA(sel_n1, 1, true)

// dynamic shared memory of attn_partials_q8_mma_n<NT8> (bytes), for the wrapper
extern "C" __global__ void attn_mma_smem_bytes(int* out) {
    out[0] = mma_attn::Lay<1>::BYTES;
    out[1] = mma_attn::Lay<2>::BYTES;
    out[2] = mma_attn::Lay<3>::BYTES;
    out[3] = mma_attn::Lay<4>::BYTES;
}
#endif  // ATTN_HD 128 / 256
