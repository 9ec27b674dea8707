// gemv — weight-streaming matrix-vector products for decode (nb = 1..8 rows at once): Q8_0
// weights (gemv_q8_*) and float32 weights (gemv_f32_*); the Q8_0 weight quantizer; the f32
// SwiGLU for the cuBLAS path.
//
// gemv_q8_nb{NB}_{cfg}:  y[b, o] = Σ_i x[b, i] · q[o, i] · d[o, i / 32]   (b < NB, o < n_out)
//   x f32 [NB, n_in] (row stride n_in), q int8 [n_out, n_in], d f16 [n_out, n_in / 32];
//   n_in % 32 == 0, q 16-byte aligned.
// gemv_f32_nb{NB}_{cfg}: y[b, o] = Σ_i x[b, i] · w[o, i], w f32 [n_out, n_in], n_in % 4 == 0,
//   w 16-byte aligned. Same structure, 4 weights per 16-byte chunk instead of 16, no scales.
// Launch (cfg = r{ROWS}t{THREADS}u{UNROLL}): one CTA of THREADS threads per ROWS output rows,
//   grid = ceil(n_out / ROWS). The CTA splits the row's 16-byte chunks over all its threads
//   (split-K): thread t takes chunks t, t + THREADS, ...; each warp load is 512 contiguous bytes
//   of one row. Each thread issues UNROLL·ROWS independent 16-byte streaming loads before it
//   uses any (ROWS·UNROLL·16 bytes in flight per thread), so short-N, tall-K shapes (o_proj,
//   down_proj: n_out = 5120) still have ~n_out/ROWS CTAs and enough bytes in flight per SM, and
//   the serial K loop per thread is n_in / (16·THREADS) steps long. Partials are reduced by a
//   warp butterfly, then across warps through shared memory; thread t < NB·ROWS writes (b, r).
//   The weights are read from memory exactly once for all NB rows; x is re-read per CTA from
//   L1/L2 (4·NB bytes per ROWS weight bytes: q8), which is what limits nb >= 2.
//   Suffix m<MINB>: the same kernel under __launch_bounds__(THREADS, MINB) (registers capped so
//   MINB CTAs fit per SM). Which configuration runs per (kind, nb, n_out): gemv.py's pick_kernel;
//   the measurements behind it: qwenref/dev/tune_gemv.py (extra variants under -DGEMV_TUNE).
//   Bytes it must move: n_out·n_in (q) + n_out·n_in/16 (d) + NB·n_in·4 (x) + NB·n_out·4 (y),
//   f32: 4·n_out·n_in + the same x/y: the weights dominate.
//   Epilogues, picked by `mode`:
//     0  plain: y in "segmented" layout (below); y += resid (same index) when resid != NULL —
//        the layer's MLP residual add rides on down_proj.
//     1  SwiGLU: weight rows interleaved (gate_0, up_0, gate_1, up_1, ...), so a CTA (ROWS even)
//        holds both halves of ROWS/2 outputs: act[b, i] = silu(gate_i) · up_i with
//        silu(g) = g / (1 + e^-g) (e^-g clamped at e^80 like the golden model),
//        act f32 [nb_total, n_out / 2].
//   Segmented output: rows [0, n_out) are cut at e0 <= e1 <= e2 <= e3 into 5 segments s with
//   [start_s, end_s); row o of segment s for batch row b goes to
//   y[nb_total·start_s + b·(end_s − start_s) + (o − start_s)], i.e. each segment is its own
//   contiguous [nb_total, len_s] matrix. e0 = e1 = e2 = e3 = n_out gives plain y [nb_total, n_out].
//   One launch of the layer's fused q|k|v|indexer-q|indexer-k weight thus feeds the next stages
//   contiguous tensors. b0/nb_total let a wrapper cover nb > 8 in chunks of 8 (x points at the
//   chunk; y and resid are indexed globally).
// Differences from golden (x @ dequant(W).T in float32, numpy/BLAS order): q8: each thread sums
//   a chunk's 16 products x·q in float32 (two interleaved chains), scales the partial by
//   float32(d) once and adds it to its running sum; f32: one fma chain per thread. Then 32 lanes'
//   sums are added by butterfly and the warps' sums in order — a different summation order, so
//   results differ by float32 rounding (~1e-7 relative), never by quantization (q·d is exact).
//   int8 -> float32 uses the exact magic-number trick (0x4B0000xx − (2^23 + 128)) instead of I2F.
//
// q8_quantize_rows: the Q8_0 rule (llama.cpp quantize_row_q8_0_ref), bit-exact with
//   golden.q8_quantize: per group of 32 in float32, amax = max|w|, d32 = amax / 127,
//   id = d32 != 0 ? 1 / d32 : 0, q = roundf(w · id) (ties away from zero), d = f16(d32) (RNE).
//   One warp per group (lane = element), grid-stride over n_groups. Moves 4 + 1 bytes per
//   weight + 2 per group.
//
// swiglu_interleaved: act[b, i] = silu(gu[b, 2i]) · gu[b, 2i + 1] — the f32 (cuBLAS) path's
//   counterpart of mode 1. One thread per output.
#include <cuda_fp16.h>

