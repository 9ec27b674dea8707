"""The package's shape, checked: imports point one way (no cycles, counting imports inside
functions too) and no module reaches into another's private names (`_name`). Private modules
(`_runtime`, `_args`, ...) are the exception: inside the package their names are public."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "qwenref"
MAX_LINES = 600

# Known breaches, being removed: each is someone's work in progress, so it passes here, while
# anything not listed fails. Entries name no line numbers (edits nearby must not matter); drop
# an entry once its breach is gone.
KNOWN = {
    # gpu modules reaching into golden's private helpers (cache layouts, argument checks)
    "qwenref.gpu.attention imports _side_kinds from qwenref.golden.kvcache",
    "qwenref.gpu.kvcache uses _golden._KVCacheState",
    "qwenref.gpu.kvcache uses _golden._check_bits",
    "qwenref.gpu.kvcache uses _golden._side_bytes_per_head",
    "qwenref.gpu.kvcache uses _golden._turbo_bits",
    "qwenref.gpu.layer imports _check_layer_args from qwenref.golden.layer",
    "qwenref.gpu.layer imports _check_weights from qwenref.golden.layer",
    # files over the line budget
    "kernels_cuda/attention.cu is over the line budget",
    "kernels_cuda/indexer.cu is over the line budget",
    "qwenref/gpu/attention.py is over the line budget",
}


def _modules():
    """{dotted name: (path, ast)} of every module in qwenref."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = (p, ast.parse(p.read_text()))
    return out


MODULES = _modules()


def _resolve(mod, node):
    """The absolute module a `from ... import` names, relative levels resolved."""
    if node.level == 0:
        return node.module or ""
    is_pkg = MODULES[mod][0].name == "__init__.py"
    base = mod.split(".")
    base = base if is_pkg else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _imports(mod):
    """[(target module, imported name or None, line)] of every import in mod, at any depth."""
    found = []
    for node in ast.walk(MODULES[mod][1]):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(mod, node)
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((sub, None, node.lineno) if sub in MODULES
                             else (target, a.name, node.lineno))
    return [(t, n, ln) for t, n, ln in found if t == "qwenref" or t.startswith("qwenref.")]


def test_no_private_name_crosses_a_module():
    bad = []
    for mod in MODULES:
        for target, name, line in _imports(mod):
            owner_private = any(_private(p) for p in target.split("."))
            if name and _private(name) and not owner_private and target != mod:
                bad.append((line, f"{mod} imports {name} from {target}"))
        aliases = {a.asname or a.name.split(".")[-1]
                   for node in ast.walk(MODULES[mod][1])
                   if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
        for node in ast.walk(MODULES[mod][1]):
            if (isinstance(node, ast.Attribute) and _private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.value.id not in ("self", "cls")):
                bad.append((node.lineno, f"{mod} uses {node.value.id}.{node.attr}"))
    new = sorted(f"{what} (line {line})" for line, what in bad if what not in KNOWN)
    assert not new, "private names used across modules:\n" + "\n".join(new)


def _edges():
    edges = {m: set() for m in MODULES}
    for mod in MODULES:
        for target, _, _ in _imports(mod):
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            # a package's __init__ re-exporting its submodules is not a dependency back
            if target in MODULES and target != mod and not mod.startswith(target + "."):
                edges[mod].add(target)
    return edges


def test_imports_have_no_cycle():
    edges, state, path, cycles = _edges(), {}, [], []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                cycles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in state:
                visit(n)
        path.pop()
        state[m] = "done"
    for m in sorted(MODULES):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("path", sorted(list(PKG.rglob("*.py"))
                                        + list((PKG.parent / "kernels_cuda").glob("*.cu*"))),
                         ids=lambda p: p.name)
def test_no_source_file_is_over_the_line_budget(path):
    n = len(path.read_text().splitlines())
    known = f"{path.relative_to(PKG.parent).as_posix()} is over the line budget" in KNOWN
    assert n <= MAX_LINES or known, f"{path.name} has {n} lines (> {MAX_LINES}): split it by job"
