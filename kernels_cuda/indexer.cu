// indexer — the QSA block indexer: queries, block keys, block scores, top-k block selection.
//
// Golden model: qwenref/golden/indexer.py. R = compress ratio, kblk = blocks kept, rd = rotary
// width, inh heads of width ihd. Kernels, one line each:
//   indexer_norm_rope     per query vector (row b, head h): zero-centred RMSNorm with q_norm_w,
//                         then rotate-half RoPE at positions[b]. grid (nb*inh), block 128.
//   indexer_block_keys    per block j in [j0, j0+nj): mean of raw keys jR..jR+R-1 (float64 sum,
//                         like golden), RMSNorm with k_norm_w, RoPE at position jR -> blk_keys[j].
//                         grid (nj), block 128.
//   indexer_block_scores  score[b, j] = sum_h relu(q[b,h] . bkey_j) * ihd^-0.5 for
//                         j < (base_pos+b+1)//R, -inf for the rest of the row. grid
//                         (ceil(nblk/8), nb), block 256 (a warp per block key), q[b] in smem.
//   indexer_select        per row: dense (sel_n = 0, mask = the nc complete blocks) while
//                         nc <= kblk; else keep block nc-1 plus the kblk-1 best others (ties:
//                         lower index) by an MSB-first 8-bit radix select on order-preserving
//                         uint32 keys (up to 4 histogram passes over the bits below those all
//                         candidates share; integer atomics: deterministic), then block prefix
//                         scans rank the kept blocks and all threads write their tokens and
//                         the tail, ascending.
//                         grid (nb), block 256; unused sel_idx entries are -1.
//
// Bytes: scores read nblk*ihd*4 block-key bytes per row (T = 128k, R = 64, ihd = 128: 1 MiB)
// and write nblk*4; the selection reads the scores and writes kblk*R + R int32 per row. These are
// small next to attention's K/V traffic, so the kernels are written for exactness, not speed.
//
// Precision vs golden: golden accumulates the block mean and the scores in float64 and rounds
// once; so do these kernels (the products of float32 values are exact in float64, only the
// summation order differs, ~1e-16 relative), so the float32 scores match golden's except when a
// float64 sum lies within ~1e-16 of a float32 rounding boundary. RMSNorm is float32 as golden
// (sum of squares in float64, rounded once: within an ulp of golden's pairwise float32 mean).
// RoPE: golden computes inv_freq, angles, cos/sin and the rotation in float64 and rounds once;
// so does this file (the angle-sensitive selection is why: float32 angles at position 1e5 err by
// ~1e-2 rad). Cost: a few float64 sincos per vector, nothing next to the scoring.

#include <cuda_fp16.h>