// 16 int8 (one int4) -> 16 exact floats. For a byte b: bits 0x4B0000(b ^ 0x80) are the float
// 2^23 + (b ^ 0x80) = 2^23 + 128 + int8(b); subtracting 2^23 + 128 leaves int8(b) exactly.
__device__ __forceinline__ void unpack16(const int4 v, float* f) {
    const unsigned u[4] = {(unsigned)v.x ^ 0x80808080u, (unsigned)v.y ^ 0x80808080u,
                           (unsigned)v.z ^ 0x80808080u, (unsigned)v.w ^ 0x80808080u};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            f[4 * i + j] = __uint_as_float(__byte_perm(u[i], 0x4B000000u, 0x7440 + j)) - 8388736.0f;
    }
}

__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(fminf(-g, 80.0f))); }

// One CTA: ROWS output rows, split-K over THREADS threads (see the header).
// Q8: w is int8 q with scales d; else w is float32 and d unused.
template <bool Q8, int NB, int ROWS, int THREADS, int UNROLL>
__device__ __forceinline__ void gemv_body(const float* __restrict__ x, const void* __restrict__ w,
                                          const __half* __restrict__ d, float* __restrict__ y,
                                          const float* __restrict__ resid, int n_in, int n_out,
                                          int e0, int e1, int e2, int e3, int b0, int nb_total,
                                          int mode) {
    constexpr int E = Q8 ? 16 : 4;  // weights per 16-byte chunk
    constexpr int NW = THREADS / 32;
    __shared__ float red[NW][NB * ROWS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int o0 = blockIdx.x * ROWS;
    const int nchunk = n_in / E;  // 16-byte chunks per row
    const size_t row_bytes = Q8 ? (size_t)n_in : (size_t)n_in * 4;

    // Rows past n_out read row n_out - 1 (valid memory, no divergence) and are not stored.
    const int4* wrow[ROWS];
    const __half* drow[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int o = min(o0 + r, n_out - 1);
        wrow[r] = reinterpret_cast<const int4*>(static_cast<const char*>(w) + o * row_bytes);
        drow[r] = Q8 ? d + (size_t)o * (n_in >> 5) : nullptr;
    }

    float acc[NB][ROWS];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[b][r] = 0.0f;

    for (int c0 = tid; c0 < nchunk; c0 += THREADS * UNROLL) {
        int4 wv[UNROLL][ROWS];
        float s[UNROLL][ROWS];
        // all UNROLL·ROWS loads first: that many 16-byte requests in flight per thread
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int c = c0 + u * THREADS;
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
                wv[u][r] = c < nchunk ? __ldcs(wrow[r] + c) : int4{0, 0, 0, 0};  // streamed once
            if (Q8) {
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
                    s[u][r] = c < nchunk ? __half2float(__ldg(drow[r] + (c >> 1))) : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int c = c0 + u * THREADS;
            if (c >= nchunk) break;
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const float4* xp =
                    reinterpret_cast<const float4*>(x + (size_t)b * n_in + (size_t)c * E);
                float xv[E];
#pragma unroll
                for (int k = 0; k < E / 4; ++k) {
                    const float4 t = __ldg(xp + k);
                    xv[4 * k] = t.x;
                    xv[4 * k + 1] = t.y;
                    xv[4 * k + 2] = t.z;
                    xv[4 * k + 3] = t.w;
                }
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    if (Q8) {
                        float wf[16];
                        unpack16(wv[u][r], wf);
                        float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
                        for (int k = 0; k < 16; k += 2) {
                            p0 = fmaf(xv[k], wf[k], p0);
                            p1 = fmaf(xv[k + 1], wf[k + 1], p1);
                        }
                        acc[b][r] = fmaf(s[u][r], p0 + p1, acc[b][r]);
                    } else {
                        const int4 v = wv[u][r];
                        const float4 wf = float4{__int_as_float(v.x), __int_as_float(v.y),
                                                 __int_as_float(v.z), __int_as_float(v.w)};
                        float a = acc[b][r];
                        a = fmaf(xv[0], wf.x, a);
                        a = fmaf(xv[1], wf.y, a);
                        a = fmaf(xv[2], wf.z, a);
                        a = fmaf(xv[3], wf.w, a);
                        acc[b][r] = a;
                    }
                }
            }
        }
    }

    // warp butterfly, then the warps' sums through shared memory
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float v = acc[b][r];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0) red[warp][b * ROWS + r] = v;
        }
    __syncthreads();

    if (mode == 1) {  // SwiGLU: ROWS/2 outputs per CTA
        constexpr int P = ROWS / 2;
        if (tid >= NB * P) return;
        const int b = tid / P, p = tid - b * P;
        const int n_act = n_out >> 1;
        const int i = (o0 >> 1) + p;
        if (i >= n_act) return;
        float g = 0.0f, up = 0.0f;
#pragma unroll
        for (int k = 0; k < NW; ++k) {
            g += red[k][b * ROWS + 2 * p];
            up += red[k][b * ROWS + 2 * p + 1];
        }
        y[(size_t)(b0 + b) * n_act + i] = silu_f(g) * up;
        return;
    }
    if (tid >= NB * ROWS) return;
    const int b = tid / ROWS, r = tid - b * ROWS;
    const int o = o0 + r;
    if (o >= n_out) return;
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < NW; ++k) v += red[k][tid];
    const int start = o < e0 ? 0 : o < e1 ? e0 : o < e2 ? e1 : o < e3 ? e2 : e3;
    const int end = o < e0 ? e0 : o < e1 ? e1 : o < e2 ? e2 : o < e3 ? e3 : n_out;
    const size_t idx = (size_t)nb_total * start + (size_t)(b0 + b) * (end - start) + (o - start);
    if (resid != nullptr) v += resid[idx];
    y[idx] = v;
}

