// attention_v1.cu — split-T decode partials on CUDA cores, float32: attn_partials_<K>_<V>.
// Golden: qwenref/golden/attention.py attn_partials (layouts: qwenref/golden/kvcache.py).
// Per (row b, kv head g, split i): base-2 online softmax over the split's visible tokens for the
// n_rep q heads of kv head g; writes m, l [nb, S, nh] and o [nb, S, nh, hd], which
// attention_combine.cu merges. Pairs: f32_f32, bf16_bf16, q8_q8, turbo{8,4,3,2} both sides,
// bf16_turbo{4,3,2}. Turbo K: q is WHT-rotated in shared memory first. Shape: -DATTN_HD,
// -DATTN_NREP (attention.cuh); ATTN_TT, ATTN_NWARP, ATTN_MINB are tuning knobs.
// Launch: grid (nb, nkv, S), block NWARP*32 = 128. The row is the fastest grid axis, so the nb
// CTAs that read one (kv head, split) run together and DRAM serves each byte once (the other
// nb-1 reads hit L2). Warp w takes token tiles w, w+NWARP, ... of TT tokens; lane l owns dims
// [l*DPL, l*DPL+DPL), DPL = hd/32 (a q8 group of 32 or turbo group of 16 never straddles lanes).
// Per tile: raw K/V loads (the next tile's prefetched into ping-pong registers), K dequantized
// once for all n_rep heads, the TT*n_rep partial dots reduced by one butterfly reduce-scatter
// (31 shuffles for 32 slots, not 5 per value), online softmax, P*V; warps merge in shared memory.
// Bytes (one row; nb rows share them through L2), T visible tokens: q8 2*T*nkv*hd + scales
// 2*T*nkv*(hd/32)*2 (hd 256: 544 B per token per kv head); turboN 2*T*nkv*(hd/16)*(2N + 2);
// bf16 2*T*nkv*hd*2; f32 2*T*nkv*hd*4; plus q (nh*hd*4) and the partials S*nh*(hd+2)*4.
// Issue-bound, not byte-bound, at the 27B shape (docs/tuning-log.md): q8/q8 goes to mma.
// Precision: float32 like golden, summed in another order (lanes, butterfly, warps, splits); q
// pre-multiplied by hd^-0.5*log2(e); the q8/turbo scale factored out of a lane's partial dot; q
// rotated by a butterfly, not a matmul: float32 rounding differences only. Sparse V (thr > 0):
// a token is dropped for one head when 2^(s_i - m_w) < thr * l_w (m_w, l_w: running max and
// sum of the warp that owns it, after its tile), which implies golden's p_i < thr; so the kernel
// drops a subset of golden's tokens and |o - golden| <= sum over {p_i < thr} of p_i*|v_i| per
// dim. Dropped tokens still count in l.
// Rungs of the attention family:
//   v0    attention_v0.cu: attention_v0_<K>_<V>, a warp per (row, q head), one pass, no partials
//   split attention_split.cu + attention_combine.cu: v0 split over T (a warp per split, plain
//         loads), the partials merged by their log-sum-exp
//   v1    attention_v1.cu (this file) + attention_combine.cu: CUDA-core split-T partials
//         (token tiles prefetched into registers, one reduce-scatter per tile, warps merged)
//   mma   attention_mma.cu + attention_combine.cu: the partials on tensor cores, rows in 1 CTA

#include <cuda_fp16.h>

#include "attention.cuh"
#include "kv_load.cuh"

#ifndef ATTN_NWARP
#define ATTN_NWARP 4
#endif
#ifndef ATTN_TT
#define ATTN_TT 4
#endif
#ifndef ATTN_MINB
#define ATTN_MINB 1
#endif

