// indexer_select.cu — the QSA block indexer's top-k block selection (v1):
// indexer_select_i<ITEMS>_q<Q>, one kernel per items-per-thread and filter size (the wrapper,
// qwenref/gpu/indexer.py select_kernel_name, picks it from nblk and kblk). Golden:
// qwenref/golden/indexer.py. Queries, block keys and scores: indexer.cu.
// Per row b at position t = base_pos + b, nc = (t+1)//R complete blocks: dense (sel_n = 0,
// mask = the nc blocks, sel_idx all -1) while nc <= kblk; else keep block nc-1 plus the
// kblk-1 best others (ties: lower index), then write mask [nb, nblk] (uint8), sel_idx
// [nb, sel_w] (the kept blocks' R tokens ascending, the tail [nc*R, t], then -1) and sel_n.
// Launch: grid (nb), block 256 (SEL_THREADS), static shared memory SelSmem (~40 KB); nblk <=
// 8192 (SEL_MAX_BLOCKS). Fast path: a group-maximum filter and exact ranks within the few
// survivors; radix select when that does not apply (comment at SelSmem).
// Bytes per row: nblk*4 of scores read, nblk mask bytes and sel_w*4 of indices written
// (sel_w = kblk*R + R). Small: one CTA per row is a latency chain, so the kernel is written for
// few barriers and a short, contiguous code path, not for bandwidth.
// Precision: exact. Scores are compared as float32 through an order-preserving integer key,
// the same order as golden's stable sort (ties to the lower index; -0.0 ties with +0.0); all
// atomics are integer, so the result is deterministic.
// Rungs of the indexer families (update_block_keys, block_scores, select):
//   v0  indexer_v0.cu: a thread per block key, per (row, block) score, per row's selection
//   v1  indexer.cu (indexer_block_keys, indexer_block_scores) + indexer_select.cu (this file)

#include <cuda_fp16.h>

