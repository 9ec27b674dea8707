"""Helpers of notebooks/03_wht.ipynb (the Walsh–Hadamard transform): the Sylvester matrix, the
butterfly diagram, the outlier and quantization experiments, exact float32 emulations of the
two kernel rungs, the error sweep against float64, the rungs run on a GPU, and the exercises'
checkers. The record printouts and figure pieces it shares with the rope notebook live in
lessons.common and are re-exported here."""

from __future__ import annotations

import numpy as np

from .. import golden, nbutil
from .common import (
    error_strip,
    print_above_floor,
    print_fastest,
    print_peers,
    print_stage,
    recorded_pairs,
    restyle_ladder,
    source_below,
    takeaway,
)

__all__ = [
    "sylvester",
    "plot_butterfly",
    "kurtosis",
    "max_over_rms",
    "outlier_keys",
    "plot_outliers",
    "turbo_roundtrip",
    "quant_errors",
    "group_stats",
    "plot_quantization",
    "wht_f32_passes",
    "wht_v0_f32",
    "CPU_WAYS",
    "sweep_input",
    "error_sweep",
    "run_rungs",
    "plot_wht_errors",
    "rungs_on_example",
    "work_ratio",
    "check_wht",
    # from lessons.common
    "error_strip",
    "print_above_floor",
    "print_fastest",
    "print_peers",
    "print_stage",
    "recorded_pairs",
    "restyle_ladder",
    "takeaway",
]


def sylvester(n):
    """H_n by the doubling construction, as integers (n a power of two)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"n must be a power of two, got {n}")
    h = np.ones((1, 1), np.int64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


PLUS, MINUS = "tab:blue", "tab:red"  # one colour per sign, in both panels of plot_butterfly


def plot_butterfly(n=8):
    """Left: the butterfly's data flow for n (pass h pairs i with i + h: sum up, difference
    down); right: H_n, whose row i is the sign pattern the passes build for output i. Blue is
    + and red is − in both panels."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 3.9), gridspec_kw=dict(width_ratios=[3, 2]))
    stages = int(np.log2(n))
    for s in range(stages):
        h = 1 << s
        for a in (i for i in range(n) if not i & h):
            b = a + h
            for src in (a, b):  # both inputs feed the sum, which lands on a
                a1.plot([s, s + 1], [-src, -a], c=PLUS, lw=1.2)
            a1.plot([s, s + 1], [-a, -b], c=PLUS, lw=1.2)  # a enters b's difference with +
            a1.plot([s, s + 1], [-b, -b], c=MINUS, lw=1.2, ls="--")  # b enters it with −
        a1.text(s + 0.5, 0.8, f"pass h = {h}", ha="center", fontsize=9)
    for s in range(stages + 1):
        a1.scatter([s] * n, -np.arange(n), c="k", s=18, zorder=3)
    a1.set_yticks(-np.arange(n), [f"x[{i}]" for i in range(n)])
    ticks = ["input"] + [f"after h={1 << s}" for s in range(stages)]
    a1.set_xticks(range(stages + 1), ticks[:-1] + [ticks[-1] + f"\n(· 1/√{n})"])
    a1.set_ylim(-n + 0.5, 1.3)
    a1.set_title("butterfly: blue = +, red dashed = − (lower input negated)", fontsize=10)
    hm = sylvester(n)
    a2.imshow(hm, cmap=ListedColormap([MINUS, PLUS]), vmin=-1, vmax=1, alpha=0.45)
    for (r, c), v in np.ndenumerate(hm):
        a2.text(c, r, "+" if v > 0 else "−", ha="center", va="center", fontsize=10)
    a2.set_title(f"H_{n} (Sylvester order): blue = +1, red = −1", fontsize=10)
    a2.set_xticks(range(n))
    a2.set_yticks(range(n))
    fig.tight_layout()
    return fig


def kurtosis(a):
    """Pearson kurtosis E[x⁴] / E[x²]² of all values, centred (3 for a Gaussian)."""
    a = np.asarray(a, np.float64).ravel()
    a = a - a.mean()
    return float(np.mean(a**4) / np.mean(a**2) ** 2)


def max_over_rms(a):
    """Per row max|x| / rms(x), averaged over the rows."""
    a = np.asarray(a, np.float64)
    return float(np.mean(np.abs(a).max(-1) / np.sqrt(np.mean(a**2, -1))))


