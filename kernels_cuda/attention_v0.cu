// attention_v0.cu — decode attention, the direct form: one warp per (row b, q head h), one pass
// over the row's visible tokens (golden: qwenref/golden/attention.py decode_attention,
// output_gate; cache layouts read by kv_load.cuh). q' = WHT(q) when K is rotated; per token t:
//   s = (q' . k_t) hd^-0.5 log2 e;  m' = max(m, s);  a = 2^(m - m');  p = 2^(s - m');  m = m'
//   l = l a + p;  o = o a + p v_t  (p v_t left out when p < sparse_v * l)
// then y = o / l; y = WHT(y) when V is rotated; y = y * sigmoid(gate) when a gate is given.
// Visible: t < base_pos + b + 1, or where sel_n[b] > 0 (clipped to W) sel_idx[b, :sel_n[b]]
//   (clamped into [0, base_pos + b]: a bad list cannot read past the row). GQA: g = h / n_rep.
// Launch: grid (nb, nh), block 32 (lane owns dims lane + 32 j of q and o), shared hd floats
//   (the vector a WHT reads); hd from -DATTN_V0_HD (64 | 128 | 256). Writes out [nb, nh, hd].
// Bytes: the visible K and V as stored (q8, hd 256: 544 B per token per kv head), q, gate, out;
//   the n_rep q heads of a kv head each read it again (L2 serves the repeats).
// Differences from golden (float64, splits then combine): float32 in one sequential pass (l, o
//   take a rounding per token: ~sqrt(T) 2^-24 relative typical, T 2^-24 at worst); the dot as 32
//   lane sums then a butterfly (bit-identical in all lanes: the sparse-V choice is warp-uniform);
//   each WHT output one sequential float32 sum. Sparse V: golden drops i where 2^(s_i - M) / L
//   < thr (M, L of the whole row); here p < thr * l with m, l running up to token i. As
//   L >= l 2^(m - M), p_i <= 2^(s_i - m) / l < thr: a subset of golden's drops (up to rounding
//   at thr), so |out - golden| <= sum over golden's dropped i of p_i |v_i| per dim.
// Rungs of the family:
//   v0 (this file): attention_v0_<K>_<V>, a warp per (row, q head), one pass, scalar loads.
//   v1 (attention_v1.cu + attention_combine.cu, attn_partials_<K>_<V> + attn_combine): a CTA per
//      (row, kv head, split), each K/V load used by all n_rep heads, tiles prefetched, butterfly
//      reduce-scatter, LSE combine.
//   mma (attention_mma.cu + attention_combine.cu, attn_partials_q8_mma_n<NT8>): q8/q8 on tensor
//      cores, all rows in one CTA.

#include <cuda_fp16.h>

#include "kv_load.cuh"

#ifndef ATTN_V0_HD
#define ATTN_V0_HD 256
#endif

