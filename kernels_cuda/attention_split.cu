// attention_split.cu — split-T decode partials in their plain form: attn_partials_split_<K>_<V>.
// Golden: qwenref/golden/attention.py attn_partials (layouts: qwenref/golden/kvcache.py).
// The rung between v0 and v1, v0 with one idea added: the row's visible tokens are cut into S
// splits (golden's split_bounds), and each split's state (m, l, o) is written as partials that
// attention_combine.cu merges, so S warps share a row instead of one warp walking all of it,
// and every K/V value a lane loads serves the kv head's NREP q heads (v0 loads it once per q
// head). The rest stays v0's: scalar loads through kv_load.cuh, one token at a time, one dot
// product per (token, q head) summed by a 5-step butterfly. v1 adds what makes it fast: tiles
// of tokens prefetched into registers, the partial dots of a tile reduced by one
// reduce-scatter, four warps per CTA merged in shared memory.
// Launch: grid (nb, nkv, S), block 32 (one warp; lane owns dims lane + 32 j); the arguments of
// v1's attn_partials_<K>_<V>; shape -DATTN_HD, -DATTN_NREP (attention.cuh), NREP * HD / 32 <= 64
// (q and o of every head in registers). Writes m, l [nb, S, nh] and o [nb, S, nh, hd].
// Precision: float32 like v1 (one sequential sum per split). Sparse V (thr > 0): v0's rule with
// the split's running m and l, a subset of golden's drops (attention_v0.cu says why).

#include <cuda_fp16.h>

#include "attention.cuh"
#include "kv_load.cuh"

namespace {

constexpr int DPS = HD / 32;  // dims per lane
static_assert(NREP * DPS <= 64, "the split rung keeps NREP * HD / 32 <= 64 q values per lane");

__device__ __forceinline__ float warp_sum_split(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

template <int KK, int VK>
__device__ void attn_partials_split_impl(const float* q, const void* kdata, const __half* kscale,
                                         const void* vdata, const __half* vscale, int max_t,
                                         int base_pos, const int* sel_idx, const int* sel_n,
                                         int sel_w, float qscale, float sparse_v, float* m_out,
                                         float* l_out, float* o_out) {
    const int b = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
    const int nkv = gridDim.y, S = gridDim.z, nh = nkv * NREP, lane = threadIdx.x;
    __shared__ float sq[NREP * HD];  // q of the kv head's group, rotated when K is

    // the row's visible list (null: dense) and this split's range of it
    const int t_len = base_pos + b + 1;
    int n_vis;
    const int* list = row_list(b, base_pos, sel_idx, sel_n, sel_w, n_vis);
    int lo, hi;
    split_range(n_vis, S, split, lo, hi);
    const SplitState dst = split_state(o_out, m_out, l_out, b, S, split, nh, g);
    if (lo >= hi) {  // empty split
        write_empty_state(dst);
        return;
    }

    const float* qg = q + ((size_t)b * nh + (size_t)g * NREP) * HD;
    for (int p = lane; p < NREP * HD; p += 32) sq[p] = qg[p];
    if constexpr (KK >= KV_TURBO2)
        block_wht(sq, NREP, HD);  // K stored rotated: q' = WHT(q)
    else
        __syncwarp();
    float qd[NREP][DPS], o[NREP][DPS], m[NREP], l[NREP];
#pragma unroll
    for (int h = 0; h < NREP; ++h) {
        m[h] = -inf_f();
        l[h] = 0.f;
#pragma unroll
        for (int j = 0; j < DPS; ++j) {
            qd[h][j] = sq[h * HD + lane + 32 * j] * qscale;
            o[h][j] = 0.f;
        }
    }

    const KvSide k{kdata, kscale, max_t, HD}, v{vdata, vscale, max_t, HD};
    for (int pos = lo; pos < hi; ++pos) {
        const int t = list ? min(max(list[pos], 0), t_len - 1) : pos;
        float kv[DPS], s[NREP];
#pragma unroll
        for (int j = 0; j < DPS; ++j) kv[j] = load_kv<KK>(k, g, t, lane + 32 * j);
#pragma unroll
        for (int h = 0; h < NREP; ++h) {
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < DPS; ++j) part = fmaf(qd[h][j], kv[j], part);
            s[h] = warp_sum_split(part);
        }
        float vv[DPS];  // V after the scores: K's registers are free again
#pragma unroll
        for (int j = 0; j < DPS; ++j) vv[j] = load_kv<VK>(v, g, t, lane + 32 * j);
#pragma unroll
        for (int h = 0; h < NREP; ++h) {
            const float m_new = fmaxf(m[h], s[h]);
            const float alpha = exp2f(m[h] - m_new);  // 0 at the split's first token
            const float p = exp2f(s[h] - m_new);
            l[h] = fmaf(l[h], alpha, p);
            m[h] = m_new;
            const float pv = p < sparse_v * l[h] ? 0.f : p;  // never with sparse_v = 0
#pragma unroll
            for (int j = 0; j < DPS; ++j) o[h][j] = fmaf(pv, vv[j], o[h][j] * alpha);
        }
    }
#pragma unroll
    for (int h = 0; h < NREP; ++h) {
#pragma unroll
        for (int j = 0; j < DPS; ++j) dst.o[h * HD + lane + 32 * j] = o[h][j];
        if (lane == 0) {
            dst.m[h] = m[h];
            dst.l[h] = l[h];
        }
    }
}

}  // namespace

// one kernel per (K kind, V kind) pair, as v1's; kscale / vscale are null for f32 and bf16
#define ATTN_PARTIALS_SPLIT(NAME, KK, VK)                                                          \
    extern "C" __global__ void __launch_bounds__(32) attn_partials_split_##NAME(                   \
        const float* q, const void* kdata, const __half* kscale, const void* vdata,                \
        const __half* vscale, int max_t, int base_pos, const int* sel_idx, const int* sel_n,       \
        int sel_w, float qscale, float sparse_v, float* m_out, float* l_out, float* o_out) {       \
        attn_partials_split_impl<KK, VK>(q, kdata, kscale, vdata, vscale, max_t, base_pos,         \
                                         sel_idx, sel_n, sel_w, qscale, sparse_v, m_out, l_out,    \
                                         o_out);                                                   \
    }

ATTN_PARTIALS_SPLIT(f32_f32, KV_F32, KV_F32)
ATTN_PARTIALS_SPLIT(bf16_bf16, KV_BF16, KV_BF16)
ATTN_PARTIALS_SPLIT(q8_q8, KV_Q8, KV_Q8)
ATTN_PARTIALS_SPLIT(turbo8_turbo8, KV_TURBO8, KV_TURBO8)
ATTN_PARTIALS_SPLIT(turbo4_turbo4, KV_TURBO4, KV_TURBO4)
ATTN_PARTIALS_SPLIT(turbo3_turbo3, KV_TURBO3, KV_TURBO3)
ATTN_PARTIALS_SPLIT(turbo2_turbo2, KV_TURBO2, KV_TURBO2)
ATTN_PARTIALS_SPLIT(bf16_turbo4, KV_BF16, KV_TURBO4)
ATTN_PARTIALS_SPLIT(bf16_turbo3, KV_BF16, KV_TURBO3)
ATTN_PARTIALS_SPLIT(bf16_turbo2, KV_BF16, KV_TURBO2)
