"""Notebook 06 (the QSA indexer): a synthetic world where the indexer has something to find, the
experiments on it (scores, selection, recall, a needle, the slider), float64 references, the GPU
rung check, kernel lines, the time figures from records, the exercise checker.

The world: every segment of SEG tokens is about one of N_TOPICS random directions; a query asks
for two. The attention sees rope(rms_norm(.)) of the raw vectors; the "aligned" indexer the same
raw vectors cut to its heads and width (q heads 0..inh-1, which read kv head 0, and kv head 0's
raw key), the "misaligned" one independent random projections."""

from __future__ import annotations

import contextlib
import io
import os

import numpy as np

from .. import excerpts, golden
from ..config import AttnConfig

__all__ = """
CFG SEG N_TOPICS FAMILIES make_world topic_queries attn_keys attn_queries index_queries
GOLDEN_SOURCE fill_cache dense_probs KEPT LATEST selection_matrix recall Needle
needle_view norm_rope_f64 block_keys_f64 scores_f64 selection_margin group_filter show_lines
plot_scores plot_selection plot_recall plot_needle_places gpu_rung_check recorded_error_samples
plot_error_hist indexer_ladders by_rung plot_against_T qsa_parts plot_qsa_parts check_n_visible
""".split()

CFG = AttnConfig.tiny()
SEG = 8  # tokens per topic segment
N_TOPICS = 16
_NH, _NKV, _HD = CFG.nh, CFG.nkv, CFG.head_dim
_INH, _IHD, _RD_I = CFG.indexer_n_heads, CFG.indexer_head_dim, CFG.indexer_rotary_dim
_THETA = CFG.rope_theta
_NO_W, _NO_WI = np.zeros(_HD, np.float32), np.zeros(_IHD, np.float32)  # norm weights 0: (1+w)=1
GOLDEN_SOURCE = "golden model on this CPU (synthetic topic world, fixed seeds)"