def outlier_keys(t=1024, d=128, channels=(3, 40, 77, 113), scale=20.0, seed=1):
    """t unit-Gaussian keys of d dims with the given channels multiplied by scale (float32)."""
    keys = np.random.default_rng(seed).standard_normal((t, d)).astype(np.float32)
    keys[:, list(channels)] *= np.float32(scale)
    return keys


def plot_outliers(keys, rot, n_show=64):
    """Top: |keys| before and after the WHT (first n_show keys), each with its own colour
    scale; bottom left: per-channel rms (before as a line over the bars of after); bottom
    right: the distribution of all values (log counts) with a Gaussian of the same energy."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 6), layout="constrained")
    gs = fig.add_gridspec(2, 2)
    for col, (name, a) in enumerate((("keys", keys), ("keys after WHT", rot))):
        ax = fig.add_subplot(gs[0, col])
        im = ax.imshow(np.abs(a[:n_show]), aspect="auto", cmap="magma", vmin=0)
        ax.set(title=f"|{name}|, first {n_show} of {len(a)}", xlabel="channel", ylabel="key")
        fig.colorbar(im, ax=ax, fraction=0.04, label="|value| (own scale)")
    ax = fig.add_subplot(gs[1, 0])
    ch = np.arange(keys.shape[1])
    rms = lambda a: np.sqrt(np.mean(np.asarray(a, np.float64) ** 2, 0))  # noqa: E731
    ax.bar(ch, rms(rot), width=1, label="after WHT", color="tab:blue", alpha=0.6)
    ax.step(ch, rms(keys), where="mid", lw=1.2, label="before", color="tab:orange")
    ax.set(xlabel="channel", ylabel=f"rms over the {len(keys)} keys", title="per-channel rms")
    ax.set_ylim(0, 1.4 * rms(keys).max())  # head room: the legend sits above the bars
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax = fig.add_subplot(gs[1, 1])
    lim = float(np.ceil(np.abs(keys).max() / 10) * 10)
    bins = np.linspace(-lim, lim, 161)
    ax.hist(keys.ravel(), bins=bins, histtype="step", lw=1.4, label="before", color="tab:orange")
    ax.hist(rot.ravel(), bins=bins, histtype="step", lw=1.4, label="after WHT", color="tab:blue")
    sd = float(np.sqrt(np.mean(np.asarray(rot, np.float64) ** 2)))
    xs = np.linspace(-lim, lim, 400)
    gauss = keys.size * (bins[1] - bins[0]) * np.exp(-(xs**2) / (2 * sd**2)) / (sd * 2.5066)
    ax.plot(xs, gauss, "k:", lw=1, label=f"Gaussian, σ = {sd:.2f}")
    ax.set(yscale="log", ylim=(0.5, 3e5), xlabel="value", ylabel="count (log)")
    ax.set_title("distribution of all values")
    ax.legend(fontsize=8)
    fig.text(0.01, -0.02, "computed here by golden.wht", fontsize=7, color="0.35")
    return fig


def turbo_roundtrip(x, bits):
    """The cache's turbo quantizer (groups of 16, one float16 scale each) and back."""
    codes, d = golden.turbo_quantize(x, bits)  # codes [T, d/16, 2·bits], d [T, d/16]
    return golden.turbo_dequantize(codes, d, bits)  # [T, d]


def quant_errors(keys, bits=(2, 3, 4, 8)):
    """{bits: (rel. error quantizing the keys, rel. error with WHT, quantize, WHT back)}."""
    rot = golden.wht(keys)
    out = {}
    for b in bits:
        plain = nbutil.relerr(turbo_roundtrip(keys, b), keys)
        rotated = nbutil.relerr(golden.wht(turbo_roundtrip(rot, b)), keys)
        out[b] = (plain, rotated)
    return out


def group_stats(x, xq, g=16):
    """Per group of g values: (max/rms of x, rms error of xq / rms of x)."""
    xg = np.asarray(x, np.float64).reshape(-1, g)
    eg = (np.asarray(xq, np.float64) - np.asarray(x, np.float64)).reshape(-1, g)
    rms = np.sqrt(np.mean(xg**2, 1))
    return np.abs(xg).max(1) / rms, np.sqrt(np.mean(eg**2, 1)) / rms


