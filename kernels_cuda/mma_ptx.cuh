// mma_ptx.cuh — the inline-PTX wrappers of the tensor-core attention (attention_mma.cu):
// cp.async copies global -> shared, ldmatrix (plain and transposed), mma.sync m16n8k16 with fp16
// or bf16 operands and fp32 accumulation, hi + lo operand splits, ex2.approx, and fp16x2 packing. Warp-level sm_80+ PTX; the
// caller keeps the operand layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16").
#ifndef QWENREF_MMA_PTX_CUH
#define QWENREF_MMA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mma_attn {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async8(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 8 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                        unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                          unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(unsigned addr, unsigned& r0, unsigned& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(addr));
}
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// the same with bf16 operands (bf16 K, or bf16 V against P as bf16 hi + lo)
__device__ __forceinline__ void mma16816_bf16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                              unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <bool BF16>
__device__ __forceinline__ void mma16816_t(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                           unsigned b1) {
    if constexpr (BF16)
        mma16816_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
    else
        mma16816(c, a[0], a[1], a[2], a[3], b0, b1);
}
// 2^x by MUFU.EX2 alone (exp2f adds a denormal-range fix-up: ~10 instructions); ex2(-inf) = 0
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ unsigned pack_h2(float lo, float hi) {
    __half2 r = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&r);
}
__device__ __forceinline__ unsigned pack_bf2(float lo, float hi) {
    __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&r);
}
// x as an fp16 (or bf16) pair hi + lo, hi = round(x), lo = round(x - hi): the operand pair that
// carries ~22 (bf16: ~16) significant bits of x through two MMAs
template <bool BF16>
__device__ __forceinline__ void split2(float x0, float x1, unsigned& hi, unsigned& lo) {
    if constexpr (BF16) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
        hi = *reinterpret_cast<const unsigned*>(&h);
        lo = pack_bf2(x0 - __low2float(h), x1 - __high2float(h));
    } else {
        const __half2 h = __floats2half2_rn(x0, x1);
        hi = *reinterpret_cast<const unsigned*>(&h);
        lo = pack_h2(x0 - __low2float(h), x1 - __high2float(h));
    }
}

}  // namespace mma_attn

#endif  // QWENREF_MMA_PTX_CUH