def _int(name, v, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be in [{lo}, {'inf' if hi is None else hi}], got {v}")
    return int(v)


def _finish(ax, source=None, size=8, legend=True):
    """Legend outside the data; the data's source under the figure (below its x label)."""
    if legend:
        ax.legend(fontsize=size, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if source:
        kw = dict(textcoords="offset points", fontsize=7, color="0.35", va="top")
        xy = ("figure fraction", ax.xaxis.label)
        ax.annotate(source, (0.01, 0), xycoords=xy, xytext=(0, -3), **kw)


# ---- the world --------------------------------------------------------------------------------
def _unit_dirs(rng, n):
    """n random directions per kv head, rms 1 per element: [nkv, n, hd]."""
    d = rng.standard_normal((_NKV, n, _HD))
    return (d / np.linalg.norm(d, axis=-1, keepdims=True) * np.sqrt(_HD)).astype(np.float32)


def make_world(T, seed, alpha=1.5):
    """Raw keys k_raw [T, nkv, hd] = alpha·(the segment's topic) + noise, values v [T, nkv, hd]."""
    T = _int("T", T, 1)
    rng = np.random.default_rng(seed)
    topics = _unit_dirs(rng, N_TOPICS)  # [nkv, N_TOPICS, hd]
    seg_topic = rng.integers(0, N_TOPICS, -(-T // SEG))  # one topic per segment
    k_raw = alpha * topics[:, np.repeat(seg_topic, SEG)[:T]].transpose(1, 0, 2)  # [T, nkv, hd]
    k_raw = (k_raw + rng.standard_normal((T, _NKV, _HD))).astype(np.float32)
    v = rng.standard_normal((T, _NKV, _HD)).astype(np.float32)
    return dict(rng=rng, topics=topics, seg_topic=seg_topic, k_raw=k_raw, v=v)


def topic_queries(world, picks, beta=1.5):
    """Raw queries [n, nh, hd] asking for the topic pairs picks [n, 2] (GQA: a kv head's q heads
    ask for the same)."""
    q = beta * world["topics"][:, picks].sum(axis=2).transpose(1, 0, 2)  # [n, nkv, hd]
    q = np.repeat(q, _NH // _NKV, axis=1)  # [n, nh, hd]
    return (q + world["rng"].standard_normal(q.shape)).astype(np.float32)


def attn_keys(k_raw):
    """The attention's keys rope(rms_norm(k_raw)) at positions 0..T-1: [T, nkv, hd]."""
    T = k_raw.shape[0]
    return golden.apply_rope(golden.rms_norm(k_raw, _NO_W), np.arange(T), CFG.rotary_dim, _THETA)


def attn_queries(q_raw, rows):
    """[n, nh, hd] -> rope(rms_norm(.)) at positions rows."""
    return golden.apply_rope(golden.rms_norm(q_raw, _NO_W), rows, CFG.rotary_dim, _THETA)


def index_queries(q_raw_i, rows):
    """[n, inh, ihd] -> the indexer's queries (golden.indexer_queries, norm weights 0)."""
    return golden.indexer_queries(q_raw_i, _NO_WI, rows, _RD_I, _THETA)


def fill_cache(world, index_keys):
    """A golden KVCache holding the attention's k, v and the indexer's raw keys, its block keys
    written by golden.update_block_keys as the layer does after each append."""
    T = world["k_raw"].shape[0]
    cache = golden.KVCache(CFG, max_t=T, kind="f32")
    idx = np.ascontiguousarray(index_keys, dtype=np.float32)
    cache.append(attn_keys(world["k_raw"]), world["v"], index_k=idx)
    golden.update_block_keys(cache, _NO_WI, CFG, 0, T)
    return cache


def dense_probs(q, K, t):
    """Exact softmax of one row (q [nh, hd]) over keys K[:, :t+1] ([nkv, T, hd]): float64
    [nh, t+1]."""
    K = np.asarray(K[:, : t + 1], np.float64)
    g = _NH // _NKV
    s = np.einsum("grd,gtd->grt", np.asarray(q, np.float64).reshape(_NKV, g, _HD), K)
    s = s.reshape(_NH, -1) / np.sqrt(_HD)
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


# ---- scores, selection, recall ----------------------------------------------------------------
# what a row reads from each block: the codes of selection_matrix (DENSE: a dense row's block,
# read without a score)
FUTURE, SKIPPED, KEPT, LATEST, TAIL, DENSE = range(6)


def selection_matrix(iq, bkeys, R, kblk):
    """(M [T, T // R] of the codes above, n_vis [T]) from golden.row_selection for every row."""
    T = iq.shape[0]
    M = np.full((T, T // R), FUTURE)
    n_vis = np.zeros(T, int)
    for t in range(T):
        nc = (t + 1) // R
        idx, mask = golden.row_selection(t, iq[t], bkeys, R, kblk)
        n_vis[t] = idx.size
        M[t, :nc] = np.where(mask, KEPT, SKIPPED) if nc > kblk else DENSE
        if nc > kblk:
            M[t, nc - 1] = LATEST
        if nc < M.shape[1] and (t + 1) % R:
            M[t, nc] = TAIL
    return M, n_vis


def recall(probs, rows, scores_of, kblk, R):
    """Mean dense softmax mass on the tokens a selection keeps: probs[i] [nh, t+1] of row rows[i],
    scores_of(i, t, nc) -> the row's block scores (or the oracle's block masses). Every row
    must be selective (nc > kblk)."""
    out = []
    for i, t in enumerate(rows):
        t = int(t)
        sc = np.asarray(scores_of(i, t, (t + 1) // R), np.float32)
        idx, _ = golden.visible_tokens(t, golden.select_blocks(sc, kblk), R)
        out.append(probs[i][:, idx].sum(-1).mean())
    return float(np.mean(out))


# ---- the needle -------------------------------------------------------------------------------
class Needle:
    """One token planted at a position of a T-token world: its raw key strength·a (a new
    direction), its value 3·u; the last row t = T-1 asks mostly for a. Everything the needle
    experiments and the slider reuse is built once here."""

    def __init__(self, T=1024, seed=5, strength=8.0):
        self.T, self.t, self.strength = T, T - 1, strength
        self.base = make_world(T, seed)
        nrng = np.random.default_rng(7)
        self.a_dir, self.u_val = _unit_dirs(nrng, 1)[:, 0], _unit_dirs(nrng, 1)[:, 0]  # [nkv, hd]
        a_q = np.repeat(self.a_dir[None], _NH // _NKV, axis=1)  # [1, nh, hd]
        self.q_raw = 3.0 * a_q + 0.5 * topic_queries(self.base, np.array([[2, 5]]), beta=1.0)
        self.q = attn_queries(self.q_raw, [self.t])[0]  # [nh, hd]
        self.iq = index_queries(self.q_raw[:, :_INH, :_IHD], [self.t])[0]  # [inh, ihd]
        self.u_heads = np.repeat(self.u_val, _NH // _NKV, axis=0)  # [nh, hd]

    def plant(self, pos, strength=None):
        """(k_raw, v) of the world with the needle at pos."""
        k_raw, v = self.base["k_raw"].copy(), self.base["v"].copy()
        k_raw[pos] = (self.strength if strength is None else strength) * self.a_dir
        v[pos] = 3.0 * self.u_val
        return k_raw, v

    def row(self, pos, R, kblk, strength=None, index_keys=None, iq=None):
        """The last row's whole story with the needle at pos: block scores, kept blocks, token
        list, dense probabilities, selective attention output. index_keys(k_raw) -> the
        indexer's raw keys [T, ihd], iq its query [inh, ihd] (default: the aligned indexer,
        kv head 0 cut to ihd, and self.iq)."""
        k_raw, v = self.plant(pos, strength)
        raw_i = k_raw[:, 0, :_IHD] if index_keys is None else index_keys(k_raw)
        nc = self.T // R
        bkeys = golden.block_keys(raw_i, np.arange(nc), R, _NO_WI, _RD_I, _THETA)
        sc = golden.block_scores(self.iq if iq is None else iq, bkeys)
        blocks = golden.select_blocks(sc, kblk) if nc > kblk else np.arange(nc)
        idx, mask = golden.visible_tokens(self.t, blocks, R)
        K, V = attn_keys(k_raw).transpose(1, 0, 2), v.transpose(1, 0, 2)  # [nkv, T, hd]
        p = dense_probs(self.q, K, self.t)
        o, u = golden.decode_attention(self.q, K[:, idx], V[:, idx]), self.u_heads  # [nh, hd]
        cos = np.sum(o * u, -1) / np.linalg.norm(o, axis=-1) / np.linalg.norm(u, axis=-1)
        j = pos // R  # the needle's block; the latest (nc - 1) and the tail are always kept
        place = 1 + int((sc[:-1] > sc[j]).sum()) if j < nc - 1 else None  # 1 = best
        return dict(
            scores=sc, blocks=blocks, idx=idx, found=bool(j >= nc or mask[j]), place=place,
            mass=float(p[:, idx].sum(-1).mean()), needle_p=float(p[:, pos].mean()),
            cos=float(cos.mean()),
        )  # fmt: skip


def needle_view(needle, budget=128, R=8, pos=100, ax=None):
    """The slider's figure: the last row's block scores (x = the block's first token), the kept
    blocks, the needle's block, and in the title what the row keeps. Golden model, < 1 s."""
    import matplotlib.pyplot as plt

    budget, R = _int("budget", budget, 1), _int("R", R, 1, needle.T)
    pos = _int("pos", pos, 0, needle.T - 1)
    kblk = max(budget // R, 1)
    s = needle.row(pos, R, kblk)
    ax = ax or plt.subplots(figsize=(8, 3.0))[1]
    j = np.arange(s["scores"].size)
    edges = np.append(j, j.size) * R  # a step per block: one patch per colour, fast to draw
    kept, last = np.isin(j, s["blocks"][:-1]), j == s["blocks"][-1]
    for m, c, lab in (
        (True, "lightgrey", "skipped"),
        (kept, "tab:blue", "kept"),
        (last, "C1", "latest"),
    ):
        ax.stairs(np.where(m, s["scores"], 0), edges, fill=True, color=c, label=lab)
    ax.axvline(pos, color="tab:red", lw=1.2, ls="--", label=f"needle (token {pos})")
    ax.set_xlim(0, needle.T)
    ax.set_xlabel("token (each bar: one block of R tokens)")
    ax.set_ylabel("block score")
    verdict = "kept" if s["found"] else "MISSED"
    where = "always kept" if s["place"] is None else f"place {s['place']}"
    ax.set_title(
        f"R = {R}, kblk = {kblk} blocks ({kblk * R} tokens): needle block {verdict} "
        f"({where}), mass kept {s['mass']:.2f}, cos(out, u) {s['cos']:.2f}",
        fontsize=9,
    )
    _finish(ax, GOLDEN_SOURCE + f"; needle loudness {needle.strength:g}")
    return s


# ---- float64 references (the errors section) ---------------------------------------------------
def norm_rope_f64(x, positions, w, rotary_dim, theta, eps=1e-6):
    """rope(rms_norm(x, w), positions) with nothing rounded to float32 (golden's cos/sin table
    is float64). x [n, d], positions [n] -> float64 [n, d]."""
    x = np.asarray(x, np.float64)
    y = x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * (1.0 + np.asarray(w, np.float64))
    cos, sin = golden.rope_cos_sin(positions, rotary_dim, theta)  # [n, rd/2]
    h = rotary_dim // 2
    x1, x2 = y[:, :h].copy(), y[:, h:rotary_dim].copy()
    y[:, :h], y[:, h:rotary_dim] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return y


def block_keys_f64(raw_keys, R, k_norm_w, rotary_dim, theta):
    """Every complete block's key in float64 throughout. [T // R, ihd]."""
    raw = np.asarray(raw_keys, np.float64)
    nc = raw.shape[0] // R
    mean = raw[: nc * R].reshape(nc, R, -1).mean(axis=1)
    return norm_rope_f64(mean, np.arange(nc) * R, k_norm_w, rotary_dim, theta)


def scores_f64(q, bkeys):
    """sum_h relu(q_h . bkey_j) / sqrt(ihd) in float64, not rounded. [nc]."""
    d = np.asarray(q, np.float64) @ np.asarray(bkeys, np.float64).T  # [inh, nc]
    return np.maximum(d, 0).sum(0) / np.sqrt(q.shape[-1])


def selection_margin(sc, kblk):
    """The gap between the last kept and the first dropped candidate score (a row's selection
    cannot change while every score moves by less than half of it)."""
    others = np.sort(np.asarray(sc[:-1], np.float64))[::-1]
    return float(others[kblk - 2] - others[kblk - 1]) if kblk >= 2 else np.inf


def group_filter(scores, K, Q=2):
    """indexer_select's exact filter in numpy, on one row's candidate scores: candidate j is in
    group ((j // 32) % Q, j % 32); m = the K-th largest group maximum; survivors C = the
    candidates scoring >= m. -> (m, C). The top K candidates are always in C."""
    s = np.asarray(scores, np.float32)
    j = np.arange(s.size)
    gmax = np.full(32 * Q, -np.inf, np.float32)
    np.maximum.at(gmax, ((j // 32) % Q) * 32 + j % 32, s)
    m = np.sort(gmax)[::-1][K - 1]
    return m, np.flatnonzero(s >= m)


def show_lines(file, name, first, last):
    """Show the lines of kernel excerpt (file, name) from the first one containing `first`
    through the next one containing `last`."""
    excerpts.show_kernel_lines(file, name, first, last)


# ---- figures of the world experiments ---------------------------------------------------------
def plot_scores(S, marks, R, band, source=GOLDEN_SOURCE):
    """Heatmap of score[t, j]; marks: [(r0, [blocks])], the blocks about the topics of the rows
    r0..r0+band-1, each drawn as a red triangle on the first of those rows that can score it
    (block j is complete from row (j+1)R - 1 on); blocks not complete in the band: no mark."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.0))
    im = ax.imshow(S, aspect="auto", cmap="viridis", interpolation="nearest")
    for r0, js in marks:
        y = np.maximum(r0, (np.asarray(js) + 1) * R - 1)  # the first row that scores block j
        ok = y < r0 + band
        ax.plot(np.asarray(js)[ok], y[ok] + 1, "rv", ms=4, clip_on=False)
    ax.set_xlabel("block j")
    ax.set_ylabel("query row t")
    ax.set_title("block scores (red ▼: a block about the band's topics, where it is complete)")
    fig.colorbar(im, ax=ax, label="score")
    _finish(ax, source, legend=False)


def plot_selection(M, kblk, R, source=GOLDEN_SOURCE):
    """What each row reads, block by block (the codes of selection_matrix)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    colors = ["white", "#dddddd", "tab:blue", "tab:orange", "tab:green", "#a6cee3"]
    fig, ax = plt.subplots(figsize=(7, 4.0))
    ax.imshow(
        M, aspect="auto", cmap=ListedColormap(colors), vmin=-0.5, vmax=5.5, interpolation="none"
    )
    names = [
        "complete, skipped",
        "kept by score",
        "latest (always kept)",
        "tail (always seen)",
        "dense row: every complete block",
    ]
    for c, lab in zip(colors[1:], names):
        ax.plot([], [], "s", color=c, label=lab)
    ax.axhline((kblk + 1) * R - 1.5, color="k", lw=0.8, ls="--", label="first selective row")
    ax.set_xlabel("block j")
    ax.set_ylabel("query row t")
    ax.set_title(f"what each row reads (kblk = {kblk}, R = {R})")
    _finish(ax, source)


def plot_recall(budgets, rec, R, T, n_rows, source=GOLDEN_SOURCE):
    """Dense softmax mass kept against the budget, one line per selector."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for (m, r), st in zip(rec.items(), ["k-", "o-", "s--", "x:"]):
        ax.plot(budgets, r, st, label=m)
    frac = [kb * R / T for kb in budgets]
    ax.plot(budgets, frac, color="grey", lw=0.8, label="fraction of tokens kept\n(random's mean)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"budget kblk (blocks of R = {R})")
    ax.set_ylabel("dense softmax mass kept")
    ax.set_title(f"recall of the attention mass, T = {T}, {n_rows} rows x {_NH} heads")
    ax.grid(alpha=0.3)
    _finish(ax, source)


def plot_needle_places(strengths, places, kblks=(4, 16), source=GOLDEN_SOURCE):
    """The needle block's place among the other candidates (1 = best) against its loudness."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.0))
    ax.plot(strengths, places, "o-", label="needle block's place")
    for kb, c in zip(kblks, ("tab:red", "tab:green")):
        ax.axhline(kb - 0.5, color=c, ls="--", lw=1, label=f"kblk = {kb}: kept below this line")
    ax.set_yscale("log")
    ax.set_xlabel("needle raw-key loudness (x a typical key)")
    ax.set_ylabel("place (1 = best, log)")
    ax.set_title("the needle block climbs as the needle gets louder")
    ax.grid(alpha=0.3)
    _finish(ax, source)


# ---- the GPU: rung check, records, time ---------------------------------------------------------
FAMILIES = ("update_block_keys", "block_scores", "select")


def _topic_inputs(T, cfg, nb, rng):
    """Topic-structured raw indexer keys [T, ihd] and queries [nb, inh, ihd] of rows T-nb..T-1:
    score gaps far above float32 rounding, so a GPU selection must equal golden's."""
    R, inh, ihd = cfg.indexer_compress_ratio, cfg.indexer_n_heads, cfg.indexer_head_dim
    topics = rng.standard_normal((32, ihd)).astype(np.float32)
    raw = 2.0 * topics[np.repeat(rng.integers(0, 32, T // R), R)] + rng.standard_normal((T, ihd))
    q = 2.0 * topics[rng.integers(0, 32, (nb, inh))] + rng.standard_normal((nb, inh, ihd))
    zero = np.zeros(ihd, np.float32)
    rows = np.arange(T - nb, T)
    iq = golden.indexer_queries(q, zero, rows, cfg.indexer_rotary_dim, cfg.rope_theta)
    return raw.astype(np.float32), iq


def gpu_rung_check(Ts=(4096, 32768), nb=4, seed=11):
    """On this GPU, at the 27B indexer shape (R 64, budget 2048, 8 heads x 128): every rung of
    the three families against golden. One line per (T, rung): block keys' and scores'
    relative errors, rows whose token list equals golden's."""
    import cupy as cp

    from .. import gpu
    from ..nbutil import relerr

    c = AttnConfig.qwen35_27b()
    R, kblk, rd, theta = c.indexer_compress_ratio, c.kblk, c.indexer_rotary_dim, c.rope_theta
    rng = np.random.default_rng(seed)
    for T in Ts:
        raw, iq = _topic_inputs(T, c, nb, rng)
        kn = (0.1 * rng.standard_normal(c.indexer_head_dim)).astype(np.float32)
        cache = gpu.KVCache(c, max_t=T, kind="q8")
        zeros = cp.zeros((4096, c.nkv, c.head_dim), cp.float32)
        for s in range(0, T, 4096):  # the attention's K/V do not matter here
            cache.append(zeros, zeros, index_k=cp.asarray(raw[s : s + 4096]))
        bkeys = golden.block_keys(raw, np.arange(T // R), R, kn, rd, theta)
        base, q_dev = T - nb, cp.asarray(iq)
        ncs = [(base + b + 1) // R for b in range(nb)]
        ref = [golden.row_selection(base + b, iq[b], bkeys, R, kblk)[0] for b in range(nb)]
        ref_sc = [golden.block_scores(iq[b], bkeys[: ncs[b]]) for b in range(nb)]
        for impl in ("v0", "v1"):
            gpu.update_block_keys(cache, cp.asarray(kn), c, 0, T, impl=impl)
            k_err = relerr(cp.asnumpy(cache.blk_keys[: T // R]), bkeys)
            sc = cp.asnumpy(gpu.block_scores(q_dev, cache, base, impl=impl))
            s_err = max(relerr(sc[b, : ncs[b]], ref_sc[b]) for b in range(nb))
            si, sn, _ = (cp.asnumpy(a) for a in gpu.select_rows(q_dev, cache, base, c, impl=impl))
            same = sum(np.array_equal(si[b, : sn[b]], ref[b]) for b in range(nb))
            print(f"T = {T:6d} {impl}: block keys rel err {k_err:.1e}, scores rel err "
                  f"{s_err:.1e}, rows with golden's token list {same}/{nb}")  # fmt: skip


def recorded_error_samples():
    """{label: |gpu - golden| / max |golden|} per kernel, its recorded ladder runs' samples
    (results/nvidia-h200.npz) pooled over T, and the line saying where they were recorded."""
    from ..nbutil import load_results, load_samples, recorded

    recs = recorded(lambda r: r.get("bench") == "ladder" and r.get("family") in FAMILIES)
    runs, samples = (load_results() or {}).get("runs", []), load_samples()
    errs, Ts = {}, {}
    for r in sorted(recs.runs, key=lambda r: r["shape"]["T"]):
        i, k = runs.index(r), r["kernel"]
        g, d = samples.get(f"{i}_golden"), samples.get(f"{i}_gpu")
        if g is not None and r["family"] != "select":
            e = np.abs(d.astype(np.float64) - g) / max(np.abs(g).max(), 1e-30)
            errs[k], Ts[k] = errs.get(k, []) + [e.ravel()], Ts.get(k, []) + [r["shape"]["T"]]
    label = {k: f"{k} (T = {', '.join(f'{t // 1024}k' for t in v)})" for k, v in Ts.items()}
    return {label[k]: np.concatenate(v) for k, v in errs.items()}, recs.source


def plot_error_hist(errors, source):
    """Log-x histograms of relative errors {label: array}, as fractions of each series' samples;
    exact zeros are counted in the label (a log axis has no place for them) and series equal to
    an earlier one are merged into its label rather than drawn on top of it."""
    import matplotlib.pyplot as plt

    merged = {}
    for lab, v in errors.items():
        v = np.abs(np.ravel(v))
        same = next((k for k, w in merged.items() if np.array_equal(w, v)), None)
        merged[f"{same} = {lab}" if same else lab] = merged.pop(same) if same else v
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    nz = np.concatenate([v[v > 0] for v in merged.values()])
    bins = np.logspace(np.log10(nz.min()), np.log10(nz.max()), 40)
    for k, (lab, v) in enumerate(merged.items()):  # distinct styles: near-equal series show
        zeros = f", {100 * np.mean(v == 0):.0f}% exactly 0" if (v == 0).any() else ""
        st = dict(ls=("-", "--", "-", ":")[k % 4], lw=(1.5, 2.5, 1.0, 2.0)[k % 4])
        w = np.full((v > 0).sum(), 1 / v.size)  # fractions: series of any size side by side
        ax.hist(v[v > 0], bins=bins, weights=w, histtype="step", label=f"{lab}{zeros}", **st)
    ax.set_xscale("log")
    ax.set_xlabel("|ours − reference| / max |reference|")
    ax.set_ylabel("fraction of the samples")
    _finish(ax, source, 7)


def indexer_ladders(live=None):
    """{family: Records} of the three indexer families, as recorded, or (a GPU here) measured
    ONCE and split by family (nbutil.ladder_records would run the same cases per family)."""
    from .. import nbutil

    if not nbutil.live_wanted(live):
        return {f: nbutil.ladder_records(f, live=False) for f in FAMILIES}
    from ..bench.context import Context
    from ..bench.ladder import ladder_cases

    ctx = Context(True)
    with contextlib.redirect_stdout(io.StringIO()):
        for fn, kw in ladder_cases("select"):
            fn(ctx, **kw)
    src = f"measured just now on {ctx.device} (quick bench settings)"
    recs = nbutil.Records(tuple(ctx.runs), ctx.copy_gbps, src, ctx.l2)
    return {f: recs.where(family=f, bench="ladder") for f in FAMILIES}


def by_rung(recs):
    """{rung: its timed runs, T ascending} of one family's records."""
    out = {}
    for r in sorted(recs.runs, key=lambda r: (r.get("rung", 0), r["shape"]["T"])):
        if r.get("median_us"):
            out.setdefault(r.get("rung", 0), []).append(r)
    return out


def plot_against_T(ladders):
    """µs per call against the context length T, one line per (family, rung). Works with any
    number of recorded T (one T: points, and the axis says so)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    Ts = set()
    for fam, recs in ladders.items():
        for rung, rs in by_rung(recs).items():
            Ts |= {r["shape"]["T"] for r in rs}
            names = sorted({r["kernel"] for r in rs})  # select's kernel depends on T: i*
            name = names[0] if len(names) == 1 else os.path.commonprefix(names) + "*"
            x, y = [r["shape"]["T"] for r in rs], [r["median_us"] for r in rs]
            ax.plot(x, y, "o" + ("--" if rung == 0 else "-"), label=f"{fam} rung {rung}: {name}")
    if not Ts:
        ax.text(0.5, 0.5, "no runs: " + next(iter(ladders.values())).source, ha="center")
        return ax.set_axis_off()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    one = f" (one size recorded: T = {min(Ts)})" if len(Ts) == 1 else ""
    ax.set_xlabel("T, tokens in the context" + one)
    ax.set_ylabel("µs per call, nb = 1 (log)")
    ax.set_title("each rung against the context length")
    ax.grid(alpha=0.3)
    _finish(ax, next(iter(ladders.values())).source, 7)


def qsa_parts(recs, kind="q8"):
    """The QSA step's parts per (T, nb) on a cache of `kind` from the indexer stage's records
    (the bench records the selective path on every kind; this notebook reads q8's): block scores,
    select_rows (scores + top-k: two launches), top-k = select_rows - block_scores (not timed
    alone), the selective attention, the whole step (queued, and as graph replay), and dense
    SDPA's time (the peer, timed the same way). [{T, nb, scores, select_rows, topk, attention,
    step, step_graph, dense, dense_graph}], µs."""
    groups = {}
    for r in recs.runs:
        if r.get("median_us") and r["shape"].get("kind") == kind:
            groups.setdefault((r["shape"].get("T"), r["shape"].get("nb")), []).append(r)
    out = []
    for (T, nb), rs in sorted(groups.items()):

        def us(prefix, graph=False, key="median_us", rs=rs):
            hits = [r for r in rs if str(r["kernel"]).startswith(prefix)]
            return next((r.get(key) for r in hits if (r.get("timing") == "graph") == graph), None)

        sc, sel, att, step = (us(k) for k in ("block_scores", "select_rows", "decode_att", "QSA"))
        if sc and sel and att and step:
            out.append(
                dict(
                    T=T, nb=nb, scores=sc, select_rows=sel, topk=sel - sc, attention=att,
                    step=step, step_graph=us("QSA", True), dense=us("QSA", key="peer_median_us"),
                    dense_graph=us("QSA", True, "peer_median_us"),
                )
            )  # fmt: skip
    return out


def plot_qsa_parts(parts, source):
    """Left: the QSA step's parts as shares of the step. Right: the step against dense SDPA."""
    import matplotlib.pyplot as plt

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 2.8), gridspec_kw={"wspace": 0.9})
    if not parts:
        for a in (a0, a1):
            a.text(0.5, 0.5, "no QSA runs:\n" + source, ha="center", va="center", fontsize=8)
            a.set_axis_off()
        return
    labels = [f"T={p['T'] // 1024}k nb={p['nb']}" for p in parts]
    y = np.arange(len(parts))
    left = np.zeros(len(parts))
    names = ("block_scores", "top-k (select_rows\n− block_scores)", "selective attention")
    for key, c, lab in zip(("scores", "topk", "attention"), ("C0", "C9", "C1"), names):
        w = np.array([100 * p[key] / p["step"] for p in parts])
        a0.barh(y, w, left=left, color=c, label=lab)
        left += w
    a0.set_yticks(y, labels)
    a0.set_xlabel("% of the QSA step (queued)")
    a0.set_title("where a QSA step's time goes", fontsize=10)
    for i, p in enumerate(parts):
        a1.barh(i + 0.2, p["step"], 0.4, color="tab:green", label="QSA step" if not i else None)
        if p["dense"]:
            a1.barh(i - 0.2, p["dense"], 0.4, color="0.5", label="dense SDPA" if not i else None)
    a1.set_yticks(y, labels)
    a1.set_xscale("log")
    a1.xaxis.set_minor_formatter(plt.NullFormatter())
    for bar in a1.patches:
        a1.text(bar.get_width() * 1.05, bar.get_y() + 0.2, f"{bar.get_width():.0f} µs", fontsize=7)
    a1.set_xlabel("µs per step, queued (log)")
    a1.set_title("the step against dense attention", fontsize=10)
    _finish(a1, size=7)
    _finish(a0, source, 7)


# ---- exercises ---------------------------------------------------------------------------------
def check_n_visible(fn, R=8, kblk=4, T=300):
    """fn(t, R, kblk) against golden.row_selection's token count for t < T: the rows that differ."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((_INH, _IHD)).astype(np.float32)
    bkeys = rng.standard_normal((T // R + 1, _IHD)).astype(np.float32)
    n_ref = [golden.row_selection(t, q, bkeys, R, kblk)[0].size for t in range(T)]
    bad = [t for t in range(T) if fn(t, R, kblk) != n_ref[t]]
    print("all rows agree with golden" if not bad else f"rows that differ: {bad[:10]}")
    return bad