namespace {

constexpr int SEL_THREADS = 256;
constexpr int SEL_WARPS = SEL_THREADS / 32;
constexpr int SEL_MAX_BLOCKS = 8192;  // nblk <= 8192 (wrapper checks)
constexpr int SEL_IDX_BITS = 13;      // composite key: (order_key << 13) | (8191 - j)
constexpr int SEL_KEY_BITS = 32 + SEL_IDX_BITS;
constexpr int SEL_WORDS = SEL_MAX_BLOCKS / 32;
constexpr int SEL_MAX_Q = 8;  // select's fast path: K <= 16 * SEL_MAX_Q
constexpr int SEL_CAP = 512;  // ... and at most this many filtered candidates
static_assert(SEL_MAX_BLOCKS == 1 << SEL_IDX_BITS, "composite key's index field");
static_assert(SEL_IDX_BITS == 13 && SEL_KEY_BITS == 45, "radix digits split at bit 13");
static_assert(SEL_MAX_BLOCKS == SEL_THREADS * 32, "select_row<32> covers SEL_MAX_BLOCKS");

// Order-preserving uint32 key of a float score (larger float -> larger key); -0.0 keys as +0.0
// (golden: 0.0 and -0.0 tie). Bit operations only: kernels built here flush float32 denormals
// in arithmetic (x + 0.f gives 0 for every |x| < 2^-126), so an arithmetic fix of -0.0 would
// fold denormal scores to 0 and break their order.
__device__ __forceinline__ unsigned order_key(float f) {
    unsigned u = __float_as_uint(f);
    if (u == 0x80000000u) u = 0u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace

// ---- indexer_select ------------------------------------------------------------------------
// scores [nb, nblk] -> sel_idx [nb, sel_w] (int32, -1 past sel_n), sel_n [nb], mask [nb, nblk].
// One CTA of 256 threads (8 warps) per row. Warp w, item i (i < ITEMS = nblk/256 rounded up to
// a power of two, a template parameter: no dead unrolled items) holds block
// j = 32 (w ITEMS + i) + lane: a warp's load is 128 contiguous bytes, and bitmap word
// w ITEMS + i is exactly warp w's item i. Candidates (j < nc - 1) are ordered by the 45-bit
// composite key (order_key << 13) | (8191 - j): all distinct, larger = better score, then lower
// index; "keep the K = kblk-1 best, ties to the lower index" = "keep the K largest composite
// keys".
//
// Fast path (1 <= K <= 128; six barriers):
//  1. group maxima: block j is in group ((j/32) % Q, j % 32), Q = 2, 4 or 8 (G = 32Q >= 2K
//     groups); a shared atomicMax per (thread, group) of the 32-bit order keys (native
//     ATOMS.MAX; a 64-bit max is a CAS loop). Every group strides the whole row (period 32Q
//     blocks), so a trend or a cluster of good blocks reaches many groups.
//  2. m = the largest group maximum that at least K group maxima reach (each warp counts for
//     G/8 of them by REDUX.SUM; one atomicMax per warp). The argmaxes of those >= K groups are
//     distinct elements with keys >= m, and order keys are monotone in the composite order, so
//     every top-K element has key >= m: C = {candidates with key >= m} holds the top K for ANY
//     input (exact, not a heuristic). |C| stays a small multiple of K on noise, trends and
//     sorted rows (docs/tuning-log.md), several times smaller than the min of the group
//     maxima would give.
//  3. C is compacted into shared memory (a ballot per item, one atomicAdd per warp).
//  4. rank of member c = how many members of C are larger: its global rank (every larger key
//     also passed). S = 8/4/2/1 adjacent lanes split C's chunks of 8 (LDS.128 broadcasts, 3.5
//     instructions a pair: (mine - v) >> 63) and add by shuffles; rank < K sets j's bit in the
//     kept bitmap.
// Fallback (K > 128, or |C| > 512: heavy ties at m, an adversarial row): MSB-first radix select
// on the composite keys, 8-bit digits from bit 44, double-buffered histograms (two barriers a
// pass), stopping once the boundary digit's bin is wholly kept; T = the K-th largest key with
// its undecided bits 0, keys >= T kept. Integer atomics only: deterministic.
// Output (both paths): bit nc-1 is in the bitmap from the start; a kept block's slot in the
// ascending list = popcount of the words below its warp's range (one REDUX.SUM a warp) + of
// the warp's own words below it (a running sum): no scan, one barrier; then all threads write
// the token list (kept blocks' R tokens, the tail, -1).
// The selection is a latency chain on one SM: 256 threads and ~6 barriers on the fast path
// (docs/tuning-log.md has the earlier designs and their timings).
struct SelSmem {
    unsigned long long cand[SEL_CAP];  // C's composite keys, zero past |C|
    unsigned bits[SEL_WORDS];          // kept-block bitmap, word w = blocks 32w..32w+31
    unsigned gmax[32 * SEL_MAX_Q];     // group maxima of the order keys
    unsigned hist[2][256];             // radix fallback, double-buffered
    int kept[SEL_MAX_BLOCKS];          // kept block ids, ascending
    unsigned m, ncand, digit, remaining, done;
};

// Step 1: block j (bitmap word j/32) is in group ((j/32) % Q, j % 32); g[group] = max of the
// members' order keys. Q and ITEMS are powers of two: a thread's items fall in min(Q, ITEMS)
// groups, so min(Q, ITEMS) atomics per thread.
template <int ITEMS, int Q>
__device__ __forceinline__ void group_maxima(unsigned* g, const unsigned (&ok)[ITEMS]) {
    const int lane = threadIdx.x & 31, wbase = (threadIdx.x >> 5) * ITEMS;
    if constexpr (ITEMS >= Q) {  // item i is in group (i % Q, lane)
        unsigned mx[Q];
#pragma unroll
        for (int c = 0; c < Q; ++c) mx[c] = 0u;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) mx[i % Q] = max(mx[i % Q], ok[i]);
#pragma unroll
        for (int c = 0; c < Q; ++c)
            if (mx[c]) atomicMax(&g[c * 32 + lane], mx[c]);
    } else {  // each item its own group
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            if (ok[i]) atomicMax(&g[((wbase + i) & (Q - 1)) * 32 + lane], ok[i]);
    }
}

// Step 2: of the G = 32Q group maxima g[], the largest one that at least K of them reach, or 0;
// warp w tests g[w G/8 .. (w+1) G/8), lane L holds g[LQ .. LQ+Q-1]. The caller takes the max
// over the warps.
template <int Q>
__device__ __forceinline__ unsigned group_threshold(const unsigned* g, int K) {
    constexpr int TPW = 32 * Q / SEL_WARPS;  // targets per warp
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned mine[Q], best = 0u;
#pragma unroll
    for (int u = 0; u < Q; ++u) mine[u] = g[lane * Q + u];
#pragma unroll
    for (int q = 0; q < TPW; ++q) {
        const unsigned target = g[warp * TPW + q];
        unsigned c = 0u;
#pragma unroll
        for (int u = 0; u < Q; ++u) c += mine[u] >= target ? 1u : 0u;
        if (__reduce_add_sync(0xffffffffu, c) >= (unsigned)K) best = max(best, target);
    }
    return best;
}

__device__ __forceinline__ unsigned long long sel_key(unsigned ok, int j) {
    return ((unsigned long long)ok << SEL_IDX_BITS) | (unsigned)(SEL_MAX_BLOCKS - 1 - j);
}

// The radix fallback of select_row below (K > 16 Q, or more than SEL_CAP candidates pass the
// group filter): sets the K kept candidates' bits in sh.bits. Reloads the row's scores (L2) so
// that the fast path's registers are not passed out of line. Whole CTA (barriers inside).
template <int ITEMS>
__device__ __noinline__ void radix_keep(SelSmem& sh, const float* __restrict__ srow, int ncand,
                                        int K) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j0 = 32 * warp * ITEMS + lane;
    unsigned ok[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) ok[i] = j0 + 32 * i < ncand ? order_key(srow[j0 + 32 * i]) : 0u;
    // the composite key's digits, 8 bits from bit 44: [37,45) .. [13,21) are the order key's
    // bytes, [5,13) and [0,5) the index field's: kept as (order key, index) halves so that no
    // 64-bit key per item is live (ITEMS 32 fits 128 registers)
    unsigned pre_hi = 0u, pre_lo = 0u, msk_hi = 0u, msk_lo = 0u;
    unsigned remaining = (unsigned)K;  // still to take among keys matching the prefix
    int buf = 0;
    for (int hi = SEL_KEY_BITS; hi > 0; hi -= 8) {
        const int sh_ = hi > 8 ? hi - 8 : 0;
        const unsigned dmask = (1u << (hi - sh_)) - 1u;
        const bool in_ok = sh_ >= SEL_IDX_BITS;  // this digit lies in the order key
        const int dsh = in_ok ? sh_ - SEL_IDX_BITS : sh_;
        sh.hist[buf ^ 1][tid] = 0u;  // next pass's bins (last read a pass ago)
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int j = j0 + 32 * i;
            const unsigned idx = (unsigned)(SEL_MAX_BLOCKS - 1 - j);
            if (j < ncand && (ok[i] & msk_hi) == pre_hi && (idx & msk_lo) == pre_lo)
                atomicAdd(&sh.hist[buf][((in_ok ? ok[i] : idx) >> dsh) & dmask], 1u);
        }
        __syncthreads();
        if (warp == 0) {  // lane L holds digits 255-8L .. 248-8L
            const unsigned* h = sh.hist[buf];
            unsigned c = 0u;
#pragma unroll
            for (int k = 0; k < 8; ++k) c += h[255 - 8 * lane - k];
            unsigned incl = c;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned v = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += v;
            }
            const unsigned excl = incl - c;
            if (excl < remaining && remaining <= incl) {  // exactly one lane
                unsigned cum = excl;
                for (int k = 0; k < 8; ++k) {
                    const unsigned dgt = 255u - 8u * lane - k, hd = h[dgt];
                    if (cum + hd >= remaining) {
                        sh.digit = dgt;
                        sh.remaining = remaining - cum;
                        sh.done = (remaining - cum == hd) ? 1u : 0u;  // the whole bin is kept: stop
                        break;
                    }
                    cum += hd;
                }
            }
        }
        __syncthreads();
        if (in_ok) {
            pre_hi |= sh.digit << dsh;
            msk_hi |= dmask << dsh;
        } else {
            pre_lo |= sh.digit << dsh;
            msk_lo |= dmask << dsh;
        }
        remaining = sh.remaining;
        buf ^= 1;
        if (sh.done) break;  // uniform; rewritten only after the next barrier
    }
    // exactly K candidates have (order key, index) >= (pre_hi, pre_lo) (undecided bits 0)
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int j = j0 + 32 * i;
        const unsigned idx = (unsigned)(SEL_MAX_BLOCKS - 1 - j);
        const bool keep = j < ncand && (ok[i] > pre_hi || (ok[i] == pre_hi && idx >= pre_lo));
        const unsigned bal = __ballot_sync(0xffffffffu, keep);
        if (lane == 0 && bal) atomicOr(&sh.bits[warp * ITEMS + i], bal);
    }
}

