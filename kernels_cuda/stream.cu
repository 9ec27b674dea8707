// stream.cu — the bandwidth floor of one launch: a read-only stream over n bytes.
//
// stream_read reads every 16-byte word of a buffer once (grid-stride, 4 loads in flight per
// thread, streaming cache hint) and keeps them live with an XOR that is written only if it hits
// one particular value. It computes nothing else, so its time for n bytes, launched the way a
// kernel under test is launched (CUDA-graph replay over buffers > 3x the L2), is what any kernel
// that must read those n bytes in one launch can hope for: the 1 GiB copy rate minus the launch,
// the ramp and the tail at that size. qwenref.tune_attention --floor prints it beside decode
// attention (H200: 71 MB, the q8 cache at T = 32k, takes 19.1-19.5 us, 90% of the copy rate;
// 285 MB at 128k reads at the copy rate). TUNING.md uses it as the floor of the 32k target.
//
// Launch: grid of 16 CTAs per SM (enough bytes in flight: 4 CTAs per SM reach only 79% at 71 MB),
// block 256; p 16-byte aligned, n16 = n / 16 words; out: one uint32 (practically never written).
extern "C" __global__ void __launch_bounds__(256) stream_read(const int4* __restrict__ p,
                                                            long long n16, unsigned* out) {
  unsigned acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 4
  for (; i < n16; i += stride) {
    const int4 v = __ldcs(p + i);
    acc ^= (unsigned)(v.x ^ v.y ^ v.z ^ v.w);
  }
  if (acc == 0x9e3779b9u) out[0] = acc;   // a data-dependent store the compiler cannot drop
}
