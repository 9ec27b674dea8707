// indexer_v0 — the QSA block indexer, one thread per output, to read next to golden's numpy
// (qwenref/golden/indexer.py). R = compress ratio, kblk = blocks kept, rd = rotary width, inh
// heads of width ihd, nc = (t+1)/R complete blocks of the row at position t.
//   update_block_keys_v0  bkey_j = rope(rms_norm(mean(idx_keys[jR .. jR+R-1]), w), jR) for
//                         j in [j0, j0+nj). grid (ceil(nj/128)), block 128: a thread a block.
//   block_scores_v0       score[b, j] = sum_h relu(q[b,h] . bkey_j) * ihd^-0.5 for j < nc,
//                         -inf for nc <= j < nblk. grid (ceil(nblk/128), nb), block 128.
//   select_v0             per row: dense (sel_n 0, mask = the nc blocks, sel_idx -1) while
//                         nc <= kblk; else block nc-1 plus every candidate j < nc-1 that fewer
//                         than kblk-1 candidates outrank (higher score, or equal and lower
//                         index); their tokens, the tail [nc*R, t], then -1. grid (nb), block 1.
// Bytes: as v1 (keys: R*ihd*4 in, ihd*4 out a block; scores: nblk*ihd*4 a row; select: nblk*4
// in, (kblk+1)*R*4 + nblk out a row), but no reuse beyond what the caches catch; select scans
// a row's scores once per candidate (each scan stops at kblk-1 outranking ones).
// Precision vs golden: block mean, sum of squares, dot products and head sum in float64
// (a product of two float32 is exact there), rounded to float32 once as golden does; only the
// summation order differs (~1e-16 relative). The norm's mean of squares is float64 rounded once
// (golden: float32 pairwise): within an ulp. RoPE in float64 (inv_freq, angles, sin/cos,
// rotation) as golden: float32 angles err by ~1e-2 rad at position 1e5. Selection compares the
// float32 scores exactly, as golden's stable sort does.
// Rungs:
//   update_block_keys: v0 (this file); v1 (indexer.cu, indexer_block_keys: a CTA per block).
//   block_scores: v0 (this file); v1 (indexer.cu, indexer_block_scores: a warp per key).
//   select: v0 (this file); v1 (indexer_select.cu, indexer_select_i<ITEMS>_q<Q>: a CTA per row,
//           group-maximum filter, exact ranks of the few survivors, radix-select fallback).