namespace {

constexpr int HD = ATTN_V0_HD;
constexpr int DPL = HD / 32;  // dims per lane
static_assert(HD == 64 || HD == 128 || HD == 256, "ATTN_V0_HD must be 64, 128 or 256");

__device__ int clamp_v0(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

__device__ float warp_sum_v0(float x) {
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Element i of golden's wht: sum_j (-1)^popcount(i & j) x_j / sqrt(HD). H is symmetric and
// orthonormal after the scale, so the same sum is also the inverse. Unrolled by 4, not whole: a
// lane's HD / 32 calls unrolled whole are one body of 2048 adds at hd 256, which ptxas spills
// at 255 registers on sm_80 / sm_86 (20 s of ptxas per arch; no spill and 1 s this way).
__device__ float wht_at_v0(const float* x, int i) {
    float acc = 0.f;
#pragma unroll 4
    for (int j = 0; j < HD; ++j) acc += (__popc(i & j) & 1) ? -x[j] : x[j];
    return acc * (1.f / sqrtf((float)HD));
}

// golden output_gate: e^-|g| never overflows
__device__ float sigmoid_v0(float g) {
    const float z = expf(-fabsf(g));
    return g >= 0.f ? 1.f / (1.f + z) : z / (1.f + z);
}

template <int KK, int VK>
__device__ void attention_v0_impl(const float* q, const KvSide k, const KvSide v, int nkv,
                                  int base_pos, const int* sel_idx, const int* sel_n, int sel_w,
                                  float qscale, float sparse_v, const float* gate, float* out) {
    const int b = blockIdx.x, h = blockIdx.y, nh = gridDim.y, lane = threadIdx.x;
    const int g = h / (nh / nkv);
    __shared__ float buf[HD];

    const int t_len = base_pos + b + 1;
    int n_vis = t_len;
    const int* list = nullptr;  // null: dense, the token is its position
    if (sel_n != nullptr) {
        const int sn = clamp_v0(sel_n[b], 0, sel_w);
        if (sn > 0) {
            n_vis = sn;
            list = sel_idx + (size_t)b * sel_w;
        }
    }

    const size_t row = ((size_t)b * nh + h) * HD;  // of q, gate and out
    float qd[DPL];
    for (int j = 0; j < DPL; ++j) buf[lane + 32 * j] = q[row + lane + 32 * j];
    __syncwarp();
    for (int j = 0; j < DPL; ++j)
        qd[j] = KK >= KV_TURBO2 ? wht_at_v0(buf, lane + 32 * j) : buf[lane + 32 * j];
    __syncwarp();  // buf is written again below

    float m = __int_as_float(0xff800000), l = 0.f, o[DPL];  // m = -inf
    for (int j = 0; j < DPL; ++j) o[j] = 0.f;
    for (int pos = 0; pos < n_vis; ++pos) {
        const int t = list ? clamp_v0(list[pos], 0, t_len - 1) : pos;
        float part = 0.f;
        for (int j = 0; j < DPL; ++j) part = fmaf(qd[j], load_kv<KK>(k, g, t, lane + 32 * j), part);
        const float s = warp_sum_v0(part) * qscale;
        const float m_new = fmaxf(m, s);
        const float alpha = exp2f(m - m_new);  // 0 at the first token (m = -inf)
        const float p = exp2f(s - m_new);
        l = fmaf(l, alpha, p);
        m = m_new;
        const float pv = p < sparse_v * l ? 0.f : p;  // never with sparse_v = 0
        for (int j = 0; j < DPL; ++j)
            o[j] = fmaf(pv, load_kv<VK>(v, g, t, lane + 32 * j), o[j] * alpha);
    }

    float y[DPL];
    for (int j = 0; j < DPL; ++j) y[j] = o[j] / l;  // l >= 1: the max token adds 2^0
    if (VK >= KV_TURBO2) {
        for (int j = 0; j < DPL; ++j) buf[lane + 32 * j] = y[j];
        __syncwarp();
        for (int j = 0; j < DPL; ++j) y[j] = wht_at_v0(buf, lane + 32 * j);
    }
    for (int j = 0; j < DPL; ++j) {
        const int d = lane + 32 * j;
        out[row + d] = gate != nullptr ? y[j] * sigmoid_v0(gate[row + d]) : y[j];
    }
}

}  // namespace

// one kernel per (K kind, V kind) pair; kscale / vscale are null for f32 and bf16 sides
#define ATTENTION_V0(NAME, KK, VK)                                                                 \
    extern "C" __global__ void __launch_bounds__(32)                                               \
        attention_v0_##NAME(const float* q, const void* kdata, const __half* kscale,               \
                            const void* vdata, const __half* vscale, int nkv, int max_t,           \
                            int base_pos, const int* sel_idx, const int* sel_n, int sel_w,         \
                            float qscale, float sparse_v, const float* gate, float* out) {         \
        attention_v0_impl<KK, VK>(q, KvSide{kdata, kscale, max_t, HD},                             \
                                  KvSide{vdata, vscale, max_t, HD}, nkv, base_pos, sel_idx, sel_n, \
                                  sel_w, qscale, sparse_v, gate, out);                             \
    }

ATTENTION_V0(f32_f32, KV_F32, KV_F32)
ATTENTION_V0(bf16_bf16, KV_BF16, KV_BF16)
ATTENTION_V0(q8_q8, KV_Q8, KV_Q8)
ATTENTION_V0(turbo8_turbo8, KV_TURBO8, KV_TURBO8)
ATTENTION_V0(turbo4_turbo4, KV_TURBO4, KV_TURBO4)
ATTENTION_V0(turbo3_turbo3, KV_TURBO3, KV_TURBO3)
ATTENTION_V0(turbo2_turbo2, KV_TURBO2, KV_TURBO2)
ATTENTION_V0(bf16_turbo4, KV_BF16, KV_TURBO4)
ATTENTION_V0(bf16_turbo3, KV_BF16, KV_TURBO3)
ATTENTION_V0(bf16_turbo2, KV_BF16, KV_TURBO2)
