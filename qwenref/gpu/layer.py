"""layer — the Qwen3.5 full-attention decoder layer on the GPU, stage by stage like the golden one.

    x ─rms_norm─> h ─one fused projection─> [q|gate] per head, k, v, indexer q, indexer k
      ─qk_norm_rope─> q, k ─cache.append(k, v, index_k)─> update_block_keys ─> select_rows
      (only when a row can be selective) ─decode_attention(gate=...)─> o_proj ─add_rms_norm─> h2, x1
      ─gate|up GEMV with SwiGLU epilogue─> act ─down GEMV (+ x1 in its epilogue)─> y

Same semantics and order as golden.FullAttentionLayer (the definition); the differences are
float32 summation order inside the kernels and float32 RoPE angles (golden: float64).

weight_format "q8": every projection Q8_0-quantized by rows (gpu.q8_weight, bit-exact with the
golden rule), run by kernels_cuda/gemv.cu; q|k|v|indexer rows are concatenated into one matrix
so one launch reads them all and writes each part contiguously, gate/up rows are interleaved so
the SwiGLU happens in the GEMV's epilogue, and the MLP residual add rides on down_proj.
weight_format "f32": the same fused layout with float32 weights, run by gemv.cu's f32 GEMV
(weights read once for up to 8 rows, like q8; no cuBLAS, so the step can be captured — CuPy
refuses cuBLAS calls during stream capture). Eager steps of more than 8 rows (prefill) use cuBLAS
sgemm per projection instead, which reads the weights once for all rows.

All per-step scratch is preallocated per row count, so a step allocates nothing of its own and
can be captured as a CUDA graph (`capture`). forward's on_stage hook announces each stage as it
is queued; qwenref.timing.stage_us times the stages with it (no timing lives here).
Shape letters: nb rows, nh q heads, nkv kv heads, hd head_dim, H hidden, I intermediate,
inh/ihd indexer heads/width.
"""

from __future__ import annotations

import functools
import types

import numpy as np

from .._args import int_arg
from ..weights import check_layer_args, check_weights
from ._runtime import check_array, cupy, type_name
from .kvcache import KVCache

__all__ = ["FullAttentionLayer", "DecodeGraph", "STAGES"]

# Stage names in execution order (on_stage's names after "start"; absent stages are skipped).
STAGES = (
    "input_norm",
    "qkv_proj",
    "qk_norm_rope",
    "indexer_q",
    "kv_append",
    "block_keys",
    "select",
    "attention",
    "o_proj",
    "post_norm",
    "mlp_gate_up",
    "mlp_down",
)


@functools.lru_cache(maxsize=None)
def _ops():
    """The sibling stage wrappers, imported on first use (importing this module needs no CuPy)."""
    from . import attention, gemv, indexer, norm, rope

    return types.SimpleNamespace(
        rms_norm=norm.rms_norm,
        add_rms_norm=norm.add_rms_norm,
        qk_norm_rope=rope.qk_norm_rope,
        indexer_queries=indexer.indexer_queries,
        update_block_keys=indexer.update_block_keys,
        select_rows=indexer.select_rows,
        decode_attention=attention.decode_attention,
        attention_plan=attention.plan,
        attention_head_dims=attention.HEAD_DIMS,
        check_merge_limit=attention.check_merge_limit,
        max_splits=attention.MAX_SPLITS,
        check_select_limits=indexer.check_select_limits,
        max_ihd=indexer.MAX_IHD,
        gemv=gemv,
    )


def _check_kernel_limits(cfg):
    """The config's sizes the kernels take, checked when a layer is built so that no step stops
    half-way on them (ValueError naming the cfg field): head_dim one of the attention kernels'
    HEAD_DIMS and n_rep * head_dim within the partials' shared-memory merge, indexer_head_dim
    <= the indexer's MAX_IHD, and a row's indexer queries within the scoring kernel's shared
    memory."""
    op = _ops()
    if cfg.head_dim not in op.attention_head_dims:
        raise ValueError(
            f"cfg.head_dim must be one of {op.attention_head_dims} (the attention kernels'), "
            f"got {cfg.head_dim}"
        )
    op.check_merge_limit(cfg, "cfg")
    if cfg.has_indexer:
        if cfg.indexer_head_dim > op.max_ihd:
            raise ValueError(
                f"cfg.indexer_head_dim must be <= {op.max_ihd} (the indexer kernels'), "
                f"got {cfg.indexer_head_dim}"
            )
        op.check_select_limits(cfg, 0)


