"""rungs — every kernel family's rungs, in one table that the stage modules, the bench's ladder
and the tests all read.

A family is one operation with several implementations (rungs), v0 first (the golden formula
written out), then each faster idea, in teaching order. Per family the table holds:

    module    the qwenref.gpu module that runs it (impl= picks the rung; its rung_kernel(family,
              impl, **shape) names the kernel a rung launches)
    kernels   rung -> the kernels_cuda module (kernels_cuda/<name>.cu, NVRTC compiles each
              alone) that holds the rung's kernels, in teaching order
    default   the rung impl=None runs; None for attention, whose rung the plan picks per call
              (qwenref.gpu.attention.plan: "mma" where it applies, else "v1")
    ladder    whether the bench's ladder (qwenref.bench.ladder) records the family

Each stage module's RUNGS / DEFAULT_RUNG are views of this table (rungs_of / defaults_of), and
its launches name their kernels_cuda module through kernel_module. Nothing here needs CuPy.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

__all__ = [
    "Family",
    "FAMILIES",
    "family",
    "rungs_of",
    "defaults_of",
    "kernel_module",
    "ladder_families",
]


@dataclasses.dataclass(frozen=True)
class Family:
    """One kernel family's row of the table (the module docstring says what each field is)."""

    module: str
    kernels: MappingProxyType
    default: str | None
    ladder: bool = True

    def __post_init__(self):
        object.__setattr__(self, "kernels", MappingProxyType(dict(self.kernels)))
        if self.default is not None and self.default not in self.kernels:
            raise ValueError(f"default {self.default!r} is not one of {tuple(self.kernels)}")

    @property
    def rungs(self):
        """The rung names in teaching order."""
        return tuple(self.kernels)


FAMILIES = MappingProxyType(
    {
        "rms_norm": Family("norm", {"v0": "norm_v0", "v1": "norm"}, "v1"),
        "add_rms_norm": Family("norm", {"v0": "norm_v0", "v1": "norm"}, "v1"),
        "qk_norm_rope": Family("rope", {"v0": "rope_v0", "v1": "rope", "v2": "rope"}, "v2"),
        "head_norm_rope": Family("rope", {"v0": "rope_v0", "v1": "rope"}, "v1", ladder=False),
        "wht": Family("wht", {"v0": "wht_v0", "v1": "wht"}, "v1"),
        "q8_append": Family("kvcache", {"v0": "kvcache_v0", "v1": "kvcache"}, "v1"),
        "turbo_append": Family("kvcache", {"v0": "kvcache_v0", "v1": "kvcache"}, "v1"),
        "tq_append": Family("kvcache", {"v0": "kvcache_v0", "v1": "kvcache_tq"}, "v1"),
        "update_block_keys": Family("indexer", {"v0": "indexer_v0", "v1": "indexer"}, "v1"),
        "block_scores": Family("indexer", {"v0": "indexer_v0", "v1": "indexer"}, "v1"),
        "select": Family("indexer", {"v0": "indexer_v0", "v1": "indexer_select"}, "v1"),
        "attention": Family(
            "attention",
            {
                "v0": "attention_v0",
                "split": "attention_split",
                "v1": "attention_v1",
                "mma": "attention_mma",
            },
            None,
        ),
        "gemv": Family("gemv", {"v0": "gemv_v0", "v1": "gemv"}, "v1"),
    }
)


def family(name):
    """The table's row of a family (ValueError naming `family` for an unknown one)."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {name!r}")
    return FAMILIES[name]


def rungs_of(module):
    """{family: rungs in teaching order} of the families qwenref.gpu.<module> runs (its RUNGS)."""
    return {n: f.rungs for n, f in FAMILIES.items() if f.module == module}


def defaults_of(module):
    """{family: default rung} of the families qwenref.gpu.<module> runs (its DEFAULT_RUNG)."""
    return {n: f.default for n, f in FAMILIES.items() if f.module == module}


def kernel_module(name, rung):
    """The kernels_cuda module that holds the kernels of `rung` of family `name`."""
    return family(name).kernels[rung]


def ladder_families():
    """{family: its qwenref.gpu module} of the families the bench's ladder records."""
    return {n: f.module for n, f in FAMILIES.items() if f.ladder}
