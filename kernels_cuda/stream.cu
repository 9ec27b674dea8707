// stream.cu — the bandwidth floor of one launch: a read-only stream over n bytes.
//
// stream_read reads every 16-byte word of a buffer once (grid-stride, 4 loads in flight per
// thread, streaming cache hint), XORs them, and writes one word per CTA: the XOR of its loads
// (a check that every byte was read: the XOR of out equals the XOR of the buffer's uint32 words).
// It computes nothing else, so its time for n bytes, launched the way a kernel under test is
// launched, is what any kernel that must read those n bytes in one launch can hope for: the
// 1 GiB copy rate less the launch, the ramp and the tail at that size. qwenref/timing.py's
// floor_us times it; the bench records it beside the q8 decode (stage attention) and
// `python -m qwenref.dev.tune_attention --floor` prints it (H200, graph replay over buffers
// > 3x the L2: 71 MB, the q8 cache at T = 32k, reads in 19.1-19.5 us, 90% of the copy rate;
// 285 MB, T = 128k, at the copy rate).
//
// Launch: grid of 16 CTAs per SM (bytes in flight: 4 CTAs per SM reach 79% at 71 MB), block 256;
// p 16-byte aligned, n16 = n / 16 words; out: one uint32 per CTA.
#define STREAM_NT 256

extern "C" __global__ void __launch_bounds__(STREAM_NT)
    stream_read(const int4* __restrict__ p, long long n16, unsigned* out) {
    __shared__ unsigned s_x[STREAM_NT / 32];
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 4
    for (; i < n16; i += stride) {
        const int4 v = __ldcs(p + i);
        acc ^= (unsigned)(v.x ^ v.y ^ v.z ^ v.w);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) s_x[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned x = 0;
#pragma unroll
        for (int w = 0; w < STREAM_NT / 32; ++w) x ^= s_x[w];
        out[blockIdx.x] = x;
    }
}
