// gemv v0 — the projections y = x · Wᵀ as directly as CUDA allows: one warp per output.
//
// gemv_q8_v0:  y[b, j] = Σ_i x[b, i] · (q[j, i] · float32(d[j, i / 32]))  (+ resid[b, j])
//   x f32 [nb, n_in], q int8 [n_out, n_in], d f16 [n_out, n_in / 32] (Q8_0: one scale per 32
//   inputs of a row), y and resid f32 [nb, n_out]; resid may be NULL (no residual).
// gemv_f32_v0: y[b, j] = Σ_i x[b, i] · w[j, i]  (+ resid[b, j]), w f32 [n_out, n_in].
// Launch: block 256 threads (8 warps), grid ceil(nb · n_out / 8); warp g owns output
//   (b, j) = (g % nb, g / nb), so the nb warps that read weight row j are neighbours and the
//   rows after the first find it in cache. Lane l takes inputs l, l + 32, l + 64, ... (a warp
//   reads 32 consecutive weights, one Q8_0 group, per step), then a warp sum; lane 0 writes.
// Bytes it must move: q8 n_out·n_in (q) + n_out·n_in/16 (d) + 4·nb·n_in (x) + 4·nb·n_out (y,
//   and as much again for resid); f32: 4·n_out·n_in for w. v0 issues the weight reads nb times
//   (once per row b) and loads one byte or float per lane per step: slow, by design.
// Differences from golden (x @ dequant(W).T in float32 by numpy/BLAS): dequantization is the
//   same and exact (int8 · f16 has at most 19 significant bits); the sum is in another order:
//   each lane a chain of ceil(n_in / 32) fused multiply-adds, then 5 butterfly levels, so the
//   error is at most (ceil(n_in / 32) + 5) · 2^-24 · Σ_i |x_i · w_i| (+ one rounding for resid).
// Rungs of the gemv family:
//   v0 (this file, gemv_q8_v0 / gemv_f32_v0): one warp per output, weights read once per row.
//   v1 (gemv.cu, gemv_{q8,f32}_nb{NB}_r{ROWS}t{THREADS}u{UNROLL}): a CTA per ROWS outputs
//     splits each row over all its threads with 16-byte streaming loads, weights read once for
//     up to 8 rows, fused segment / SwiGLU / residual epilogues.
#include <cuda_fp16.h>

__device__ __forceinline__ float warp_sum_v0(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void gemv_q8_v0(const float* __restrict__ x,
                                      const signed char* __restrict__ q,
                                      const __half* __restrict__ d, float* __restrict__ y,
                                      const float* __restrict__ resid, int nb, int n_in,
                                      int n_out) {
    const long long g = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (g >= (long long)nb * n_out) return;  // a whole warp leaves: blockDim is a multiple of 32
    const int b = (int)(g % nb), j = (int)(g / nb);
    const float* xb = x + (size_t)b * n_in;
    const signed char* qj = q + (size_t)j * n_in;
    const __half* dj = d + (size_t)j * (n_in / 32);
    float acc = 0.0f;
    for (int i = lane; i < n_in; i += 32) acc += xb[i] * ((float)qj[i] * __half2float(dj[i / 32]));
    acc = warp_sum_v0(acc);
    const size_t o = (size_t)b * n_out + j;
    if (lane == 0) y[o] = resid != nullptr ? acc + resid[o] : acc;
}

extern "C" __global__ void gemv_f32_v0(const float* __restrict__ x, const float* __restrict__ w,
                                       float* __restrict__ y, const float* __restrict__ resid,
                                       int nb, int n_in, int n_out) {
    const long long g = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (g >= (long long)nb * n_out) return;
    const int b = (int)(g % nb), j = (int)(g / nb);
    const float* xb = x + (size_t)b * n_in;
    const float* wj = w + (size_t)j * n_in;
    float acc = 0.0f;
    for (int i = lane; i < n_in; i += 32) acc += xb[i] * wj[i];
    acc = warp_sum_v0(acc);
    const size_t o = (size_t)b * n_out + j;
    if (lane == 0) y[o] = resid != nullptr ? acc + resid[o] : acc;
}
