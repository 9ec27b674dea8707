// attention — split-T flash decode over the head-major KV cache, then the LSE combine.
//
// Golden model: qwenref/golden/attention.py (attn_partials, attn_combine, output_gate) and the
// stored layout of qwenref/golden/kvcache.py. Kernels, one line each:
//   attn_partials_<K>_<V>  per (row b, kv head g, split i): base-2 online softmax over the split's
//                          tokens for the n_rep q heads of kv head g. Writes m, l [nb, S, nh] and
//                          o [nb, S, nh, hd]. Pairs: f32_f32, bf16_bf16, q8_q8, turbo{8,4,3,2} both
//                          sides, bf16_turbo{4,3,2}. Turbo K: q is WHT-rotated in shared memory first.
//   attn_combine           per (row b, q head h): M = max m_i, L = sum 2^(m_i-M) l_i,
//                          out = sum 2^(m_i-M) o_i / L, then inverse WHT (V rotated), then
//                          * sigmoid(gate); optional lse2 = M + log2 L.
//
// Compile-time shape: ATTN_HD (head_dim, 64|128|256) and ATTN_NREP (q heads per kv head, 1..32)
// come in as -D options (the wrapper compiles one module per (hd, n_rep); the defaults are the
// Qwen3.5-27B layer, so `nvcc -c attention.cu` builds the hot configuration). ATTN_TT (tokens per
// warp tile) and ATTN_NWARP are tuning knobs (docs/tuning-log.md).
//
// Launch shape. partials: grid (nb, nkv, S), block NWARP*32 = 128. The row index is the fastest
// grid axis, so the nb CTAs that read the same K/V range of one (kv head, split) run together and
// DRAM serves each byte once; the other nb-1 reads hit L2. Inside a CTA, warp w takes token tiles
// w, w+NWARP, ... of the split (TT tokens each); lane l owns dims [l*DPL, l*DPL+DPL), DPL = hd/32,
// for every kind (a q8 group of 32 and a turbo group of 16 never straddle two lanes' ranges).
// Per tile: load raw K and V of TT tokens (the next tile's raw bytes are prefetched into registers
// while this one is computed: ping-pong buffers), dequantize K once and use each value for all
// n_rep heads, reduce the TT*n_rep partial dots across the warp with a butterfly reduce-scatter
// (31 shuffles for 32 slots instead of 5 per value), base-2 online softmax, P*V with each
// dequantized V value again used for all n_rep heads. The NWARP warp states merge in shared
// memory at the end.
// combine: grid (nh, nb, dim chunks), block COMBINE_NT = 256 (splits spread over the block).
//
// Bytes the partials must move (one row; nb rows share them through L2), T visible tokens:
//   q8:     K+V int8 2*T*nkv*hd  +  scales 2*T*nkv*(hd/32)*2  (hd 256: 544 B per token per kv head)
//   turboN: 2*T*nkv*(hd/16)*(2N + 2);  bf16: 2*T*nkv*hd*2;  f32: 2*T*nkv*hd*4
//   plus q (nh*hd*4), partials out S*nh*(hd+2)*4 (read again by the combine).
// Instructions, q8, hd 256, n_rep 6 (SASS of the main loop, per token per kv head per row, in
// warp instructions; docs/tuning-log.md has the full mix): 96 FFMA (48 QK + 48 PV), 16 PRMT + 16 FADD
// (int8 -> float via the 2^23 magic: I2F would issue at 1/8 the FFMA rate), ~8 SHFL + ~14 FSEL
// (butterfly), ~13 FMUL (scales; the rescale is skipped while the max holds), 5 LDG, ~80 other
// (addresses, moves, softmax): ~250 in all, so at the 27B shape this kernel is issue-bound at ~2x the time of its bytes, and
// any fp32 CUDA-core kernel is bound by its 96 FFMA + 32 conversions (~128 instr/token, ~94% of
// the copy time) before anything else: >= 85% of copy bandwidth, and nb=4 at <= 1.3x nb=1, need
// tensor cores: attn_partials_q8_mma_n<NT8> below (q8/q8, hd 128/256, dense rows; the wrapper
// picks it by default and keeps this kernel for every other case).
//
// Differences from the golden model: float32 throughout like golden, but a different summation
// order (lanes, then the butterfly, then warps, then splits), q pre-multiplied by hd^-0.5*log2(e)
// instead of the dot product, the q8/turbo scale factored out of each lane's 8-dim partial sum
// (d * sum q*c instead of sum q*(c*d)) and q WHT-rotated by a butterfly instead of a matmul.
// All are float32 rounding differences. Sparse V (sparse_v = thr > 0): golden drops exactly the
// tokens with normalized p_i < thr; this kernel drops a token (for one head) when
// 2^(s_i - m_w) < thr * l_w, where m_w, l_w are the running max and sum of the warp that owns the
// token, after the token's tile. That is safe: the final L = sum_j 2^(s_j - M) >= l_w * 2^(m_w - M)
// (the warp's tokens are a subset; M >= m_w), so p_i = 2^(s_i - M) / L <= 2^(s_i - m_w) / l_w < thr.
// The kernel therefore drops a subset of golden's tokens; the output differs from golden's by at
// most sum over {p_i < thr} of p_i*|v_i| per dim. Dropped tokens still count in l.

#include <cuda_fp16.h>

#ifndef ATTN_HD
#define ATTN_HD 256
#endif
#ifndef ATTN_NREP
#define ATTN_NREP 6
#endif
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

// NVRTC compiles without <math.h>: no infinity macro there
__device__ __forceinline__ float inf_f() { return __int_as_float(0x7f800000); }
constexpr int HD = ATTN_HD;
constexpr int NREP = ATTN_NREP;
constexpr int NWARP = ATTN_NWARP;
constexpr int DPL = HD / 32;                 // dims per lane
constexpr int NP = NREP <= 1 ? 1 : NREP <= 2 ? 2 : NREP <= 4 ? 4 : NREP <= 8 ? 8 : NREP <= 16 ? 16 : 32;
constexpr int LOG_NP = NP == 1 ? 0 : NP == 2 ? 1 : NP == 4 ? 2 : NP == 8 ? 3 : NP == 16 ? 4 : 5;
constexpr int SPLIT_CHUNK = 32;              // split bounds are whole chunks of 32 tokens (golden)

static_assert(HD == 64 || HD == 128 || HD == 256, "ATTN_HD must be 64, 128 or 256");
static_assert(NREP >= 1 && NREP <= 32, "ATTN_NREP must be 1..32");
static_assert(NWARP * NREP * HD * 4 + 2 * NWARP * NP * 4 <= 48 * 1024,
              "warp-merge buffer exceeds 48 KB static shared memory: lower ATTN_NWARP");

// kind codes (the wrapper's KIND_CODE table must agree)
enum { KF32 = 0, KBF16 = 1, KQ8 = 2, KT2 = 12, KT3 = 13, KT4 = 14, KT8 = 18 };

// ---- one lane's DPL dims of one token, raw (as loaded) ------------------------------------
// val(i) is the dequantized value without the scale; scale() the per-group factor (1 for
// f32/bf16). The dequantized element is val(i) * scale(), bit-exact with golden's dequantization
// (int8 * float32(d), (c - (2^n - 1)/2) * float32(d), bf16 bits << 16).
template <int KIND> struct Gran;

template <> struct Gran<KF32> {
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
        v[4 * j] = t.x; v[4 * j + 1] = t.y; v[4 * j + 2] = t.z; v[4 * j + 3] = t.w;
      }
    } else {
      float2 t = __ldg(reinterpret_cast<const float2*>(p));
      v[0] = t.x; v[1] = t.y;
    }
  }
  __device__ __forceinline__ float val(int i) const { return v[i]; }
  __device__ __forceinline__ float scale() const { return 1.f; }
};

