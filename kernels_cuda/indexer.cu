// indexer.cu — the QSA block indexer's queries, block keys and block scores (v1); the top-k
// block selection is indexer_select.cu. Golden: qwenref/golden/indexer.py. R = compress ratio,
// rd = rotary width, inh heads of width ihd (<= MAX_IHD = 512). Kernels:
//   indexer_norm_rope     per query vector (row b, head h): zero-centred RMSNorm with q_norm_w,
//                         then rotate-half RoPE at positions[b]. grid (nb*inh), block 128.
//   indexer_block_keys    per block j in [j0, j0+nj): mean of raw keys jR..jR+R-1 (float64 sum,
//                         like golden), RMSNorm with k_norm_w, RoPE at position jR -> blk_keys[j].
//                         grid (nj), block 128.
//   indexer_block_scores  score[b, j] = sum_h relu(q[b,h] . bkey_j) * ihd^-0.5 for
//                         j < (base_pos+b+1)//R, -inf for the rest of the row. grid
//                         (ceil(nblk/16), nb), block 512 (a warp per block key, 8 heads at a
//                         time), q[b] in dynamic shared memory as float64 (inh*ihd*8 bytes).
// Bytes: keys read R*ihd*4 and write ihd*4 a block; scores read nblk*ihd*4 block-key bytes per
// row (T = 128k, R = 64, ihd = 128: 1 MiB) and write nblk*4. Small next to attention's K/V
// traffic, so the kernels are written for exactness first.
// Precision vs golden: golden accumulates the block mean and the scores in float64 and rounds
// once; so do these kernels (the products of float32 values are exact in float64, only the
// summation order differs, ~1e-16 relative), so the float32 scores match golden's except when a
// float64 sum lies within ~1e-16 of a float32 rounding boundary. RMSNorm is float32 as golden
// (sum of squares in float64, rounded once: within an ulp of golden's pairwise float32 mean).
// RoPE: inv_freq, angles, cos/sin and the rotation in float64, rounded once, as golden (the
// angle-sensitive selection is why: float32 angles at position 1e5 err by ~1e-2 rad). Cost: a
// few float64 sincos per vector, nothing next to the scoring.
// Rungs of the indexer families (update_block_keys, block_scores, select):
//   v0  indexer_v0.cu: a thread per block key, per (row, block) score, per row's selection
//   v1  indexer.cu (this file: indexer_block_keys, indexer_block_scores) + indexer_select.cu
//       (indexer_select_i<ITEMS>_q<Q>: a CTA per row)

#include <cuda_fp16.h>

namespace {

// NVRTC compiles without <math.h>: no infinity macro there
__device__ __forceinline__ float inf_f() { return __int_as_float(0x7f800000); }
constexpr int MAX_IHD = 512;

__device__ __forceinline__ double warp_sum_d(double x) {
#pragma unroll
    for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Block-wide sum (any blockDim that is a multiple of 32, <= 1024); every thread gets the total.
__device__ double block_sum_d(double x, double* s_red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    x = warp_sum_d(x);
    __syncthreads();
    if (lane == 0) s_red[warp] = x;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < nw; ++w) t += s_red[w];  // fixed order: deterministic
    return t;
}

// x[0..n) in shared memory -> zero-centred RMSNorm (golden norm.rms_norm, float32:
// y = (x * (1 / sqrt(mean(x^2) + eps))) * (1 + w)) then rotate-half RoPE on dims [0, rd) at
// position pos in float64 (golden rope.apply_rope), written to out[0..n). Whole block.
__device__ void norm_rope_block(float* x, int n, const float* __restrict__ w, float eps, int rd,
                                double theta, long long pos, float* __restrict__ out,
                                double* s_red) {
    double ss = 0.0;
    for (int d = threadIdx.x; d < n; d += blockDim.x) ss += double(x[d]) * double(x[d]);
    ss = block_sum_d(ss, s_red);
    const float ms = float(ss / double(n));
    const float rstd = 1.f / sqrtf(ms + eps);
    __syncthreads();
    for (int d = threadIdx.x; d < n; d += blockDim.x) x[d] = (x[d] * rstd) * (1.f + w[d]);
    __syncthreads();
    const int half = rd / 2;
    for (int d = threadIdx.x; d < n; d += blockDim.x) {
        if (d < rd) {
            const int i = d < half ? d : d - half;
            const double inv_freq = pow(theta, -2.0 * double(i) / double(rd));
            double sn, cs;
            sincos(double(pos) * inv_freq, &sn, &cs);
            const double x1 = x[i], x2 = x[i + half];
            out[d] = float(d < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn);
        } else {
            out[d] = x[d];
        }
    }
}

}  // namespace