namespace {

// NVRTC compiles without <math.h>: no infinity macro there
__device__ float inf_v0() { return __int_as_float(0x7f800000); }

// Larger score -> larger key, and 0.0 / -0.0 equal, by the bits alone: a float compare may be
// built with denormals flushed, which would tie tiny scores that golden orders.
__device__ unsigned score_key(float f) {
    unsigned u = __float_as_uint(f);
    if (u == 0x80000000u) u = 0u;  // -0.0 ties with +0.0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace

// idx_keys [max_t, ihd] -> blk_keys[j] for j in [j0, j0 + nj). The output row is the scratch
// vector: mean, then norm in place, then the rotation of each pair (i, i + rd/2) in place.
extern "C" __global__ void update_block_keys_v0(const float* __restrict__ idx_keys, int ihd, int R,
                                                int j0, int nj, const float* __restrict__ w,
                                                float eps, int rd, double theta,
                                                float* __restrict__ blk_keys) {
    const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= nj) return;
    const long long j = j0 + n;
    const float* src = idx_keys + j * R * ihd;  // tokens jR .. jR+R-1
    float* y = blk_keys + j * ihd;
    double ss = 0.0;
    for (int d = 0; d < ihd; ++d) {
        double acc = 0.0;
        for (int r = 0; r < R; ++r) acc += double(src[(long long)r * ihd + d]);
        const float m = float(acc / double(R));  // golden: float64 mean, rounded to float32
        y[d] = m;
        ss += double(m) * double(m);
    }
    const float rstd = 1.f / sqrtf(float(ss / double(ihd)) + eps);
    for (int d = 0; d < ihd; ++d) y[d] = (y[d] * rstd) * (1.f + w[d]);
    const int half = rd / 2;
    for (int i = 0; i < half; ++i) {
        const double inv_freq = pow(theta, -2.0 * double(i) / double(rd));
        double sn, cs;
        sincos(double(j * R) * inv_freq, &sn, &cs);
        const double x1 = y[i], x2 = y[i + half];
        y[i] = float(x1 * cs - x2 * sn);
        y[i + half] = float(x2 * cs + x1 * sn);
    }
}

// q [nb, inh, ihd]; bkeys [nblk, ihd]; out [nb, nblk]. Row b = blockIdx.y sits at base_pos + b.
extern "C" __global__ void block_scores_v0(const float* __restrict__ q,
                                           const float* __restrict__ bkeys, int inh, int ihd,
                                           int nblk, int base_pos, int R, double scale,
                                           float* __restrict__ out) {
    const int b = blockIdx.y;
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= nblk) return;
    const long long nc = ((long long)base_pos + b + 1) / R;
    float* o = out + (long long)b * nblk + j;
    if (j >= nc) {  // not complete at this row's position
        *o = -inf_v0();
        return;
    }
    const float* qb = q + (long long)b * inh * ihd;
    const float* k = bkeys + j * ihd;
    double total = 0.0;
    for (int h = 0; h < inh; ++h) {
        double dot = 0.0;
        for (int d = 0; d < ihd; ++d) dot += double(qb[h * ihd + d]) * double(k[d]);
        total += dot > 0.0 ? dot : 0.0;  // relu
    }
    *o = float(total * scale);
}

// scores [nb, nblk] -> sel_idx [nb, sel_w] (int32, -1 past sel_n), sel_n [nb], mask [nb, nblk]
// (uint8). The same arguments as indexer_select.cu's indexer_select_i*_q*; thread 0 of CTA b =
// row b.
extern "C" __global__ void select_v0(const float* __restrict__ scores, int nblk, int base_pos,
                                     int R, int kblk, int sel_w, int* __restrict__ sel_idx,
                                     int* __restrict__ sel_n, unsigned char* __restrict__ mask) {
    if (threadIdx.x != 0) return;
    const int b = blockIdx.x;
    const int t = base_pos + b;
    const int nc = (t + 1) / R;  // complete blocks; the wrapper checks nc <= nblk
    const float* s = scores + (long long)b * nblk;
    int* idx = sel_idx + (long long)b * sel_w;
    unsigned char* m = mask + (long long)b * nblk;
    if (nc <= kblk) {  // dense row (nc may be 0): every complete block
        for (int j = 0; j < nblk; ++j) m[j] = j < nc ? 1 : 0;
        for (int p = 0; p < sel_w; ++p) idx[p] = -1;
        sel_n[b] = 0;
        return;
    }
    const int ncand = nc - 1;  // candidates j < ncand; block nc-1 is always kept
    const int K = kblk - 1;    // candidates to keep, 0 <= K < ncand
    for (int j = 0; j < ncand; ++j) {
        const unsigned kj = score_key(s[j]);
        int above = 0;  // candidates ranked before j (stop at K)
        for (int i = 0; i < ncand && above < K; ++i) {
            const unsigned ki = score_key(s[i]);
            if (ki > kj || (ki == kj && i < j)) ++above;
        }
        m[j] = above < K ? 1 : 0;
    }
    for (int j = ncand; j < nblk; ++j) m[j] = j == ncand ? 1 : 0;
    int p = 0;  // kblk*R block tokens, then < R tail tokens
    for (int j = 0; j < nc; ++j)
        if (m[j])
            for (int r = 0; r < R && p < sel_w; ++r) idx[p++] = j * R + r;
    for (int tok = nc * R; tok <= t && p < sel_w; ++tok) idx[p++] = tok;
    sel_n[b] = p;
    for (; p < sel_w; ++p) idx[p] = -1;
}
