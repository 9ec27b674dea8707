"""The package's shape, checked: imports point one way (no cycles, counting imports inside
functions too), no module reaches into another's private names (`_name`), no source file is
over the line budget, and a lesson module (qwenref/lessons/, a notebook's drawings and
printouts) imports only the library: nothing from qwenref.bench and no other lesson module but
lessons.common, the lesson modules' shared drawing and printing home. Private modules
(`_runtime`, `_args`, ...) are the exception to the second rule: inside the package their
names are public.

KNOWN lists the violations there are today, each as the exact string the checks report; they
are being removed, and a check fails on
any violation not in KNOWN and on any KNOWN entry that has gone (so the list only shrinks).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "qwenref"
MAX_LINES = 600

# Violations that remain, to be removed (not to be added to): lesson modules that still import
# the bench or another lesson module.
KNOWN = {
    "private": set(),
    "cycle": set(),
    "long": set(),
    "lesson": set(),
}
LESSONS = "qwenref.lessons"
SHARED_LESSON = "qwenref.lessons.common"  # the one lesson module the others may import


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
    base = base[: len(base) - (node.level - 1)]
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
                found.append(
                    (sub, None, node.lineno) if sub in MODULES else (target, a.name, node.lineno)
                )
    return [(t, n, ln) for t, n, ln in found if t == "qwenref" or t.startswith("qwenref.")]


def _private_uses():
    """{"<module> imports <_name> from <module>" | "<module> uses <alias>.<_name>": [lines]}."""
    found = {}
    for mod in MODULES:
        for target, name, line in _imports(mod):
            owner_private = any(_private(p) for p in target.split("."))
            if name and _private(name) and not owner_private and target != mod:
                found.setdefault(f"{mod} imports {name} from {target}", []).append(line)
        aliases = {
            a.asname or a.name.split(".")[-1]
            for node in ast.walk(MODULES[mod][1])
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for a in node.names
        }
        for node in ast.walk(MODULES[mod][1]):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.value.id not in ("self", "cls")
            ):
                found.setdefault(f"{mod} uses {node.value.id}.{node.attr}", []).append(node.lineno)
    return found


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


def _cycles():
    edges, state, path, cycles = _edges(), {}, [], []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                cycles.append(" -> ".join(path[path.index(n) :] + [n]))
            elif n not in state:
                visit(n)
        path.pop()
        state[m] = "done"

    for m in sorted(MODULES):
        if m not in state:
            visit(m)
    return cycles


def _lesson_imports():
    """{"<lesson module> imports <module>": [lines]} for each import of a lesson module that
    reaches into qwenref.bench, or into another lesson module than lessons.common."""
    found = {}
    for mod in MODULES:
        if not mod.startswith(LESSONS + "."):
            continue
        for target, _, line in _imports(mod):
            bench = target == "qwenref.bench" or target.startswith("qwenref.bench.")
            lesson = target.startswith(LESSONS + ".") and target not in (mod, SHARED_LESSON)
            if bench or lesson:
                found.setdefault(f"{mod} imports {target}", []).append(line)
    return found


def _sources():
    return sorted(list(PKG.rglob("*.py")) + list((ROOT / "kernels_cuda").glob("*.cu*")))


def _long_files():
    """{path relative to the repo root: line count} of the source files over MAX_LINES."""
    counts = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in _sources()}
    return {p: n for p, n in counts.items() if n > MAX_LINES}


def test_no_private_name_crosses_a_module():
    found = _private_uses()
    new = [
        f"{v} (line {', '.join(map(str, found[v]))})" for v in sorted(set(found) - KNOWN["private"])
    ]
    assert not new, "private names used across modules:\n" + "\n".join(new)


def test_imports_have_no_cycle():
    new = [c for c in _cycles() if c not in KNOWN["cycle"]]
    assert not new, "import cycles:\n" + "\n".join(new)


def test_no_source_file_is_over_the_line_budget():
    long = _long_files()
    new = [
        f"{p} has {long[p]} lines (> {MAX_LINES}): split it by job"
        for p in sorted(set(long) - KNOWN["long"])
    ]
    assert not new, "\n".join(new)


def test_lesson_modules_import_only_the_library():
    found = _lesson_imports()
    new = [
        f"{v} (line {', '.join(map(str, found[v]))})" for v in sorted(set(found) - KNOWN["lesson"])
    ]
    assert not new, (
        "lesson modules importing the bench or another lesson module (the computation belongs in "
        "the notebook's cells or the library, shared drawing in lessons.common):\n" + "\n".join(new)
    )


@pytest.mark.parametrize("kind", sorted(KNOWN))
def test_known_violations_are_still_there(kind):
    """A KNOWN entry that the checks no longer report was fixed: take it off the list."""
    found = {
        "private": set(_private_uses()),
        "cycle": set(_cycles()),
        "long": set(_long_files()),
        "lesson": set(_lesson_imports()),
    }[kind]
    gone = sorted(KNOWN[kind] - found)
    assert not gone, f"fixed, remove from KNOWN[{kind!r}]:\n" + "\n".join(gone)


LESSON_LINES = 2_500  # the notebooks' drawings and printouts, all of qwenref/lessons/


def test_the_lesson_modules_stay_small():
    """What a figure computes lives in its notebook; qwenref/lessons/ only draws and prints,
    so the whole package stays within LESSON_LINES."""
    n = sum(len(p.read_text().splitlines()) for p in (PKG / "lessons").glob("*.py"))
    assert n <= LESSON_LINES, f"qwenref/lessons/ has {n} lines (> {LESSON_LINES})"