template <> struct Gran<KBF16> {
  static constexpr bool SCALED = false;
  unsigned w[DPL / 2];                        // two bf16 per word
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < DPL / 2; ++i) w[i] = 0u;
  }
  __device__ __forceinline__ void load(const void* data, const __half*, size_t row, int lane) {
    const unsigned short* p = static_cast<const unsigned short*>(data) + row * HD + lane * DPL;
    if constexpr (DPL == 8) {
      uint4 t = __ldg(reinterpret_cast<const uint4*>(p));
      w[0] = t.x; w[1] = t.y; w[2] = t.z; w[3] = t.w;
    } else if constexpr (DPL == 4) {
      uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
      w[0] = t.x; w[1] = t.y;
    } else {
      w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
    }
  }
  __device__ __forceinline__ float val(int i) const {
    return (i & 1) ? __uint_as_float(w[i / 2] & 0xFFFF0000u) : __uint_as_float(w[i / 2] << 16);
  }
  __device__ __forceinline__ float scale() const { return 1.f; }
};

template <> struct Gran<KQ8> {
  static constexpr bool SCALED = true;
  unsigned w[(DPL + 3) / 4];                  // int8 bytes, each XOR 0x80 (biased to 0..255)
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
      w[0] = t.x ^ 0x80808080u; w[1] = t.y ^ 0x80808080u;
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
template <int N> struct GranTurbo {
  static constexpr bool SCALED = true;
  unsigned long long bits;                    // this lane's DPL codes, code i at bits [N*i, N*i+N)
  float d;
  __device__ __forceinline__ void zero() {
    bits = 0ull;                              // code 0 -> finite value; scale 0 -> contributes 0
    d = 0.f;
  }
  __device__ __forceinline__ void load(const void* data, const __half* sc, size_t row, int lane) {
    const int g = (lane * DPL) / 16, c0 = (lane * DPL) % 16;
    const unsigned char* gp =
        static_cast<const unsigned char*>(data) + (row * (HD / 16) + g) * (2 * N);
    if constexpr (N == 8) {                   // byte per code: load exactly this lane's bytes
      if constexpr (DPL == 8) bits = __ldg(reinterpret_cast<const unsigned long long*>(gp + c0));
      else if constexpr (DPL == 4) bits = __ldg(reinterpret_cast<const unsigned*>(gp + c0));
      else bits = __ldg(reinterpret_cast<const unsigned short*>(gp + c0));
    } else {                                  // 2N <= 8 bytes: the whole group, then shift
      unsigned long long gbits;
      if constexpr (N == 4) gbits = __ldg(reinterpret_cast<const unsigned long long*>(gp));
      else if constexpr (N == 2) gbits = __ldg(reinterpret_cast<const unsigned*>(gp));
      else {                                  // N == 3: 6 bytes, 2-byte aligned
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
template <> struct Gran<KT2> : GranTurbo<2> {};
template <> struct Gran<KT3> : GranTurbo<3> {};
template <> struct Gran<KT4> : GranTurbo<4> {};
template <> struct Gran<KT8> : GranTurbo<8> {};

static_assert(ATTN_TT >= 1 && ATTN_TT <= 32 && (ATTN_TT & (ATTN_TT - 1)) == 0,
              "ATTN_TT must be a power of two");

// Tokens per warp tile: TT * NP partial dots must fit one butterfly (<= 32 slots); f32 granules
// are DPL registers per token per side, so their tile is halved to bound registers.
template <int KIND> __host__ __device__ constexpr int tile_tokens() {
  int tt = (KIND == KF32 && ATTN_TT > 1) ? ATTN_TT / 2 : ATTN_TT;
  while (tt > 1 && tt * NP > 32) tt /= 2;
  return tt;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// In-place orthonormal WHT (Sylvester order) of `rows` vectors of length n in shared memory,
// done by the whole block. Matches golden wht (x @ H.T / sqrt(n)) up to float32 rounding.
__device__ void block_wht(float* x, int rows, int n) {
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
  const float s = 1.f / sqrtf(float(n));    // as gpu.wht: one multiply by float32(1/sqrt(n))
  for (int p = threadIdx.x; p < rows * n; p += blockDim.x) x[p] *= s;
  __syncthreads();
}

// Split i of a visible list of n tokens: golden split_bounds, per = ceil(ceil(n/32)/S) chunks.
__device__ __forceinline__ void split_range(int n, int S, int i, int& lo, int& hi) {
  const int chunks = (n + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  const int per = (chunks + S - 1) / S;
  const long long a = (long long)i * per * SPLIT_CHUNK, b = a + (long long)per * SPLIT_CHUNK;
  lo = int(a < n ? a : n);
  hi = int(b < n ? b : n);
}

template <int KK, int VK>
__device__ __forceinline__ void attn_partials_impl(
    const float* __restrict__ q,            // [nb, nh, HD]
    const void* __restrict__ kdata, const __half* __restrict__ kscale,
    const void* __restrict__ vdata, const __half* __restrict__ vscale,
    int max_t, int base_pos,
    const int* __restrict__ sel_idx,        // [nb, sel_w] or null (all rows dense)
    const int* __restrict__ sel_n,          // [nb] or null; sel_n[b] == 0: row b dense
    int sel_w, float qscale, float sparse_v,
    float* __restrict__ m_out, float* __restrict__ l_out, float* __restrict__ o_out) {
  constexpr int TT = tile_tokens<KK>() < tile_tokens<VK>() ? tile_tokens<KK>() : tile_tokens<VK>();
  constexpr int V = TT * NP;                 // partial-dot slots per tile, <= 32
  constexpr int LOG_V = (V == 1 ? 0 : V == 2 ? 1 : V == 4 ? 2 : V == 8 ? 3 : V == 16 ? 4 : 5);
  constexpr int REP = 32 / V;                // lanes holding the same slot after the reduce
  static_assert(V >= 1 && V <= 32 && (1 << LOG_V) == V, "tile slots must be a power of two <= 32");

  const int b = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int nkv = gridDim.y, S = gridDim.z;
  const int nh = nkv * NREP;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  __shared__ __align__(16) float smem[NWARP * NREP * HD];     // q staging, then warp merge
  __shared__ float s_ml[2][NWARP][NP];                          // warp m, l for the merge
  __shared__ __align__(16) float s_p[NWARP][TT][NP];            // this tile's p per (token, head)
  __shared__ __align__(16) float s_alpha[NWARP][NP];            // this tile's rescale per head

  // ---- the row's visible list and this split's range -------------------------------------
  int n_vis = base_pos + b + 1;
  const int* list = nullptr;                 // null: dense, position == token index
  if (sel_n != nullptr) {
    int sn = sel_n[b];
    sn = sn < 0 ? 0 : (sn > sel_w ? sel_w : sn);
    if (sn > 0) { n_vis = sn; list = sel_idx + (size_t)b * sel_w; }
  }
  const int t_len = base_pos + b + 1;        // tokens the row may see (clamp for gathers)
  int lo, hi;
  split_range(n_vis, S, split, lo, hi);

  float* o_dst = o_out + (((size_t)b * S + split) * nh + (size_t)g * NREP) * HD;
  float* m_dst = m_out + ((size_t)b * S + split) * nh + (size_t)g * NREP;
  float* l_dst = l_out + ((size_t)b * S + split) * nh + (size_t)g * NREP;
  if (lo >= hi) {                            // empty split: m = -inf, l = 0, o = 0 (golden)
    for (int p = threadIdx.x; p < NREP * HD; p += blockDim.x) o_dst[p] = 0.f;
    for (int p = threadIdx.x; p < NREP; p += blockDim.x) {
      m_dst[p] = -inf_f();
      l_dst[p] = 0.f;
    }
    return;
  }

  // ---- q of this kv head's group: stage, rotate if K is rotated, pre-scale, to registers ----
  const float* qg = q + ((size_t)b * nh + (size_t)g * NREP) * HD;
  for (int p = threadIdx.x; p < NREP * HD; p += blockDim.x) smem[p] = qg[p];
  constexpr bool K_ROT = KK >= KT2;
  if constexpr (K_ROT) block_wht(smem, NREP, HD);
  else __syncthreads();
  float qr[NREP][DPL];
#pragma unroll
  for (int h = 0; h < NREP; ++h)
#pragma unroll
    for (int i = 0; i < DPL; ++i) qr[h][i] = smem[h * HD + lane * DPL + i] * qscale;
  __syncthreads();                           // smem is reused by the warp merge below

  // ---- this lane's slot after the reduce-scatter: slot = t * NP + h ------------------------
  const int my_slot = lane >> (5 - LOG_V);
  const int my_t = my_slot >> LOG_NP, my_h = my_slot & (NP - 1);
  const bool slot_writer = (lane & (REP - 1)) == 0;

  float m_run = -inf_f(), l_run = 0.f;      // for head my_h (this lane's slot)
  float o[NREP][DPL];
#pragma unroll
  for (int h = 0; h < NREP; ++h)
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[h][i] = 0.f;

  const size_t head_row0 = (size_t)g * max_t;
  auto token_of = [&](int pos) -> int {
    int t = list ? __ldg(list + pos) : pos;
    return t < 0 ? 0 : (t >= t_len ? t_len - 1 : t);   // memory safety for bad lists
  };
  auto load_tile = [&](int start, Gran<KK> (&kt)[TT], Gran<VK> (&vt)[TT]) {
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
  auto process_tile = [&](int start, const Gran<KK> (&kc_)[TT], const Gran<VK> (&vc_)[TT]) {
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
      const int n = V >> step;               // live slots before this step (0 once done)
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
    if (p < sparse_v * l_run) p = 0.f;       // safe sparse-V rule (header comment)
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
    __syncwarp();                            // s_p / s_alpha are rewritten next tile
  };

  // ping-pong register buffers: the next tile's raw bytes load while this one is computed
  // (two named buffers instead of a copy at the loop end, which cost ~90 MOVs per tile)
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
    o_dst[p] = acc;
    if (p % HD == 0) {
      m_dst[h] = M;
      l_dst[h] = L;
    }
  }
}

}  // namespace

#define ATTN_PARTIALS(NAME, KK, VK)                                                            \
  extern "C" __global__ void __launch_bounds__(NWARP * 32, ATTN_MINB)                          \
      attn_partials_##NAME(const float* q, const void* kdata, const __half* kscale,            \
                           const void* vdata, const __half* vscale, int max_t, int base_pos,   \
                           const int* sel_idx, const int* sel_n, int sel_w, float qscale,      \
                           float sparse_v, float* m_out, float* l_out, float* o_out) {         \
    attn_partials_impl<KK, VK>(q, kdata, kscale, vdata, vscale, max_t, base_pos, sel_idx,      \
                               sel_n, sel_w, qscale, sparse_v, m_out, l_out, o_out);           \
  }

ATTN_PARTIALS(f32_f32, KF32, KF32)
ATTN_PARTIALS(bf16_bf16, KBF16, KBF16)
ATTN_PARTIALS(q8_q8, KQ8, KQ8)
ATTN_PARTIALS(turbo8_turbo8, KT8, KT8)
ATTN_PARTIALS(turbo4_turbo4, KT4, KT4)
ATTN_PARTIALS(turbo3_turbo3, KT3, KT3)
ATTN_PARTIALS(turbo2_turbo2, KT2, KT2)
ATTN_PARTIALS(bf16_turbo4, KBF16, KT4)
ATTN_PARTIALS(bf16_turbo3, KBF16, KT3)
ATTN_PARTIALS(bf16_turbo2, KBF16, KT2)

// combine: grid (nh, nb, hd / dc), block COMBINE_NT threads. CTA z combines dims
// [z*dc, (z+1)*dc) of one (row, head); dc is hd when inverse_wht (the WHT needs the whole row),
// else 64 (32 when hd % 64 != 0). hd a multiple of 32 in 32..1024, a power of two when
// inverse_wht. m, l [nb, S, nh]; o [nb, S, nh, hd] (16-byte aligned); gate [nb, nh, hd] or null;
// out [nb, nh, hd]; lse [nb, nh] or null (written by z = 0).
//
// Work per (row, head) is small (S * hd FMAs, S * hd * 4 bytes from L2: 66 KB at S 66, hd 256)
// and latency-bound, so it is spread as wide as it goes: over dim chunks (CTAs) and, inside a
// CTA, over splits: thread (g, v) owns float4 v of the chunk and the splits g, g + ngrp, ...
// (ngrp = COMBINE_NT / (dc/4): 16 at dc 64), issuing up to COMBINE_UNR of its loads before
// the m/l reduction so their latency overlaps it. The ngrp partial sums meet in shared memory.
// History (ncu, H200, S 66, hd 256, nb 1, cold L2): one CTA per (row, head) with one thread per
// dim walking all splits: 11.6 us; the same CTA with 256 and then 512 threads over splits:
// 5.8 / 5.2 us (issue-bound on 24 SMs: ~720 instructions per warp); docs/tuning-log.md has this one.
// Deterministic: every sum has a fixed order (each group in split order, then the groups in
// order; L as a fixed tree). Splits of weight 0 (empty: m = -inf) add nothing, whatever their o.
#define COMBINE_NT 256
#define COMBINE_UNR 8
extern "C" __global__ void __launch_bounds__(COMBINE_NT) attn_combine(
    const float* __restrict__ m, const float* __restrict__ l, const float* __restrict__ o, int S,
    int hd, int dc, const float* __restrict__ gate, int inverse_wht, float* __restrict__ out,
    float* __restrict__ lse) {
  const int h = blockIdx.x, b = blockIdx.y, nh = gridDim.x, tid = threadIdx.x;
  const int d0 = blockIdx.z * dc;            // this CTA's first dim
  __shared__ float s_w[1024];                // m_i, then 2^(m_i - M) (S <= 1024, wrapper checks)
  __shared__ float s_l[1024];
  __shared__ float s_red[COMBINE_NT / 32];
  __shared__ __align__(16) float s_acc[4 * COMBINE_NT];   // ngrp * dc partial sums
  __shared__ __align__(16) float s_x[1024];               // the output chunk (WHT in place)

  const int nv = dc >> 2, ngrp = COMBINE_NT / nv;
  const int g = tid / nv, v = tid % nv;
  const bool active = g < ngrp;
  const size_t split_stride = (size_t)nh * (hd >> 2);      // float4s from split i to i + 1
  const float4* ob = reinterpret_cast<const float4*>(o + ((size_t)b * S * nh + h) * hd + d0) + v;

  // first batch of o: independent of the weights, so it is in flight during the reductions
  float4 ov[COMBINE_UNR];
#pragma unroll
  for (int k = 0; k < COMBINE_UNR; ++k) {
    const int i = g + k * ngrp;
    ov[k] = (active && i < S) ? ob[(size_t)i * split_stride] : make_float4(0.f, 0.f, 0.f, 0.f);
  }

  // M = max m_i; w_i = 2^(m_i - M); L = sum w_i l_i
  const float* mb = m + (size_t)b * S * nh + h;
  const float* lb = l + (size_t)b * S * nh + h;
  float mx = -inf_f();
  for (int i = tid; i < S; i += COMBINE_NT) {
    const float mi = mb[(size_t)i * nh];
    s_w[i] = mi;
    s_l[i] = lb[(size_t)i * nh];
    mx = fmaxf(mx, mi);
  }
  mx = warp_max(mx);
  if (tid % 32 == 0) s_red[tid / 32] = mx;
  __syncthreads();
  float M = -inf_f();
#pragma unroll
  for (int w = 0; w < COMBINE_NT / 32; ++w) M = fmaxf(M, s_red[w]);
  __syncthreads();                           // s_red is reused for L
  float lp = 0.f;
  for (int i = tid; i < S; i += COMBINE_NT) {
    const float mi = s_w[i];
    const float w = (mi == -inf_f() || M == -inf_f()) ? 0.f : exp2f(mi - M);
    s_w[i] = w;
    lp = fmaf(w, s_l[i], lp);
  }
  lp = warp_sum(lp);
  if (tid % 32 == 0) s_red[tid / 32] = lp;
  __syncthreads();
  float L = 0.f;
#pragma unroll
  for (int w = 0; w < COMBINE_NT / 32; ++w) L += s_red[w];

  // o: this thread's splits, COMBINE_UNR loads in flight at a time
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i0 = g; active; i0 += COMBINE_UNR * ngrp) {
#pragma unroll
    for (int k = 0; k < COMBINE_UNR; ++k) {
      const int i = i0 + k * ngrp;
      const float w = i < S ? s_w[i] : 0.f;
      if (w != 0.f) {
        acc.x = fmaf(w, ov[k].x, acc.x);
        acc.y = fmaf(w, ov[k].y, acc.y);
        acc.z = fmaf(w, ov[k].z, acc.z);
        acc.w = fmaf(w, ov[k].w, acc.w);
      }
    }
    const int next = i0 + COMBINE_UNR * ngrp;
    if (next >= S) break;
#pragma unroll
    for (int k = 0; k < COMBINE_UNR; ++k) {
      const int i = next + k * ngrp;
      ov[k] = i < S ? ob[(size_t)i * split_stride] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  if (active) reinterpret_cast<float4*>(s_acc)[g * nv + v] = acc;
  __syncthreads();

  for (int d = tid; d < dc; d += COMBINE_NT) {
    float y = 0.f;
    for (int gg = 0; gg < ngrp; ++gg) y += s_acc[gg * dc + d];
    s_x[d] = L > 0.f ? y / L : 0.f;
  }
  if (lse != nullptr && tid == 0 && blockIdx.z == 0) lse[(size_t)b * nh + h] = M + log2f(L);
  if (inverse_wht) block_wht(s_x, 1, dc);   // dc == hd here; starts and ends with a barrier
  else __syncthreads();
  const size_t row = ((size_t)b * nh + h) * hd + d0;
  for (int d = tid; d < dc; d += COMBINE_NT) {
    float y = s_x[d];
    if (gate != nullptr) y = y * (1.f / (1.f + expf(-gate[row + d])));
    out[row + d] = y;
  }
}

// =============================================================================================
// attn_partials_q8_mma_n<NT8> — q8/q8 dense decode partials on tensor cores (mma.sync m16n8k16,
// fp16 operands, fp32 accumulation). Same outputs as attn_partials_q8_q8 (m, l [nb, S, nh],
// o [nb, S, nh, hd], golden's per-row split_bounds), for all nb rows of a batch in ONE CTA per
// (kv head, split): K/V bytes are read and converted once for every row.
//
// Launch: grid (nkv, S), block Cfg<NT8>::NW*32 (4 warps; -DMMA_NW=8 allowed at hd 256), dynamic
// shared memory Lay<NT8>::BYTES (attn_mma_smem_bytes reports it)
// (> 48 KB: the wrapper raises the limit). Template NT8 = ceil(nb*NREP / 8) column tiles.
// Columns c = b*NREP + r (row b, q head g*NREP + r) form the MMA's N dimension, padded to 8*NT8.
//
// Per CTA the token range is the union of the rows' split ranges [lo_b, hi_b) (golden's
// split_bounds(base_pos + b + 1, S), so partials equal v1's/golden's); column c only sees tokens
// in its row's range (others are -inf for it). Blocks of BT = 16*NW tokens stream through an
// NSTAGE-deep cp.async pipeline (16-byte copies, 16-byte chunks XOR-swizzled by token & 7 so the
// ldmatrix reads are bank-conflict free; tokens past the range are zero-filled). Per block:
//  A (scores)  warp w takes tokens [16w, 16w+16): S^T[t, c] = sum_g d_k[t,g] * (K[t, g] . Q^T[g, c])
//              with A = K (ldmatrix, int8 -> fp16 exact by PRMT(x ^ 0x80, 0x64) - 1152), B = q as
//              fp16 hi + lo (two MMAs, ~22 bits; q pre-scaled by hd^-0.5*log2e*2^e, e a power of
//              two per CTA putting max|q| in [2^13, 2^14): no fp16 overflow, lo never subnormal
//              in a way that matters), one fresh fp32 C per 32-dim group, then FFMA by d_k.
//              Column max over the warp's 16 tokens -> shared memory.
//  B (softmax) every thread combines the NW warp maxima of its columns (all warps hold the same
//              running max m), alpha = 2^(m_old - m_new), p = 2^(s - m_new), per-thread partial l,
//              and writes P[t][c] = fp16(p * 2^PS) (2^PS keeps P normal) to shared memory.
//  C (P.V)     each warp owns NG/NW groups of dims (Cfg::group):
//              O^T[dims, c] += V'^T[dims, t] . P^T[t, c],
//              A = V'^T via ldmatrix.trans (token pairs per dim), int8 -> fp16 by PRMT, then times
//              the half2 of the two tokens' scales (HMUL2: V' = fp16(code * d_v), the V scale
//              folded into the A operand), B = P^T via ldmatrix.trans, once per 16 tokens for all
//              groups. O^T accumulators stay in registers across blocks (rescaled by alpha).
//              (Folding d_v into P instead, P'[g] = fp16(p * d_v[g]) per group, needs NG times the
//              P buffer and its FMUL/F2FP per group: nb 4 at 128k 101.3 -> 97.3 us, docs/tuning-log.md.)
// End: l summed over lanes and warps; o = O * 2^-PS written straight from the accumulators.
//
// Measured (H200, 27B shape, docs/tuning-log.md, graph replay): T = 128k partials nb 1 72-74 us (~3.9
// TB/s, the copy rate), nb 4 97 us; v1 364 / 2413 us. Check `nvcc -Xptxas -v`
// (python -m qwenref.gpu.compile_check): 0 bytes stack frame (a register array indexed inside a
// partly unrolled group loop went to local memory once and cost 27%).
//
// Precision (vs golden float64): scores ~2^-22 relative (q hi/lo; int8 exact; fp32 sums), like
// v1. P.V rounds twice to fp16, p * 2^PS and code * d_v, each with relative error <= u = 2^-11,
// so each term p_t v_t is off by <= 2u + u^2 relative and |o - o_golden| <= (2u + u^2) *
// sum_t p_t |v_t| (+ float32 terms): at most ~2^-10 * max|v| on the output, typically far less
// (independent roundings average out). Range: |code * d_v| <= 65504 (|v| up to ~65000 before
// quantization); a V' below 2^-14 (groups with max|v| < 127 * 2^-14 ~ 0.0078) is subnormal, with
// an absolute error <= 2^-25 instead. Sparse V uses v1; one selective row
// (nb 1) reads its token list through sel_idx in attn_partials_q8_mma_sel_n1.
// =============================================================================================

#ifndef MMA_NW
#define MMA_NW 0                               // warps per CTA; 0 = Cfg's rule below
#endif
// the mma kernels exist only for hd 128 / 256 (the wrapper uses v1 otherwise)
#if (ATTN_HD == 128 || ATTN_HD == 256) && (MMA_NW == 0 || (ATTN_HD / 32) % MMA_NW == 0)
#ifndef MMA_NSTAGE
#define MMA_NSTAGE 0                           // pipeline stages; 0 = Cfg's rule below
#endif
#define MMA_PS 8
#ifndef MMA_UNROLL_G
#define MMA_UNROLL_G 0                         // score-loop unroll; 0 = Cfg's rule below
#endif

namespace mma_attn {

constexpr int NG = HD / 32;                    // q8 groups per token
constexpr int NCH = HD / 16;                   // 16-byte chunks per token row
static_assert(HD == 128 || HD == 256, "mma kernel: head_dim 128 or 256");

// Warps per CTA (default 4) and pipeline stages. Two CTAs per SM (8 warps, two per scheduler) is
// what keeps the tensor-core loop issuing, so every NT8 takes 2 stages: at hd 256 NT8 = 3 needs
// 98,160 B and NT8 = 4 108,688 B, under the 115,712 B that two CTAs may each take (NT8 = 4 at one
// CTA with 3 stages: nb 5 at 128k 146 us; at two, 122 us). docs/tuning-log.md has the measurements.
template <int NT8> struct Cfg {
  static constexpr int NW = MMA_NW > 0 ? MMA_NW : 4;
  static constexpr int NST = MMA_NSTAGE > 0 ? MMA_NSTAGE : 2;
  static_assert(NST >= 2 && NST <= 4, "MMA_NSTAGE must be 2..4");
  static constexpr int NT = NW * 32;
  static constexpr int BT = 16 * NW;           // tokens per pipeline block
  static constexpr int GPW = NG / NW;          // groups per warp in P.V
  static_assert(NG % NW == 0 && GPW >= 1, "mma kernel: hd/32 must be a multiple of MMA_NW");
  // score loop over groups: unrolled fully (the HMMA chains of several groups interleave:
  // nb 4 at 128k 106.1 -> 101.0 us), except at NT8 = 4, which would spill at 255 registers
  static constexpr int UG = MMA_UNROLL_G > 0 ? MMA_UNROLL_G : (NT8 >= 4 ? 2 : NG);
  // the group of a warp's idx-th P.V group
  static __device__ __forceinline__ int group(int warp, int idx) { return warp * GPW + idx; }
};

// All of a CTA's shared memory is this one dynamic layout. Keep it so: a 16-byte static
// __shared__ array beside it (a ticket ring) made every mma kernel 16% slower (128k
// nb 1: 72.8 -> 84.7 us) by moving where the dynamic part starts; as a slot here it cost nothing.
template <int NT8> struct Lay {
  static constexpr int NW = Cfg<NT8>::NW, BT = Cfg<NT8>::BT, NST = Cfg<NT8>::NST;
  static constexpr int NCOL = 8 * NT8;
  static constexpr int PST = 8 * ((NT8 % 2) ? NT8 : NT8 + 1);   // P row stride (halves)
  static constexpr int K_OFF = 0;
  static constexpr int V_OFF = K_OFF + NST * BT * HD;
  static constexpr int DK_OFF = V_OFF + NST * BT * HD;
  static constexpr int DV_OFF = DK_OFF + NST * BT * NG * 2;
  static constexpr int Q_OFF = DV_OFF + NST * BT * NG * 2;
  static constexpr int P_OFF = Q_OFF + NCH * NT8 * 32 * 16;
  static constexpr int RED_OFF = P_OFF + BT * PST * 2;
  static constexpr int L_OFF = RED_OFF + NCOL * NW * 4;
  static constexpr int M_OFF = L_OFF + NCOL * NW * 4;
  static constexpr int QMAX_OFF = M_OFF + NCOL * 4;
  static constexpr int BYTES = QMAX_OFF + NW * 4;
};

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
template <int N> __device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                        unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                          unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(unsigned addr, unsigned& r0, unsigned& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// two int8 bytes of x -> half2 of their exact values: (0x6400 | (b ^ 0x80)) is the fp16
// 1024 + b + 128; minus 1152 gives b. sel is a PRMT selector over (0x64646464, x): nibbles 0-3
// pick the 0x64 byte, 4-7 the bytes of x (0x0504: x's bytes 0, 1; 0x0604: bytes 0, 2). The
// constant comes first so ptxas keeps sel as the immediate (the other order made it
// re-materialise sel from a uniform register at every use in the score loop: 59 per block).
__device__ __forceinline__ unsigned i8x2_to_h2(unsigned xb, unsigned sel) {
  const unsigned h = __byte_perm(0x64646464u, xb, sel);
  __half2 r = __hsub2(*reinterpret_cast<const __half2*>(&h), __float2half2_rn(1152.f));
  return *reinterpret_cast<unsigned*>(&r);
}
// the same, times the half2 of the two tokens' V scales: V' = fp16(b * d_v), one rounding
__device__ __forceinline__ unsigned i8x2_to_h2_scaled(unsigned xb, unsigned sel, unsigned d2) {
  const unsigned h = i8x2_to_h2(xb, sel);
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&h),
                            *reinterpret_cast<const __half2*>(&d2));
  return *reinterpret_cast<const unsigned*>(&r);
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

template <int NT8, bool SEL>
__device__ __forceinline__ void partials_q8_mma(
    const float* __restrict__ q, const signed char* __restrict__ kq,
    const __half* __restrict__ kd, const signed char* __restrict__ vq,
    const __half* __restrict__ vd, int max_t, int base_pos, int nb,
    const int* __restrict__ sel_idx, const int* __restrict__ sel_n, int sel_w, float qscale,
    float* __restrict__ m_out, float* __restrict__ l_out, float* __restrict__ o_out) {
  using L = Lay<NT8>;
  constexpr int NCOL = L::NCOL;
  constexpr int NW = Cfg<NT8>::NW, NT = Cfg<NT8>::NT, BT = Cfg<NT8>::BT, GPW = Cfg<NT8>::GPW;
  constexpr int NST = Cfg<NT8>::NST;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* sK = smem + L::K_OFF;
  unsigned char* sV = smem + L::V_OFF;
  __half* sDk = reinterpret_cast<__half*>(smem + L::DK_OFF);
  __half* sDv = reinterpret_cast<__half*>(smem + L::DV_OFF);
  uint4* sQ = reinterpret_cast<uint4*>(smem + L::Q_OFF);
  __half* sP = reinterpret_cast<__half*>(smem + L::P_OFF);
  float* sRed = reinterpret_cast<float*>(smem + L::RED_OFF);   // [NCOL][NW] warp maxima
  float* sL = reinterpret_cast<float*>(smem + L::L_OFF);       // [NW][NCOL] warp l
  float* sM = reinterpret_cast<float*>(smem + L::M_OFF);       // [NCOL]
  float* sQmax = reinterpret_cast<float*>(smem + L::QMAX_OFF); // [NW]

  const int g = blockIdx.x, split = blockIdx.y;
  const int nkv = gridDim.x, S = gridDim.y;
  const int nh = nkv * NREP;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int ncv = nb * NREP;                   // valid columns

  // A selective row (SEL, nb == 1, the wrapper checks; sel_n[0] > 0) sees the n_vis =
  // min(sel_n[0], sel_w) tokens sel_idx[0, p]: below, t is a position in that list and the token
  // read is sel[t]. A dense row (no list, or sel_n[0] == 0) sees positions = tokens
  // 0 .. base_pos + b. SEL is a template flag so that the dense kernels carry none of this: as a
  // runtime test it cost the nb 4 kernel 5% (130.5 -> 137.5 us at 128k, ncu).
  const int n_sel = (SEL && sel_n != nullptr) ? min(sel_n[0], sel_w) : 0;
  const int* sel = (SEL && n_sel > 0) ? sel_idx : nullptr;
  auto row_len = [&](int b) { return sel != nullptr ? n_sel : base_pos + b + 1; };

  // ---- per-row split ranges and their union -------------------------------------------------
  // [I0, I1): positions inside every row's range (empty when a row's split is empty); a warp
  // whose 16 positions all lie there skips the mask
  int L0 = 0x7fffffff, L1 = 0, I0 = 0, I1 = 0x7fffffff;
  for (int b = 0; b < nb; ++b) {
    int lo, hi;
    split_range(row_len(b), S, split, lo, hi);
    if (lo < hi) { L0 = min(L0, lo); L1 = max(L1, hi); }
    I0 = max(I0, lo);
    I1 = min(I1, hi);
  }
  if (L0 >= L1) {                              // every row's split is empty (golden: -inf, 0, 0)
    for (int p = tid; p < ncv * HD; p += NT) {
      const int c = p / HD, b = c / NREP, r = c % NREP;
      o_out[(((size_t)b * S + split) * nh + g * NREP + r) * HD + p % HD] = 0.f;
    }
    for (int c = tid; c < ncv; c += NT) {
      const int b = c / NREP, r = c % NREP;
      m_out[((size_t)b * S + split) * nh + g * NREP + r] = -inf_f();
      l_out[((size_t)b * S + split) * nh + g * NREP + r] = 0.f;
    }
    return;
  }
  const int nblk = (L1 - L0 + BT - 1) / BT;
  const size_t row0 = (size_t)g * max_t;

  // this thread's copies: chunk lch_ of tokens ltok0 + i*TSTEP (TSTEP a multiple of 8, so the
  // swizzle is the same for all of them); the scale row of token tid (tid < BT)
  constexpr int TSTEP = NT / NCH;
  static_assert(NT % NCH == 0 && TSTEP % 8 == 0 && BT % TSTEP == 0, "copy layout");
  const int lch_ = tid % NCH, ltok0 = tid / NCH;
  const signed char* kq_t = kq + row0 * HD + lch_ * 16;
  const signed char* vq_t = vq + row0 * HD + lch_ * 16;
  const unsigned sK_t = smem_u32(sK) + ltok0 * HD + ((lch_ ^ (ltok0 & 7)) << 4);
  const unsigned sV_t = smem_u32(sV) + ltok0 * HD + ((lch_ ^ (ltok0 & 7)) << 4);
  const __half* kd_t = kd + row0 * NG;
  const __half* vd_t = vd + row0 * NG;
  const unsigned sDk_t = smem_u32(sDk + tid * NG), sDv_t = smem_u32(sDv + tid * NG);
  auto load_block = [&](int j) {
    const int buf = j % NST;
    const int t0 = L0 + j * BT;
    if (sel == nullptr && t0 + BT <= L1) {
      // a dense block inside the range (all but the last): one base address per side and
      // constant offsets (the general path below costs ~100 integer instructions per block)
      const size_t off = (size_t)(t0 + ltok0) * HD;
      const unsigned dst = buf * BT * HD;
#pragma unroll
      for (int i = 0; i < BT / TSTEP; ++i) {
        cp_async16(sK_t + dst + i * TSTEP * HD, kq_t + off + i * TSTEP * HD, true);
        cp_async16(sV_t + dst + i * TSTEP * HD, vq_t + off + i * TSTEP * HD, true);
      }
    } else {
#pragma unroll
      for (int i = 0; i < BT / TSTEP; ++i) {
        const int t = t0 + ltok0 + i * TSTEP;
        const bool ok = t < L1;
        const int pos = ok ? t : L0;
        const size_t off = (size_t)(sel != nullptr ? sel[pos] : pos) * HD;
        const unsigned dst = (buf * BT + i * TSTEP) * HD;
        cp_async16(sK_t + dst, kq_t + off, ok);
        cp_async16(sV_t + dst, vq_t + off, ok);
      }
    }
    if (tid < BT) {
      const int t = t0 + tid;
      const bool ok = t < L1;
      const int pos = ok ? t : L0;
      const size_t off = (size_t)(sel != nullptr ? sel[pos] : pos) * NG;
      const unsigned dst = buf * BT * NG * 2;
      if constexpr (NG == 8) {
        cp_async16(sDk_t + dst, kd_t + off, ok);
        cp_async16(sDv_t + dst, vd_t + off, ok);
      } else {
        cp_async8(sDk_t + dst, kd_t + off, ok);
        cp_async8(sDv_t + dst, vd_t + off, ok);
      }
    }
  };

  // start the pipeline before the q preparation so the first bytes are already in flight
#pragma unroll
  for (int j = 0; j < NST - 1; ++j) {
    if (j < nblk) load_block(j);
    cp_commit();
  }

  // ---- q: scale, max, power-of-two pre-scale, fp16 hi/lo fragments --------------------------
  // One pass over global memory with every load in flight: a thread holds NQ4 float4s of q
  // (column c, dims 4*d4 .. 4*d4+3), and each float4 is exactly one fragment entry sQ[p], so
  // the same thread writes it after the max. (Two strided loops here, one load per round trip,
  // took ~10% of the nb 4 kernel's samples: ncu, docs/tuning-log.md.)
  const float* qg = q + (size_t)g * NREP * HD;           // row b: + b*nh*HD
  constexpr int NQ4 = NCOL * HD / 4 / NT;
  static_assert((NCOL * HD / 4) % NT == 0, "q float4 layout");
  float4 qv[NQ4];
#pragma unroll
  for (int i = 0; i < NQ4; ++i) {
    const int p4 = tid + i * NT, c = p4 / (HD / 4), d4 = p4 % (HD / 4);
    qv[i] = c < ncv ? *reinterpret_cast<const float4*>(
                          qg + ((size_t)(c / NREP) * nh + c % NREP) * HD + 4 * d4)
                    : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float qmax = 0.f;
#pragma unroll
  for (int i = 0; i < NQ4; ++i)
    qmax = fmaxf(fmaxf(fmaxf(qmax, fabsf(qv[i].x * qscale)), fabsf(qv[i].y * qscale)),
                 fmaxf(fabsf(qv[i].z * qscale), fabsf(qv[i].w * qscale)));
  qmax = warp_max(qmax);
  if (lane == 0) sQmax[warp] = qmax;
  __syncthreads();
  qmax = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) qmax = fmaxf(qmax, sQmax[w]);
  int e = 0;
  if (qmax > 0.f) {
    int ex;
    frexpf(qmax, &ex);                         // qmax < 2^ex
    e = 14 - ex;
    e = e > 120 ? 120 : (e < -120 ? -120 : e);
  }
  const float qmul = qscale * ldexpf(1.f, e);
  const float sinv = ldexpf(1.f, -e);          // scores = (accumulated) * 2^-e
#pragma unroll
  for (int i = 0; i < NQ4; ++i) {
    // fragment entry of (c, d4): chunk d4 / 4, n8 = c / 8, lane (c % 8) * 4 + d4 % 4
    const int p4 = tid + i * NT, c = p4 / (HD / 4), d4 = p4 % (HD / 4);
    const float x[4] = {qv[i].x * qmul, qv[i].y * qmul, qv[i].z * qmul, qv[i].w * qmul};
    float hi[4], lo[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      hi[k] = __half2float(__float2half_rn(x[k]));
      lo[k] = x[k] - hi[k];                    // exact in fp32
    }
    sQ[((d4 / 4) * NT8 + c / 8) * 32 + (c % 8) * 4 + d4 % 4] =
        make_uint4(pack_h2(hi[0], hi[1]), pack_h2(hi[2], hi[3]), pack_h2(lo[0], lo[1]),
                   pack_h2(lo[2], lo[3]));
  }

  // ---- per-thread column state: columns 8*n8 + 2*tig + j ------------------------------------
  int clo[NT8][2], chi[NT8][2];
  float mrun[NT8][2], lpart[NT8][2];
#pragma unroll
  for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = n8 * 8 + 2 * tig + j;
      int lo = 0, hi = 0;
      if (c < ncv) split_range(row_len(c / NREP), S, split, lo, hi);
      clo[n8][j] = lo;
      chi[n8][j] = hi;
      mrun[n8][j] = -inf_f();
      lpart[n8][j] = 0.f;
    }
  float O[2 * GPW][NT8][4];
#pragma unroll
  for (int mt = 0; mt < 2 * GPW; ++mt)
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
      for (int i = 0; i < 4; ++i) O[mt][n8][i] = 0.f;

  // ldmatrix row of this lane inside a 16-token step: matrices (tokens 0-7 | 8-15) x (chunk
  // c | c+1); its swizzle key is row & 7 = lane & 7
  const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;
  const int lch = lane >> 4;
  const int swz = lane & 7;

  for (int j = 0; j < nblk; ++j) {
    const int buf = j % NST;
    cp_wait<NST - 2>();
    __syncthreads();                           // block j landed; block j-1 fully consumed
    if (j + NST - 1 < nblk) load_block(j + NST - 1);
    cp_commit();
    const int t0 = L0 + j * BT;

    // ---- A: scores of this warp's 16 tokens ------------------------------------------------
    float s[NT8][4];
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n8][i] = 0.f;
    {
      const int trow = warp * 16 + lrow;
      const unsigned kbase = smem_u32(sK + (buf * BT + trow) * HD);
      // d_k read per group from shared memory (where this loop is only partly unrolled, a
      // preloaded register array indexed by gi goes to local memory, as it did in v2c)
      const __half* dkr = sDk + (buf * BT + warp * 16 + gid) * NG;
#pragma unroll Cfg<NT8>::UG
      for (int gi = 0; gi < NG; ++gi) {
        unsigned r0, r1, r2, r3;
        ldsm_x4(kbase + (((2 * gi + lch) ^ swz) << 4), r0, r1, r2, r3);
        r0 ^= 0x80808080u; r1 ^= 0x80808080u; r2 ^= 0x80808080u; r3 ^= 0x80808080u;
        const unsigned a00 = i8x2_to_h2(r0, 0x0504), a01 = i8x2_to_h2(r1, 0x0504),
                       a02 = i8x2_to_h2(r0, 0x0706), a03 = i8x2_to_h2(r1, 0x0706);
        const unsigned a10 = i8x2_to_h2(r2, 0x0504), a11 = i8x2_to_h2(r3, 0x0504),
                       a12 = i8x2_to_h2(r2, 0x0706), a13 = i8x2_to_h2(r3, 0x0706);
        const float dk0 = __half2float(dkr[gi]), dk1 = __half2float(dkr[8 * NG + gi]);
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8) {
          float c[4] = {0.f, 0.f, 0.f, 0.f};
          const uint4 q0 = sQ[((2 * gi) * NT8 + n8) * 32 + lane];
          const uint4 q1 = sQ[((2 * gi + 1) * NT8 + n8) * 32 + lane];
          mma16816(c, a00, a01, a02, a03, q0.x, q0.y);
          mma16816(c, a00, a01, a02, a03, q0.z, q0.w);
          mma16816(c, a10, a11, a12, a13, q1.x, q1.y);
          mma16816(c, a10, a11, a12, a13, q1.z, q1.w);
          s[n8][0] = fmaf(dk0, c[0], s[n8][0]);
          s[n8][1] = fmaf(dk0, c[1], s[n8][1]);
          s[n8][2] = fmaf(dk1, c[2], s[n8][2]);
          s[n8][3] = fmaf(dk1, c[3], s[n8][3]);
        }
      }
    }
    // mask per column (not needed where the warp's 16 positions are inside every row's range:
    // columns past ncv then see finite scores of a zero q, and nothing of theirs is written),
    // then the column max over the warp's 16 tokens
    const int tw = t0 + warp * 16;
    if (tw >= I0 && tw + 16 <= I1) {
#pragma unroll
      for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n8][i] *= sinv;
    } else {
      const int ta = tw + gid, tb = ta + 8;
#pragma unroll
      for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const bool va = ta >= clo[n8][jj] && ta < chi[n8][jj];
          const bool vb = tb >= clo[n8][jj] && tb < chi[n8][jj];
          s[n8][jj] = va ? s[n8][jj] * sinv : -inf_f();
          s[n8][2 + jj] = vb ? s[n8][2 + jj] * sinv : -inf_f();
        }
    }
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        float mx = fmaxf(s[n8][jj], s[n8][2 + jj]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        if (gid == 0) sRed[(n8 * 8 + 2 * tig + jj) * NW + warp] = mx;
      }
    __syncthreads();

    // ---- B: online softmax; P = fp16(p * 2^PS) to shared memory ------------------------------
    // ---- C: O^T[dims of this warp, cols] += V'^T . P^T, V' = fp16(code * d_v) ----------------
    float alpha[NT8][2];
    float pa[NT8][2], pb[NT8][2];
    {
#pragma unroll
      for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const float* red = sRed + (n8 * 8 + 2 * tig + jj) * NW;
          float mb = red[0];
#pragma unroll
          for (int w = 1; w < NW; ++w) mb = fmaxf(mb, red[w]);
          const float mo = mrun[n8][jj];
          const float mn = fmaxf(mo, mb);
          alpha[n8][jj] = mo == mn ? 1.f : ex2(mo - mn);
          // ex2(-inf) = 0 covers masked scores; mn = -inf only when all of them are
          const float mz = mn == -inf_f() ? 0.f : mn;
          const float p0 = ex2(s[n8][jj] - mz), p1 = ex2(s[n8][2 + jj] - mz);
          lpart[n8][jj] = fmaf(lpart[n8][jj], alpha[n8][jj], p0 + p1);
          mrun[n8][jj] = mn;
          pa[n8][jj] = p0 * float(1 << MMA_PS);         // exact: the P scale 2^PS
          pb[n8][jj] = p1 * float(1 << MMA_PS);
        }
    }
    // rescale O only when some column's max moved (late in a split it rarely does: the
    // multiplies by 1 are skipped, warp-uniformly, and the result is the same bit for bit)
    bool moved = false;
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8) moved |= alpha[n8][0] != 1.f || alpha[n8][1] != 1.f;
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mt = 0; mt < 2 * GPW; ++mt)
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8) {
          O[mt][n8][0] *= alpha[n8][0];
          O[mt][n8][1] *= alpha[n8][1];
          O[mt][n8][2] *= alpha[n8][0];
          O[mt][n8][3] *= alpha[n8][1];
        }
    }
    {
      // P = fp16(p * 2^PS) once for every group: the V scale goes into the A operand instead
      unsigned* pr = reinterpret_cast<unsigned*>(sP + (warp * 16 + gid) * L::PST + 2 * tig);
#pragma unroll
      for (int n8 = 0; n8 < NT8; ++n8) {
        pr[n8 * 4] = pack_h2(pa[n8][0], pa[n8][1]);
        pr[8 * L::PST / 2 + n8 * 4] = pack_h2(pb[n8][0], pb[n8][1]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < NW; ++ks) {
      const unsigned vbase = smem_u32(sV + (buf * BT + ks * 16 + lrow) * HD);
      // P^T fragments of this 16-token step, shared by all of the warp's groups
      unsigned pf0[NT8], pf1[NT8];
      const unsigned pbase = smem_u32(sP + (ks * 16 + (lane & 15)) * L::PST);
#pragma unroll
      for (int n8 = 0; n8 < NT8; ++n8) ldsm_x2_t(pbase + n8 * 16, pf0[n8], pf1[n8]);
      const __half* dvs = sDv + (buf * BT + ks * 16) * NG;     // the step's 16 scale rows
      unsigned dg0 = 0u, dg1 = 0u;
      if constexpr (NG == 8) {
        // ldmatrix.trans of the [16 tokens][8 groups] scales: this lane gets group gid's
        // half2 of tokens (2tig, 2tig+1) in dg0 and (8+2tig, 9+2tig) in dg1
        ldsm_x2_t(smem_u32(dvs + (lane & 15) * NG), dg0, dg1);
      }
#pragma unroll
      for (int gl = 0; gl < GPW; ++gl) {
        const int G = Cfg<NT8>::group(warp, gl);
        // half2 V scales of tokens (2tig, 2tig+1) and (8+2tig, 9+2tig) of group G: the A
        // fragment's k pairs (lower token in the lower half, as ldmatrix.trans puts it)
        unsigned d01, d89;
        if constexpr (NG == 8) {
          d01 = __shfl_sync(0xffffffffu, dg0, G * 4 + tig);
          d89 = __shfl_sync(0xffffffffu, dg1, G * 4 + tig);
        } else {
          const unsigned short* du = reinterpret_cast<const unsigned short*>(dvs) + G;
          d01 = du[(2 * tig) * NG] | ((unsigned)du[(2 * tig + 1) * NG] << 16);
          d89 = du[(2 * tig + 8) * NG] | ((unsigned)du[(2 * tig + 9) * NG] << 16);
        }
        unsigned r0, r1, r2, r3;
        ldsm_x4_t(vbase + (((2 * G + lch) ^ swz) << 4), r0, r1, r2, r3);
        r0 ^= 0x80808080u; r1 ^= 0x80808080u; r2 ^= 0x80808080u; r3 ^= 0x80808080u;
        const unsigned a00 = i8x2_to_h2_scaled(r0, 0x0604, d01),
                       a01 = i8x2_to_h2_scaled(r0, 0x0705, d01),
                       a02 = i8x2_to_h2_scaled(r1, 0x0604, d89),
                       a03 = i8x2_to_h2_scaled(r1, 0x0705, d89);
        const unsigned a10 = i8x2_to_h2_scaled(r2, 0x0604, d01),
                       a11 = i8x2_to_h2_scaled(r2, 0x0705, d01),
                       a12 = i8x2_to_h2_scaled(r3, 0x0604, d89),
                       a13 = i8x2_to_h2_scaled(r3, 0x0705, d89);
#pragma unroll
        for (int n8 = 0; n8 < NT8; ++n8) {
          mma16816(O[2 * gl][n8], a00, a01, a02, a03, pf0[n8], pf1[n8]);
          mma16816(O[2 * gl + 1][n8], a10, a11, a12, a13, pf0[n8], pf1[n8]);
        }
      }
    }
  }
  cp_wait<0>();

  // ---- write m, l, o ------------------------------------------------------------------------
#pragma unroll
  for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      float lv = lpart[n8][jj];
      lv += __shfl_xor_sync(0xffffffffu, lv, 4);
      lv += __shfl_xor_sync(0xffffffffu, lv, 8);
      lv += __shfl_xor_sync(0xffffffffu, lv, 16);
      if (gid == 0) {
        sL[warp * NCOL + n8 * 8 + 2 * tig + jj] = lv;
        if (warp == 0) sM[n8 * 8 + 2 * tig + jj] = mrun[n8][jj];
      }
    }
  __syncthreads();
  for (int c = tid; c < ncv; c += NT) {
    float lv = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) lv += sL[w * NCOL + c];
    const size_t at = ((size_t)(c / NREP) * S + split) * nh + g * NREP + c % NREP;
    m_out[at] = sM[c];
    l_out[at] = lv;
  }
  const float ounscale = 1.f / float(1 << MMA_PS);
