// wht_v0.cu — orthonormal Walsh–Hadamard transform over the last axis, the literal definition
// (golden: qwenref/golden/wht.py), Sylvester order:
//
//   y[r, i] = (sum_j (-1)^popcount(i & j) · x[r, j]) · s,   s = float32(1 / float32(sqrt(n)))
//
// One thread per output element, O(n²) work per row instead of the butterfly's n log2(n).
// Launch: block = n threads (n a power of two in 16..1024), one block per row, grid =
//   min(rows, 2^20) (grid-stride over rows past that). Static shared memory: 1024 floats.
//   The block first copies its row into shared memory and waits for the whole copy before any
//   thread writes y, so out = x (in place) is safe; every thread then reads all n values.
// Bytes that must move: 8 · rows · n (read x, write y).
// Differences from golden: golden adds in float64 (butterflies) and rounds once; here each
//   output is one sequential float32 chain j = 0, 1, ..., n-1 (n - 1 roundings of a partial
//   sum no larger than the row's L1 norm), so |error| <= (n - 1) · 2^-24 · sum|x| / sqrt(n),
//   plus the roundings of s and of the final product (<= 2 ulps of the value). The sign flip is
//   exact and the order fixed, so numpy reproduces these bits exactly (the tests do).
// Rungs of the family:
//   v0 (this file): wht_v0, one thread per output, sign from popcount(i & j), O(n²).
//   v1 (wht.cu, wht_f32_n16 .. wht_f32_n1024): log2(n) butterfly passes on a row held in the
//      registers of a few lanes, warp shuffles across lanes, float4 loads.

#define WHT_V0_MAX_N 1024

extern "C" __global__ void __launch_bounds__(WHT_V0_MAX_N)
    wht_v0(const float* x, float* y, long long rows, int n) {
    __shared__ float xs[WHT_V0_MAX_N];
    const int i = threadIdx.x;  // the output index in the row
    const bool live = i < n;    // the wrapper launches exactly n threads
    const float s = __fdiv_rn(1.0f, __fsqrt_rn((float)n));
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {  // same trips per block
        __syncthreads();  // the previous row is no longer read
        if (live) xs[i] = x[row * n + i];
        __syncthreads();  // the whole row is in xs
        if (live) {
            float acc = 0.0f;
            for (int j = 0; j < n; ++j) {
                const float v = xs[j];
                acc = __fadd_rn(acc, (__popc(i & j) & 1) ? -v : v);
            }
            y[row * n + i] = __fmul_rn(acc, s);
        }
    }
}
