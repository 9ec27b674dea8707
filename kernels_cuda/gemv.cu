// gemv — Q8_0 weight-only matrix-vector products for decode (nb = 1..8 rows at once), the
// Q8_0 weight quantizer, and the f32 SwiGLU for the cuBLAS path.
//
// gemv_q8_nb{1..8}:  y[b, o] = Σ_i x[b, i] · q[o, i] · d[o, i / 32]        (b < NB, o < n_out)
//   x f32 [NB, n_in] (row stride n_in), q int8 [n_out, n_in], d f16 [n_out, n_in / 32];
//   n_in % 32 == 0. Launch: 128 threads = 4 warps, one warp per ROWS = 4 output rows,
//   grid = ceil(n_out / 16). Each lane walks its rows' 16-byte chunks (16 int8 weights, half a
//   Q8_0 group) with stride 32 chunks, so each warp load is 512 contiguous bytes of one row and
//   the weights are read from memory exactly once for all NB rows; x is re-read from L1/L2
//   (NB·4 bytes per ROWS weight bytes). Bytes it must move: n_out·n_in (q) + n_out·n_in/16 (d)
//   + NB·n_in·4 (x) + NB·n_out·4 (y): the weights dominate.
//   Epilogues, picked by `mode`:
//     0  plain: y in "segmented" layout (below); y += resid (same index) when resid != NULL —
//        the layer's MLP residual add rides on down_proj.
//     1  SwiGLU: weight rows interleaved (gate_0, up_0, gate_1, up_1, ...), so a warp holds both
//        halves of two outputs: act[b, i] = silu(gate_i) · up_i with silu(g) = g / (1 + e^-g)
//        (e^-g clamped at e^80 like the golden model), act f32 [nb_total, n_out / 2].
//   Segmented output: rows [0, n_out) are cut at e0 <= e1 <= e2 <= e3 into 5 segments s with
//   [start_s, end_s); row o of segment s for batch row b goes to
//   y[nb_total·start_s + b·(end_s − start_s) + (o − start_s)], i.e. each segment is its own
//   contiguous [nb_total, len_s] matrix. e0 = e1 = e2 = e3 = n_out gives plain y [nb_total, n_out].
//   One launch of the layer's fused q|k|v|indexer-q|indexer-k weight thus feeds the next stages
//   contiguous tensors. b0/nb_total let a wrapper cover nb > 8 in chunks of 8 (x points at the
//   chunk; y and resid are indexed globally).
// Differences from golden (x @ dequant(W).T in float32, numpy/BLAS order): each lane sums its
//   16 products x·q in float32 (two interleaved chains), scales the partial by float32(d) once,
//   then the warp adds 32 lanes' partials by butterfly — a different summation order, so results
//   differ by float32 rounding (~1e-7 relative), never by quantization (q·d is exact).
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
//
// spin_wait: a 1-thread kernel that busy-waits `ns` nanoseconds on %globaltimer. Timing helpers
//   launch it first so the host can queue the launches to be timed while the GPU waits: the
//   events then measure GPU time, not the host's launch rate.
#include <cuda_fp16.h>

#define GEMV_ROWS 4
#define GEMV_THREADS 128

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

__device__ __forceinline__ float silu_f(float g) {
    return g / (1.0f + expf(fminf(-g, 80.0f)));
}

template <int NB>
__device__ __forceinline__ void gemv_q8_body(
        const float* __restrict__ x, const signed char* __restrict__ q,
        const __half* __restrict__ d, float* __restrict__ y, const float* __restrict__ resid,
        int n_in, int n_out, int e0, int e1, int e2, int e3, int b0, int nb_total, int mode) {
    const int lane = threadIdx.x & 31;
    const int o0 = (blockIdx.x * (GEMV_THREADS / 32) + (threadIdx.x >> 5)) * GEMV_ROWS;
    if (o0 >= n_out) return;                                   // whole warp leaves together
    const int nchunk = n_in >> 4;                              // 16-byte chunks per row
    const int ngroup = n_in >> 5;                              // Q8_0 groups per row

    // Rows past n_out read row n_out - 1 (valid memory, no divergence) and are not stored.
    const int4* qrow[GEMV_ROWS];
    const __half* drow[GEMV_ROWS];
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; ++r) {
        const int o = min(o0 + r, n_out - 1);
        qrow[r] = reinterpret_cast<const int4*>(q + (size_t)o * n_in);
        drow[r] = d + (size_t)o * ngroup;
    }

    float acc[NB][GEMV_ROWS];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r) acc[b][r] = 0.0f;

    // Two iterations unrolled for NB <= 2 so each lane has 8 independent 16-byte weight loads
    // in flight (the decode case has little other work to hide memory latency behind).
