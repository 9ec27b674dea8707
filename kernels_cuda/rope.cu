// rope.cu — per-head zero-centred RMSNorm + partial rotate-half (NeoX) RoPE, fused
// (golden: qwenref/golden/rope.py qk_norm_rope / apply_rope, qwenref/golden/norm.py rms_norm)
//
// For one head x [hd] at position p, with half = rd / 2 (rd = rotary_dim, even, <= hd):
//   n_i = (x_i · r) · (1 + w_i),  r = 1 / sqrt(mean(x²) + eps)
//   f_j = float32(theta ^ (-2j / rd))            (pow in double, rounded once: the golden's
//                                                 float64 inv_freq rounded to float32; a
//                                                 float32 powf would add up to ~2 ulps that no
//                                                 test could emulate. One fp64 pow per pair,
//                                                 i.e. one per lane for rd <= 64: negligible)
//   a_j = float32(p) · f_j                       (ONE float32 product: the float32 angle)
//   y_j        = n_j · cos a_j - n_{j+half} · sin a_j          j < half
//   y_{j+half} = n_{j+half} · cos a_j + n_j · sin a_j
//   y_i        = n_i                                            rd <= i < hd
//
// qk_norm_rope_pipe_v1 / _v2 / _v4 (the wrapper's path when hd % 4 == 0, hd <= 512 and the
//   arrays are 16-byte aligned; NV = 1, 2, 4 float4 per lane per head): persistent grid of
//   8-warp blocks; a warp takes items (token, 2 heads; v4: 1 head) in grid-stride order and
//   loads the next item while it computes the current one; inv_freq once per block, cos/sin
//   once per item (not per head). Same float32 operations in the same order as the kernels
//   below, so identical bits. Details above the kernel. H200, 27B shape (nb 4096, 24 + 4
//   heads, hd 256): 71 us (78% of copy) vs 114 us for qk_norm_rope.
//   Launch: 256 threads, grid = min(items / 8, blocks resident at once), smem (rd/2 + 16·rd)·4 B.
// Kernels (both: one warp = one block = one (row, head); the head is staged in dynamic smem so a
// lane can read its rotate-half partner; float4 global loads when hd % 4 == 0 and the head's
// start is 16-byte aligned, else scalar; stores are scalar and coalesced)
//   qk_norm_rope    q heads read from the interleaved q|gate layout qg [nb, nh, 2*hd] (gate half
//                   untouched) and k heads from k [nb, nkv, hd], in ONE launch:
//                   grid = nb * (nh + nkv), blockIdx -> (row b, head h); h < nh is a q head.
//                   Writes q_out [nb, nh, hd], k_out [nb, nkv, hd].
//   head_norm_rope  the generic form, for any [nb, nheads, hd] view whose last axis is contiguous:
//                   head (b, h) starts at x + b*row_stride + h*head_stride (strides in floats),
//                   output y is contiguous [nb, nheads, hd]; grid = nb * nheads. Fits the
//                   indexer's queries (x = the q part of qk_proj's output, row stride
//                   (inh+1)*ihd, head stride ihd) and block keys (nheads = 1). rd = 0 gives a
//                   plain per-head RMSNorm. Both kernels inline the same helper with explicit
//                   fma/mul intrinsics, so they give identical bits for the same head.
// Launch: block = 32 threads, dynamic smem = hd * 4 bytes (hd <= 12288).
// Bytes that must move: read nb*(nh+nkv)*hd*4 (the gate half of qg is not read), write the
//         same, plus the weights (2*hd*4, L2-resident) and positions (4*nb).
// Differences from golden:
//   - norm: same float32 formula, but the sum of squares is a warp tree, not numpy's pairwise
//     order (a few ulps).
//   - angles: golden computes p · inv_freq in float64. Here inv_freq is rounded to float32
//     (relative error <= 2^-24) and the product rounds to float32 (another 2^-24), so
//     |a_gpu - a_exact| <= a · 2^-23 <= p · 2^-23 rad (a_j <= p). j = 0 is exact (f_0 = 1,
//     p < 2^24); at p = 200k the bound is ~0.014 rad for j = 1 (theta 1e7, rd 64), so rotated
//     values differ from golden by up to |pair| · a · 2^-23. This is what transformers'
//     float32 RoPE costs too (notebook 02 plots it). sincosf (not __sincosf) keeps cos/sin
//     accurate for these large arguments (full range reduction); its slow path for |a| > 1e5
//     uses a small local-memory frame, which ptxas reports as stack (not spills).
//   - rotation in float32 (golden float64): a few ulps of the pair's magnitude.

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// One warp normalizes and rotates one head. sm: hd floats of this warp's shared memory.
// All 32 lanes must call it (it uses full-warp shuffles).
__device__ __forceinline__ void head_norm_rope_warp(const float* x, const float* __restrict__ w,
                                                    float* y, float* sm, int hd, int rd, int pos,
                                                    double theta, float eps) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
    if ((hd & 3) == 0 && aligned16(x)) {
        for (int i = 4 * lane; i < hd; i += 128) {
            const float4 v = *reinterpret_cast<const float4*>(x + i);
            *reinterpret_cast<float4*>(sm + i) = v;
            ss = __fmaf_rn(v.x, v.x, ss);
            ss = __fmaf_rn(v.y, v.y, ss);
            ss = __fmaf_rn(v.z, v.z, ss);
            ss = __fmaf_rn(v.w, v.w, ss);
        }
    } else {
        for (int i = lane; i < hd; i += 32) {
            const float v = x[i];
            sm[i] = v;
            ss = __fmaf_rn(v, v, ss);
        }
    }
    ss = warp_sum(ss);
    __syncwarp();
    // same float32 steps as golden rms_norm: r = 1 / sqrt(ss / hd + eps); n = (x · r) · (1 + w)
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)hd), eps)));
    const int half = rd >> 1;
    const float pf = (float)pos;
    for (int j = lane; j < half; j += 32) {
        const float a = __fmul_rn(__fmul_rn(sm[j], r), 1.0f + w[j]);
        const float b = __fmul_rn(__fmul_rn(sm[j + half], r), 1.0f + w[j + half]);
        const float f = (float)pow(theta, -(double)(2 * j) / (double)rd);
        float sn, cs;
        sincosf(__fmul_rn(pf, f), &sn, &cs);
        // explicit fma/mul (no contraction left to the compiler), so every kernel that
        // inlines this helper rounds identically
        y[j] = __fmaf_rn(a, cs, -__fmul_rn(b, sn));
        y[j + half] = __fmaf_rn(b, cs, __fmul_rn(a, sn));
    }
    for (int i = rd + lane; i < hd; i += 32) y[i] = __fmul_rn(__fmul_rn(sm[i], r), 1.0f + w[i]);
}