namespace {

constexpr int NWARP = ATTN_NWARP;
constexpr int DPL = HD / 32;  // dims per lane
constexpr int NP = NREP <= 1    ? 1
                   : NREP <= 2  ? 2
                   : NREP <= 4  ? 4
                   : NREP <= 8  ? 8
                   : NREP <= 16 ? 16
                                : 32;
constexpr int LOG_NP = NP == 1 ? 0 : NP == 2 ? 1 : NP == 4 ? 2 : NP == 8 ? 3 : NP == 16 ? 4 : 5;

static_assert(NWARP * NREP * HD * 4 + 2 * NWARP * NP * 4 <= 48 * 1024,
              "warp-merge buffer exceeds 48 KB static shared memory: lower ATTN_NWARP");

// kind codes: kv_load.cuh's KV_* (one definition for every attention rung)

// ---- one lane's DPL dims of one token, raw (as loaded) ------------------------------------
// val(i) is the dequantized value without the scale; scale() the per-group factor (1 for
// f32/bf16). The dequantized element is val(i) * scale(), bit-exact with golden's dequantization
// (int8 * float32(d), (c - (2^n - 1)/2) * float32(d), bf16 bits << 16).
template <int KIND>
struct Gran;

template <>
struct Gran<KV_F32> {
    static constexpr bool SCALED = false;
    float v[DPL];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < DPL; ++i) v[i] = 0.f;
    }
    __device__ __forceinline__ void load(const void* data, const __half*, size_t row, int lane) {
        const float* p = static_cast<const float*>(data) + row * HD + lane * DPL;
        if constexpr (DPL % 4 == 0) {
#pragma unroll
            for (int j = 0; j < DPL / 4; ++j) {
                float4 t = __ldg(reinterpret_cast<const float4*>(p) + j);
                v[4 * j] = t.x;
                v[4 * j + 1] = t.y;
                v[4 * j + 2] = t.z;
                v[4 * j + 3] = t.w;
            }
        } else {
            float2 t = __ldg(reinterpret_cast<const float2*>(p));
            v[0] = t.x;
            v[1] = t.y;
        }
    }
    __device__ __forceinline__ float val(int i) const { return v[i]; }
    __device__ __forceinline__ float scale() const { return 1.f; }
};

template <>
struct Gran<KV_BF16> {
    static constexpr bool SCALED = false;
    unsigned w[DPL / 2];  // two bf16 per word
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < DPL / 2; ++i) w[i] = 0u;
    }
    __device__ __forceinline__ void load(const void* data, const __half*, size_t row, int lane) {
        const unsigned short* p = static_cast<const unsigned short*>(data) + row * HD + lane * DPL;
        if constexpr (DPL == 8) {
            uint4 t = __ldg(reinterpret_cast<const uint4*>(p));
            w[0] = t.x;
            w[1] = t.y;
            w[2] = t.z;
            w[3] = t.w;
        } else if constexpr (DPL == 4) {
            uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
            w[0] = t.x;
            w[1] = t.y;
        } else {
            w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
        }
    }
    __device__ __forceinline__ float val(int i) const {
        return (i & 1) ? __uint_as_float(w[i / 2] & 0xFFFF0000u) : __uint_as_float(w[i / 2] << 16);
    }
    __device__ __forceinline__ float scale() const { return 1.f; }
};

template <>
struct Gran<KV_Q8> {
    static constexpr bool SCALED = true;
    unsigned w[(DPL + 3) / 4];  // int8 bytes, each XOR 0x80 (biased to 0..255)
    float d;
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < (DPL + 3) / 4; ++i) w[i] = 0x80808080u;
        d = 0.f;
    }
    __device__ __forceinline__ void load(const void* data, const __half* sc, size_t row, int lane) {
        const signed char* p = static_cast<const signed char*>(data) + row * HD + lane * DPL;
        if constexpr (DPL == 8) {
            uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
            w[0] = t.x ^ 0x80808080u;
            w[1] = t.y ^ 0x80808080u;
        } else if constexpr (DPL == 4) {
            w[0] = __ldg(reinterpret_cast<const unsigned*>(p)) ^ 0x80808080u;
        } else {
            w[0] = unsigned(__ldg(reinterpret_cast<const unsigned short*>(p))) ^ 0x80808080u;
        }
        d = __half2float(__ldg(sc + row * (HD / 32) + (lane * DPL) / 32));
    }
    // 0x4B000000 | u is the float 2^23 + u exactly; minus 2^23 + 128 gives the int8 value.
    // PRMT + FADD instead of I2F (I2F issues at 1/8 the FFMA rate on sm_90).
    __device__ __forceinline__ float val(int i) const {
        return __uint_as_float(__byte_perm(w[i / 4], 0x4B000000u, 0x7440u | unsigned(i % 4))) -
               8388736.f;
    }
    __device__ __forceinline__ float scale() const { return d; }
};

