// attention_mma.cuh — what the tensor-core partials of attention_mma.cu are built from: their
// compile-time configuration (Cfg: warps, pipeline stages, score-loop unroll; knobs -DMMA_NW,
// -DMMA_NSTAGE, -DMMA_UNROLL_G; minb_n1: the CTAs an SM the one-row kernels are built for,
// -DMMA_MINB_N1), their one dynamic shared-memory layout (Lay: its BYTES are what
// qwenref/gpu/attention_plan.py mma_smem_bytes mirrors and what a block must be let opt into),
// and the int8 -> fp16 conversions of the q8 K and V operands. attention_mma.cu includes it
// inside its guard (hd 128 / 256, MMA_NW dividing hd / 32), after setting MMA_NW's default.
#ifndef QWENREF_ATTENTION_MMA_CUH
#define QWENREF_ATTENTION_MMA_CUH

#include <cuda_fp16.h>

#include "attention.cuh"

#ifndef MMA_NSTAGE
#define MMA_NSTAGE 0  // pipeline stages; 0 = Cfg's rule below
#endif
#define MMA_PS 8
#ifndef MMA_UNROLL_G
#define MMA_UNROLL_G 0  // score-loop unroll; 0 = Cfg's rule below
#endif
#ifndef MMA_MINB_N1
#define MMA_MINB_N1 0  // CTAs per SM the NT8 = 1 kernels are built for; 0: the kind's (minb_n1)
#endif
#ifndef MMA_TQ2_QUAD
#define MMA_TQ2_QUAD 0  // 1: tq2 looks its codes up four at a time (kv_tile_tq.cuh's TqTable)
#endif