extern "C" __global__ void qk_norm_rope(const float* qg, const float* k,
                                        const float* __restrict__ q_weight,
                                        const float* __restrict__ k_weight,
                                        const int* __restrict__ positions, float* q_out,
                                        float* k_out, int nb, int nh, int nkv, int hd, int rd,
                                        double theta, float eps) {
    extern __shared__ __align__(16) float sm[];
    const long long heads = (long long)nb * (nh + nkv);
    for (long long blk = blockIdx.x; blk < heads; blk += gridDim.x) {
        const int b = (int)(blk / (nh + nkv)), h = (int)(blk % (nh + nkv));
        const int pos = positions[b];
        __syncwarp();  // the previous head's smem reads are done before it is overwritten
        if (h < nh) {
            head_norm_rope_warp(qg + ((long long)b * nh + h) * 2 * hd, q_weight,
                                q_out + ((long long)b * nh + h) * hd, sm, hd, rd, pos, theta, eps);
        } else {
            const int hk = h - nh;
            head_norm_rope_warp(k + ((long long)b * nkv + hk) * hd, k_weight,
                                k_out + ((long long)b * nkv + hk) * hd, sm, hd, rd, pos, theta,
                                eps);
        }
    }
}

// ---- qk_norm_rope, persistent pipelined form (the fast path) ----
// Work items: (token b, HPW consecutive heads of its H = nh + nkv); a persistent grid of W-warp
// blocks, each warp takes items gw, gw + stride, ... and loads item i + stride (float4, NV per
// lane per head: lane holds elements 4·lane + 128·c, the helper's order) before it computes
// item i, so every warp keeps a load in flight while it works; warps never wait for each
// other (one __syncthreads at start, after the block's inv_freq table). Per item the warp
// computes its token's cos/sin (lane j < rd/2) into its own table, then normalizes and rotates
// each head with the same float32 operations, in the same order, as head_norm_rope_warp (sum of
// squares per lane over its chunks in order, warp_sum, r, n_i = (x_i·r)·(1 + w_i), y by the same
// fma/mul pair): identical bits. The head's normalized rotary part is staged in the warp's rd
// floats of shared memory for the partner read; stores are float4. Needs hd % 4 == 0,
// hd <= 128·NV and 16-byte aligned qg, k, q_out, k_out (the wrapper checks; else
// qk_norm_rope above). Shared memory: (rd/2 + W·2·rd) floats.
template <int NV, int HPW>
__device__ __forceinline__ void qk_item_load(float4 (&x)[HPW][NV], int it, int ipt, const float* qg,
                                             const float* k, int nh, int nkv, int hd, int lane) {
    const long long b = it / ipt;
    const int h0 = (it - (int)b * ipt) * HPW, H = nh + nkv;
#pragma unroll
    for (int kk = 0; kk < HPW; ++kk) {
        const int h = h0 + kk;
        const float* src = h < nh ? qg + (b * nh + h) * 2 * hd : k + (b * nkv + (h - nh)) * hd;
#pragma unroll
        for (int c = 0; c < NV; ++c) {
            const int i = 4 * lane + 128 * c;
            x[kk][c] = h < H && i < hd ? *reinterpret_cast<const float4*>(src + i)
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

template <int NV, int HPW>
__device__ __forceinline__ void qk_norm_rope_pipe(const float* qg, const float* k,
                                                  const float* __restrict__ q_weight,
                                                  const float* __restrict__ k_weight,
                                                  const int* __restrict__ positions, float* q_out,
                                                  float* k_out, int nb, int nh, int nkv, int hd,
                                                  int rd, double theta, float eps) {
    extern __shared__ __align__(16) float pipe_sm[];
    const int half = rd >> 1, H = nh + nkv, ipt = (H + HPW - 1) / HPW;
    const int W = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* f_tab = pipe_sm;
    float* cs_w = pipe_sm + half + w * 2 * rd;
    float* sn_w = cs_w + half;
    float* stage = cs_w + rd;
    for (int j = threadIdx.x; j < half; j += blockDim.x)
        f_tab[j] = (float)pow(theta, -(double)(2 * j) / (double)rd);
    float wq[NV][4], wk[NV][4];  // 1 + w for this lane's elements
#pragma unroll
    for (int c = 0; c < NV; ++c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = 4 * lane + 128 * c + e;
            wq[c][e] = i < hd ? 1.0f + q_weight[i] : 0.0f;
            wk[c][e] = i < hd ? 1.0f + k_weight[i] : 0.0f;
        }
    }
    __syncthreads();  // f_tab complete
    // Each warp takes a contiguous run of items (the wrapper keeps nb * ipt < 2^31), so
    // consecutive items share a token and cos/sin are recomputed only when the token changes:
    // ~2 sincosf per lane per run instead of one per item (an item is 2 of the 28 heads at
    // the 27B shape). sincosf's slow path (|a| > ~1e5, positions past 100k) made them the
    // largest instruction cost here (ncu, docs/tuning-log.md).
    const int items = nb * ipt, n_warps = gridDim.x * W;
    const int per_warp = (items + n_warps - 1) / n_warps;
    int it = (blockIdx.x * W + w) * per_warp;
    const int it_end = min(items, it + per_warp);
    int b_cs = -1;  // token of cs_w / sn_w
    float4 xa[HPW][NV], xb[HPW][NV];
    if (it < it_end) qk_item_load<NV, HPW>(xa, it, ipt, qg, k, nh, nkv, hd, lane);
    for (; it < it_end; ++it) {
        if (it + 1 < it_end) qk_item_load<NV, HPW>(xb, it + 1, ipt, qg, k, nh, nkv, hd, lane);
        const int b = it / ipt;
        const int h0 = (it - b * ipt) * HPW;
        if (b != b_cs) {   // warp-uniform
            __syncwarp();  // the previous token's table is no longer read
            const float pf = (float)positions[b];
            for (int j = lane; j < half; j += 32) {
                float sn, cs;
                sincosf(__fmul_rn(pf, f_tab[j]), &sn, &cs);
                cs_w[j] = cs;
                sn_w[j] = sn;
            }
            b_cs = b;
        }
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < HPW; ++kk) {
            const int h = h0 + kk;
            if (h >= H) break;  // warp-uniform
            const bool isq = h < nh;
            float ss = 0.0f;
#pragma unroll
            for (int c = 0; c < NV; ++c) {
                if (4 * lane + 128 * c < hd) {
                    ss = __fmaf_rn(xa[kk][c].x, xa[kk][c].x, ss);
                    ss = __fmaf_rn(xa[kk][c].y, xa[kk][c].y, ss);
                    ss = __fmaf_rn(xa[kk][c].z, xa[kk][c].z, ss);
                    ss = __fmaf_rn(xa[kk][c].w, xa[kk][c].w, ss);
                }
            }
            ss = warp_sum(ss);
            const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)hd), eps)));
            float n[NV][4];
