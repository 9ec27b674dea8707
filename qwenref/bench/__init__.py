"""python -m qwenref.bench [--quick] [--only STAGE[,STAGE...]] [--kinds KIND[,KIND...]] [--out DIR]
[--dry]

Validate every GPU kernel against the golden model on the same inputs, then time it, and record
the numbers (README.md, "GPU"; docs/performance.md renders them):

  results/<device>.json  {device, date, commit, cupy, cuda, torch, copy_gbps, runs: [...]}
  results/<device>.npz   per run, up to 4096 (golden, gpu) sample pairs: "<i>_golden", "<i>_gpu"

Each run: stage, kernel, shape, median_us, bytes, gbps, pct_of_copy and the run's copy_gbps,
rel_err (+ tol, ok, iqr_us), family, rung and default, and peer, peer_median_us, speedup and
peers ({name: µs}) where a peer exists (torch SDPA bf16, the fastest of its backends and GQA
layouts, for attention; torch rms_norm for norm; cuBLAS bf16 through torch for the Q8 GEMV).

Method: random inputs, never zeros; rel_err = ‖gpu − golden‖ /
‖golden‖ in float64; timing with CUDA events, warm-up first, the median of many batches; before
each batch a spin kernel holds the GPU while the host queues the batch, so the events time the
GPU, not the Python launch rate; inputs rotate among copies when one set would fit in L2, so a
streaming kernel streams from memory; every decode (each cache kind at 32k and 128k tokens,
1 and 4 rows) is also timed as CUDA-graph replays, each beside the SDPA peer timed the same way
and its floor (floor_us, pct_of_floor): stream.cu's stream_read, one launch that reads the same
bytes and nothing else (the best a single launch of that size can do), measured in the same
case; so is the graph-replayed layer step. Every time is measured by qwenref.timing.
`bytes` is what the kernel must move: each input read once, each output written once, counted
from the shapes (counting.py). copy_gbps = 2 × bytes / time of a device-to-device copy of 1 GiB
in the same run; pct_of_copy = 100 · gbps / copy_gbps.

--only runs some stages and --kinds the cases of some cache kinds (cases of no kind left out);
either merges into an existing results file, replacing the runs of what it ran (stages, or
stages and kinds) and keeping the rest, each run with its own commit.

The device machine has no .git: pass the commit the code was run at in QWENREF_COMMIT; without
it the bench refuses to record (exit 2; --dry prints the table and writes nothing). A stage
that fails is printed as an error row and the bench goes on; the exit status is 1 if any run
failed or missed its tolerance.

The package, by job: counting (bytes), records (runs, the results file, the table), tolerances,
inputs, context (what the cases share), cases_* (one module per stage), ladder (every rung of
every kernel family), cli (the run list and the command line).
"""

from __future__ import annotations

from .cli import STAGES, main

__all__ = ["STAGES", "main"]
