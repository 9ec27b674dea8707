// wht.cu — orthonormal Walsh–Hadamard transform over the last axis, Sylvester order
// (golden: qwenref/golden/wht.py):  y = H_n x / sqrt(n),  H_n[i, j] = (-1)^popcount(i & j).
// Self-inverse, so the forward and inverse kernels are the same code (the wrapper's `inverse`
// flag only exists for symmetry).
//
// Kernels: wht_f32_n16, _n32, _n64, _n128, _n256, _n512, _n1024 — one instantiation of
// wht_rows<N> each, so each gets registers for its own N.
//   Layout: a row of N floats lives in the registers of L = N / E lanes, E = max(4, N / 32)
//   consecutive elements per lane (N = 128: 32 lanes x 4; 256: 32 x 8; 1024: 32 x 32; N < 128:
//   E = 4 and 32 / L rows share a warp). Butterfly pass h (h = 1, 2, 4, ..., N/2) maps the pair
//   (a, b) at distance h to (a + b, a - b): passes h < E run inside a lane's registers, passes
//   h >= E pair lane with lane ^ (h / E) through __shfl_xor_sync (the lower lane keeps a + b,
//   the upper a - b). Then one multiply by 1/sqrt(N).
//   kvcache.cu's turbo append uses the same wht_regs (wht_regs.cuh) and scale expression, so a
//   turbo append's rotation is bit-identical to this kernel's output.
// Launch: block = 128 threads (4 warps), grid = ceil(rows / (4 * rows_per_warp)), grid-stride
//   over row groups (all 32 lanes of a warp run every shuffle; lanes past the last row load 0
//   and store nothing). float4 loads/stores when x and y are 16-byte aligned, else scalar. y may
//   alias x (a warp reads its rows completely before writing them).
// Bytes that must move: 8 * rows * N (read x, write y). Work: N log2(N) adds per row; at N = 256
//   that is 5 shuffle passes x 8 values per lane — far below the memory time.
// Differences from golden: golden runs the butterflies in float64 and rounds once; here each of
//   the log2(N) passes rounds in float32, so per element the error is <= log2(N) · 2^-24 · (sum
//   of |x| over the row) / sqrt(N) (in practice ~log2(N)/2 ulps of the row's rms), plus one
//   rounding of the scale product (1/sqrt(N) itself is rounded to float32 for odd log2 N).
//
// Device helper shared with kvcache.cu (wht_regs.cuh):
//   wht_regs<N>(float (&v)[E], sub)  — the transform of one row held in the layout above by the
//   L lanes whose index within their group is `sub`; unscaled.

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

#include "wht_regs.cuh"

template <int N>
__device__ __forceinline__ void wht_rows(const float* x, float* y, long long rows) {
    constexpr int E = WhtShape<N>::E, L = WhtShape<N>::L, RPW = WhtShape<N>::RPW;
    const int lane = threadIdx.x & 31, sub = lane % L, rsub = lane / L;
    const int warps = blockDim.x >> 5;
    const long long warp0 = (long long)blockIdx.x * warps + (threadIdx.x >> 5);
    const long long wstride = (long long)gridDim.x * warps;
    const bool vec = aligned16(x) && aligned16(y);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)N));
    for (long long g = warp0; g * RPW < rows; g += wstride) {
        const long long row = g * RPW + rsub;
        const bool live = row < rows;
        const long long off = row * N + (long long)sub * E;
        float v[E];
        if (live && vec) {
#pragma unroll
            for (int i = 0; i < E; i += 4) {
                const float4 t = *reinterpret_cast<const float4*>(x + off + i);
                v[i] = t.x;
                v[i + 1] = t.y;
                v[i + 2] = t.z;
                v[i + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < E; ++i) v[i] = live ? x[off + i] : 0.0f;
        }
        wht_regs<N>(v, sub);
#pragma unroll
        for (int i = 0; i < E; ++i) v[i] = __fmul_rn(v[i], scale);
        if (live) {
            if (vec) {
#pragma unroll
                for (int i = 0; i < E; i += 4)
                    *reinterpret_cast<float4*>(y + off + i) =
                        make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
            } else {
#pragma unroll
                for (int i = 0; i < E; ++i) y[off + i] = v[i];
            }
        }
    }
}

// One entry point per supported N (the wrapper picks by name).
extern "C" __global__ void __launch_bounds__(128)
    wht_f32_n16(const float* x, float* y, long long rows) {
    wht_rows<16>(x, y, rows);
}
extern "C" __global__ void __launch_bounds__(128)
    wht_f32_n32(const float* x, float* y, long long rows) {
    wht_rows<32>(x, y, rows);
}
extern "C" __global__ void __launch_bounds__(128)
    wht_f32_n64(const float* x, float* y, long long rows) {
    wht_rows<64>(x, y, rows);
}
extern "C" __global__ void __launch_bounds__(128)
    wht_f32_n128(const float* x, float* y, long long rows) {
    wht_rows<128>(x, y, rows);
}
extern "C" __global__ void __launch_bounds__(128)
    wht_f32_n256(const float* x, float* y, long long rows) {
    wht_rows<256>(x, y, rows);
}
extern "C" __global__ void __launch_bounds__(128)
    wht_f32_n512(const float* x, float* y, long long rows) {
    wht_rows<512>(x, y, rows);
}
extern "C" __global__ void __launch_bounds__(128)
    wht_f32_n1024(const float* x, float* y, long long rows) {
    wht_rows<1024>(x, y, rows);
}