class _Scratch:
    """Every intermediate of one step for nb rows (allocated once, outside any capture)."""

    def __init__(self, layer, nb):
        cp = cupy()
        c, f = layer.cfg, cp.float32
        hd, H = c.head_dim, c.hidden_size
        self.nb = nb
        self.pos = cp.zeros((nb,), cp.int32)
        self.h = cp.empty((nb, H), f)
        self.proj = cp.empty((nb * layer.n_proj,), f)  # segmented q|k|v|iq|ik output
        self.q = cp.empty((nb, c.nh, hd), f)
        self.k = cp.empty((nb, c.nkv, hd), f)
        self.gate = cp.empty((nb, c.nh, hd), f)
        self.iq = (
            cp.empty((nb, c.indexer_n_heads, c.indexer_head_dim), f) if c.has_indexer else None
        )
        self.attn = cp.empty((nb, c.nh, hd), f)
        self.o = cp.empty((nb, H), f)
        self.h2 = cp.empty((nb, H), f)
        self.x1 = cp.empty((nb, H), f)
        if layer.has_mlp:
            self.act = cp.empty((nb, c.intermediate_size), f)
            if layer._use_cublas(nb, False):
                self.gu = cp.empty((nb, 2 * c.intermediate_size), f)
                self.m = cp.empty((nb, H), f)

    def parts(self, layer):
        """[qg, k, v, iq_raw, ik] projection outputs as contiguous [nb, len] views."""
        nb, out, s = self.nb, [], 0
        for n in layer.seg_sizes:
            out.append(self.proj[nb * s : nb * (s + n)].reshape(nb, n))
            s += n
        return out


