"""qwenref.dev — tools for working on the kernels on a GPU machine, not part of the library's
API (the library never imports them; the tests import sanitize when run under it): tuning
sweeps and before/after timings, one-launch-per-kernel runs for Nsight Compute, reading its
exports, and the tests under compute-sanitizer. Each is a script:

    python -m qwenref.dev.tune_attention     decode attention: rungs, split counts, NVRTC
                                             options, the read floor and torch SDPA, as graph
                                             replays
    python -m qwenref.dev.tune_gemv          gemv.cu's launch configurations per projection
    python -m qwenref.dev.profile_kernels    one launch per kernel between profiler start/stop
    python -m qwenref.dev.ncu_mix k.csv      instruction mix and stalls of one kernel's SASS
    python -m qwenref.dev.sanitize --tool T  the GPU tests under compute-sanitizer (make sanitize)

They time through qwenref.timing and build inputs with qwenref.bench.inputs, like the bench.
"""