namespace mma_attn {

constexpr int NG = HD / 32;   // 32-dim units per token (q8 groups, score-loop steps, P.V units)
constexpr int NCH = HD / 16;  // 16-dim k-steps per token (q fragments)
static_assert(HD == 128 || HD == 256, "mma kernel: head_dim 128 or 256");

// Warps per CTA (default 4) and pipeline stages. Two CTAs per SM (8 warps, two per scheduler) is
// what keeps the q8 tensor-core loop issuing, so every NT8 takes 2 stages: at hd 256 NT8 = 3
// needs 98,160 B and NT8 = 4 108,688 B, under the 115,712 B that two CTAs may each take (NT8 = 4
// at one CTA with 3 stages is slower than at two with 2). docs/tuning-log.md has the measurements.
template <int NT8>
struct Cfg {
    static constexpr int NW = MMA_NW > 0 ? MMA_NW : 4;
    static constexpr int NST = MMA_NSTAGE > 0 ? MMA_NSTAGE : 2;
    static_assert(NST >= 2 && NST <= 4, "MMA_NSTAGE must be 2..4");
    static constexpr int NT = NW * 32;
    static constexpr int BT = 16 * NW;   // tokens per pipeline block
    static constexpr int GPW = NG / NW;  // 32-dim units per warp in P.V
    static_assert(NG % NW == 0 && GPW >= 1, "mma kernel: hd/32 must be a multiple of MMA_NW");
    // score loop over units: unrolled fully (the HMMA chains of several units interleave),
    // except at NT8 = 4, which would spill at 255 registers
    static constexpr int UG = MMA_UNROLL_G > 0 ? MMA_UNROLL_G : (NT8 >= 4 ? 2 : NG);
    // the unit of a warp's idx-th P.V unit
    static __device__ __forceinline__ int group(int warp, int idx) { return warp * GPW + idx; }
};

// CTAs per SM the NT8 = 1 kernels are built for (__launch_bounds__; -DMMA_MINB_N1 overrides): tq's
// three (they fit 168 registers at no cost in instructions, and at hd 256 75,568 B of shared
// memory at most, so three CTAs share an SM and the plan's split count follows), the others'
// one (turbo4 held to 168 registers gained 1 % at 128k tokens and lost 11 % at 32k, measured
// before the split count's EXTRA_CTA_TILES rule: docs/tuning-log.md).
template <class KL>
constexpr int minb_n1() {
    return MMA_MINB_N1 > 0 ? MMA_MINB_N1 : (KL::TQB > 0 ? 3 : 1);
}

template <int B>
struct TqTable;  // kv_tile_tq.cuh

// All of a CTA's shared memory is this one dynamic layout. Keep it so: a 16-byte static
// __shared__ array beside it (a ticket ring) makes every mma kernel markedly slower by moving
// where the dynamic part starts; as a slot here it costs nothing (docs/tuning-log.md).
// KL, VL: the K and V tile loaders (kv_tile.cuh): their row strides and scales per token.
template <class KL, class VL, int NT8>
struct Lay {
    static constexpr int NW = Cfg<NT8>::NW, BT = Cfg<NT8>::BT, NST = Cfg<NT8>::NST;
    static constexpr int NCOL = 8 * NT8;
    static constexpr int PST = 8 * ((NT8 % 2) ? NT8 : NT8 + 1);  // P row stride (halves)
    static constexpr int NP = VL::BF16 ? 2 : 1;                  // P planes: bf16 hi + lo
    static constexpr int K_OFF = 0;
    static constexpr int V_OFF = K_OFF + NST * BT * KL::RL::RS;
    static constexpr int DK_OFF = V_OFF + NST * BT * VL::RL::RS;
    static constexpr int DV_OFF = DK_OFF + NST * BT * KL::SC * 2;
    static constexpr int Q_OFF = DV_OFF + NST * BT * VL::SC * 2;
    static constexpr int P_OFF = Q_OFF + NCH * NT8 * 32 * 16;
    static constexpr int RED_OFF = P_OFF + NP * BT * PST * 2;
    static constexpr int L_OFF = RED_OFF + NCOL * NW * 4;
    static constexpr int M_OFF = L_OFF + NCOL * NW * 4;
    static constexpr int QMAX_OFF = M_OFF + NCOL * 4;
    // tq: the codebook's table (kv_tile_tq.cuh's TqTable: 128 B an entry)
    static constexpr int TQB = KL::TQB > VL::TQB ? KL::TQB : VL::TQB;
    static constexpr int TAB_BYTES = TQB > 0 ? TqTable<TQB>::BYTES : 0;
    static constexpr int TAB_OFF = TQB > 0 ? (QMAX_OFF + NW * 4 + 15) / 16 * 16 : QMAX_OFF + NW * 4;
    static constexpr int BYTES = TAB_OFF + TAB_BYTES;
};

// two int8 bytes of x -> half2 of their exact values: (0x6400 | (b ^ 0x80)) is the fp16
// 1024 + b + 128; minus 1152 gives b. sel is a PRMT selector over (0x64646464, x): nibbles 0-3
// pick the 0x64 byte, 4-7 the bytes of x (0x0504: x's bytes 0, 1; 0x0604: bytes 0, 2). The
// constant comes first so ptxas keeps sel as the immediate (the other order makes it
// re-materialise sel from a uniform register at every use in the score loop).
__device__ __forceinline__ unsigned i8x2_to_h2(unsigned xb, unsigned sel) {
    const unsigned h = __byte_perm(0x64646464u, xb, sel);
    __half2 r = __hsub2(*reinterpret_cast<const __half2*>(&h), __float2half2_rn(1152.f));
    return *reinterpret_cast<unsigned*>(&r);
}
// the same, times the half2 of the two tokens' V scales: V' = fp16(b * d_v), one rounding
__device__ __forceinline__ unsigned i8x2_to_h2_scaled(unsigned xb, unsigned sel, unsigned d2) {
    const unsigned h = i8x2_to_h2(xb, sel);
    const __half2 r =
        __hmul2(*reinterpret_cast<const __half2*>(&h), *reinterpret_cast<const __half2*>(&d2));
    return *reinterpret_cast<const unsigned*>(&r);
}

}  // namespace mma_attn

#endif  // QWENREF_ATTENTION_MMA_CUH
