// rope_v0.cu — per-head zero-centred RMSNorm + partial rotate-half (NeoX) RoPE, the direct form,
// one thread per (row, head) (golden: qwenref/golden/rope.py qk_norm_rope, apply_rope)
//
// For one head x [hd] at position p, half = rd / 2 (rd = rotary_dim, even, <= hd):
//   n_i = (x_i · r) · (1 + w_i),   r = 1 / sqrt(sum_i x_i² / hd + eps)
//   f_j = float32(theta ^ (-2j / rd)) (pow in double, rounded once),  a_j = float32(p) · f_j
//   y_j = n_j cos a_j - n_{j+half} sin a_j,  y_{j+half} = n_{j+half} cos a_j + n_j sin a_j,
//   j < half;  y_i = n_i for rd <= i < hd (passed through)
// Kernels: qk_norm_rope_v0 reads q heads from qg [nb, nh, 2*hd] (per head [q | gate]; the gate
//   half is not read) and k heads from k [nb, nkv, hd], writes q_out [nb, nh, hd] and k_out
//   [nb, nkv, hd]; thread t -> (row t / (nh + nkv), head t % (nh + nkv)), head < nh is a q head.
//   head_norm_rope_v0: any [nb, nheads, hd] view with a contiguous last axis (strides in
//   floats), output contiguous [nb, nheads, hd].
// Launch: block = 128 threads, grid = min(ceil(heads / 128), 2^20), grid-stride over heads.
// Bytes that must move: read and write (nh + nkv) · hd · 4 per row, plus weights and positions.
// Differences from golden: the angle, cos/sin and rotation are the same float32 operations as
//   rope.cu (float32 angles: off golden's float64 angle by <= a · 2^-23 rad). The sum of squares
//   is one sequential chain of hd fused multiply-adds (relative error <= hd · 2^-24, halved by
//   the sqrt) instead of a warp tree; otherwise the norm is golden's float32 steps.
// Aliasing: each (j, j + half) pair is read before either is written, so k_out = k is safe.
// Rungs of qk_norm_rope:
//   v0 (this file): qk_norm_rope_v0, one thread per head, plain loops, pow + sincosf per pair.
//   v1 (rope.cu, qk_norm_rope): one warp per head, head staged in shared memory, warp-sum norm.
//   v2 (rope.cu, qk_norm_rope_pipe_v1/_v2/_v4): persistent warps, next item loaded while the
//      current one computes, cos/sin once per token (falls back to v1 where it does not apply).
// head_norm_rope: v0 (this file) head_norm_rope_v0; v1 (rope.cu) head_norm_rope.

// Normalize and rotate one head; y may be x itself.
__device__ void norm_rope_head_v0(const float* x, const float* w, float* y, int hd, int rd, int pos,
                                  double theta, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < hd; ++i) ss = __fmaf_rn(x[i], x[i], ss);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)hd), eps)));
    const int half = rd / 2;
    for (int j = 0; j < half; ++j) {
        const float a = __fmul_rn(__fmul_rn(x[j], r), __fadd_rn(1.0f, w[j]));
        const float b = __fmul_rn(__fmul_rn(x[j + half], r), __fadd_rn(1.0f, w[j + half]));
        const float f = (float)pow(theta, -(double)(2 * j) / (double)rd);
        float sn, cs;
        sincosf(__fmul_rn((float)pos, f), &sn, &cs);
        // rope.cu's exact fma/mul pair, so the rotation rounds the same way
        y[j] = __fmaf_rn(a, cs, -__fmul_rn(b, sn));
        y[j + half] = __fmaf_rn(b, cs, __fmul_rn(a, sn));
    }
    for (int i = rd; i < hd; ++i) y[i] = __fmul_rn(__fmul_rn(x[i], r), __fadd_rn(1.0f, w[i]));
}

extern "C" __global__ void qk_norm_rope_v0(const float* qg, const float* k, const float* q_weight,
                                           const float* k_weight, const int* positions,
                                           float* q_out, float* k_out, int nb, int nh, int nkv,
                                           int hd, int rd, double theta, float eps) {
    const int H = nh + nkv;
    const long long heads = (long long)nb * H;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < heads; t += stride) {
        const long long b = t / H;
        const int h = (int)(t % H);
        if (h < nh) {
            norm_rope_head_v0(qg + (b * nh + h) * 2 * hd, q_weight, q_out + (b * nh + h) * hd, hd,
                              rd, positions[b], theta, eps);
        } else {
            const int hk = h - nh;
            norm_rope_head_v0(k + (b * nkv + hk) * hd, k_weight, k_out + (b * nkv + hk) * hd, hd,
                              rd, positions[b], theta, eps);
        }
    }
}

extern "C" __global__ void head_norm_rope_v0(const float* x, long long row_stride,
                                             long long head_stride, const float* w,
                                             const int* positions, float* y, int nb, int nheads,
                                             int hd, int rd, double theta, float eps) {
    const long long heads = (long long)nb * nheads;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < heads; t += stride) {
        const long long b = t / nheads;
        const int h = (int)(t % nheads);
        norm_rope_head_v0(x + b * row_stride + h * head_stride, w, y + t * hd, hd, rd, positions[b],
                          theta, eps);
    }
}
