"""qwenref — a runnable reference for the decode path of a Qwen3.5-style full-attention layer.

``qwenref.golden`` is the numpy definition of every stage; ``qwenref.gpu`` runs the same stages
as CUDA kernels through CuPy (imported lazily: ``import qwenref`` needs neither a GPU nor CuPy).
What both share has one home each: ``qwenref.layout`` (cache kinds, stored arrays, bytes per
token), ``qwenref.weights`` (a layer's tensors and their checks), ``qwenref.kvcache_base`` (the
KV cache's class body) and ``qwenref.config`` (the layer's shape).
"""

from . import golden
from .checkpoint import Checkpoint, LayerWeights, load_checkpoint, write_random_checkpoint
from .config import AttnConfig

__all__ = [
    "AttnConfig",
    "LayerWeights",
    "Checkpoint",
    "load_checkpoint",
    "write_random_checkpoint",
    "golden",
]
__version__ = "0.1.0"
