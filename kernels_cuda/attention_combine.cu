// attention_combine.cu — attn_combine: the LSE merge of the split-T partials that
// attention_v1.cu and attention_mma.cu write, then the inverse WHT and the output gate.
// Golden: qwenref/golden/attention.py attn_combine, output_gate.
// Per (row b, q head h) over the S splits: M = max m_i, L = sum 2^(m_i-M) l_i,
// out = sum 2^(m_i-M) o_i / L, then the inverse WHT over hd (V rotated: inverse_wht 1; a tq V:
// 2, the WHT then the signs of layout.tq_signs), then * sigmoid(gate); optional lse2 = M + log2 L.
// Launch: grid (nh, nb, hd / dc), block COMBINE_NT = 256; CTA z combines dims [z*dc, (z+1)*dc)
// of one (row, head), its threads spread over float4s of the chunk and over splits (comment at
// the kernel). Compiled without -D options: hd, dc and S are arguments (S <= 1024).
// Bytes per (row, head): S*(hd+2)*4 of partials read from L2 (66 KB at S 66, hd 256), the gate
// hd*4, out hd*4 (+4 lse): small next to the partials' K/V, so the kernel is latency-bound and
// written to spread wide, not to save bytes.
// Precision: float32 (golden: float64); every sum has a fixed order, so results are
// deterministic; the inverse WHT is golden's orthonormal Sylvester-order wht by float32
// butterflies and one multiply by float32(1/sqrt(hd)), as gpu.wht. Splits of weight 0 (empty:
// m = -inf) add nothing, whatever their o; a row with L = 0 gives out = 0.
// Rungs of the attention family:
//   v0   attention_v0.cu: attention_v0_<K>_<V>, a warp per (row, q head), one pass, no partials
//   v1   attention_v1.cu + attention_combine.cu (this file): CUDA-core split-T partials
//   mma  attention_mma.cu + attention_combine.cu (this file): q8/q8 partials on tensor cores

#include "attention.cuh"
#include "tq_signs.cuh"

namespace {

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

}  // namespace

