"""Drawings and printouts of notebooks/06_indexer.ipynb (the QSA indexer): kernel lines, the
score heatmap, what each row reads, recall against the budget, the needle's place and the
slider's figure, the error histograms, each rung against the context length and where a QSA
step's time goes. What the figures show (the topic world, the selection, recall, the needle,
the float64 references, the GPU rung check, the records' samples and parts) is computed in the
notebook."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np

from .common import readable_log

__all__ = """
GOLDEN_SOURCE print_recorded_errors plot_scores plot_selection plot_recall
plot_needle_places plot_needle_view plot_error_hist plot_against_T print_qsa_parts plot_qsa_parts
""".split()

GOLDEN_SOURCE = "golden model on this CPU (synthetic topic world, fixed seeds)"


def _finish(ax, source=None, size=8, legend=True):
    """Legend outside the data; the data's source under the figure (below its x label)."""
    if legend:
        ax.legend(fontsize=size, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if source:
        kw = dict(textcoords="offset points", fontsize=7, color="0.35", va="top")
        xy = ("figure fraction", ax.xaxis.label)
        ax.annotate(source, (0.01, 0), xycoords=xy, xytext=(0, -3), **kw)


def print_recorded_errors(ladders):
    """Each family's recorded runs with the error the bench measured against golden (select:
    the tokens differing), then where they were recorded."""
    for fam, recs in ladders.items():
        what = "tokens differing" if fam == "select" else "rel err"
        for r in sorted(recs.runs, key=lambda r: (r["shape"]["T"], r["rung"])):
            print(
                f"{fam:<18} rung {r['rung']} {r['kernel']:<22} T = {r['shape']['T']:6d}: "
                f"{what} {r['rel_err']:.1e}"
            )
    print(ladders["select"].source)


def plot_scores(S, marks, R, band, source=GOLDEN_SOURCE):
    """Heatmap of score[t, j]; marks: [(r0, [blocks])], the blocks about the topics of the rows
    r0..r0+band-1, each drawn as a red triangle on the first of those rows that can score it
    (block j is complete from row (j+1)R - 1 on); blocks not complete in the band: no mark."""
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


def plot_recall(budgets, rec, R, T, n_rows, n_heads, source=GOLDEN_SOURCE):
    """Dense softmax mass kept against the budget, one line per selector."""
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for (m, r), st in zip(rec.items(), ["k-", "o-", "s--", "x:"]):
        ax.plot(budgets, r, st, label=m)
    frac = [kb * R / T for kb in budgets]
    ax.plot(budgets, frac, color="grey", lw=0.8, label="fraction of tokens kept\n(random's mean)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"budget kblk (blocks of R = {R})")
    ax.set_ylabel("dense softmax mass kept")
    ax.set_title(f"recall of the attention mass, T = {T}, {n_rows} rows x {n_heads} heads")
    ax.grid(alpha=0.3)
    _finish(ax, source)


def plot_needle_places(strengths, places, kblks=(4, 16), source=GOLDEN_SOURCE):
    """The needle block's place among the other candidates (1 = best) against its loudness."""
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


def plot_needle_view(s, T, R, kblk, pos, strength, ax=None):
    """The slider's figure: the last row's block scores (x = the block's first token), the kept
    blocks, the needle's block at pos, and in the title what the row keeps (s: the row's story,
    with its scores, blocks, found, place, mass and cos, of a T-token world whose needle has
    loudness strength)."""
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
    ax.set_xlim(0, T)
    ax.set_xlabel("token (each bar: one block of R tokens)")
    ax.set_ylabel("block score")
    verdict = "kept" if s["found"] else "MISSED"
    where = "always kept" if s["place"] is None else f"place {s['place']}"
    ax.set_title(
        f"R = {R}, kblk = {kblk} blocks ({kblk * R} tokens): needle block {verdict} "
        f"({where}), mass kept {s['mass']:.2f}, cos(out, u) {s['cos']:.2f}",
        fontsize=9,
    )
    _finish(ax, GOLDEN_SOURCE + f"; needle loudness {strength:g}")


def plot_error_hist(errors, source):
    """Log-x histograms of relative errors {label: array}, as fractions of each series' samples;
    exact zeros are counted in the label (a log axis has no place for them) and series equal to
    an earlier one are merged into its label rather than drawn on top of it."""
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
        st = dict(ls=("-", "--", "-", ":")[k % 4], lw=(1.5, 2.5, 3.0, 1.5)[k % 4])
        w = np.full((v > 0).sum(), 1 / v.size)  # fractions: series of any size side by side
        ax.hist(v[v > 0], bins=bins, weights=w, histtype="step", label=f"{lab}{zeros}", **st)
    ax.set_xscale("log")
    ax.set_xlabel("|ours − reference| / max |reference|")
    ax.set_ylabel("fraction of the samples")
    _finish(ax, source, 7)


def plot_against_T(rungs, source):
    """µs per call against the context length T, one line per (family, rung); rungs = {family:
    {rung: its timed runs, T ascending}}. Works with any number of recorded T (one T: points,
    and the axis says so)."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    Ts = set()
    for fam, by_rung in rungs.items():
        for rung, rs in by_rung.items():
            Ts |= {r["shape"]["T"] for r in rs}
            names = sorted({r["kernel"] for r in rs})  # select's kernel depends on T: i*
            name = names[0] if len(names) == 1 else os.path.commonprefix(names) + "*"
            x, y = [r["shape"]["T"] for r in rs], [r["median_us"] for r in rs]
            ax.plot(x, y, "o" + ("--" if rung == 0 else "-"), label=f"{fam} rung {rung}: {name}")
    if not Ts:
        ax.text(0.5, 0.5, "no runs: " + source, ha="center")
        return ax.set_axis_off()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    one = f" (one size recorded: T = {min(Ts)})" if len(Ts) == 1 else ""
    ax.set_xlabel("T, tokens in the context" + one)
    ax.set_ylabel("µs per call, nb = 1 (log)")
    ax.set_title("each rung against the context length")
    ax.grid(alpha=0.3)
    _finish(ax, source, 7)


def print_qsa_parts(parts, lad):
    """Each (T, nb)'s QSA step and its parts (the dicts of the notebook's qsa_parts), beside the
    ladder's select and block_scores at nb = 1 (lad = {family: {T: µs}}) and dense SDPA."""
    for p in parts:
        s = p["step"]
        share = {
            k: f"{p[k]:.1f} µs ({100 * p[k] / s:.0f}%)" for k in ("scores", "topk", "attention")
        }
        print(
            f"T = {p['T']}, nb = {p['nb']}: QSA step {s:.1f} µs (queued); its parts:\n"
            f"   block_scores {share['scores']} + top-k (select_rows {p['select_rows']:.1f} − "
            f"block_scores) {share['topk']} + selective attention {share['attention']}\n"
            f"   = {p['select_rows'] + p['attention']:.1f} µs, the parts timed apart "
            f"({100 * (p['select_rows'] + p['attention']) / s:.0f}% of the step timed whole)"
        )
        if p["nb"] == 1 and p["T"] in lad["select"]:
            ls, lb = lad["select"][p["T"]], lad["block_scores"][p["T"]]
            print(
                f"   the ladder at T = {p['T']}: select (= select_rows) {ls:.1f} − block_scores "
                f"{lb:.1f} = top-k {ls - lb:.1f} µs"
            )
        graph = ("graph replay", p["step_graph"], p["dense_graph"])
        for how, ours, dense in (("queued", s, p["dense"]), graph):
            if ours and dense:
                print(
                    f"   {how}: dense SDPA {dense:.1f} µs, the QSA step {dense / ours:.1f}x faster"
                )


def plot_qsa_parts(parts, source):
    """Left: the QSA step's parts as shares of the step. Right: the step against dense SDPA."""
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
    readable_log(a1.xaxis)  # labels at 1-2-5 steps; room on the right for the bars' labels
    a1.set_xlim(right=2 * max(bar.get_width() for bar in a1.patches))
    for bar in a1.patches:
        a1.text(bar.get_width() * 1.05, bar.get_y() + 0.2, f"{bar.get_width():.0f} µs", fontsize=7)
    a1.set_xlabel("µs per step, queued (log)")
    a1.set_title("the step against dense attention", fontsize=10)
    _finish(a1, size=7)
    _finish(a0, source, 7)