// q_raw [nvec, ihd] (nvec = nb * heads) -> out [nvec, ihd]; vector v sits at positions[v / heads].
extern "C" __global__ void __launch_bounds__(128)
    indexer_norm_rope(const float* __restrict__ x, int ihd, int heads,
                      const int* __restrict__ positions, const float* __restrict__ w, float eps,
                      int rd, double theta, float* __restrict__ out) {
    __shared__ float s_x[MAX_IHD];
    __shared__ double s_red[32];
    const long long v = blockIdx.x;
    for (int d = threadIdx.x; d < ihd; d += blockDim.x) s_x[d] = x[v * ihd + d];
    __syncthreads();
    norm_rope_block(s_x, ihd, w, eps, rd, theta, positions[v / heads], out + v * ihd, s_red);
}

// idx_keys [max_t, ihd] -> blk_keys[j] for j = j0 + blockIdx.x.
extern "C" __global__ void __launch_bounds__(128)
    indexer_block_keys(const float* __restrict__ idx_keys, int ihd, int R, int j0,
                       const float* __restrict__ w, float eps, int rd, double theta,
                       float* __restrict__ blk_keys) {
    __shared__ float s_x[MAX_IHD];
    __shared__ double s_red[32];
    const long long j = (long long)j0 + blockIdx.x;
    const float* src = idx_keys + j * R * ihd;
    for (int d = threadIdx.x; d < ihd; d += blockDim.x) {
        double acc = 0.0;
        for (int r = 0; r < R; ++r) acc += double(src[(long long)r * ihd + d]);
        s_x[d] = float(acc / double(R));  // golden: float64 mean, rounded to float32
    }
    __syncthreads();
    norm_rope_block(s_x, ihd, w, eps, rd, theta, j * R, blk_keys + j * ihd, s_red);
}

// ---- block scores --------------------------------------------------------------------------
// One warp per block key j. The q rows sit in shared memory as float64 (the products q*k of two
// float32 are exact in float64, as golden's are; no conversion per product), filled while the
// key's loads are in flight. Heads go in groups of 8 with 8 independent accumulators per lane,
// then one reduce-scatter over lane bits 4, 3, 2 (each step hands half the heads to the partner
// lane: 4 + 2 + 1 shuffles) and two plain steps (bits 1, 0) leave lane L with head
// 4 b4 + 2 b3 + b2 of the group summed over all 32 lanes; relu; the heads' sum by three more
// shuffles: 12 float64 shuffles a key for 8 heads, against 40 for a tree per head.
// Lane layout: for ihd = 64 V (V = 1, 2, 4, 8) lane L holds dims 64 c + 2L, 64 c + 2L + 1: the key
// by float2 loads, q by one conflict-free LDS.128 (a double2) per chunk and head, at immediate
// offsets; any other ihd: dims L + 32 i.
// keys per CTA: 16 warps (128 CTAs at nblk 2048, one q fill per SM) beat 4, 8 and 32
// (docs/tuning-log.md)
constexpr int SCORE_WARPS = 16;
constexpr int SCORE_KPL = MAX_IHD / 32;  // key values a lane holds (any-ihd layout)

// Lane L's head of this group after the reduce-scatter: 4 (L>>4 & 1) + 2 (L>>3 & 1) + (L>>2 & 1).
__device__ __forceinline__ double reduce_scatter8(const double (&a)[8], int lane) {
    const bool u16 = lane & 16, u8 = lane & 8, u4 = lane & 4;
    double b4[4], b2[2];
#pragma unroll
    for (int u = 0; u < 4; ++u)
        b4[u] = (u16 ? a[u + 4] : a[u]) + __shfl_xor_sync(0xffffffffu, u16 ? a[u] : a[u + 4], 16);
#pragma unroll
    for (int u = 0; u < 2; ++u)
        b2[u] = (u8 ? b4[u + 2] : b4[u]) + __shfl_xor_sync(0xffffffffu, u8 ? b4[u] : b4[u + 2], 8);
    double s = (u4 ? b2[1] : b2[0]) + __shfl_xor_sync(0xffffffffu, u4 ? b2[0] : b2[1], 4);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    return s;
}

// The sum over the 8 head slots (lane bits 4, 3, 2) of the relu'd group sums: every lane.
__device__ __forceinline__ double sum_head_slots(double total) {
    total += __shfl_xor_sync(0xffffffffu, total, 4);
    total += __shfl_xor_sync(0xffffffffu, total, 8);
    total += __shfl_xor_sync(0xffffffffu, total, 16);
    return total;
}

// sum_h relu(q_h . k) in float64, ihd = 64 V: kd[2c], kd[2c+1] = the lane's dims of chunk c.
template <int V>
__device__ __forceinline__ double warp_score_v(const double* s_qd, const double (&kd)[2 * V],
                                               int inh, int lane) {
    constexpr int IHD = 64 * V;
    double total = 0.0;  // relu'd sums of lane's head slot, all groups
    for (int h0 = 0; h0 < inh; h0 += 8) {
        const double2* qh = reinterpret_cast<const double2*>(s_qd + h0 * IHD) + lane;
        double a[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            a[u] = 0.0;  // a missing head (h0 + u >= inh) stays 0
            if (h0 + u < inh) {
#pragma unroll
                for (int c = 0; c < V; ++c) {
                    const double2 qq = qh[u * (IHD / 2) + 32 * c];
                    a[u] = fma(qq.x, kd[2 * c], a[u]);
                    a[u] = fma(qq.y, kd[2 * c + 1], a[u]);
                }
            }
        }
        const double s = reduce_scatter8(a, lane);
        total += s > 0.0 ? s : 0.0;  // relu(0) of a missing head adds +0
    }
    return sum_head_slots(total);
}

