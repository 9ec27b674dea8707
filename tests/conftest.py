import os
import time

import numpy as np
import pytest

import qwenref

# Under compute-sanitizer (python -m qwenref.dev.sanitize sets these, and documents them):
#   QWENREF_SANITIZE=1              CuPy's memory pool off, so every array is its own
#                                   allocation and an access past its end is seen; tests
#                                   marked no_sanitizer and the files below skipped
#   QWENREF_SANITIZE_SELECT=quick   each test function with every value of each parameter at
#                                   least once, not every combination (cover_parameters)
#   QWENREF_SANITIZE_SHARD=k/n      the k-th of n interleaved slices of the selected tests
#   QWENREF_SANITIZE_BUDGET=s       tests that would start after s seconds are skipped, so a
#                                   run ends inside the time it was given
SANITIZING = os.environ.get("QWENREF_SANITIZE") == "1"
# whole files that only measure time (the sanitizer stretches every kernel); the kernels they
# time (spin, copy, stream_read) run in the stage tests too
SANITIZER_SKIPPED_FILES = {"test_gpu_timing.py": "measures GPU time, which the sanitizer stretches"}
BUDGET_SKIP = "sanitizer time budget spent"
_START = time.monotonic()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs CuPy and an NVIDIA GPU (skipped otherwise)")
    config.addinivalue_line("markers", "oracle: needs torch + transformers (skipped otherwise)")
    config.addinivalue_line(
        "markers",
        "no_sanitizer(reason): skipped under compute-sanitizer (QWENREF_SANITIZE=1): a test that "
        "only exists for big shapes or timing",
    )
    if SANITIZING:
        _pool_off()


def _pool_off():
    """Every CuPy array its own cudaMalloc (the pool hands out slices of larger blocks, inside
    which the sanitizer cannot tell one array's end)."""
    from qwenref.gpu import available

    if available():
        import cupy

        cupy.cuda.set_allocator(None)


def pytest_collection_modifyitems(config, items):
    from qwenref.gpu import available

    if SANITIZING:
        _sanitizer_selection(config, items)
    if available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU / CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _sanitizer_selection(config, items):
    for item in items:
        marker = item.get_closest_marker("no_sanitizer")
        reason = SANITIZER_SKIPPED_FILES.get(item.path.name)
        if marker is not None:
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"under compute-sanitizer: {reason}"))
    from qwenref.dev.sanitize import cover_parameters, shard_of

    keep = list(items)
    if os.environ.get("QWENREF_SANITIZE_SELECT", "all") == "quick":
        keep = cover_parameters(keep)
    shard = os.environ.get("QWENREF_SANITIZE_SHARD")
    if shard:
        k, n = shard_of(shard)
        keep = keep[k - 1 :: n]
    kept = set(keep)
    dropped = [item for item in items if item not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_runtest_setup(item):
    budget = os.environ.get("QWENREF_SANITIZE_BUDGET")
    if SANITIZING and budget and time.monotonic() - _START > float(budget):
        pytest.skip(BUDGET_SKIP)


@pytest.fixture
def rng(request):
    """A fresh generator per test, seeded from the test's name so failures reproduce."""
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def tiny_cfg():
    return qwenref.AttnConfig.tiny()


@pytest.fixture
def cp():
    """CuPy, through qwenref's loader (GPU tests only: they are skipped without a GPU)."""
    from qwenref.gpu._runtime import cupy

    return cupy()


@pytest.fixture
def gpu():
    import qwenref.gpu as g

    return g