// turbo-n: code c of dim i of a group of 16 at bits [n*i, n*i + n) of the group's 2n bytes.
template <int N>
struct GranTurbo {
    static constexpr bool SCALED = true;
    unsigned long long bits;  // this lane's DPL codes, code i at bits [N*i, N*i+N)
    float d;
    __device__ __forceinline__ void zero() {
        bits = 0ull;  // code 0 -> finite value; scale 0 -> contributes 0
        d = 0.f;
    }
    __device__ __forceinline__ void load(const void* data, const __half* sc, size_t row, int lane) {
        const int g = (lane * DPL) / 16, c0 = (lane * DPL) % 16;
        const unsigned char* gp =
            static_cast<const unsigned char*>(data) + (row * (HD / 16) + g) * (2 * N);
        if constexpr (N == 8) {  // byte per code: load exactly this lane's bytes
            if constexpr (DPL == 8)
                bits = __ldg(reinterpret_cast<const unsigned long long*>(gp + c0));
            else if constexpr (DPL == 4)
                bits = __ldg(reinterpret_cast<const unsigned*>(gp + c0));
            else
                bits = __ldg(reinterpret_cast<const unsigned short*>(gp + c0));
        } else {  // 2N <= 8 bytes: the whole group, then shift
            unsigned long long gbits;
            if constexpr (N == 4)
                gbits = __ldg(reinterpret_cast<const unsigned long long*>(gp));
            else if constexpr (N == 2)
                gbits = __ldg(reinterpret_cast<const unsigned*>(gp));
            else {  // N == 3: 6 bytes, 2-byte aligned
                const unsigned short* h = reinterpret_cast<const unsigned short*>(gp);
                gbits = (unsigned long long)__ldg(h) | ((unsigned long long)__ldg(h + 1) << 16) |
                        ((unsigned long long)__ldg(h + 2) << 32);
            }
            bits = gbits >> (N * c0);
        }
        d = __half2float(__ldg(sc + row * (HD / 16) + g));
    }
    // 0x4A800000 | (c << 1) is the float 2^22 + c (mantissa LSB = 0.5); subtracting
    // 2^22 + (2^n - 1)/2 (exact at that exponent) gives c - (2^n - 1)/2 exactly.
    __device__ __forceinline__ float val(int i) const {
        const unsigned c = unsigned(bits >> (N * i)) & ((1u << N) - 1u);
        return __uint_as_float(0x4A800000u | (c << 1)) - (4194304.f + 0.5f * float((1 << N) - 1));
    }
    __device__ __forceinline__ float scale() const { return d; }
};
template <>
struct Gran<KV_TURBO2> : GranTurbo<2> {};
template <>
struct Gran<KV_TURBO3> : GranTurbo<3> {};
template <>
struct Gran<KV_TURBO4> : GranTurbo<4> {};
template <>
struct Gran<KV_TURBO8> : GranTurbo<8> {};

static_assert(ATTN_TT >= 1 && ATTN_TT <= 32 && (ATTN_TT & (ATTN_TT - 1)) == 0,
              "ATTN_TT must be a power of two");

// Tokens per warp tile: TT * NP partial dots must fit one butterfly (<= 32 slots); f32 granules
// are DPL registers per token per side, so their tile is halved to bound registers.
template <int KIND>
__host__ __device__ constexpr int tile_tokens() {
    int tt = (KIND == KV_F32 && ATTN_TT > 1) ? ATTN_TT / 2 : ATTN_TT;
    while (tt > 1 && tt * NP > 32) tt /= 2;
    return tt;
}