def plot_quantization(keys, errs, bits=4):
    """Left: each group's relative error against its max/rms at `bits`, with the uniform
    quantizer's estimate; right: the keys' relative error against bits, with and without the
    rotation (errs from quant_errors)."""
    import matplotlib.pyplot as plt

    rot = golden.wht(keys)
    mr0, er0 = group_stats(keys, turbo_roundtrip(keys, bits))
    mr1, er1 = group_stats(rot, turbo_roundtrip(rot, bits))
    levels = ((1 << bits) - 1) / 2
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 3.7))
    a1.scatter(mr0, er0, s=2, alpha=0.3, label="keys", color="tab:orange")
    a1.scatter(mr1, er1, s=2, alpha=0.3, label="after WHT", color="tab:blue")
    m = np.linspace(1, 4, 50)
    a1.plot(m, m / (levels * np.sqrt(12)), "k--", lw=1, label=f"max/rms / ({levels}·√12)")
    a1.set(xlabel="group max/rms (16 values)", ylabel="group rms error / group rms")
    a1.set_title(f"{bits}-bit: a group's error follows its max/rms", fontsize=10)
    a1.legend(fontsize=8, markerscale=4)
    b = np.array(sorted(errs))
    a2.semilogy(b, [errs[k][0] for k in b], "o-", color="tab:orange", label="quantize the keys")
    a2.semilogy(b, [errs[k][1] for k in b], "s--", color="tab:blue", label="WHT, quantize, back")
    a2.set_xticks(b)
    a2.set(xlabel="bits per value", ylabel="relative error of the keys")
    a2.set_title("turbo-n quantizer on the keys", fontsize=10)
    a2.legend(fontsize=8)
    fig.text(0.01, -0.02, "computed here by golden.turbo_quantize", fontsize=7, color="0.35")
    fig.tight_layout()
    return fig


def wht_f32_passes(x):
    """What v1 computes, in numpy float32: butterfly passes h = 1, 2, 4, ... each rounded to
    float32, then one multiply by float32(1 / float32(sqrt(n))) (the kernel's scale)."""
    x = np.asarray(x, np.float32)
    n = x.shape[-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        y = np.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), axis=2)
        h *= 2
    scale = np.float32(1) / np.sqrt(np.float32(n))
    return (y.reshape(x.shape) * scale).astype(np.float32)


def wht_v0_f32(x):
    """What v0 computes, in numpy float32: every output one sequential chain acc += ±x_j for
    j = 0, 1, ..., n − 1 (each add rounded), then the same scale as v1."""
    x = np.asarray(x, np.float32)
    n = x.shape[-1]
    xr = x.reshape(-1, n)
    h = sylvester(n).astype(np.float32)
    acc = np.zeros_like(xr)
    for j in range(n):
        acc += h[j][None, :] * xr[:, j : j + 1]  # term j of every output, in order
    scale = np.float32(1) / np.sqrt(np.float32(n))
    return (acc * scale).reshape(x.shape)