namespace {

// NVRTC compiles without <math.h>: no infinity macro there
__device__ __forceinline__ float inf_f() { return __int_as_float(0x7f800000); }
constexpr int SEL_THREADS = 256;
constexpr int SEL_ITEMS = 32;                 // blocks per thread: nblk <= 8192 (wrapper checks)
constexpr int MAX_IHD = 512;

__device__ __forceinline__ double warp_sum_d(double x) {
#pragma unroll
  for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Block-wide sum (any blockDim that is a multiple of 32, <= 1024); every thread gets the total.
__device__ double block_sum_d(double x, double* s_red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  x = warp_sum_d(x);
  __syncthreads();
  if (lane == 0) s_red[warp] = x;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < nw; ++w) t += s_red[w];   // fixed order: deterministic
  return t;
}

// x[0..n) in shared memory -> zero-centred RMSNorm (golden norm.rms_norm, float32:
// y = (x * (1 / sqrt(mean(x^2) + eps))) * (1 + w)) then rotate-half RoPE on dims [0, rd) at
// position pos in float64 (golden rope.apply_rope), written to out[0..n). Whole block.
__device__ void norm_rope_block(float* x, int n, const float* __restrict__ w, float eps, int rd,
                                double theta, long long pos, float* __restrict__ out,
                                double* s_red) {
  double ss = 0.0;
  for (int d = threadIdx.x; d < n; d += blockDim.x) ss += double(x[d]) * double(x[d]);
  ss = block_sum_d(ss, s_red);
  const float ms = float(ss / double(n));
  const float rstd = 1.f / sqrtf(ms + eps);
  __syncthreads();
  for (int d = threadIdx.x; d < n; d += blockDim.x) x[d] = (x[d] * rstd) * (1.f + w[d]);
  __syncthreads();
  const int half = rd / 2;
  for (int d = threadIdx.x; d < n; d += blockDim.x) {
    if (d < rd) {
      const int i = d < half ? d : d - half;
      const double inv_freq = pow(theta, -2.0 * double(i) / double(rd));
      double sn, cs;
      sincos(double(pos) * inv_freq, &sn, &cs);
      const double x1 = x[i], x2 = x[i + half];
      out[d] = float(d < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn);
    } else {
      out[d] = x[d];
    }
  }
}

// Order-preserving uint32 key of a float score (larger float -> larger key); -0.0 keys as +0.0
// (golden: 0.0 and -0.0 tie).
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned u = __float_as_uint(f + 0.f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum over the block in thread order; *total gets the sum (blockDim a multiple
// of 32, <= 1024).
__device__ unsigned block_excl_scan(unsigned v, unsigned* s_warp, unsigned* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const unsigned wv = lane < (int)(blockDim.x / 32) ? s_warp[lane] : 0u;
    unsigned wi = wv;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned n = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += n;
    }
    s_warp[lane] = wi - wv;                    // exclusive offset of warp `lane`
    if (lane == 31) s_warp[32] = wi;           // block total
  }
  __syncthreads();
  const unsigned r = incl - v + s_warp[warp];
  *total = s_warp[32];
  __syncthreads();
  return r;
}

}  // namespace

// q_raw [nvec, ihd] (nvec = nb * heads) -> out [nvec, ihd]; vector v sits at positions[v / heads].
extern "C" __global__ void __launch_bounds__(128) indexer_norm_rope(
    const float* __restrict__ x, int ihd, int heads, const int* __restrict__ positions,
    const float* __restrict__ w, float eps, int rd, double theta, float* __restrict__ out) {
  __shared__ float s_x[MAX_IHD];
  __shared__ double s_red[32];
  const long long v = blockIdx.x;
  for (int d = threadIdx.x; d < ihd; d += blockDim.x) s_x[d] = x[v * ihd + d];
  __syncthreads();
  norm_rope_block(s_x, ihd, w, eps, rd, theta, positions[v / heads], out + v * ihd, s_red);
}

// idx_keys [max_t, ihd] -> blk_keys[j] for j = j0 + blockIdx.x.
extern "C" __global__ void __launch_bounds__(128) indexer_block_keys(
    const float* __restrict__ idx_keys, int ihd, int R, int j0, const float* __restrict__ w,
    float eps, int rd, double theta, float* __restrict__ blk_keys) {
  __shared__ float s_x[MAX_IHD];
  __shared__ double s_red[32];
  const long long j = (long long)j0 + blockIdx.x;
  const float* src = idx_keys + j * R * ihd;
  for (int d = threadIdx.x; d < ihd; d += blockDim.x) {
    double acc = 0.0;
    for (int r = 0; r < R; ++r) acc += double(src[(long long)r * ihd + d]);
    s_x[d] = float(acc / double(R));           // golden: float64 mean, rounded to float32
  }
  __syncthreads();
  norm_rope_block(s_x, ihd, w, eps, rd, theta, j * R, blk_keys + j * ihd, s_red);
}

