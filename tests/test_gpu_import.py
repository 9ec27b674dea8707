"""`import qwenref.gpu` works with no GPU and no CuPy; calling a GPU function there says what is
missing instead of failing somewhere deep (the public API, README.md)."""

import numpy as np
import pytest

import qwenref
import qwenref.gpu as gpu


def test_public_names_resolve_without_cupy():
    for name in gpu.__all__:
        assert callable(getattr(gpu, name)) or isinstance(getattr(gpu, name), type), name
    assert gpu.wht is getattr(gpu, "wht")  # the function, not the submodule of that name


def test_the_golden_quantizers_have_their_gpu_namesakes():
    """Each quantizer of the golden cache formats is a name of qwenref.gpu too."""
    formats = ("q8", "turbo", "tq")
    names = [f"{f}_{op}" for f in formats for op in ("quantize", "dequantize")] + ["tq_codebook"]
    for name in names:
        assert name in gpu.__all__ and callable(getattr(qwenref.golden, name)), name


@pytest.mark.skipif(gpu.available(), reason="a GPU is present: the calls would run")
@pytest.mark.parametrize(
    "call",
    [
        lambda: gpu.rms_norm(np.ones((2, 64), np.float32), np.zeros(64, np.float32)),
        lambda: gpu.wht(np.ones((2, 64), np.float32)),
        lambda: gpu.KVCache(qwenref.AttnConfig.tiny(), 16, "q8"),
        lambda: gpu.tq_quantize(np.ones((2, 64), np.float32), 4),
    ],
)
def test_gpu_call_without_a_gpu_says_what_is_missing(call):
    with pytest.raises(RuntimeError, match="CuPy|CUDA device"):
        call()
