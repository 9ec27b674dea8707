// kvcache_rows.cuh — what the append kernels of kvcache.cu and kvcache_tq.cu share: the warp's
// rows of a grid-stride loop, the cache row a source row goes to, alignment tests and the bit
// packing of codes into a 128-bit (lo, hi) pair.
#ifndef QWENREF_KVCACHE_ROWS_CUH
#define QWENREF_KVCACHE_ROWS_CUH

#define FULL_MASK 0xffffffffu
typedef unsigned long long u64;

__device__ __forceinline__ bool aligned(const void* p, unsigned long long a) {
    return (reinterpret_cast<unsigned long long>(p) & (a - 1)) == 0;
}

// Bits [s, s + n) of a 128-bit (lo, hi) pair get w (n <= 64, 0 <= s, s + n <= 128).
__device__ __forceinline__ void put_bits(u64& lo, u64& hi, u64 w, int s, int n) {
    if (s < 64) {
        lo |= w << s;
        if (s + n > 64) hi |= w >> (64 - s);  // straddles the words (s > 0)
    } else {
        hi |= w << (s - 64);
    }
}

// src [nb, nkv, hd] contiguous; token b of head h goes to cache row h * max_t + t0 + b.
// One warp per (b, h): warp index r = b * nkv + h (so src row r), 4 warps per block, grid-stride
// (the loop bound is warp-uniform, so whole warps run every shuffle).
__device__ __forceinline__ int first_warp() {
    return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
__device__ __forceinline__ int warp_stride() { return gridDim.x * (blockDim.x >> 5); }
__device__ __forceinline__ long long cache_row(int r, int nkv, int max_t, int t0) {
    return (long long)(r % nkv) * max_t + t0 + r / nkv;
}

#endif  // QWENREF_KVCACHE_ROWS_CUH
