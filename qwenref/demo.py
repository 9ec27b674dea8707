"""A short end-to-end run of the golden model, printing what it computed.

    python -m qwenref.demo [--decode N] [--kinds f32,q8,...]

Writes a random tiny checkpoint, loads it back, then runs one full-attention layer over a
40-token prefill and a few decode steps once per KV-cache kind. Every kind sees the same
inputs, so its output's distance from the f32 cache's is the error that cache format costs.
CPU only, a few seconds; it uses only the public API (README.md), so it doubles as a smoke test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np

import qwenref
from qwenref import golden

# every cache kind, with one of the three bf16-K kinds
DEFAULT_KINDS = tuple(k for k in golden.CACHE_KINDS if not k.startswith("bf16k-")) + (
    "bf16k-turbo3v",
)
PREFILL = 40  # with tiny()'s indexer (R 8, budget 32) row 39 is the first selective row


def _relerr(a, ref):
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def run_kind(layer, cfg, x, kind, n_prefill, max_t):
    """Prefill x[:n_prefill] in one forward, then decode the rest one token per forward.
    Returns (outputs [len(x), hidden], cache)."""
    cache = golden.KVCache(cfg, max_t=max_t, kind=kind)
    ys = [layer.forward(x[:n_prefill], base_pos=0, cache=cache)]
    for t in range(n_prefill, len(x)):
        ys.append(layer.forward(x[t : t + 1], base_pos=len(cache), cache=cache))
    return np.concatenate(ys), cache


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m qwenref.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--decode", type=int, default=4, help="decode steps after the prefill")
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS), help="comma-separated cache kinds")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if "f32" not in kinds:
        kinds.insert(0, "f32")  # the reference every other kind is measured against

    cfg = qwenref.AttnConfig.tiny()
    print(f"qwenref {qwenref.__version__} demo: golden model (numpy float32), AttnConfig.tiny()")
    print(
        f"  hidden {cfg.hidden_size}, {cfg.nh} q heads / {cfg.nkv} kv heads x head_dim "
        f"{cfg.head_dim} (rotary {cfg.rotary_dim}), MLP {cfg.intermediate_size}; indexer "
        f"{cfg.indexer_n_heads} heads x {cfg.indexer_head_dim}, blocks of "
        f"{cfg.indexer_compress_ratio}, budget {cfg.indexer_budget} tokens ({cfg.kblk} blocks)"
    )

    with tempfile.TemporaryDirectory(prefix="qwenref-demo-") as d:
        qwenref.write_random_checkpoint(d, cfg, seed=0)
        ckpt = qwenref.load_checkpoint(d)
        layer_idx = ckpt.full_attention_layers[0]
        w = ckpt.layer(layer_idx)
    print(
        f"random checkpoint written and read back: full-attention layers "
        f"{list(ckpt.full_attention_layers)}, layer {layer_idx} has {len(w)} tensors:"
    )
    for name in sorted(w):
        print(f"    {name:<36} {tuple(w[name].shape)}")

    n_tok = PREFILL + args.decode
    max_t = -(-n_tok // cfg.indexer_compress_ratio) * cfg.indexer_compress_ratio
    first_sel = (cfg.kblk + 1) * cfg.indexer_compress_ratio - 1
    x = np.random.default_rng(0).standard_normal((n_tok, cfg.hidden_size), dtype=np.float32)
    print(
        f"\ninput x {x.shape}: prefill {PREFILL} tokens in one forward, then {args.decode} "
        f"decode steps; rows at position >= {first_sel} attend to {cfg.kblk} selected blocks "
        f"+ tail, earlier rows densely"
    )

    layer = golden.FullAttentionLayer(cfg, w)
    print(
        f"\n{'cache kind':<15} {'bytes/token':>11} {'‖y‖ prefill':>12} {'‖y‖ decode':>11}"
        f" "
        f"{'rel err vs f32':>15} {'time':>7}"
    )
    ref = None
    for kind in kinds:
        t0 = time.perf_counter()
        y, cache = run_kind(layer, cfg, x, kind, PREFILL, max_t)
        dt = time.perf_counter() - t0
        assert len(cache) == n_tok, (kind, len(cache))
        if ref is None:
            ref = y
        err = "(reference)" if y is ref else f"{_relerr(y, ref):.2e}"
        print(
            f"{kind:<15} {cache.nbytes_per_token():>11} {np.linalg.norm(y[:PREFILL]):>12.4f} "
            f"{np.linalg.norm(y[PREFILL:]):>11.4f} {err:>15} {dt:>6.2f}s"
        )

    # weights quantized with the Q8_0 rule (f32 cache): the cost of q8 weights alone
    yq, _ = run_kind(
        golden.FullAttentionLayer(cfg, w, weight_format="q8"), cfg, x, "f32", PREFILL, max_t
    )
    print(f"\nq8 weights, f32 cache: rel err vs f32 weights {_relerr(yq, ref):.2e}")
    # errors are on the layer output (DESIGN's parity measure), which carries the residual x;
    # this ratio says how much of y the layer itself computed
    print(f"layer update vs residual: ‖y - x‖ / ‖x‖ = {_relerr(ref, x):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