#pragma unroll
            for (int c = 0; c < NV; ++c) {
                const float xs[4] = {xa[kk][c].x, xa[kk][c].y, xa[kk][c].z, xa[kk][c].w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    n[c][e] = __fmul_rn(__fmul_rn(xs[e], r), isq ? wq[c][e] : wk[c][e]);
                    const int i = 4 * lane + 128 * c + e;
                    if (i < rd) stage[i] = n[c][e];
                }
            }
            __syncwarp();
            float* dst = isq ? q_out + ((long long)b * nh + h) * hd
                             : k_out + ((long long)b * nkv + (h - nh)) * hd;
#pragma unroll
            for (int c = 0; c < NV; ++c) {
                const int i0 = 4 * lane + 128 * c;
                if (i0 >= hd) continue;
                float y[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = i0 + e;
                    if (i < half) {
                        y[e] = __fmaf_rn(n[c][e], cs_w[i], -__fmul_rn(stage[i + half], sn_w[i]));
                    } else if (i < rd) {
                        const int j = i - half;
                        y[e] = __fmaf_rn(n[c][e], cs_w[j], __fmul_rn(stage[j], sn_w[j]));
                    } else {
                        y[e] = n[c][e];
                    }
                }
                *reinterpret_cast<float4*>(dst + i0) = make_float4(y[0], y[1], y[2], y[3]);
            }
            __syncwarp();  // stage / table read before they are overwritten
        }
