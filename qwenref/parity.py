"""Parity of the golden layer with transformers' Qwen3_5DecoderLayer: transformers builds and
saves a tiny one-layer Qwen3.5, qwenref loads the checkpoint, and the golden layer (f32 and q8
weights; f32, q8 and tq caches) runs a prefill and decode steps against transformers' layer
over the whole sequence. Quiet: no progress bars, nothing on stderr. Notebook 08 shows the run
(live where asked, else the record); tests/test_parity_hf.py runs it against its record.

    python -m qwenref.parity    # runs hf_parity() and records it in results/parity_hf.json
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from . import golden, nbutil
from .checkpoint import load_checkpoint
from .layout import TQ_KINDS

__all__ = ["VARIANTS", "hf_parity", "live_or_recorded", "write_parity"]

# (weights, cache kind) of the golden layer against transformers: float32 for parity, then the
# formats' own errors beside it (the tq kinds are golden's alone: no GPU kernels yet)
VARIANTS = (("f32", "f32"), ("f32", "q8")) + tuple(("f32", k) for k in TQ_KINDS) + (("q8", "f32"),)


@contextlib.contextmanager
def _quiet():
    """No tqdm warning that ipywidgets is missing (transformers imports tqdm.auto), and no
    progress bar from save_pretrained: nothing on stderr."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
        with contextlib.suppress(ImportError):
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        yield transformers


def _hf_model(theta, seed):
    """A one-layer Qwen3_5ForCausalLM in float32, all full attention, its weights randomised
    (transformers initialises the zero-centred norms to 0, which would hide a w vs 1 + w slip;
    projections ~ N(0, 1/fan_in) keep every term O(1))."""
    import torch
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    conf = Qwen3_5TextConfig(
        vocab_size=16,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        rms_norm_eps=1e-6,
        layer_types=["full_attention"],
        rope_parameters=dict(rope_type="default", rope_theta=theta, partial_rotary_factor=0.25),
    )
    conf._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(conf).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            scale = 0.1 if p.ndim == 1 else p.shape[-1] ** -0.5
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return model


def _config_fields(conf):
    """The fields of transformers' config that shape the layer, as recorded beside the errors."""
    d = conf.to_dict()
    keys = ["model_type", "hidden_size", "num_attention_heads", "num_key_value_heads"]
    keys += ["head_dim", "intermediate_size", "rms_norm_eps", "num_hidden_layers", "layer_types"]
    keys += ["hidden_act", "attention_bias", "rope_parameters"]
    return {k: d[k] for k in keys if k in d}


def hf_parity(theta=1e7, seed=0, chunks=(20, 1, 1, 1)):
    """transformers' Qwen3_5DecoderLayer against golden.FullAttentionLayer on a checkpoint that
    transformers wrote: per-row relative errors of the golden VARIANTS (weights, cache kind),
    golden running a prefill then decode steps through a KVCache. Returns a
    JSON-able dict (what results/parity_hf.json records)."""
    import torch

    with _quiet() as transformers:
        model = _hf_model(theta, seed)
        T = sum(chunks)
        xr = np.random.default_rng(seed).standard_normal((T, 128)).astype(np.float32)
        xr[5, 7] = 9.0  # an outlier channel
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d)
            ck = load_checkpoint(d)
            weights = ck.layer(0)  # read now: the checkpoint reads its files lazily
        xt = torch.from_numpy(xr)[None]  # [1, T, H]
        # text positions as three identical M-RoPE rows [3, batch, T]: transformers versions
        # differ in whether the rotary embedding expands [batch, T] itself
        cos_sin = model.model.rotary_emb(xt, torch.arange(T)[None, None].expand(3, 1, T))
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        with torch.no_grad():
            ref = model.model.layers[0](xt, position_embeddings=cos_sin, attention_mask=mask)
    ref = (ref[0] if isinstance(ref, tuple) else ref)[0].numpy()  # [T, H]
    what = "golden.FullAttentionLayer vs transformers Qwen3_5DecoderLayer (eager, float32)"
    out = dict(what=what)
    out.update(torch=torch.__version__, transformers=transformers.__version__)
    out.update(numpy=np.__version__, config=_config_fields(model.config), variants={})
    out.update(date=time.strftime("%Y-%m-%d"), chunks=list(chunks), tolerance=1e-5)
    out["update_norm"] = nbutil.relerr(ref, xr)
    for wf, kind in VARIANTS:
        layer = golden.FullAttentionLayer(ck.config, weights, weight_format=wf)
        cache = golden.KVCache(ck.config, max_t=64, kind=kind)
        y = np.concatenate(
            [layer.forward(c, len(cache), cache) for c in np.split(xr, np.cumsum(chunks)[:-1])]
        )
        out["variants"][f"{wf} weights, {kind} cache"] = {
            "per_row": [nbutil.relerr(y[t], ref[t]) for t in range(T)],
            "all": nbutil.relerr(y, ref),
            "update": nbutil.relerr(y - xr, ref - xr),
        }
    return out


def live_or_recorded(live):
    """(parity dict or None, a line saying where it comes from): live when `live` and torch and
    transformers (with the Qwen3.5 classes) import, else the run in results/parity_hf.json."""
    why = "not asked for (LIVE_HF is False)"
    if live:
        try:
            p = hf_parity()
            return p, f"live run: torch {p['torch']}, transformers {p['transformers']}"
        except ImportError as e:
            why = f"torch or transformers' Qwen3.5 model is not importable ({e})"
        except Exception as e:  # an API this run does not know yet: say so, show the record
            msg = str(e).replace(tempfile.gettempdir(), "$TMPDIR")  # no machine's path
            why = f"the live run failed: {type(e).__name__}: {msg}"
    path = nbutil.results_path("parity_hf.json")
    if path is None:
        return None, f"not run live ({why}) and no results/parity_hf.json is recorded"
    p = json.loads(path.read_text())
    return p, (
        f"not run live: {why}; recorded {p['date']} with torch {p['torch']}, "
        f"transformers {p['transformers']} (results/parity_hf.json)"
    )


def write_parity(path=None):
    """Run hf_parity() and record it at path (default: the repository's
    results/parity_hf.json, wherever this is run from), with how to redo it."""
    p = hf_parity()
    n_dec = len(p["chunks"]) - 1
    p["how"] = (
        "python -m qwenref.parity: hf_parity() (theta 1e7, a prefill of "
        f"{p['chunks'][0]} rows + {n_dec} decode steps), the run notebooks/08_layer.ipynb shows"
    )
    repo = Path(__file__).resolve().parents[1]
    path = Path(path) if path else repo / "results" / "parity_hf.json"
    path.write_text(json.dumps(p, indent=1) + "\n")
    return p


if __name__ == "__main__":
    write_parity()
