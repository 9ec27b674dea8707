"""Time decode attention on the GPU: v1 (CUDA cores) vs mma (tensor cores) partials, the whole
decode (partials + combine), and torch SDPA (bf16, GQA) as the peer, against a >= 1 GiB
device-to-device copy measured in the same run. Writes tune_attention<TAG>.json into --out (a
folder, default the current one) and prints a table.

    python -m qwenref.dev.tune_attention [--T 4096,32768,131072] [--nb 1,4] [--reps 21]
                                         [--opts -DMMA_NSTAGE=3,...] [--no-sdpa] [--floor]
                                         [--tag TAG] [--out DIR]

Shape: the Qwen3.5-27B full-attention layer (24 q heads, 4 kv heads, head_dim 256), q8 cache.
Timing (qwenref.timing): every measured launch is one of a CUDA graph of launches rotating over
enough caches to exceed 3x the L2 (>= 2 caches, random data, never zeros); the graph is replayed
`reps` times, each replay timed with CUDA events; time per launch = median replay time /
launches (graph_us; the whole decode also queued, queued_us). SDPA is timed the same way
(torch_graph_us; queued when its capture fails).
Bytes counted (the fewest a kernel must move): K/V int8 + fp16 scales of the T visible tokens,
q and the final output (f32); SDPA: bf16 K/V, q and out.
--floor adds, per T and nb, one launch of kernels_cuda/stream.cu's read-only stream over the
same number of bytes (timing.floor_us), queued and as graph replays: what a single launch of
that size can reach at best.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np

from .. import timing
from ..bench.inputs import random_q8_caches


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", default="4096,32768,131072")
    ap.add_argument("--nb", default="1,4")
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument(
        "--opts",
        default="",
        help="comma-separated extra NVRTC options for the "
        "partials kernels (options= of gpu.attention), e.g. -DMMA_NSTAGE=3",
    )
    ap.add_argument("--splits", default="auto,x2", help="mma split counts: auto, x2, x0.5, or ints")
    ap.add_argument("--no-sdpa", action="store_true")
    ap.add_argument("--floor", action="store_true", help="time a read-only stream of the bytes")
    ap.add_argument("--tag", default="", help="appended to the JSON file's name")
    ap.add_argument("--out", default=".", help="folder the JSON file goes into (default: .)")
    args = ap.parse_args(argv)

    import qwenref
    import qwenref.gpu.attention as A
    from qwenref.gpu._runtime import cupy
    from qwenref.gpu.attention_plan import plan_kernel

    cp = cupy()
    opts = tuple(o for o in args.opts.split(",") if o)  # passed to every call as options=
    out_dir = args.out
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    l2 = timing.l2_bytes()
    res = {
        "device": timing.device_name(),
        "sm": props["multiProcessorCount"],
        "l2": l2,
        "opts": list(opts),
        "rows": [],
    }
    bw = timing.copy_gbps(batches=args.reps) * 1e9  # bytes read + written per second
    res["copy_Bps"] = bw
    print(f"copy: {bw / 1e12:.3f} TB/s (1 GiB, {2 * (1 << 30) / bw * 1e6:.0f} us)", flush=True)

    cfg = qwenref.AttnConfig(
        hidden_size=5120,
        num_attention_heads=24,
        num_key_value_heads=4,
        head_dim=256,
        intermediate_size=128,
    )
    nh, nkv, hd = cfg.nh, cfg.nkv, cfg.head_dim
    Ts = [int(x) for x in args.T.split(",")]
    nbs = [int(x) for x in args.nb.split(",")]
    torch = None
    if not args.no_sdpa:
        try:
            import torch
            import torch.nn.functional as F
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except Exception as e:  # noqa: BLE001
            print("torch unavailable:", e)
            torch = None

    for T in Ts:
        kv_bytes = 2 * T * nkv * hd + 2 * T * nkv * (hd // 32) * 2
        n_c = max(2, math.ceil(3 * l2 / kv_bytes))
        caches = random_q8_caches(cfg, T, n_c)
        for nb in nbs:
            base_pos = T - nb
            q = cp.random.standard_normal((nb, nh, hd), dtype=cp.float32) * 0.6
            out = cp.empty((nb, nh, hd), cp.float32)
            nbytes = kv_bytes + 2 * nb * nh * hd * 4
            row = {"T": T, "nb": nb, "bytes": nbytes, "caches": n_c}
            ideal = nbytes / bw
            row["copy_time_us"] = ideal * 1e6
            if args.floor:
                fl = timing.floor_us(nbytes, math.ceil(3 * l2 / nbytes), args.reps, graph_calls=1)
                # graph replays like the rows below; the queued time when capture failed
                t = (fl.graph_us if fl.graph_us is not None else fl.us) * 1e-6
                mode = fl.graph_mode if fl.graph_us is not None else f"queued; {fl.graph_mode}"
                row["read_floor"] = {
                    "us": t * 1e6,
                    "mode": mode,
                    "pct_copy": 100 * ideal / t,
                    "queued_us": fl.us,
                }
                print(
                    f"T={T:6d} nb={nb} {'read_floor':12s}        {t * 1e6:8.1f} us  "
                    f"{100 * ideal / t:5.1f}% of copy  [{mode}]; queued {fl.us:8.1f} us",
                    flush=True,
                )

            def run(name, impl, S):
                m = cp.empty((nb, S, nh), cp.float32)
                l = cp.empty((nb, S, nh), cp.float32)
                o = cp.empty((nb, S, nh, hd), cp.float32)
                calls_p = [
                    lambda c=c: A.attn_partials(
                        q, c, base_pos, S, m_out=m, l_out=l, o_out=o, impl=impl, options=opts
                    )
                    for c in caches
                ]
                g = timing.graph_us(calls_p, args.reps)
                t, sd, mode = g.us * 1e-6, g.sd_us * 1e-6, g.mode
                row[name] = {
                    "us": t * 1e6,
                    "sd_us": sd * 1e6,
                    "S": S,
                    "mode": mode,
                    "pct_copy": 100 * ideal / t,
                }
                print(
                    f"T={T:6d} nb={nb} {name:12s} S={S:4d} {t * 1e6:8.1f} us  "
                    f"{nbytes / t / 1e12:.2f} TB/s  {100 * ideal / t:5.1f}% of copy  [{mode}]",
                    flush=True,
                )
                return m, l, o

            # v1 with its own split count
            S1 = A.plan(caches[0], nb, base_pos=base_pos, impl="v1", options=opts).n_splits
            run("v1", "v1", S1)
            pm = A.plan(caches[0], nb, base_pos=base_pos, impl="mma", options=opts)
            Sa = pm.n_splits
            row["mma_kernel"] = pm.kernel
            row["mma_threads"] = pm.threads
            row["mma_regs"] = int(getattr(plan_kernel(pm), "num_regs", -1))
            row["mma_smem"] = pm.smem
            chunks = -(-T // 32)
            for sp in args.splits.split(","):
                if sp == "auto":
                    S = Sa
                elif sp.startswith("x"):
                    S = max(1, min(int(round(Sa * float(sp[1:]))), chunks, A.MAX_SPLITS))
                else:
                    S = int(sp)
                m, l, o = run(f"mma_{sp}", "mma", S)
            # whole decode (partials + combine) on the mma path with its auto split count
            m = cp.empty((nb, Sa, nh), cp.float32)
            l = cp.empty((nb, Sa, nh), cp.float32)
            o = cp.empty((nb, Sa, nh, hd), cp.float32)
            # (graph replay, and queued launches: the bench's method)
            calls = [
                lambda c=c: A.decode_attention(q, c, base_pos, out=out, partials=(m, l, o), plan=pm)
                for c in caches
            ]
            g = timing.graph_us(calls, args.reps)
            t, mode = g.us * 1e-6, g.mode
            tq = timing.queued_us(lambda i: calls[i](), n_rot=len(calls)).us * 1e-6
            row["decode_mma"] = {
                "us": t * 1e6,
                "S": Sa,
                "mode": mode,
                "pct_copy": 100 * ideal / t,
                "queued_us": tq * 1e6,
            }
            print(
                f"T={T:6d} nb={nb} {'decode_mma':12s} S={Sa:4d} {t * 1e6:8.1f} us  "
                f"{100 * ideal / t:5.1f}% of copy  [{mode}]; queued {tq * 1e6:8.1f} us",
                flush=True,
            )
            # mma vs v1 agreement on this data (sanity, not a test)
            a = cp.asnumpy(A.decode_attention(q, caches[0], base_pos, plan=pm))
            b = cp.asnumpy(
                A.decode_attention(q, caches[0], base_pos, n_splits=S1, impl="v1", options=opts)
            )
            row["mma_vs_v1_maxrel"] = float(np.abs(a - b).max() / max(1e-30, np.abs(b).max()))
            res["rows"].append(row)

            if torch is not None:
                try:
                    sd_bytes = 2 * T * nkv * hd * 2 + 2 * nb * nh * hd * 2
                    ntc = max(2, math.ceil(3 * l2 / (2 * T * nkv * hd * 2)))
                    Ks = [
                        torch.randn(1, nkv, T, hd, device="cuda", dtype=torch.bfloat16)
                        for _ in range(ntc)
                    ]
                    Vs = [
                        torch.randn(1, nkv, T, hd, device="cuda", dtype=torch.bfloat16)
                        for _ in range(ntc)
                    ]
                    qt = torch.randn(1, nh, nb, hd, device="cuda", dtype=torch.bfloat16)
                    best = None

                    def sdpa(i):
                        return F.scaled_dot_product_attention(
                            qt, Ks[i % ntc], Vs[i % ntc], enable_gqa=True
                        )

                    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                        try:
                            with sdpa_kernel([be]):
                                try:
                                    us = timing.torch_graph_us(sdpa, ntc, args.reps)
                                    mode = "graph"
                                except Exception as e:  # noqa: BLE001
                                    us = timing.queued_us(sdpa, ntc, args.reps).us
                                    mode = f"queued ({type(e).__name__})"
                                t = us * 1e-6
                                name = str(be).split(".")[-1]
                                row[f"sdpa_{name}"] = {"us": us, "mode": mode}
                                print(
                                    f"T={T:6d} nb={nb} sdpa {name:16s} {us:8.1f} us  "
                                    f"{sd_bytes / t / 1e12:.2f} TB/s [{mode}]",
                                    flush=True,
                                )
                                if best is None or t < best:
                                    best = t
                        except Exception as e:  # noqa: BLE001
                            print(f"T={T} nb={nb} sdpa {be}: failed: {str(e)[:200]}", flush=True)
                    row["sdpa_best_us"] = None if best is None else best * 1e6
                    del Ks, Vs
                    torch.cuda.empty_cache()
                except Exception as e:  # noqa: BLE001
                    print("sdpa failed:", str(e)[:300], flush=True)
        caches = None
        cp.get_default_memory_pool().free_all_blocks()

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"tune_attention{args.tag}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"\ncopy {bw / 1e12:.3f} TB/s   (times in us; % = copy-time of the bytes / time)")
    print(
        f"{'T':>7} {'nb':>2} {'copy':>7} {'v1':>8} {'mma':>8} {'%':>5} {'mma_x2':>8} "
        f"{'decode':>8} {'sdpa':>8} {'mma/v1':>7}"
    )
    for r in res["rows"]:
        ma = r.get("mma_auto", {}).get("us", float("nan"))
        mx = r.get("mma_x2", {}).get("us", float("nan"))
        print(
            f"{r['T']:7d} {r['nb']:2d} {r['copy_time_us']:7.1f} {r['v1']['us']:8.1f} {ma:8.1f} "
            f"{100 * r['copy_time_us'] / ma:5.1f} {mx:8.1f} {r['decode_mma']['us']:8.1f} "
            f"{(r.get('sdpa_best_us') or float('nan')):8.1f} {r['mma_vs_v1_maxrel']:7.1e}"
        )
    for T in Ts:
        rr = {r["nb"]: r for r in res["rows"] if r["T"] == T}
        if 1 in rr and 4 in rr:
            print(f"T={T}: mma nb4/nb1 = {rr[4]['mma_auto']['us'] / rr[1]['mma_auto']['us']:.2f}")
    return res


if __name__ == "__main__":
    main()