#pragma unroll
  for (int mt = 0; mt < 2 * GPW; ++mt) {
    const int d = 16 * (2 * Cfg<NT8>::group(warp, mt / 2) + (mt & 1)) + 2 * gid;
#pragma unroll
    for (int n8 = 0; n8 < NT8; ++n8)
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int c = n8 * 8 + 2 * tig + jj;
        if (c < ncv) {
          float* dst = o_out + (((size_t)(c / NREP) * S + split) * nh + g * NREP + c % NREP) * HD + d;
          *reinterpret_cast<float2*>(dst) =
              make_float2(O[mt][n8][jj] * ounscale, O[mt][n8][2 + jj] * ounscale);
        }
      }
  }
}

}  // namespace mma_attn

// attn_partials_q8_mma_n<NT8>: dense rows (sel_idx, sel_n, sel_w are ignored);
// attn_partials_q8_mma_sel_n1: one row that may be selective (the wrapper's choice for nb = 1
// with sel_n given). Same parameters, so the wrapper launches both alike.
#define ATTN_PARTIALS_MMA(SFX, NT8, SEL)                                                       \
  extern "C" __global__ void __launch_bounds__(mma_attn::Cfg<NT8>::NT, 1)                      \
  attn_partials_q8_mma_##SFX(                                                                  \
      const float* q, const signed char* kq, const __half* kd, const signed char* vq,          \
      const __half* vd, int max_t, int base_pos, int nb, const int* sel_idx, const int* sel_n, \
      int sel_w, float qscale, float* m_out, float* l_out, float* o_out) {                     \
    mma_attn::partials_q8_mma<NT8, SEL>(q, kq, kd, vq, vd, max_t, base_pos, nb, sel_idx,       \
                                        sel_n, sel_w, qscale, m_out, l_out, o_out);            \
  }
ATTN_PARTIALS_MMA(n1, 1, false)
ATTN_PARTIALS_MMA(n2, 2, false)
ATTN_PARTIALS_MMA(n3, 3, false)
ATTN_PARTIALS_MMA(n4, 4, false)
ATTN_PARTIALS_MMA(sel_n1, 1, true)

// dynamic shared memory of attn_partials_q8_mma_n<NT8> (bytes), for the wrapper
extern "C" __global__ void attn_mma_smem_bytes(int* out) {
  out[0] = mma_attn::Lay<1>::BYTES;
  out[1] = mma_attn::Lay<2>::BYTES;
  out[2] = mma_attn::Lay<3>::BYTES;
  out[3] = mma_attn::Lay<4>::BYTES;
}
#endif  // ATTN_HD 128 / 256