#pragma unroll
        for (int kk = 0; kk < HPW; ++kk) {
#pragma unroll
            for (int c = 0; c < NV; ++c) xa[kk][c] = xb[kk][c];
        }
    }
}

#define QK_NORM_ROPE_PIPE(SFX, NV, HPW, MINB)                                                      \
    extern "C" __global__ void __launch_bounds__(256, MINB) qk_norm_rope_pipe_##SFX(               \
        const float* qg, const float* k, const float* __restrict__ q_weight,                       \
        const float* __restrict__ k_weight, const int* __restrict__ positions, float* q_out,       \
        float* k_out, int nb, int nh, int nkv, int hd, int rd, double theta, float eps) {          \
        qk_norm_rope_pipe<NV, HPW>(qg, k, q_weight, k_weight, positions, q_out, k_out, nb, nh,     \
                                   nkv, hd, rd, theta, eps);                                       \
    }
QK_NORM_ROPE_PIPE(v1, 1, 2, 4)  // hd <= 128
QK_NORM_ROPE_PIPE(v2, 2, 2, 3)  // hd <= 256
QK_NORM_ROPE_PIPE(v4, 4, 1, 2)  // hd <= 512

extern "C" __global__ void head_norm_rope(const float* x, long long row_stride,
                                          long long head_stride, const float* __restrict__ w,
                                          const int* __restrict__ positions, float* y, int nb,
                                          int nheads, int hd, int rd, double theta, float eps) {
    extern __shared__ __align__(16) float sm[];
    const long long heads = (long long)nb * nheads;
    for (long long blk = blockIdx.x; blk < heads; blk += gridDim.x) {
        const int b = (int)(blk / nheads), h = (int)(blk % nheads);
        __syncwarp();
        head_norm_rope_warp(x + b * row_stride + h * head_stride, w, y + blk * hd, sm, hd, rd,
                            positions[b], theta, eps);
    }
}