// One selective row (nc > kblk): fills sh.bits with the kept blocks (nc-1 included), then
// sh.kept with their ids ascending and the mask row. Ends on a barrier (sh.kept readable).
// Q (groups 32 Q >= 2K) is the kernel's; K > 16 Q, or more than SEL_CAP survivors, go to
// radix_keep, out of line so that the fast path's code is short and contiguous.
template <int ITEMS, int Q>
__device__ __forceinline__ void select_row(SelSmem& sh, const float* __restrict__ srow, int nblk,
                                           int nc, int kblk, unsigned char* __restrict__ mask_row) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int ncand = nc - 1;                 // candidates j < ncand; block ncand is kept
    const int K = kblk - 1;                   // 0 <= K < ncand
    const int j0 = 32 * warp * ITEMS + lane;  // item i: j = j0 + 32 i
    float sc[ITEMS];                          // loads first: the barrier waits under them
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) sc[i] = j0 + 32 * i < ncand ? srow[j0 + 32 * i] : 0.f;
    static_assert(
        SEL_WORDS == SEL_THREADS && SEL_CAP == 2 * SEL_THREADS && 32 * SEL_MAX_Q == SEL_THREADS,
        "select_row's zeroing: fixed stores per thread");
    sh.bits[tid] = 0u;
    sh.cand[tid] = 0ull;
    sh.cand[tid + SEL_THREADS] = 0ull;
    sh.hist[0][tid] = 0u;
    sh.gmax[tid] = 0u;
    if (tid == 0) {
        sh.m = 0u;
        sh.ncand = 0u;
    }
    __syncthreads();
    if (tid == 0) atomicOr(&sh.bits[ncand >> 5], 1u << (ncand & 31));
    unsigned ok[ITEMS];  // order keys; 0 for non-candidates
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) ok[i] = j0 + 32 * i < ncand ? order_key(sc[i]) : 0u;

    static_assert(Q == 2 || Q == 4 || Q == 8, "Q: 2, 4 or 8 (SEL_MAX_Q)");
    bool fast = K >= 1 && K <= 16 * Q;
    if (fast) {
        // 1. group maxima
        group_maxima<ITEMS, Q>(sh.gmax, ok);
        __syncthreads();
        // 2. the threshold m
        const unsigned best = group_threshold<Q>(sh.gmax, K);
        if (lane == 0 && best) atomicMax(&sh.m, best);
        __syncthreads();
        const unsigned m = sh.m;  // 0 (all pass) if a group had no candidate
        // 3. compaction of C
        unsigned n_warp = 0u;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            n_warp += __popc(__ballot_sync(0xffffffffu, j0 + 32 * i < ncand && ok[i] >= m));
        unsigned base = 0u;
        if (lane == 0 && n_warp) base = atomicAdd(&sh.ncand, n_warp);
        base = __shfl_sync(0xffffffffu, base, 0);
        const unsigned lt = (1u << lane) - 1u;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {  // the ballots again (fewer live registers)
            const bool in = j0 + 32 * i < ncand && ok[i] >= m;
            const unsigned bal = __ballot_sync(0xffffffffu, in);
            const unsigned pos = base + __popc(bal & lt);
            if (in && pos < SEL_CAP) sh.cand[pos] = sel_key(ok[i], j0 + 32 * i);
            base += __popc(bal);
        }
        __syncthreads();
        const int n = (int)sh.ncand;  // the same in every thread
        fast = n <= SEL_CAP;
        if (fast) {
            // 4. ranks
            const int S = n <= 32 ? 8 : (n <= 64 ? 4 : (n <= 128 ? 2 : 1));
            const int per = SEL_THREADS / S, part = tid & (S - 1), nch = (n + 7) >> 3;
            const ulonglong2* c2 = reinterpret_cast<const ulonglong2*>(sh.cand);
            for (int cb = 0; cb < n; cb += per) {  // uniform trip count
                const int c = cb + tid / S;
                unsigned rank = 0u;
                unsigned long long mine = 0ull;
                if (c < n) {
                    mine = sh.cand[c];
                    for (int k = part; k < nch; k += S) {
                        const ulonglong2 v0 = c2[4 * k], v1 = c2[4 * k + 1], v2 = c2[4 * k + 2],
                                         v3 = c2[4 * k + 3];
                        // (mine - v) >> 63 is 1 iff v > mine (both below 2^45); the zero padding never is
                        rank += (unsigned)((mine - v0.x) >> 63) + (unsigned)((mine - v0.y) >> 63) +
                                (unsigned)((mine - v1.x) >> 63) + (unsigned)((mine - v1.y) >> 63) +
                                (unsigned)((mine - v2.x) >> 63) + (unsigned)((mine - v2.y) >> 63) +
                                (unsigned)((mine - v3.x) >> 63) + (unsigned)((mine - v3.y) >> 63);
                    }
                }
                for (int o = 1; o < S; o <<= 1) rank += __shfl_xor_sync(0xffffffffu, rank, o);
                if (c < n && part == 0 && rank < (unsigned)K) {
                    const int j = SEL_MAX_BLOCKS - 1 - (int)(mine & (SEL_MAX_BLOCKS - 1));
                    atomicOr(&sh.bits[j >> 5], 1u << (j & 31));
                }
            }
        }
    }
    if (!fast && K >= 1) radix_keep<ITEMS>(sh, srow, ncand, K);  // uniform branch
    __syncthreads();                                             // the bitmap is final

    // mask and slots: kept blocks in the words below this warp's range, then a running count
    const int wbase = warp * ITEMS;
    unsigned below = 0u;