// combine: grid (nh, nb, hd / dc), block COMBINE_NT threads. CTA z combines dims
// [z*dc, (z+1)*dc) of one (row, head); dc is hd when inverse_wht (the WHT needs the whole row),
// else 64 (32 when hd % 64 != 0). hd a multiple of 32 in 32..1024, a power of two when
// inverse_wht. m, l [nb, S, nh]; o [nb, S, nh, hd] (16-byte aligned); gate [nb, nh, hd] or null;
// out [nb, nh, hd]; lse [nb, nh] or null (written by z = 0).
//
// Work per (row, head) is small (S * hd FMAs, S * hd * 4 bytes from L2: 66 KB at S 66, hd 256)
// and latency-bound, so it is spread as wide as it goes: over dim chunks (CTAs) and, inside a
// CTA, over splits: thread (g, v) owns float4 v of the chunk and the splits g, g + ngrp, ...
// (ngrp = COMBINE_NT / (dc/4): 16 at dc 64), issuing up to COMBINE_UNR of its loads before
// the m/l reduction so their latency overlaps it. The ngrp partial sums meet in shared memory.
// Deterministic: every sum has a fixed order (each group in split order, then the groups in
// order; L as a fixed tree). Splits of weight 0 (empty: m = -inf) add nothing, whatever their o.
#define COMBINE_NT 256
#define COMBINE_UNR 8
extern "C" __global__ void __launch_bounds__(COMBINE_NT)
    attn_combine(const float* __restrict__ m, const float* __restrict__ l,
                 const float* __restrict__ o, int S, int hd, int dc, const float* __restrict__ gate,
                 int inverse_wht, float* __restrict__ out, float* __restrict__ lse) {
    const int h = blockIdx.x, b = blockIdx.y, nh = gridDim.x, tid = threadIdx.x;
    const int d0 = blockIdx.z * dc;  // this CTA's first dim
    __shared__ float s_w[1024];      // m_i, then 2^(m_i - M) (S <= 1024, wrapper checks)
    __shared__ float s_l[1024];
    __shared__ float s_red[COMBINE_NT / 32];
    __shared__ __align__(16) float s_acc[4 * COMBINE_NT];  // ngrp * dc partial sums
    __shared__ __align__(16) float s_x[1024];              // the output chunk (WHT in place)

    const int nv = dc >> 2, ngrp = COMBINE_NT / nv;
    const int g = tid / nv, v = tid % nv;
    const bool active = g < ngrp;
    const size_t split_stride = (size_t)nh * (hd >> 2);  // float4s from split i to i + 1
    const float4* ob = reinterpret_cast<const float4*>(o + ((size_t)b * S * nh + h) * hd + d0) + v;

    // first batch of o: independent of the weights, so it is in flight during the reductions
    float4 ov[COMBINE_UNR];
#pragma unroll
    for (int k = 0; k < COMBINE_UNR; ++k) {
        const int i = g + k * ngrp;
        ov[k] = (active && i < S) ? ob[(size_t)i * split_stride] : make_float4(0.f, 0.f, 0.f, 0.f);
    }

    // M = max m_i; w_i = 2^(m_i - M); L = sum w_i l_i
    const float* mb = m + (size_t)b * S * nh + h;
    const float* lb = l + (size_t)b * S * nh + h;
    float mx = -inf_f();
    for (int i = tid; i < S; i += COMBINE_NT) {
        const float mi = mb[(size_t)i * nh];
        s_w[i] = mi;
        s_l[i] = lb[(size_t)i * nh];
        mx = fmaxf(mx, mi);
    }
    mx = warp_max(mx);
    if (tid % 32 == 0) s_red[tid / 32] = mx;
    __syncthreads();
    float M = -inf_f();
#pragma unroll
    for (int w = 0; w < COMBINE_NT / 32; ++w) M = fmaxf(M, s_red[w]);
    __syncthreads();  // s_red is reused for L
    float lp = 0.f;
    for (int i = tid; i < S; i += COMBINE_NT) {
        const float mi = s_w[i];
        const float w = (mi == -inf_f() || M == -inf_f()) ? 0.f : exp2f(mi - M);
        s_w[i] = w;
        lp = fmaf(w, s_l[i], lp);
    }
    lp = warp_sum(lp);
    if (tid % 32 == 0) s_red[tid / 32] = lp;
    __syncthreads();
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < COMBINE_NT / 32; ++w) L += s_red[w];

    // o: this thread's splits, COMBINE_UNR loads in flight at a time
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i0 = g; active; i0 += COMBINE_UNR * ngrp) {
#pragma unroll
        for (int k = 0; k < COMBINE_UNR; ++k) {
            const int i = i0 + k * ngrp;
            const float w = i < S ? s_w[i] : 0.f;
            if (w != 0.f) {
                acc.x = fmaf(w, ov[k].x, acc.x);
                acc.y = fmaf(w, ov[k].y, acc.y);
                acc.z = fmaf(w, ov[k].z, acc.z);
                acc.w = fmaf(w, ov[k].w, acc.w);
            }
        }
        const int next = i0 + COMBINE_UNR * ngrp;
        if (next >= S) break;
#pragma unroll
        for (int k = 0; k < COMBINE_UNR; ++k) {
            const int i = next + k * ngrp;
            ov[k] = i < S ? ob[(size_t)i * split_stride] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    if (active) reinterpret_cast<float4*>(s_acc)[g * nv + v] = acc;
    __syncthreads();

    for (int d = tid; d < dc; d += COMBINE_NT) {
        float y = 0.f;
        for (int gg = 0; gg < ngrp; ++gg) y += s_acc[gg * dc + d];
        s_x[d] = L > 0.f ? y / L : 0.f;
    }
    if (lse != nullptr && tid == 0 && blockIdx.z == 0) lse[(size_t)b * nh + h] = M + log2f(L);
    if (inverse_wht)
        block_wht(s_x, 1, dc);  // dc == hd here; starts and ends with a barrier
    else
        __syncthreads();
    const size_t row = ((size_t)b * nh + h) * hd + d0;
    for (int d = tid; d < dc; d += COMBINE_NT) {
        float y = s_x[d];
        if (inverse_wht == 2)
            y = __uint_as_float(__float_as_uint(y) ^ tq_sign_bit(d));  // s ⊙ wht(o)
        if (gate != nullptr) y = y * (1.f / (1.f + expf(-gate[row + d])));
        out[row + d] = y;
    }
}
