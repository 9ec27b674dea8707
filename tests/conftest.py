import numpy as np
import pytest

import qwenref


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs CuPy and an NVIDIA GPU (skipped otherwise)")
    config.addinivalue_line("markers", "oracle: needs torch + transformers (skipped otherwise)")


def pytest_collection_modifyitems(config, items):
    from qwenref.gpu import available

    if available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU / CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