#pragma unroll
    for (int k = 0; k < (SEL_WARPS * ITEMS + 31) / 32; ++k)
        if (lane + 32 * k < wbase) below += __popc(sh.bits[lane + 32 * k]);
    unsigned run = __reduce_add_sync(0xffffffffu, below);
    const unsigned lt = (1u << lane) - 1u;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const unsigned word = sh.bits[wbase + i];
        const int j = j0 + 32 * i;
        const unsigned bit = (word >> lane) & 1u;
        if (j < nblk) mask_row[j] = (unsigned char)bit;
        if (bit) sh.kept[run + __popc(word & lt)] = j;
        run += __popc(word);
    }
    __syncthreads();
}

// indexer_select_i<ITEMS>_q<Q>: one kernel per (ITEMS, Q), so that a launch runs one short,
// contiguous code path: the select runs on one SM whose instruction cache is cold after the
// kernels before it (instruction fetch is the top stall there), and a single kernel holding all
// six ITEMS and three Q paths inline spreads the hot path across ~20 k instructions
// (docs/tuning-log.md). ITEMS = (nblk/32)/8 rounded up to a power
// of two (1..32), Q = 2, 4, 8 for K = kblk-1 <= 32, <= 64, else (qwenref/gpu/indexer.py).
template <int ITEMS, int Q>
__device__ __forceinline__ void select_kernel(SelSmem& sh, const float* __restrict__ scores,
                                              int nblk, int base_pos, int R, int kblk, int sel_w,
                                              int* __restrict__ sel_idx, int* __restrict__ sel_n,
                                              unsigned char* __restrict__ mask) {
    const int b = blockIdx.x, tid = threadIdx.x;
    const int t = base_pos + b;
    const int nc = (t + 1) / R;
    int* idx_row = sel_idx + (size_t)b * sel_w;
    unsigned char* mask_row = mask + (size_t)b * nblk;

    if (nc <= kblk) {  // dense row: all complete blocks, no list
        for (int j = tid; j < nblk; j += SEL_THREADS) mask_row[j] = j < nc ? 1 : 0;
        for (int p = tid; p < sel_w; p += SEL_THREADS) idx_row[p] = -1;
        if (tid == 0) sel_n[b] = 0;
        return;
    }
    select_row<ITEMS, Q>(sh, scores + (size_t)b * nblk, nblk, nc, kblk, mask_row);

    // the list: the kept blocks' tokens in order, then the tail [nc*R, t], then -1
    const int n_blk_tok = kblk * R;  // kblk blocks kept
    const int n_vis = n_blk_tok + (t + 1 - nc * R);
    if (R % 4 == 0 && ((size_t)idx_row & 15) == 0) {
        // 16-byte stores: entries p .. p+3 (p % 4 == 0) lie in one block's R tokens, or past them
        const int step = 4 * SEL_THREADS, dq = step / R, dr = step - dq * R;
        int slot = 4 * tid / R, r = 4 * tid - slot * R;  // p = slot * R + r
        for (int p = 4 * tid; p < sel_w; p += step) {
            int4 v;
            if (p < n_blk_tok) {
                const int t0 = sh.kept[slot] * R + r;
                v = make_int4(t0, t0 + 1, t0 + 2, t0 + 3);
            } else {
                const int q = nc * R + (p - n_blk_tok);
                v = make_int4(p < n_vis ? q : -1, p + 1 < n_vis ? q + 1 : -1,
                              p + 2 < n_vis ? q + 2 : -1, p + 3 < n_vis ? q + 3 : -1);
            }
            *reinterpret_cast<int4*>(idx_row + p) = v;
            slot += dq;
            r += dr;
            if (r >= R) {
                r -= R;
                ++slot;
            }
        }
    } else {
        const int dq = SEL_THREADS / R, dr = SEL_THREADS - dq * R;
        int slot = tid / R, r = tid - slot * R;  // p = slot * R + r
        for (int p = tid; p < sel_w; p += SEL_THREADS) {
            int v = -1;
            if (p < n_blk_tok)
                v = sh.kept[slot] * R + r;
            else if (p < n_vis)
                v = nc * R + (p - n_blk_tok);
            idx_row[p] = v;
            slot += dq;
            r += dr;
            if (r >= R) {
                r -= R;
                ++slot;
            }
        }
    }
    if (tid == 0) sel_n[b] = n_vis;
}

#define SELECT_KERNEL(I, Q)                                                                        \
    extern "C" __global__ void __launch_bounds__(SEL_THREADS, 2) indexer_select_i##I##_q##Q(       \
        const float* __restrict__ scores, int nblk, int base_pos, int R, int kblk, int sel_w,      \
        int* __restrict__ sel_idx, int* __restrict__ sel_n, unsigned char* __restrict__ mask) {    \
        __shared__ __align__(16) SelSmem sh;                                                       \
        select_kernel<I, Q>(sh, scores, nblk, base_pos, R, kblk, sel_w, sel_idx, sel_n, mask);     \
    }
#define SELECT_KERNELS(I) SELECT_KERNEL(I, 2) SELECT_KERNEL(I, 4) SELECT_KERNEL(I, 8)
SELECT_KERNELS(1)
SELECT_KERNELS(2)
SELECT_KERNELS(4)
SELECT_KERNELS(8)
SELECT_KERNELS(16)
SELECT_KERNELS(32)
#undef SELECT_KERNELS
#undef SELECT_KERNEL