template <int KK, int VK>
__device__ __forceinline__ void attn_partials_impl(
    const float* __restrict__ q,  // [nb, nh, HD]
    const void* __restrict__ kdata, const __half* __restrict__ kscale,
    const void* __restrict__ vdata, const __half* __restrict__ vscale, int max_t, int base_pos,
    const int* __restrict__ sel_idx,  // [nb, sel_w] or null (all rows dense)
    const int* __restrict__ sel_n,    // [nb] or null; sel_n[b] == 0: row b dense
    int sel_w, float qscale, float sparse_v, float* __restrict__ m_out, float* __restrict__ l_out,
    float* __restrict__ o_out) {
    constexpr int TT =
        tile_tokens<KK>() < tile_tokens<VK>() ? tile_tokens<KK>() : tile_tokens<VK>();
    constexpr int V = TT * NP;  // partial-dot slots per tile, <= 32
    constexpr int LOG_V = (V == 1 ? 0 : V == 2 ? 1 : V == 4 ? 2 : V == 8 ? 3 : V == 16 ? 4 : 5);
    constexpr int REP = 32 / V;  // lanes holding the same slot after the reduce
    static_assert(V >= 1 && V <= 32 && (1 << LOG_V) == V,
                  "tile slots must be a power of two <= 32");

    const int b = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
    const int nkv = gridDim.y, S = gridDim.z;
    const int nh = nkv * NREP;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    __shared__ __align__(16) float smem[NWARP * NREP * HD];  // q staging, then warp merge
    __shared__ float s_ml[2][NWARP][NP];                     // warp m, l for the merge
    __shared__ __align__(16) float s_p[NWARP][TT][NP];       // this tile's p per (token, head)
    __shared__ __align__(16) float s_alpha[NWARP][NP];       // this tile's rescale per head

    // ---- the row's visible list and this split's range -------------------------------------
    int n_vis;
    const int* list = row_list(b, base_pos, sel_idx, sel_n, sel_w, n_vis);  // null: dense
    const int t_len = base_pos + b + 1;  // tokens the row may see (clamp for gathers)
    int lo, hi;
    split_range(n_vis, S, split, lo, hi);

    const SplitState dst = split_state(o_out, m_out, l_out, b, S, split, nh, g);
    if (lo >= hi) {  // empty split
        write_empty_state(dst);
        return;
    }

    // ---- q of this kv head's group: stage, rotate if K is rotated, pre-scale, to registers ----
    const float* qg = q + ((size_t)b * nh + (size_t)g * NREP) * HD;
    for (int p = threadIdx.x; p < NREP * HD; p += blockDim.x) smem[p] = qg[p];
    constexpr bool K_ROT = KK >= KV_TURBO2;
    if constexpr (K_ROT)
        block_wht(smem, NREP, HD);
    else
        __syncthreads();
    float qr[NREP][DPL];
#pragma unroll
    for (int h = 0; h < NREP; ++h)
#pragma unroll
        for (int i = 0; i < DPL; ++i) qr[h][i] = smem[h * HD + lane * DPL + i] * qscale;
    __syncthreads();  // smem is reused by the warp merge below

    // ---- this lane's slot after the reduce-scatter: slot = t * NP + h ------------------------
    const int my_slot = lane >> (5 - LOG_V);
    const int my_t = my_slot >> LOG_NP, my_h = my_slot & (NP - 1);
    const bool slot_writer = (lane & (REP - 1)) == 0;

    float m_run = -inf_f(), l_run = 0.f;  // for head my_h (this lane's slot)
    float o[NREP][DPL];
#pragma unroll
    for (int h = 0; h < NREP; ++h)
#pragma unroll
        for (int i = 0; i < DPL; ++i) o[h][i] = 0.f;

    const size_t head_row0 = (size_t)g * max_t;
    auto token_of = [&](int pos) -> int {
        int t = list ? __ldg(list + pos) : pos;
        return t < 0 ? 0 : (t >= t_len ? t_len - 1 : t);  // memory safety for bad lists
    };
    auto load_tile = [&](int start, Gran<KK>(&kt)[TT], Gran<VK>(&vt)[TT]) {
#pragma unroll
        for (int t = 0; t < TT; ++t) {
            const int pos = start + t;
            if (pos < hi) {
                const size_t row = head_row0 + token_of(pos);
                kt[t].load(kdata, kscale, row, lane);
                vt[t].load(vdata, vscale, row, lane);
            } else {
                kt[t].zero();
                vt[t].zero();
            }
        }
    };

    // one tile: partial dots, reduce-scatter, online softmax, P*V (state in registers)
    auto process_tile = [&](int start, const Gran<KK>(&kc_)[TT], const Gran<VK>(&vc_)[TT]) {
        // partial dots: lane's DPL dims, every head, every token of the tile
        float part[V];
#pragma unroll
        for (int t = 0; t < TT; ++t) {
#pragma unroll
            for (int h = 0; h < NP; ++h) {
                float acc = 0.f;
                if (h < NREP) {
#pragma unroll
                    for (int i = 0; i < DPL; ++i) acc = fmaf(qr[h][i], kc_[t].val(i), acc);
                    if constexpr (Gran<KK>::SCALED) acc *= kc_[t].scale();
                }
                part[t * NP + h] = acc;
            }
        }
        // butterfly reduce-scatter: at offset o the lane with bit o set keeps the upper half of
        // its live slots; once one slot is left the remaining offsets all-reduce it. Afterwards
        // lane holds the full sum of slot lane >> (5 - LOG_V).
#pragma unroll
        for (int step = 0; step < 5; ++step) {
            const int o = 16 >> step;
            const int n = V >> step;  // live slots before this step (0 once done)
            if (n <= 1) {
                part[0] += __shfl_xor_sync(0xffffffffu, part[0], o);
            } else {
                const bool upper = (lane & o) != 0;
#pragma unroll
                for (int i = 0; i < V / 2; ++i) {
                    if (i < n / 2) {
                        const float send = upper ? part[i] : part[i + n / 2];
                        const float keep = upper ? part[i + n / 2] : part[i];
                        part[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
                    }
                }
            }
        }
        float s = part[0];
        const bool valid = start + my_t < hi && my_h < NREP;
        if (!valid) s = -inf_f();

        // online softmax for (my_t, my_h); token bits of the slot are lane bits [5-LOG_V+LOG_NP, 5)
        float tmax = s;
#pragma unroll
        for (int bit = 5 - LOG_V + LOG_NP; bit < 5; ++bit)
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1 << bit));
        const float m_new = fmaxf(m_run, tmax);
        const float alpha = m_run == -inf_f() ? 0.f : exp2f(m_run - m_new);
        float p = s == -inf_f() ? 0.f : exp2f(s - m_new);
        float psum = p;
#pragma unroll
        for (int bit = 5 - LOG_V + LOG_NP; bit < 5; ++bit)
            psum += __shfl_xor_sync(0xffffffffu, psum, 1 << bit);
        l_run = fmaf(l_run, alpha, psum);
        m_run = m_new;
        if (p < sparse_v * l_run) p = 0.f;  // safe sparse-V rule (header comment)
        if (slot_writer) {
            s_p[warp][my_t][my_h] = p;
            if (my_t == 0) s_alpha[warp][my_h] = alpha;
        }
        __syncwarp();

        // P*V: rescale (skipped when no head's max moved), then accumulate
#pragma unroll
        for (int h = 0; h < NREP; ++h) {
            const float a = s_alpha[warp][h];
            if (a != 1.f) {
#pragma unroll
                for (int i = 0; i < DPL; ++i) o[h][i] *= a;
            }
        }
#pragma unroll
        for (int t = 0; t < TT; ++t) {
            float pt[NREP];
#pragma unroll
            for (int h = 0; h < NREP; ++h) pt[h] = s_p[warp][t][h];
            float vv[DPL];
#pragma unroll
            for (int i = 0; i < DPL; ++i) vv[i] = vc_[t].val(i);
            // no per-(token, head) branch: p = 0 (masked or sparse-dropped) adds exact zeros, and
            // the branch overhead (BSSY/BRA/BSYNC) cost more than the 8 FFMAs it would save
#pragma unroll
            for (int h = 0; h < NREP; ++h) {
                float pd = pt[h];
                if constexpr (Gran<VK>::SCALED) pd *= vc_[t].scale();
#pragma unroll
                for (int i = 0; i < DPL; ++i) o[h][i] = fmaf(pd, vv[i], o[h][i]);
            }
        }
        __syncwarp();  // s_p / s_alpha are rewritten next tile
    };

    // ping-pong register buffers: the next tile's raw bytes load while this one is computed
    // (two named buffers: a copy at the loop end costs ~90 MOVs per tile)
    const int stride = NWARP * TT;
    int start = lo + warp * TT;
    Gran<KK> ka[TT], kb[TT];
    Gran<VK> va[TT], vb[TT];
    if (start < hi) load_tile(start, ka, va);
    while (start < hi) {
        if (start + stride < hi) load_tile(start + stride, kb, vb);
        process_tile(start, ka, va);
        start += stride;
        if (start >= hi) break;
        if (start + stride < hi) load_tile(start + stride, ka, va);
        process_tile(start, kb, vb);
        start += stride;
    }

    // ---- merge the NWARP warp states ---------------------------------------------------------
    if (slot_writer && my_t == 0) {
        s_ml[0][warp][my_h] = m_run;
        s_ml[1][warp][my_h] = l_run;
    }
