"""Launch each kernel that misses its performance target once, between
cudaProfilerStart/Stop, so Nsight Compute profiles exactly those launches (warm-up and
compilation happen outside):

    ncu --clock-control none --profile-from-start off --set full -o prof \\
        python3 -m qwenref.dev.profile_kernels [--only attention,qsa,rope,append]

Shapes are the bench's (Qwen3.5-27B attention: 24 q heads, 4 kv heads, head_dim 256; q8 cache;
indexer R 64, budget 2048, 8 heads x 128). Inputs are random (never zeros).
docs/tuning-log.md reads the profiles.
"""

from __future__ import annotations

import argparse

import numpy as np

from ..bench.inputs import dense_cfg, qwen_cfg, randn, random_q8_caches

PARTS = ("attention", "qsa", "rope", "append")


def _randn(cp, shape, scale=1.0):
    """Normal values without outliers (the profiles are of typical data)."""
    return randn(cp, shape, scale, outliers=False)


def _launches(cp, parts):
    """[(label, fn)]: every fn launched once for warm-up, then once under the profiler."""
    from .. import gpu

    cfg, dense = qwen_cfg(), dense_cfg()
    nh, nkv, hd = cfg.nh, cfg.nkv, cfg.head_dim
    todo = []
    if "attention" in parts:
        for T, nb in ((32768, 1), (131072, 1), (131072, 4)):
            cache = random_q8_caches(dense, T, 1)[0]  # random codes and scales
            q = _randn(cp, (nb, nh, hd), 0.6)
            todo.append(
                (
                    f"decode q8 T={T} nb={nb}",
                    lambda q=q, c=cache, T=T, nb=nb: gpu.decode_attention(q, c, T - nb),
                )
            )
    if "qsa" in parts:
        T, nb = 131072, 1
        cache = gpu.KVCache(cfg, max_t=T, kind="q8")
        for t0 in range(0, T, 16384):
            cache.append(
                _randn(cp, (16384, nkv, hd)),
                _randn(cp, (16384, nkv, hd)),
                index_k=_randn(cp, (16384, cfg.indexer_head_dim)),
            )
        gpu.update_block_keys(cache, _randn(cp, (cfg.indexer_head_dim,), 0.1), cfg, 0, T)
        iq = _randn(cp, (nb, cfg.indexer_n_heads, cfg.indexer_head_dim))
        q = _randn(cp, (nb, nh, hd), 2.0)

        def qsa(c=cache, iq=iq, q=q, base=T - nb):
            idx, n, _ = gpu.select_rows(iq, c, base, cfg)
            gpu.decode_attention(q, c, base, sel_idx=idx, sel_n=n)

        todo.append((f"QSA T={T} nb={nb}", qsa))
    if "rope" in parts:
        nb = 4096
        qg, k = _randn(cp, (nb, nh, 2 * hd)), _randn(cp, (nb, nkv, hd))
        qw, kw = _randn(cp, (hd,), 0.1), _randn(cp, (hd,), 0.1)
        pos = cp.asarray(np.random.default_rng(1).integers(0, 131072, nb).astype(np.int32))
        todo.append(
            (
                f"qk_norm_rope nb={nb}",
                lambda: gpu.qk_norm_rope(qg, k, qw, kw, pos, cfg.rotary_dim, cfg.rope_theta, 1e-6),
            )
        )
    if "append" in parts:
        nb = 4096
        cache = gpu.KVCache(dense, max_t=4 * nb, kind="q8")
        kk, vv = _randn(cp, (nb, nkv, hd)), _randn(cp, (nb, nkv, hd))

        def append(c=cache):
            if len(c) + nb > c.max_t:
                c.length = 0
            c.append(kk, vv)

        todo.append((f"KVCache.append q8 nb={nb}", append))
    return todo


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma-separated from {PARTS}")
    args = ap.parse_args(argv)
    parts = [p for p in args.only.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"--only: unknown part(s) {bad}; choose from {PARTS}")
    from ..gpu._runtime import cupy

    cp = cupy()
    todo = _launches(cp, parts)
    for _, fn in todo:  # compile + warm up outside the profiled range
        fn()
    cp.cuda.Device().synchronize()
    cp.cuda.runtime.profilerStart()
    for label, fn in todo:
        print("profiling:", label, flush=True)
        fn()
        cp.cuda.Device().synchronize()
    cp.cuda.runtime.profilerStop()


if __name__ == "__main__":
    main()