#pragma unroll(NB <= 2 ? 2 : 1)
    for (int c = lane; c < nchunk; c += 32) {
        int4 wq[GEMV_ROWS];
        float s[GEMV_ROWS];
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r) wq[r] = __ldcs(qrow[r] + c);   // streamed once
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r) s[r] = __half2float(__ldg(drow[r] + (c >> 1)));
        float wf[GEMV_ROWS][16];
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r) unpack16(wq[r], wf[r]);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const float4* xp = reinterpret_cast<const float4*>(x + (size_t)b * n_in) + 4 * c;
            float xv[16];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float4 t = __ldg(xp + k);
                xv[4 * k] = t.x; xv[4 * k + 1] = t.y; xv[4 * k + 2] = t.z; xv[4 * k + 3] = t.w;
            }
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; ++r) {
                float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
                for (int k = 0; k < 16; k += 2) {
                    p0 = fmaf(xv[k], wf[r][k], p0);
                    p1 = fmaf(xv[k + 1], wf[r][k + 1], p1);
                }
                acc[b][r] = fmaf(s[r], p0 + p1, acc[b][r]);
            }
        }
    }

#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                acc[b][r] += __shfl_xor_sync(0xffffffffu, acc[b][r], off);

    if (mode == 1) {                                           // SwiGLU: 2 outputs per warp
        const int n_act = n_out >> 1;
        const int i0 = o0 >> 1;
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int p = 0; p < GEMV_ROWS / 2; ++p)
                if (lane == b * (GEMV_ROWS / 2) + p && i0 + p < n_act)
                    y[(size_t)(b0 + b) * n_act + i0 + p] =
                        silu_f(acc[b][2 * p]) * acc[b][2 * p + 1];
        return;
    }
    // Lane b·ROWS + r stores (b, r): register indices stay compile-time constants.
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; ++r) {
            const int o = o0 + r;
            if (lane == b * GEMV_ROWS + r && o < n_out) {
                const int start = o < e0 ? 0 : o < e1 ? e0 : o < e2 ? e1 : o < e3 ? e2 : e3;
                const int end = o < e0 ? e0 : o < e1 ? e1 : o < e2 ? e2 : o < e3 ? e3 : n_out;
                const size_t idx = (size_t)nb_total * start + (size_t)(b0 + b) * (end - start)
                                   + (o - start);
                float v = acc[b][r];
                if (resid != nullptr) v += resid[idx];
                y[idx] = v;
            }
        }
}

#define GEMV_Q8_KERNEL(NB)                                                                     \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS) gemv_q8_nb##NB(                 \
            const float* __restrict__ x, const signed char* __restrict__ q,                    \
            const __half* __restrict__ d, float* __restrict__ y,                               \
            const float* __restrict__ resid, int n_in, int n_out, int e0, int e1, int e2,      \
            int e3, int b0, int nb_total, int mode) {                                          \
        gemv_q8_body<NB>(x, q, d, y, resid, n_in, n_out, e0, e1, e2, e3, b0, nb_total, mode);  \
    }

GEMV_Q8_KERNEL(1)
GEMV_Q8_KERNEL(2)
GEMV_Q8_KERNEL(3)
GEMV_Q8_KERNEL(4)
GEMV_Q8_KERNEL(5)
GEMV_Q8_KERNEL(6)
GEMV_Q8_KERNEL(7)
GEMV_Q8_KERNEL(8)

extern "C" __global__ void q8_quantize_rows(const float* __restrict__ w,
                                            signed char* __restrict__ q,
                                            __half* __restrict__ d, long long n_groups) {
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long g = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
         g < n_groups; g += warps) {
        const float v = w[g * 32 + lane];
        float amax = fabsf(v);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float d32 = amax / 127.0f;                      // IEEE division (no fast math)
        const float id = d32 != 0.0f ? 1.0f / d32 : 0.0f;
        q[g * 32 + lane] = (signed char)roundf(v * id);       // |v·id| <= 127 (+ rounding)
        if (lane == 0) d[g] = __float2half_rn(d32);
    }
}

extern "C" __global__ void swiglu_interleaved(const float* __restrict__ gu,
                                              float* __restrict__ act, int nb, int n_act) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nb * n_act) return;
    const long long b = i / n_act, j = i - b * n_act;
    const float2 p = reinterpret_cast<const float2*>(gu + b * 2 * n_act)[j];
    act[i] = silu_f(p.x) * p.y;
}

extern "C" __global__ void spin_wait(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(500);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
