"""qwenref — a runnable reference for the decode path of a Qwen3.5-style full-attention layer.

``qwenref.golden`` is the numpy definition of every stage; ``qwenref.gpu`` runs the same stages
as CUDA kernels through CuPy (imported lazily: ``import qwenref`` needs neither a GPU nor CuPy).
"""
from .config import AttnConfig
from .checkpoint import LayerWeights, Checkpoint, load_checkpoint, write_random_checkpoint
from . import golden

__all__ = ["AttnConfig", "LayerWeights", "Checkpoint", "load_checkpoint",
           "write_random_checkpoint", "golden"]
__version__ = "0.1.0"
