"""The rules every committed notebook keeps, so a learner's path stays readable: short cells,
short outputs, nothing on stderr, the same opening box and closing sections, no machine's
paths and no documents the repository does not hold. (nbval checks that the cells run;
test_browser that they render.)"""

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