// The same for any ihd: kr[i] = the lane's dim L + 32 i.
__device__ __forceinline__ double warp_score_any(const double* s_qd, const float (&kr)[SCORE_KPL],
                                                 int inh, int ihd, int lane) {
    double total = 0.0;
    for (int h0 = 0; h0 < inh; h0 += 8) {
        double a[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) a[u] = 0.0;
#pragma unroll
        for (int i = 0; i < SCORE_KPL; ++i) {
            if (32 * i >= ihd) break;  // uniform
            const int d = lane + 32 * i;
            if (d < ihd) {
                const double kd = double(kr[i]);
#pragma unroll
                for (int u = 0; u < 8; ++u)
                    if (h0 + u < inh) a[u] = fma(s_qd[(h0 + u) * ihd + d], kd, a[u]);
            }
        }
        const double s = reduce_scatter8(a, lane);
        total += s > 0.0 ? s : 0.0;
    }
    return sum_head_slots(total);
}

// This CTA's SCORE_WARPS keys of row b = blockIdx.y -> out[b, j] (-inf for j >= nc).
// V = ihd / 64 (the chunked layout) or 0 (any ihd).
template <int V>
__device__ __forceinline__ void score_keys(double* s_qd, const float* __restrict__ q,
                                           const float* __restrict__ bkeys, int inh, int ihd,
                                           int nblk, int base_pos, int R, double scale,
                                           float* __restrict__ out) {
    const int b = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long nc = ((long long)base_pos + b + 1) / R;
    const int j = blockIdx.x * SCORE_WARPS + warp;
    const bool live = j < nblk && j < nc;  // warp-uniform
    const float* kj = bkeys + (size_t)j * ihd;
    constexpr int NK = V > 0 ? V : SCORE_KPL;
    float2 k2[V > 0 ? V : 1];
    float kr[V > 0 ? 1 : SCORE_KPL];
    if constexpr (V > 0) {
#pragma unroll
        for (int c = 0; c < NK; ++c)
            k2[c] = live ? __ldg(reinterpret_cast<const float2*>(kj) + lane + 32 * c)
                         : make_float2(0.f, 0.f);
    } else {
#pragma unroll
        for (int i = 0; i < NK; ++i)
            kr[i] = live && lane + 32 * i < ihd ? __ldg(kj + lane + 32 * i) : 0.f;
    }
    const float* qb = q + (size_t)b * inh * ihd;
    for (int p = threadIdx.x; p < inh * ihd; p += blockDim.x) s_qd[p] = double(qb[p]);
    __syncthreads();
    if (!live) {
        if (lane == 0 && j < nblk) out[(size_t)b * nblk + j] = -inf_f();
        return;
    }
    double total;
    if constexpr (V > 0) {
        double kd[2 * V];
#pragma unroll
        for (int c = 0; c < V; ++c) {
            kd[2 * c] = k2[c].x;
            kd[2 * c + 1] = k2[c].y;
        }
        total = warp_score_v<V>(s_qd, kd, inh, lane);
    } else {
        total = warp_score_any(s_qd, kr, inh, ihd, lane);
    }
    if (lane == 0) out[(size_t)b * nblk + j] = float(total * scale);
}

// q [nb, inh, ihd]; bkeys [nblk, ihd] (16-byte aligned); out [nb, nblk]. Dynamic smem: inh * ihd
// doubles.
extern "C" __global__ void __launch_bounds__(SCORE_WARPS * 32, 1)
    indexer_block_scores(const float* __restrict__ q, const float* __restrict__ bkeys, int inh,
                         int ihd, int nblk, int base_pos, int R, double scale,
                         float* __restrict__ out) {
    extern __shared__ double s_qd[];
    switch (ihd) {  // uniform
        case 64:
            score_keys<1>(s_qd, q, bkeys, inh, ihd, nblk, base_pos, R, scale, out);
            break;
        case 128:
            score_keys<2>(s_qd, q, bkeys, inh, ihd, nblk, base_pos, R, scale, out);
            break;
        case 256:
            score_keys<4>(s_qd, q, bkeys, inh, ihd, nblk, base_pos, R, scale, out);
            break;
        case 512:
            score_keys<8>(s_qd, q, bkeys, inh, ihd, nblk, base_pos, R, scale, out);
            break;
        default:
            score_keys<0>(s_qd, q, bkeys, inh, ihd, nblk, base_pos, R, scale, out);
    }
}
