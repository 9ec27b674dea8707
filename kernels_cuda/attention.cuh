// attention.cuh — what the split-T attention modules share (attention_split.cu, attention_v1.cu,
// attention_mma.cu, attention_combine.cu; kernel_source pastes it into each, NVRTC compiles each
// module alone): the compile-time shape, inf_f, split_range (golden's split_bounds), warp_max,
// block_wht, and for the one-row-per-CTA partials (split, v1) row_list, split_state and
// write_empty_state.
//
// ATTN_HD (head_dim, 64|128|256) and ATTN_NREP (q heads per kv head, 1..32) come in as -D
// options: the wrapper compiles one partials module per (hd, n_rep), and the defaults are the
// Qwen3.5-27B layer, so a plain `nvcc -c` builds the hot configuration. The combine reads
// neither (hd and S are its arguments) and is compiled without options.
#ifndef QWENREF_ATTENTION_CUH
#define QWENREF_ATTENTION_CUH

#ifndef ATTN_HD
#define ATTN_HD 256
#endif
#ifndef ATTN_NREP
#define ATTN_NREP 6
#endif

// [[maybe_unused]]: each module uses only part of this header, and NVRTC warns about an unused
// function of an unnamed namespace.
namespace {

// NVRTC compiles without <math.h>: no infinity macro there
[[maybe_unused]] __device__ __forceinline__ float inf_f() { return __int_as_float(0x7f800000); }
constexpr int HD = ATTN_HD;
constexpr int NREP = ATTN_NREP;
constexpr int SPLIT_CHUNK = 32;  // split bounds are whole chunks of 32 tokens (golden)

static_assert(HD == 64 || HD == 128 || HD == 256, "ATTN_HD must be 64, 128 or 256");
static_assert(NREP >= 1 && NREP <= 32, "ATTN_NREP must be 1..32");

[[maybe_unused]] __device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// In-place orthonormal WHT (Sylvester order) of `rows` vectors of length n in shared memory,
// done by the whole block. Matches golden wht (x @ H.T / sqrt(n)) up to float32 rounding.
[[maybe_unused]] __device__ void block_wht(float* x, int rows, int n) {
    for (int h = 1; h < n; h <<= 1) {
        __syncthreads();
        for (int p = threadIdx.x; p < rows * (n / 2); p += blockDim.x) {
            const int r = p / (n / 2), k = p % (n / 2);
            const int i = r * n + (k / h) * (2 * h) + (k % h), j = i + h;
            const float a = x[i], b = x[j];
            x[i] = a + b;
            x[j] = a - b;
        }
    }
    __syncthreads();
    const float s = 1.f / sqrtf(float(n));  // as gpu.wht: one multiply by float32(1/sqrt(n))
    for (int p = threadIdx.x; p < rows * n; p += blockDim.x) x[p] *= s;
    __syncthreads();
}

// Split i of a visible list of n tokens: golden split_bounds, per = ceil(ceil(n/32)/S) chunks.
[[maybe_unused]] __device__ __forceinline__ void split_range(int n, int S, int i, int& lo,
                                                             int& hi) {
    const int chunks = (n + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
    const int per = (chunks + S - 1) / S;
    const long long a = (long long)i * per * SPLIT_CHUNK, b = a + (long long)per * SPLIT_CHUNK;
    lo = int(a < n ? a : n);
    hi = int(b < n ? b : n);
}

// Row b's visible list for the one-row-per-CTA partials (attention_split.cu, attention_v1.cu):
// returns null (dense: position == token, n_vis = base_pos + b + 1 tokens) or the row's token
// list, when sel_n[b] (clipped to [0, sel_w]) is above 0, with n_vis = that count.
[[maybe_unused]] __device__ __forceinline__ const int* row_list(int b, int base_pos,
                                                                const int* sel_idx,
                                                                const int* sel_n, int sel_w,
                                                                int& n_vis) {
    n_vis = base_pos + b + 1;
    if (sel_n == nullptr) return nullptr;
    const int sn = min(max(sel_n[b], 0), sel_w);
    if (sn == 0) return nullptr;
    n_vis = sn;
    return sel_idx + (size_t)b * sel_w;
}

// Where the partials of row b, split `split` and kv head g's NREP heads go: o [NREP][HD],
// m and l [NREP] (of o_out [nb, S, nh, HD], m_out and l_out [nb, S, nh]).
struct SplitState {
    float *o, *m, *l;
};
[[maybe_unused]] __device__ __forceinline__ SplitState split_state(float* o_out, float* m_out,
                                                                   float* l_out, int b, int S,
                                                                   int split, int nh, int g) {
    const size_t head0 = ((size_t)b * S + split) * nh + (size_t)g * NREP;
    return {o_out + head0 * HD, m_out + head0, l_out + head0};
}

// An empty split's partials for the NREP heads at dst (golden: m = -inf, l = 0, o = 0),
// written by the block's threads.
[[maybe_unused]] __device__ __forceinline__ void write_empty_state(const SplitState& dst) {
    for (int p = threadIdx.x; p < NREP * HD; p += blockDim.x) dst.o[p] = 0.f;
    for (int p = threadIdx.x; p < NREP; p += blockDim.x) {
        dst.m[p] = -inf_f();
        dst.l[p] = 0.f;
    }
}

}  // namespace

#endif  // QWENREF_ATTENTION_CUH
