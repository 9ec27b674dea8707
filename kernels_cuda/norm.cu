// norm.cu — RMSNorm and fused residual-add + RMSNorm over the last axis (golden: qwenref/golden/norm.py)
//
//   y = (x · r) · w'      r = 1 / sqrt(mean(x²) + eps),  w' = 1 + w (zero-centred) or w
//
// Kernels
//   rms_norm_f32      one block per row (grid-stride over rows): pass 1 sums x² (float4 loads when
//                     n % 4 == 0 and x, w, y are 16-byte aligned, else scalar), warp shuffles then
//                     one smem slot per warp reduce the sum; pass 2 re-reads x (L1/L2 hit, the
//                     same thread read it in pass 1) and writes y.
//   add_rms_norm_f32  the same with s = x + residual: pass 1 writes s and sums s², pass 2 re-reads
//                     s (written by the same thread) and writes y. One launch for all rows.
// Launch: grid = rows, block = min(256, roundup32(ceil(n / 4))) threads (a multiple of 32, <= 1024),
//         no dynamic smem. n may be anything >= 1; out may alias x (every read of a row's x comes
//         before its block's barrier or from the thread that overwrites it).
// Bytes that must move per row: rms_norm 8n (read x, write y) + 4n for w (read once per block,
//         L2-resident); add_rms_norm 16n (read x, residual; write s, y) + w.
// Differences from golden: the same float32 formula and the same operation order after the sum
//         ((x · r) · w', r = 1 / sqrt(ms + eps), all IEEE-rounded), but the sum of squares is a
//         block tree instead of numpy's pairwise order, so y matches to a few ulps, not bits
//         (relative error of the sum <= ~log2(n) ulps, halved by the sqrt). s is bit-exact.

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the same total (each warp
// reduces the per-warp partials itself, in the same order, so there is no broadcast step).
__device__ __forceinline__ float block_sum(float v, float* sh /* [32] */) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // sh may still be read from the previous row
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    return warp_sum(lane < nw ? sh[lane] : 0.0f);
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// r = 1 / sqrt(ss / n + eps), IEEE-rounded at every step like the golden's float32 numpy.
__device__ __forceinline__ float rms_scale(float ss, int n, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
}

__device__ __forceinline__ float wscale(float w, int zero_centered) {
    return zero_centered ? 1.0f + w : w;
}

__device__ __forceinline__ float norm1(float x, float r, float w, int zc) {
    return __fmul_rn(__fmul_rn(x, r), wscale(w, zc));
}

extern "C" __global__ void rms_norm_f32(const float* __restrict__ x, const float* __restrict__ w,
                                        float* y, long long rows, int n, float eps,
                                        int zero_centered) {
    __shared__ float sh[32];
    const bool vec = (n % 4 == 0) && aligned16(x) && aligned16(w) && aligned16(y);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * n;
        float* yr = y + row * n;
        float ss = 0.0f;
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
                const float4 v = x4[i];
                ss = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, ss))));
            }
        } else {
            for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
        }
        const float r = rms_scale(block_sum(ss, sh), n, eps);
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            const float4* w4 = reinterpret_cast<const float4*>(w);
            float4* y4 = reinterpret_cast<float4*>(yr);
            for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
                const float4 v = x4[i], g = w4[i];
                y4[i] = make_float4(
                    norm1(v.x, r, g.x, zero_centered), norm1(v.y, r, g.y, zero_centered),
                    norm1(v.z, r, g.z, zero_centered), norm1(v.w, r, g.w, zero_centered));
            }
        } else {
            for (int i = threadIdx.x; i < n; i += blockDim.x)
                yr[i] = norm1(xr[i], r, w[i], zero_centered);
        }
    }
}

extern "C" __global__ void add_rms_norm_f32(const float* x, const float* res,
                                            const float* __restrict__ w, float* y, float* s,
                                            long long rows, int n, float eps, int zero_centered) {
    __shared__ float sh[32];
    const bool vec = (n % 4 == 0) && aligned16(x) && aligned16(res) && aligned16(w) &&
                     aligned16(y) && aligned16(s);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long o = row * n;
        float ss = 0.0f;
        if (vec) {
            for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
                const float4 a = reinterpret_cast<const float4*>(x + o)[i];
                const float4 b = reinterpret_cast<const float4*>(res + o)[i];
                const float4 v = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
                reinterpret_cast<float4*>(s + o)[i] = v;
                ss = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, ss))));
            }
        } else {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const float v = x[o + i] + res[o + i];
                s[o + i] = v;
                ss = fmaf(v, v, ss);
            }
        }
        const float r = rms_scale(block_sum(ss, sh), n, eps);
        // s is re-read by the thread that wrote it (program order; no barrier needed).
        if (vec) {
            const float4* w4 = reinterpret_cast<const float4*>(w);
            for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
                const float4 v = reinterpret_cast<const float4*>(s + o)[i], g = w4[i];
                reinterpret_cast<float4*>(y + o)[i] = make_float4(
                    norm1(v.x, r, g.x, zero_centered), norm1(v.y, r, g.y, zero_centered),
                    norm1(v.z, r, g.z, zero_centered), norm1(v.w, r, g.w, zero_centered));
            }
        } else {
            for (int i = threadIdx.x; i < n; i += blockDim.x)
                y[o + i] = norm1(s[o + i], r, w[i], zero_centered);
        }
    }
}