class FullAttentionLayer:
    """FullAttentionLayer(cfg, w, sparse_v=0.0, n_splits=None, weight_format="f32").

    w: LayerWeights (numpy float32 under HF names), uploaded once. forward(x, base_pos, cache)
    with x cupy float32 [nb, H] and a gpu.KVCache -> cupy float32 [nb, H]. MoE checkpoints
    (no dense MLP weights) run attention only, y = x + attention(x), like the golden layer.
    """

    def __init__(self, cfg, w, sparse_v=0.0, n_splits=None, weight_format="f32"):
        check_layer_args(weight_format, sparse_v, n_splits)
        if n_splits is not None and n_splits > _ops().max_splits:
            raise ValueError(f"n_splits must be <= {_ops().max_splits}, got {n_splits}")
        has_mlp = check_weights(cfg, w, weight_format)
        _check_kernel_limits(cfg)
        cp = cupy()
        self.cfg, self.sparse_v, self.n_splits = cfg, float(sparse_v), n_splits
        self.weight_format = weight_format
        c = cfg
        self.has_mlp = has_mlp

        def f32(name):
            return np.ascontiguousarray(np.asarray(w[name], dtype=np.float32))

        def up(a):
            return cp.asarray(np.ascontiguousarray(a, dtype=np.float32))

        ihd, inh = c.indexer_head_dim, c.indexer_n_heads
        self.norm_in = up(f32("input_layernorm.weight"))
        self.norm_post = up(f32("post_attention_layernorm.weight"))
        self.q_norm = up(f32("self_attn.q_norm.weight"))
        self.k_norm = up(f32("self_attn.k_norm.weight"))
        self.iq_norm = self.ik_norm = None
        # projection rows: q_proj [2·nh·hd] | k_proj | v_proj | indexer q [inh·ihd]
        # | indexer k [ihd]
        parts = [
            f32("self_attn.q_proj.weight"),
            f32("self_attn.k_proj.weight"),
            f32("self_attn.v_proj.weight"),
        ]
        if c.has_indexer:
            self.iq_norm = up(f32("self_attn.indexer.q_norm.weight"))
            self.ik_norm = up(f32("self_attn.indexer.k_norm.weight"))
            wqk = f32("self_attn.indexer.qk_proj.weight")
            parts += [wqk[: inh * ihd], wqk[inh * ihd :]]
        self.seg_sizes = [p.shape[0] for p in parts]
        self.n_proj = sum(self.seg_sizes)
        gemv = _ops().gemv
        if weight_format == "q8":

            def q8(a):
                dev = up(a)
                return gemv.q8_weight(dev)  # the f32 upload is freed on return

            self.w_proj = q8(np.concatenate(parts, axis=0))
            self.w_o = q8(f32("self_attn.o_proj.weight"))
            if self.has_mlp:
                self.w_gu = q8(
                    gemv.interleave_rows(f32("mlp.gate_proj.weight"), f32("mlp.up_proj.weight"))
                )
                self.w_down = q8(f32("mlp.down_proj.weight"))
        else:
            self.w_proj = up(np.concatenate(parts, axis=0))
            self.w_o = up(f32("self_attn.o_proj.weight"))
            if self.has_mlp:
                self.w_gu = up(
                    gemv.interleave_rows(f32("mlp.gate_proj.weight"), f32("mlp.up_proj.weight"))
                )
                self.w_down = up(f32("mlp.down_proj.weight"))
        # gemv.cu's f32 kernel loads 16-byte chunks: every projection's input dim % 4 == 0
        self._f32_gemv_ok = all(
            n % 4 == 0 for n in (c.hidden_size, c.nh * c.head_dim, c.intermediate_size)
        )
        self._scratch = {}

    # ---- sizes, for byte counting ------------------------------------------------------------
    def weight_bytes(self):
        """Bytes of projection weights one step reads (as stored: int8 + f16 scales, or f32)."""

        def nbytes(w):
            if isinstance(w, (tuple, list)):
                return sum(a.nbytes for a in w)
            return w.nbytes

        ws = [self.w_proj, self.w_o] + ([self.w_gu, self.w_down] if self.has_mlp else [])
        return int(sum(nbytes(w) for w in ws))

    # ---- the step ----------------------------------------------------------------------------
    def _check(self, x, base_pos, cache, out=None, trace=None, on_stage=None):
        """Every argument of a step, checked before anything is launched or written: the plain
        ones first (no GPU needed), then x, the cache's room and out. -> nb."""
        c = self.cfg
        base_pos = int_arg("base_pos", base_pos, 0)
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a qwenref.gpu.KVCache, got {type_name(cache)}")
        if cache.cfg != c:
            raise ValueError("cache was built for a different AttnConfig than this layer")
        if base_pos != len(cache):
            raise ValueError(f"base_pos ({base_pos}) must equal len(cache) ({len(cache)})")
        if trace is not None and not isinstance(trace, dict):
            raise TypeError(f"trace must be None or a dict, got {type(trace).__name__}")
        if on_stage is not None and not callable(on_stage):
            raise TypeError(f"on_stage must be None or callable, got {type(on_stage).__name__}")
        check_array("x", x, dtype="float32", ndim=2)
        nb = x.shape[0]
        if x.shape[1] != c.hidden_size or nb < 1:
            raise ValueError(f"x must have shape [nb, {c.hidden_size}], got {x.shape}")
        if len(cache) + nb > cache.max_t:
            raise ValueError(
                f"x: {nb} rows after the {len(cache)} stored exceed the cache's max_t={cache.max_t}"
            )
        if out is not None:
            check_array("out", out, dtype="float32", shape=(nb, c.hidden_size))
        return nb

    def _plan(self, cache, nb, base_pos):
        """The step's attention plan and the selection's limits, checked before the step
        appends anything (host work: shapes and kernel attributes, no device read-back):
        whether rows may be selective is known from base_pos and nb alone."""
        op, c = _ops(), self.cfg
        selective = self._selective(base_pos, nb)
        if selective:
            op.check_select_limits(c, cache.blk_keys.shape[0])
        width = c.kblk * c.indexer_compress_ratio + c.indexer_compress_ratio if selective else 0
        return op.attention_plan(
            cache,
            nb,
            base_pos=base_pos,
            sparse_v=self.sparse_v,
            selective=selective,
            width=width,
            n_splits=self.n_splits,
        )

    def _scratch_for(self, nb):
        s = self._scratch.get(nb)
        if s is None:
            s = self._scratch[nb] = _Scratch(self, nb)
        return s

    def _selective(self, base_pos, nb):
        """Can any row of this step be selective? (host arithmetic: no device read-back)"""
        c = self.cfg
        return c.has_indexer and (base_pos + nb) // c.indexer_compress_ratio > c.kblk

    def _use_cublas(self, nb, capturing):
        """f32 weights: cuBLAS for eager steps of more than 8 rows (it reads the weights once for
        all rows; the GEMV kernel once per 8), or when the kernel cannot load 16-byte chunks."""
        if self.weight_format != "f32":
            return False
        if not self._f32_gemv_ok:
            return True
        return nb > 8 and not capturing

    def _wd(self, w):
        """(weights, scales) as gemv._launch takes them."""
        return w if self.weight_format == "q8" else (w, None)

    def _step(self, x, base_pos, cache, y, s, plan, mark=None, capturing=False, trace=None):
        """One decode step into y using scratch s (positions already in s.pos) and the attention
        plan from _plan. Launches only: no allocation of its own, no host synchronisation.
        mark(name) is called with "start" before the first launch and after each stage's
        launches (forward's on_stage); trace, a dict, receives the selection and the attention
        plan (host objects and device arrays: filling it reads nothing back)."""
        op, c = _ops(), self.cfg
        mark = mark or (lambda name: None)
        mark("start")
        nb, hd, eps = s.nb, c.head_dim, c.rms_norm_eps
        kind = self.weight_format
        cublas = self._use_cublas(nb, capturing)
        op.rms_norm(x, self.norm_in, eps, out=s.h)
        mark("input_norm")

        parts = s.parts(self)
        if cublas:
            r0 = 0
            for n, out in zip(self.seg_sizes, parts):
                op.gemv.linear(s.h, self.w_proj[r0 : r0 + n], out=out)  # row slice: contiguous
                r0 += n
        else:
            ends = np.cumsum(self.seg_sizes)[:-1].tolist()
            op.gemv._launch(kind, s.h, *self._wd(self.w_proj), s.proj, ends=ends)
        mark("qkv_proj")
        qg = parts[0].reshape(nb, c.nh, 2 * hd)  # per head [q_h | gate_h]
        k_raw = parts[1].reshape(nb, c.nkv, hd)
        v = parts[2].reshape(nb, c.nkv, hd)

        op.qk_norm_rope(
            qg,
            k_raw,
            self.q_norm,
            self.k_norm,
            s.pos,
            c.rotary_dim,
            c.rope_theta,
            eps,
            q_out=s.q,
            k_out=s.k,
        )
        s.gate[...] = qg[:, :, hd:]  # contiguous copy of the gates
        mark("qk_norm_rope")

        index_k = None
        if c.has_indexer:
            iq_raw = parts[3].reshape(nb, c.indexer_n_heads, c.indexer_head_dim)
            index_k = parts[4]  # [nb, ihd]
            op.indexer_queries(
                iq_raw, self.iq_norm, s.pos, c.indexer_rotary_dim, c.rope_theta, eps, out=s.iq
            )
            mark("indexer_q")
        cache.append(s.k, v, index_k=index_k)
        mark("kv_append")
        sel_idx = sel_n = None
        if c.has_indexer:
            op.update_block_keys(cache, self.ik_norm, c, base_pos, base_pos + nb)
            mark("block_keys")
            if self._selective(base_pos, nb):
                sel_idx, sel_n, _ = op.select_rows(s.iq, cache, base_pos, c)
                mark("select")
        if trace is not None:
            trace["selection"] = None if sel_idx is None else (sel_idx, sel_n)
            trace["attention_plan"] = plan
        op.decode_attention(
            s.q,
            cache,
            base_pos,
            gate=s.gate,
            n_splits=self.n_splits,
            sparse_v=self.sparse_v,
            sel_idx=sel_idx,
            sel_n=sel_n,
            out=s.attn,
            plan=plan,
        )
        mark("attention")

        attn2 = s.attn.reshape(nb, c.nh * hd)
        if cublas:
            op.gemv.linear(attn2, self.w_o, out=s.o)
        else:
            op.gemv._launch(kind, attn2, *self._wd(self.w_o), s.o)
        mark("o_proj")
        op.add_rms_norm(s.o, x, self.norm_post, eps, out=s.h2, sum_out=s.x1)  # x1 = attn + x
        mark("post_norm")
        if not self.has_mlp:
            y[...] = s.x1
            return y
        if not cublas:
            op.gemv._launch(kind, s.h2, *self._wd(self.w_gu), s.act, mode=1)
            mark("mlp_gate_up")
            op.gemv._launch(kind, s.act, *self._wd(self.w_down), y, resid=s.x1)
        else:
            op.gemv.linear(s.h2, self.w_gu, out=s.gu)
            op.gemv.swiglu_interleaved(s.gu, out=s.act)
            mark("mlp_gate_up")
            op.gemv.linear(s.act, self.w_down, out=s.m)
            cupy().add(s.x1, s.m, out=y)  # y = x1 + mlp
        mark("mlp_down")
        return y

    def _prepare(self, base_pos, nb, s=None):
        s = s or self._scratch_for(nb)
        s.pos.set(np.arange(base_pos, base_pos + nb, dtype=np.int32))
        return s

    def forward(self, x, base_pos, cache, out=None, trace=None, on_stage=None):
        """x cupy float32 [nb, H] at positions base_pos .. base_pos+nb-1 -> y [nb, H].

        Appends the rows' K/V (and indexer keys) to `cache`; row b attends to the cache as
        stored over base_pos + b + 1 tokens (dense, or the indexer's selection). base_pos must
        equal len(cache) (ValueError). `trace`, if a dict, receives (as golden's forward fills
        its own) "selection": (sel_idx, sel_n) cupy arrays of the step, or None when every row
        is dense, and "attention_plan": the gpu.attention.AttentionPlan decode_attention ran.
        Filling it adds no host synchronisation (nothing is read back from the GPU).
        `on_stage(name)`, if given, is called on the host with "start" once the step's inputs
        are on the GPU and before its first launch, then with each STAGES name once that
        stage's launches are queued (qwenref.timing.stage_us records an event at each).
        """
        cp = cupy()
        nb = self._check(x, base_pos, cache, out=out, trace=trace, on_stage=on_stage)
        plan = self._plan(cache, nb, base_pos)
        y = cp.empty((nb, self.cfg.hidden_size), cp.float32) if out is None else out
        s = self._prepare(base_pos, nb)
        return self._step(x, base_pos, cache, y, s, plan, mark=on_stage, trace=trace)

    def capture(self, x, base_pos, cache):
        """Capture one decode step (nb = len(x) rows at base_pos) as a CUDA graph.

        The step is recorded, not run, then launched once, so afterwards the cache holds the
        step like after forward(x, base_pos, cache). Each replay re-runs the same step: it
        rewrites the same cache slots from the current contents of graph.x (positions and
        lengths are baked in), so the cache stays consistent and replays can be timed.
        Call forward() once before (compiles the kernels). f32 weights run by gemv.cu's f32
        kernel here whatever nb is (CuPy refuses cuBLAS during capture); stages that the
        wrappers implement with a host read-back or cuBLAS cannot be captured: RuntimeError.
        If capture fails after the append was recorded, the cache's length has advanced
        without its data: use a fresh cache.
        """
        cp = cupy()
        nb = self._check(x, base_pos, cache)
        plan = self._plan(cache, nb, base_pos)
        s = _Scratch(self, nb)  # the graph's own buffers
        self._prepare(base_pos, nb, s)
        g_x = cp.array(x, copy=True)
        g_y = cp.empty((nb, self.cfg.hidden_size), cp.float32)
        cp.cuda.Device().synchronize()  # inputs above are written before capture
        stream = cp.cuda.Stream(non_blocking=True)
        pool = cp.cuda.MemoryPool()  # wrappers' own temporaries: a private
        with stream, cp.cuda.using_allocator(pool.malloc):  # pool that lives with the graph
            stream.begin_capture()
            try:
                self._step(g_x, base_pos, cache, g_y, s, plan, capturing=True)
            except Exception as e:
                try:
                    stream.end_capture()
                except Exception:
                    pass
                raise RuntimeError(
                    f"FullAttentionLayer.capture: the step could not be captured "
                    f"({type(e).__name__}: {e})"
                ) from e
            graph = stream.end_capture()
        g = DecodeGraph(graph, stream, g_x, g_y, keep=(s, pool))
        g.replay()
        stream.synchronize()
        return g


class DecodeGraph:
    """A captured decode step: copy inputs into .x, replay(), read .out (on .stream);
    qwenref.timing.graph_us(graph) times replays."""

    def __init__(self, graph, stream, x, out, keep=()):
        self.graph, self.stream, self.x, self.out = graph, stream, x, out
        self._keep = keep  # scratch + pool the graph points into

    def replay(self):
        self.graph.launch(stream=self.stream)
        return self.out