def sweep_input(n, rows=256, seed=2):
    """rows × n unit Gaussians with n/32 channels (at least one) scaled by 20: sums that mix
    values of very different size."""
    rng = np.random.default_rng(seed + n)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[:, rng.choice(n, max(1, n // 32), replace=False)] *= 20
    return x


def _truth(x):
    n = x.shape[-1]
    return np.asarray(x, np.float64) @ sylvester(n).T / np.sqrt(n)


CPU_WAYS = {
    "golden (float64, rounded once)": golden.wht,
    "CPU: float32 passes (v1's arithmetic)": wht_f32_passes,
    "CPU: float32 sums in order (v0's)": wht_v0_f32,
}


def error_sweep(sizes, strip_n=256):
    """Norm-wise relative error against float64 of each CPU way at each n ({label: [errors]}),
    and the element errors of each at n = strip_n ({label: array})."""
    curves, strip = {k: [] for k in CPU_WAYS}, {}
    for n in sizes:
        x = sweep_input(n)
        ref = _truth(x)
        for label, fn in CPU_WAYS.items():
            y = fn(x)
            curves[label].append(nbutil.relerr(y, ref))
            if n == strip_n:
                strip[label.split(" (")[0] + " − float64"] = y - ref
    return curves, strip


def run_rungs(sizes, strip_n=256):
    """Every rung of gpu.wht on sweep_input(n) for each n (needs a GPU): ({label: [rel. error
    vs float64]}, {label: element errors at strip_n}); a label notes when the rung's output is
    bit-identical to its CPU emulation at every n."""
    import cupy as cp

    from ..gpu.wht import RUNGS, wht

    emul = {"v0": wht_v0_f32, "v1": wht_f32_passes}
    curves, strip = {}, {}
    for i, impl in enumerate(RUNGS["wht"]):
        errs, same = [], True
        for n in sizes:
            x = sweep_input(n)
            out = cp.full(x.shape, cp.nan, cp.float32)  # poisoned: an unwritten element shows
            y = wht(cp.asarray(x), out=out, impl=impl).get()
            errs.append(nbutil.relerr(y, _truth(x)))
            same = same and impl in emul and np.array_equal(y, emul[impl](x))
            if n == strip_n:
                strip[f"GPU rung {i} − float64"] = y - _truth(x)
        curves[
            f"GPU rung {i} ({impl})" + (", bit-identical to its CPU emulation" if same else "")
        ] = errs
    return curves, strip


def plot_wht_errors(sizes, curves, strip, source, strip_n=256):
    """Left: relative error against n (CPU ways as wide pale lines, GPU rungs as markers on
    top, so identical ones stay visible); right: error_strip of the elements at strip_n."""
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.9), gridspec_kw=dict(width_ratios=[5, 4]))
    marks = [dict(marker="o", ms=9, mfc="none"), dict(marker="x", ms=7), dict(marker="+", ms=9)]
    n_gpu = 0
    for label, v in curves.items():
        style = dict(lw=4, alpha=0.45)
        if label.startswith("GPU"):
            style = dict(ls="none", **marks[n_gpu % len(marks)])
            n_gpu += 1
        a1.plot(sizes, v, label=label, **style)
    a1.plot(sizes, np.log2(sizes) / 2 * 2.0**-24, "k:", lw=1, label="log2(n)/2 · 2⁻²⁴")
    a1.set(xscale="log", yscale="log", xlabel="n", ylabel="‖out − float64‖ / ‖float64‖")
    a1.set_xscale("log", base=2)
    a1.set_title("error against the float64 truth, by n", fontsize=10)
    a1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.2), ncol=2)
    error_strip(a2, strip, f"n = {strip_n}, every element: golden and GPU side by side")
    fig.tight_layout()
    source_below(fig, a1, f"CPU rows computed here; GPU rows {source}")
    return fig


def rungs_on_example(x):
    """Each rung of gpu.wht on x (float32 [rows, n]): on a GPU, run now, max |gpu − golden|;
    else each rung's recorded error (rel_err, norm-wise against golden) at the bench's size."""
    from ..gpu.wht import RUNGS, rung_kernel

    n = x.shape[-1]
    if not nbutil.gpu_available():
        recs = nbutil.recorded(lambda r: r.get("family") == "wht")
        print("no GPU here; " + recs.source)
        for r in sorted(recs.runs, key=lambda r: (r["bytes"], r["rung"])):
            sh = r["shape"]
            print(
                f"  rows {sh['rows']:>6} × n {sh['n']}  rung {r['rung']}: {r['kernel']:<14}"
                f"  rel_err {r['rel_err']:.1e}"
            )
        return
    import cupy as cp

    from ..gpu.wht import wht

    ref = golden.wht(x)
    for i, impl in enumerate(RUNGS["wht"]):
        y = wht(cp.asarray(x), impl=impl).get()
        name = rung_kernel("wht", impl, n=n)
        print(f"  rung {i} ({impl}): {name:<14} max |gpu − golden| = {np.abs(y - ref).max():.1e}")


def work_ratio(ladder):
    """v0's additions per row (n²) against the butterfly's (n log2 n), beside the measured time
    ratio of rung 0 to rung 1 at each recorded size."""
    by = {}
    for r in ladder.runs:
        by.setdefault((r["shape"]["rows"], r["shape"]["n"]), {})[r["rung"]] = r["median_us"]
    for (rows, n), t in sorted(by.items()):
        work = n / np.log2(n)
        timed = f"{t[0] / t[1]:.0f}x" if 0 in t and 1 in t else "not both recorded"
        print(
            f"rows {rows:>6}, n {n}: v0 does {work:.0f}x the additions; it takes {timed} v1's time"
        )


def check_wht(fn, sizes=(2, 4, 16, 64), seed=0):
    """True when fn(x) equals golden.wht(x) for one float64 vector of each size (to 1e-6 of
    its norm): exercise 1's checker."""
    rng = np.random.default_rng(seed)
    for n in sizes:
        x = rng.standard_normal(n)
        got = np.asarray(fn(x.copy()), np.float64)
        if got.shape != (n,) or not np.allclose(got, golden.wht(x), atol=1e-6 * np.linalg.norm(x)):
            print(f"differs from golden.wht at n = {n}")
            return False
    return True