// q [nb, inh, ihd]; bkeys [nblk, ihd]; out [nb, nblk]. Dynamic smem: inh * ihd floats.
extern "C" __global__ void __launch_bounds__(256) indexer_block_scores(
    const float* __restrict__ q, const float* __restrict__ bkeys, int inh, int ihd, int nblk,
    int base_pos, int R, double scale, float* __restrict__ out) {
  extern __shared__ float s_q[];
  const int b = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long nc = ((long long)base_pos + b + 1) / R;
  const float* qb = q + (size_t)b * inh * ihd;
  for (int p = threadIdx.x; p < inh * ihd; p += blockDim.x) s_q[p] = qb[p];
  __syncthreads();
  const int j = blockIdx.x * (blockDim.x / 32) + warp;
  if (j >= nblk) return;
  float* dst = out + (size_t)b * nblk + j;
  if (j >= nc) {
    if (lane == 0) *dst = -inf_f();
    return;
  }
  const float* kj = bkeys + (size_t)j * ihd;
  double total = 0.0;
  for (int h = 0; h < inh; ++h) {
    double acc = 0.0;
    for (int d = lane; d < ihd; d += 32) acc += double(s_q[h * ihd + d]) * double(__ldg(kj + d));
    acc = warp_sum_d(acc);
    total += acc > 0.0 ? acc : 0.0;
  }
  if (lane == 0) *dst = float(total * scale);
}

// Block-wide min and max of unsigned keys (blockDim a multiple of 32, <= 1024); all threads get both.
__device__ void block_minmax(unsigned& lo, unsigned& hi, unsigned* s_lo, unsigned* s_hi) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (lane == 0) { s_lo[warp] = lo; s_hi[warp] = hi; }
  __syncthreads();
  for (int w = 0; w < nw; ++w) { lo = min(lo, s_lo[w]); hi = max(hi, s_hi[w]); }
  __syncthreads();
}

// scores [nb, nblk] -> sel_idx [nb, sel_w] (int32, -1 past sel_n), sel_n [nb], mask [nb, nblk].
// v2 (ncu, H200, nblk 2048, one row): v1 (1024 threads, 2 keys each, 4 radix passes from bit
// 31, one thread writing each kept block's R tokens) took 12.1 us, issue- and barrier-bound on
// its one SM. v2: 256 threads (fewer warps at every barrier), the radix passes start below the
// bits that every candidate shares (their min and max tell which: a row's scores mostly share
// sign and exponent, which made pass 1 one hot bin), and all threads write the token list
// together from a shared list of kept blocks (coalesced). TUNING.md has the new figure.
extern "C" __global__ void __launch_bounds__(SEL_THREADS) indexer_select(
    const float* __restrict__ scores, int nblk, int base_pos, int R, int kblk, int sel_w,
    int* __restrict__ sel_idx, int* __restrict__ sel_n, unsigned char* __restrict__ mask) {
  __shared__ unsigned s_hist[256];
  __shared__ unsigned s_warp[33];
  __shared__ unsigned s_lo[SEL_THREADS / 32], s_hi[SEL_THREADS / 32];
  __shared__ unsigned s_prefix, s_remaining;
  __shared__ int s_kept[SEL_THREADS * SEL_ITEMS];   // kept block ids in ascending order
  const int b = blockIdx.x, tid = threadIdx.x;
  const int t = base_pos + b;
  const int nc = (t + 1) / R;
  int* idx_row = sel_idx + (size_t)b * sel_w;
  unsigned char* mask_row = mask + (size_t)b * nblk;

  if (nc <= kblk) {                            // dense row: all complete blocks, no list
    for (int j = tid; j < nblk; j += blockDim.x) mask_row[j] = j < nc ? 1 : 0;
    for (int p = tid; p < sel_w; p += blockDim.x) idx_row[p] = -1;
    if (tid == 0) sel_n[b] = 0;
    return;
  }

  // this thread's contiguous range of block indices and their keys (candidates: j < nc - 1)
  const int items = (nblk + SEL_THREADS - 1) / SEL_THREADS;
  const int j_lo = tid * items;
  const int ncand = nc - 1;
  unsigned key[SEL_ITEMS];
  unsigned kmin = 0xFFFFFFFFu, kmax = 0u;
#pragma unroll
  for (int i = 0; i < SEL_ITEMS; ++i) {
    const int j = j_lo + i;
    const bool c = i < items && j < ncand;
    key[i] = c ? order_key(scores[(size_t)b * nblk + j]) : 0u;
    if (c) { kmin = min(kmin, key[i]); kmax = max(kmax, key[i]); }
  }

  // radix select: T = the K-th largest candidate key, take = how many keys == T to keep
  const int K = kblk - 1;
  unsigned T = 0xFFFFFFFFu, take = 0;
  if (K > 0) {
    block_minmax(kmin, kmax, s_lo, s_hi);
    const unsigned diff = kmin ^ kmax;
    // bits above `top` are the same in every candidate: start the passes below them
    const int top = diff ? 31 - __clz(diff) : -1;
    unsigned pmask = top >= 31 ? 0u : (top < 0 ? 0xFFFFFFFFu : ~((2u << top) - 1u));
    unsigned prefix = kmin & pmask, remaining = (unsigned)K;
    for (int shift = top - 7; shift > -8; shift -= 8) {
      const int sh = shift < 0 ? 0 : shift;    // the last digit may be narrower than 8 bits
      const unsigned dmask = shift < 0 ? (1u << (shift + 8)) - 1u : 255u;
      for (int p = tid; p < 256; p += blockDim.x) s_hist[p] = 0u;
      __syncthreads();
#pragma unroll
      for (int i = 0; i < SEL_ITEMS; ++i) {
        const int j = j_lo + i;
        if (i < items && j < ncand && (key[i] & pmask) == prefix)
          atomicAdd(&s_hist[(key[i] >> sh) & dmask], 1u);
      }
      __syncthreads();
      if (tid < 32) {                          // warp 0: lane L holds digits 255-8L .. 248-8L
        unsigned c = 0u;
#pragma unroll
        for (int i = 0; i < 8; ++i) c += s_hist[255 - 8 * tid - i];
        unsigned incl = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const unsigned n = __shfl_up_sync(0xffffffffu, incl, o);
          if (tid >= o) incl += n;
        }
        const unsigned excl = incl - c;
        if (excl < remaining && remaining <= incl) {   // exactly one lane
          unsigned cum = excl;
          for (int i = 0; i < 8; ++i) {
            const unsigned dgt = 255u - 8u * tid - i, h = s_hist[dgt];
            if (cum + h >= remaining) {
              s_prefix = prefix | (dgt << sh);
              s_remaining = remaining - cum;
              break;
            }
            cum += h;
          }
        }
      }
      __syncthreads();
      prefix = s_prefix;
      remaining = s_remaining;
      pmask |= dmask << sh;
      __syncthreads();
    }
    T = prefix;                                // every bit decided (or all candidates equal)
    take = remaining;
  }

  // keep: key > T, or key == T among the first `take` such (ascending index), or j == nc - 1
  unsigned n_eq = 0u;
