// wht_regs.cuh — the register Walsh–Hadamard butterfly shared by wht.cu (the standalone
// transform) and kvcache.cu (the turbo append rotates each row before quantizing it). One copy,
// so a turbo append's rotation stays bit-identical to gpu.wht's output.
//
// A row of N floats (N a power of two, 16..1024) lives in the registers of L = N / E lanes,
// E = max(4, N / 32) consecutive elements per lane; `sub` is the lane's index within its row.
// Butterfly pass h (h = 1, 2, 4, ..., N/2) maps the pair (a, b) at distance h to (a + b, a - b):
// passes h < E run inside a lane's registers, passes h >= E pair lane with lane ^ (h / E)
// through __shfl_xor_sync (the lower lane keeps a + b, the upper a - b). Unscaled: callers
// multiply by 1/sqrt(N) themselves.
//
// The Python side (qwenref.gpu._runtime.kernel_source) pastes this file in place of its
// #include line before NVRTC compiles, so CuPy's disk cache, keyed on the source text, sees any
// change here; nvcc finds it next to the .cu files.
#ifndef QWENREF_WHT_REGS_CUH
#define QWENREF_WHT_REGS_CUH

#ifndef FULL_MASK
#define FULL_MASK 0xffffffffu
#endif

template <int N>
struct WhtShape {
    static constexpr int E = N >= 128 ? N / 32 : 4;  // elements per lane
    static constexpr int L = N / E;                  // lanes per row (4, 8, 16 or 32)
    static constexpr int RPW = 32 / L;               // rows per warp
    static constexpr bool FMA = false;  // the cross-lane pass as a select and an add (below)
};

// SH: the layout of the row (WhtShape<N>, or another E with L = N / E lanes: the same passes in
// the same order give the same bits wherever the elements sit). SH::FMA: the cross-lane pass as
// one fma, o + s v with s = ±1 (the same bits as v + o and o - v: one rounding of the same sum),
// one instruction fewer than the select and add.
template <int N, typename SH = WhtShape<N>>
__device__ __forceinline__ void wht_regs(float (&v)[SH::E], int sub) {
    constexpr int E = SH::E, L = SH::L;
#pragma unroll
    for (int h = 1; h < E; h <<= 1) {
#pragma unroll
        for (int i = 0; i < E; ++i) {
            if ((i & h) == 0) {
                const float a = v[i], b = v[i + h];
                v[i] = a + b;
                v[i + h] = a - b;
            }
        }
    }
#pragma unroll
    for (int m = 1; m < L; m <<= 1) {
        const bool upper = (sub & m) != 0;
        const float s = upper ? -1.0f : 1.0f;
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const float o = __shfl_xor_sync(FULL_MASK, v[i], m);
            if constexpr (SH::FMA) {
                v[i] = fmaf(s, v[i], o);
            } else {
                v[i] = upper ? o - v[i] : v[i] + o;
            }
        }
    }
}

#endif  // QWENREF_WHT_REGS_CUH
