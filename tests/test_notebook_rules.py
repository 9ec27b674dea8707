"""The rules every committed notebook keeps, so a learner's path stays readable: short cells,
short outputs, nothing on stderr, the same opening box and closing sections, no machine's
paths and no documents the repository does not hold, and one lesson module imported under one
name, `lesson`. (nbval checks that the cells run; test_browser that they render.)"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IDS = [p.name for p in NOTEBOOKS]
MAX_CELL_LINES = 30  # a cell a reader takes in at a glance
MAX_OUTPUT_LINES = 60  # about one screen
# an absolute path (not a URL's): a machine's, which no reader has
ABS_PATH = re.compile(r"(?<![\w.:/~-])/[\w.-]+/[\w.-]+")
# a Markdown document named by file name: it must be one of the repo's
DOC = re.compile(r"\b([\w/.-]+\.md)\b")
LESSONS = "qwenref.lessons"
# notebooks that still import their lesson modules otherwise, to be converted (the list only
# shrinks)
KNOWN_LESSON_IMPORTS = set()


def _cells(nb):
    return json.loads(nb.read_text())["cells"]


def _text(cell):
    return "".join(cell["source"])


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_cells_are_short(nb):
    long = [
        (i, _text(c).count("\n") + 1)
        for i, c in enumerate(_cells(nb))
        if c["cell_type"] == "code" and _text(c).count("\n") + 1 > MAX_CELL_LINES
    ]
    assert not long, f"{nb.name}: code cells over {MAX_CELL_LINES} lines (cell, lines): {long}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_outputs_are_short_and_nothing_on_stderr(nb):
    for i, c in enumerate(_cells(nb)):
        for o in c.get("outputs", []):
            assert o.get("name") != "stderr", f"{nb.name} cell {i}: stderr output committed"
            text = "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
            n = text.count("\n")
            assert n <= MAX_OUTPUT_LINES, f"{nb.name} cell {i}: output of {n} lines"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_opens_with_the_box_and_ends_with_exercises(nb):
    cells = _cells(nb)
    box = _text(cells[0]).lower()
    assert cells[0]["cell_type"] == "markdown"
    for part in ("you will learn", "you need", "run time"):
        assert part in box, f"{nb.name}: the opening box lacks {part!r}"
    headings = [_text(c).lower() for c in cells if c["cell_type"] == "markdown"]
    assert any("take-away" in h or "takeaway" in h for h in headings), f"{nb.name}: no take-away"
    assert any("exercises" in h for h in headings), f"{nb.name}: no exercises"
    assert any("solution" in h for h in headings), f"{nb.name}: no solutions"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_speaks_of_itself_alone(nb):
    """No machine's paths, and every document cited is one the repository holds."""
    docs = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    for i, c in enumerate(_cells(nb)):
        texts = [_text(c)] + ["".join(o.get("text", "")) for o in c.get("outputs", [])]
        for t in texts:
            m = ABS_PATH.search(t)
            assert not m, f"{nb.name} cell {i}: an absolute path {m.group(0)!r}"
            for d in DOC.findall(t):
                assert Path(d).name in docs, f"{nb.name} cell {i}: cites {d}, not in the repo"


def _lesson_imports(nb):
    """[(lesson module, the name it is bound to)] of every import of qwenref.lessons in the
    notebook's code cells (IPython's % and ! lines left out); names taken out of a lesson
    module (`from qwenref.lessons.x import f`) are bound to no module name: (x, None)."""
    found = []
    for i, c in enumerate(_cells(nb)):
        if c["cell_type"] != "code":
            continue
        lines = _text(c).splitlines()
        src = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            pytest.fail(f"{nb.name} cell {i}: not Python ({e})")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [
                    (a.name.removeprefix(LESSONS + "."), a.asname)
                    for a in node.names
                    if a.name.startswith(LESSONS + ".")
                ]
            elif isinstance(node, ast.ImportFrom) and node.module == LESSONS:
                found += [(a.name, a.asname) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(LESSONS + "."):
                found.append((node.module.removeprefix(LESSONS + "."), None))
    return found


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_imports_one_lesson_module_as_lesson(nb):
    """A notebook's lesson module (its drawings and printouts) is one module, always called
    `lesson`, so a reader knows what `lesson.` names without looking it up."""
    found = _lesson_imports(nb)
    ok = len({m for m, _ in found}) <= 1 and all(name == "lesson" for _, name in found)
    if nb.name in KNOWN_LESSON_IMPORTS:
        assert not ok, f"{nb.name} keeps the rule now: take it off KNOWN_LESSON_IMPORTS"
        return
    assert ok, f"{nb.name}: lesson imports (module, name) {found}; want one module, as `lesson`"