// One gemv_body instantiation as an extern "C" kernel NAME with __launch_bounds__ BOUNDS.
#define GEMV_KERNEL_AS(NAME, BOUNDS, ISQ8, NB, ROWS, THREADS, UNROLL)                              \
    extern "C" __global__ void __launch_bounds__ BOUNDS NAME(                                      \
        const float* __restrict__ x, const void* __restrict__ w, const __half* __restrict__ d,     \
        float* __restrict__ y, const float* __restrict__ resid, int n_in, int n_out, int e0,       \
        int e1, int e2, int e3, int b0, int nb_total, int mode) {                                  \
        gemv_body<ISQ8, NB, ROWS, THREADS, UNROLL>(x, w, d, y, resid, n_in, n_out, e0, e1, e2, e3, \
                                                   b0, nb_total, mode);                            \
    }

#define GEMV_KERNEL(KIND, ISQ8, NB, ROWS, THREADS, UNROLL)                                         \
    GEMV_KERNEL_AS(gemv_##KIND##_nb##NB##_r##ROWS##t##THREADS##u##UNROLL, (THREADS), ISQ8, NB,     \
                   ROWS, THREADS, UNROLL)

// As GEMV_KERNEL with __launch_bounds__(THREADS, MINB) (a register cap: more CTAs per SM), name
// suffix m<MINB>.
#define GEMV_KERNEL_MB(KIND, ISQ8, NB, ROWS, THREADS, UNROLL, MINB)                                \
    GEMV_KERNEL_AS(gemv_##KIND##_nb##NB##_r##ROWS##t##THREADS##u##UNROLL##m##MINB,                 \
                   (THREADS, MINB), ISQ8, NB, ROWS, THREADS, UNROLL)