#pragma unroll
  for (int i = 0; i < SEL_ITEMS; ++i) {
    const int j = j_lo + i;
    if (K > 0 && i < items && j < ncand && key[i] == T) ++n_eq;
  }
  unsigned dummy;
  unsigned eq_rank = block_excl_scan(n_eq, s_warp, &dummy);
  bool keep[SEL_ITEMS];
  unsigned n_keep = 0u;
#pragma unroll
  for (int i = 0; i < SEL_ITEMS; ++i) {
    const int j = j_lo + i;
    bool k = false;
    if (i < items && j < nblk) {
      if (j == nc - 1) {
        k = true;
      } else if (K > 0 && j < ncand) {
        if (key[i] > T) k = true;
        else if (key[i] == T) k = eq_rank++ < take;
      }
      mask_row[j] = k ? 1 : 0;
    }
    keep[i] = k;
    n_keep += k ? 1u : 0u;
  }
  unsigned kept_total;
  unsigned rank = block_excl_scan(n_keep, s_warp, &kept_total);
#pragma unroll
  for (int i = 0; i < SEL_ITEMS; ++i)
    if (keep[i]) s_kept[rank++] = j_lo + i;
  __syncthreads();
  // the list: the kept blocks' tokens in order, then the tail [nc*R, t], then -1
  const int n_blk_tok = (int)kept_total * R;   // kept_total == kblk
  const int n_vis = n_blk_tok + (t + 1 - nc * R);
  for (int p = tid; p < sel_w; p += blockDim.x) {
    int v = -1;
    if (p < n_blk_tok) v = s_kept[p / R] * R + p % R;
    else if (p < n_vis) v = nc * R + (p - n_blk_tok);
    idx_row[p] = v;
  }
  if (tid == 0) sel_n[b] = n_vis;
}
