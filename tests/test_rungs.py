"""The rung table (qwenref/gpu/rungs.py), checked without a GPU: each family's default is one of
its rungs, each rung's kernels_cuda module exists and holds the kernel the rung names, the
stage modules' dispatch and the bench's ladder read this one table, and no other module
defines a default rung (a source scan)."""

import ast
import importlib
import re
from pathlib import Path

import pytest

from qwenref.bench import ladder
from qwenref.gpu import rungs as registry
from qwenref.gpu._runtime import kernel_source, kernels_dir

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "qwenref"
FAMILIES = sorted(registry.FAMILIES)
# the shape keywords each family's rung_kernel names its kernels by (the ladder's, and
# head_norm_rope, which the ladder does not record)
SHAPES = {
    "rms_norm": {},
    "add_rms_norm": {},
    "qk_norm_rope": {"head_dim": 256},
    "head_norm_rope": {},
    "wht": {"n": 256},
    "q8_append": {"head_dim": 256},
    "turbo_append": {"head_dim": 256},
    "tq_append": {"head_dim": 256},
    "update_block_keys": {},
    "block_scores": {},
    "select": {"nblk": 512, "kblk": 32},
    "attention": {"kind": "q8", "nb": 1, "n_rep": 6},
    "gemv": {"kind": "q8", "nb": 1, "n_out": 5120},
}


def _module(name):
    return importlib.import_module(f"qwenref.gpu.{registry.family(name).module}")


def test_every_family_is_named_once_with_its_shape():
    assert set(SHAPES) == set(registry.FAMILIES)


@pytest.mark.parametrize("name", FAMILIES)
def test_default_is_one_of_the_rungs(name):
    fam = registry.family(name)
    rungs = fam.rungs
    assert rungs[0] == "v0" and len(rungs) >= 2 and len(set(rungs)) == len(rungs)
    if name == "attention":
        assert fam.default is None  # chosen per call by the plan
    else:
        assert fam.default in rungs
    with pytest.raises(ValueError, match="default"):
        registry.Family(fam.module, fam.kernels, "v9")


def _holds(src, kernel):
    """The module's source declares `kernel`: by name, or by a macro that pastes its name from a
    prefix it starts with (ATTN_PARTIALS(q8_q8, ...) -> attn_partials_##NAME)."""
    if re.search(rf"\b{kernel}\s*\(", src):
        return True
    return any(kernel.startswith(p) for p in re.findall(r"\b(\w+?)_?##", src))


@pytest.mark.parametrize("name", FAMILIES)
def test_every_rung_module_exists_and_holds_its_kernel(name):
    mod = _module(name)
    for rung, cu in registry.family(name).kernels.items():
        assert (kernels_dir() / f"{cu}.cu").is_file(), (name, rung, cu)
        kern = mod.rung_kernel(name, rung, **SHAPES[name])
        assert _holds(kernel_source(cu), kern), (name, rung, cu, kern)
        assert registry.kernel_module(name, rung) == cu


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="^family"):
        registry.family("norm")
    with pytest.raises(KeyError):
        registry.kernel_module("wht", "v2")


def _dispatching_modules():
    """The qwenref.gpu modules whose launches resolve a rung (they call resolve_rung), and
    attention, whose plan does."""
    calls = re.compile(r"(?<!def )resolve_rung\(")
    return sorted(p.stem for p in (PKG / "gpu").glob("*.py") if calls.search(p.read_text())) + [
        "attention"
    ]


def test_the_stage_modules_are_views_of_the_table():
    """RUNGS / DEFAULT_RUNG of every dispatching module are the table's rows for it, and each
    family's impl=None names its default's kernel."""
    modules = _dispatching_modules()
    assert set(modules) == {f.module for f in registry.FAMILIES.values()}
    for m in modules:
        mod = importlib.import_module(f"qwenref.gpu.{m}")
        assert mod.RUNGS == registry.rungs_of(m), m
        assert mod.DEFAULT_RUNG == registry.defaults_of(m), m
    for name, fam in registry.FAMILIES.items():
        if fam.default is not None:
            mod = _module(name)
            shape = SHAPES[name]
            assert mod.rung_kernel(name, None, **shape) == mod.rung_kernel(
                name, fam.default, **shape
            )
    att = importlib.import_module("qwenref.gpu.attention")
    assert att.KERNEL_MODULE == dict(registry.family("attention").kernels)
    assert att.IMPLS == registry.family("attention").rungs


def test_the_ladder_reads_the_table():
    """The ladder records the table's families (head_norm_rope has no ladder case), each with
    the table's rungs, in its order, and its stage module."""
    assert ladder.FAMILY_MODULE == registry.ladder_families()
    assert set(registry.FAMILIES) - set(ladder.FAMILY_MODULE) == {"head_norm_rope"}
    for name in ladder.FAMILY_MODULE:
        rungs, mod = ladder.family_rungs(name)
        assert rungs == registry.family(name).rungs
        assert mod is _module(name)


def test_ladder_runs_takes_keywords_after_ctx():
    import inspect

    params = list(inspect.signature(ladder.ladder_runs).parameters.values())
    assert params[0].name == "ctx"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])


# ---- no other module defines a default rung --------------------------------------------------
RUNG_NAMES = {r for f in registry.FAMILIES.values() for r in f.rungs}
TABLE = PKG / "gpu" / "rungs.py"


def _is_rung(node):
    return isinstance(node, ast.Constant) and node.value in RUNG_NAMES


def _literal(node):
    return isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set, ast.Constant))


def _defaults_defined(path):
    """["<file>:<line> <what>"] for each place the module states a default rung: RUNGS /
    DEFAULT_RUNG / *_DEFAULT* bound to a literal, a rung name given as default= or bound to a
    name with "default" in it, a {family: rung} dict, or a parameter defaulting to a rung."""
    rel, found = path.name if path.parent.name != "gpu" else f"gpu/{path.name}", []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                name = getattr(t, "id", "") or getattr(t, "attr", "")
                bad = name in ("RUNGS", "DEFAULT_RUNG") and _literal(node.value)
                bad |= "default" in name.lower() and _is_rung(node.value)
                if bad:
                    found.append(f"{rel}:{node.lineno} {name} = a literal")
        elif isinstance(node, ast.keyword) and node.arg == "default" and _is_rung(node.value):
            found.append(f"{rel}:{node.value.lineno} default={node.value.value!r}")
        elif isinstance(node, ast.Dict) and node.keys:
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            if set(keys) & set(registry.FAMILIES) and all(_is_rung(v) for v in node.values):
                found.append(f"{rel}:{node.lineno} a {{family: rung}} dict")
        elif isinstance(node, ast.arguments):
            for d in [*node.defaults, *node.kw_defaults]:
                if d is not None and _is_rung(d):
                    found.append(f"{rel}:{d.lineno} a parameter defaulting to {d.value!r}")
    return found


def test_the_scan_sees_a_default_rung(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        'DEFAULT_RUNG = {"wht": "v1"}\nf(default="v1")\nx_default = "v2"\ndef g(impl="mma"): ...'
    )
    assert len(_defaults_defined(probe)) == 5  # the dict counts twice: its name and shape


def test_no_module_but_the_table_defines_a_default_rung():
    found = [f for p in sorted(PKG.rglob("*.py")) if p != TABLE for f in _defaults_defined(p)]
    assert found == []