// The configurations the wrappers use (qwenref/gpu/gemv.py _CFG picks one per kind and nb).
GEMV_KERNEL(q8, true, 1, 4, 128, 2)
GEMV_KERNEL(q8, true, 2, 8, 128, 1)
GEMV_KERNEL(q8, true, 3, 8, 128, 1)
GEMV_KERNEL(q8, true, 4, 8, 128, 1)
GEMV_KERNEL(q8, true, 5, 4, 64, 1)
GEMV_KERNEL(q8, true, 6, 4, 64, 1)
GEMV_KERNEL(q8, true, 7, 4, 64, 1)
GEMV_KERNEL(q8, true, 8, 4, 64, 1)
GEMV_KERNEL_MB(q8, true, 1, 8, 128, 1, 8)
GEMV_KERNEL(f32, false, 1, 4, 128, 4)
GEMV_KERNEL(f32, false, 2, 4, 128, 2)
GEMV_KERNEL(f32, false, 3, 4, 128, 2)
GEMV_KERNEL(f32, false, 4, 4, 128, 2)
GEMV_KERNEL(f32, false, 5, 4, 128, 2)
GEMV_KERNEL(f32, false, 6, 4, 128, 2)
GEMV_KERNEL(f32, false, 7, 4, 128, 2)
GEMV_KERNEL(f32, false, 8, 4, 128, 2)

#ifdef GEMV_TUNE
// Variants for qwenref/dev/tune_gemv.py only (compiled with -DGEMV_TUNE).
GEMV_KERNEL(q8, true, 1, 2, 128, 2)
GEMV_KERNEL(q8, true, 1, 2, 128, 4)
GEMV_KERNEL(q8, true, 1, 4, 128, 1)
GEMV_KERNEL(q8, true, 1, 4, 128, 4)
GEMV_KERNEL(q8, true, 1, 4, 64, 2)
GEMV_KERNEL(q8, true, 1, 4, 64, 4)
GEMV_KERNEL(q8, true, 1, 4, 256, 2)
GEMV_KERNEL(q8, true, 1, 8, 128, 1)
GEMV_KERNEL(q8, true, 1, 8, 128, 2)
GEMV_KERNEL(q8, true, 1, 8, 256, 2)
GEMV_KERNEL(q8, true, 4, 2, 128, 2)
GEMV_KERNEL(q8, true, 4, 4, 128, 2)
GEMV_KERNEL(q8, true, 4, 4, 64, 1)
GEMV_KERNEL(q8, true, 4, 2, 128, 1)
GEMV_KERNEL(q8, true, 8, 2, 128, 1)
GEMV_KERNEL(q8, true, 8, 4, 128, 2)
GEMV_KERNEL(q8, true, 8, 2, 64, 1)
GEMV_KERNEL(f32, false, 1, 2, 128, 4)
GEMV_KERNEL(f32, false, 1, 4, 128, 2)
GEMV_KERNEL(f32, false, 1, 4, 256, 4)
GEMV_KERNEL(f32, false, 1, 8, 128, 2)
GEMV_KERNEL(f32, false, 1, 4, 128, 8)
GEMV_KERNEL(f32, false, 4, 4, 128, 4)
GEMV_KERNEL(f32, false, 8, 4, 128, 4)
GEMV_KERNEL(q8, true, 4, 4, 128, 1)
GEMV_KERNEL(q8, true, 8, 4, 128, 1)
GEMV_KERNEL_MB(q8, true, 1, 4, 128, 2, 6)
GEMV_KERNEL_MB(q8, true, 1, 4, 256, 2, 3)
#endif

extern "C" __global__ void q8_quantize_rows(const float* __restrict__ w,
                                            signed char* __restrict__ q, __half* __restrict__ d,
                                            long long n_groups) {
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long g = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); g < n_groups;
         g += warps) {
        const float v = w[g * 32 + lane];
        float amax = fabsf(v);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float d32 = amax / 127.0f;  // IEEE division (no fast math)
        const float id = d32 != 0.0f ? 1.0f / d32 : 0.0f;
        q[g * 32 + lane] = (signed char)roundf(v * id);  // |v·id| <= 127 (+ rounding)
        if (lane == 0) d[g] = __float2half_rn(d32);
    }
}

extern "C" __global__ void swiglu_interleaved(const float* __restrict__ gu, float* __restrict__ act,
                                              int nb, int n_act) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nb * n_act) return;
    const long long b = i / n_act, j = i - b * n_act;
    const float2 p = reinterpret_cast<const float2*>(gu + b * 2 * n_act)[j];
    act[i] = silu_f(p.x) * p.y;
}