#pragma unroll
    for (int h = 0; h < NREP; ++h)
#pragma unroll
        for (int i = 0; i < DPL; ++i) smem[(warp * NREP + h) * HD + lane * DPL + i] = o[h][i];
    __syncthreads();
    for (int p = threadIdx.x; p < NREP * HD; p += blockDim.x) {
        const int h = p / HD;
        float M = -inf_f();
#pragma unroll
        for (int w = 0; w < NWARP; ++w) M = fmaxf(M, s_ml[0][w][h]);
        float acc = 0.f, L = 0.f;
        if (M != -inf_f()) {
#pragma unroll
            for (int w = 0; w < NWARP; ++w) {
                const float mw = s_ml[0][w][h];
                const float c = mw == -inf_f() ? 0.f : exp2f(mw - M);
                acc = fmaf(c, smem[w * NREP * HD + p], acc);
                L = fmaf(c, s_ml[1][w][h], L);
            }
        }
        dst.o[p] = acc;
        if (p % HD == 0) {
            dst.m[h] = M;
            dst.l[h] = L;
        }
    }
}

}  // namespace

#define ATTN_PARTIALS(NAME, KK, VK)                                                                \
    extern "C" __global__ void __launch_bounds__(NWARP * 32, ATTN_MINB) attn_partials_##NAME(      \
        const float* q, const void* kdata, const __half* kscale, const void* vdata,                \
        const __half* vscale, int max_t, int base_pos, const int* sel_idx, const int* sel_n,       \
        int sel_w, float qscale, float sparse_v, float* m_out, float* l_out, float* o_out) {       \
        attn_partials_impl<KK, VK>(q, kdata, kscale, vdata, vscale, max_t, base_pos, sel_idx,      \
                                   sel_n, sel_w, qscale, sparse_v, m_out, l_out, o_out);           \
    }

ATTN_PARTIALS(f32_f32, KV_F32, KV_F32)
ATTN_PARTIALS(bf16_bf16, KV_BF16, KV_BF16)
ATTN_PARTIALS(q8_q8, KV_Q8, KV_Q8)
ATTN_PARTIALS(turbo8_turbo8, KV_TURBO8, KV_TURBO8)
ATTN_PARTIALS(turbo4_turbo4, KV_TURBO4, KV_TURBO4)
ATTN_PARTIALS(turbo3_turbo3, KV_TURBO3, KV_TURBO3)
ATTN_PARTIALS(turbo2_turbo2, KV_TURBO2, KV_TURBO2)
ATTN_PARTIALS(bf16_turbo4, KV_BF16, KV_TURBO4)
ATTN_PARTIALS(bf16_turbo3, KV_BF16, KV_TURBO3)
ATTN_PARTIALS(bf16_turbo2, KV_BF16, KV_TURBO2)
