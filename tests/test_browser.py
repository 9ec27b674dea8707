"""The notebooks in a real browser: JupyterLab in headless Chromium runs every notebook and the
page must show what the kernel produced.

For each notebooks/<name>.ipynb, a copy without outputs goes to build/browser/ (JupyterLab saves
what it runs; the committed notebooks stay untouched, checked at the end). JupyterLab serves that
folder with a kernel on this interpreter and this checkout first on PYTHONPATH; Playwright drives
Chromium to open the notebook, run all cells and save it. Then:
- every code cell ran, in order, none raised, also not inside a widget (the failure names the
  cell and its traceback), and none wrote to stderr: the notebooks print no warnings;
- every image/png output shows as a decoded <img> and every widget output as a rendered
  ipywidget (sliders included) in the page, with the figures an `interact` draws into it;
- the figures and widgets per cell match a headless run of the same notebook on the CPU
  (`python -m qwenref.notebooks`, run alongside into build/browser/cpu/);
- a screenshot of the whole notebook goes to build/browser/screenshots/<name>.png.
A probe notebook (a figure, an `interact` slider drawing one, an `interact` whose function
raises, a warning, an exception) runs first and shows that these checks see what they look for.

Needs Chromium (`chromium` on PATH, or $QWENREF_CHROMIUM) and Playwright for Python (the
`browser` extra; Playwright's own browser download is not used). Without them the tests skip,
unless QWENREF_BROWSER=1 (CI), where they fail. $QWENREF_BROWSER_TIMEOUT: seconds per notebook.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_lab import (
    CHROMIUM_ARGS,
    LabPage,
    LabServer,
    find_chromium,
    output_summary,
    problems,
    strip_outputs,
)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
OUT = ROOT / "build" / "browser"
TIMEOUT = float(os.environ.get("QWENREF_BROWSER_TIMEOUT", "600"))
REQUIRED = os.environ.get("QWENREF_BROWSER") == "1"

PROBE_CELLS = [
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
    "from ipywidgets import interact\n\n\n"
    "def draw(n=3):\n    plt.plot(range(n))\n    plt.show()\n\n\n"
    "interact(draw, n=(1, 10));",
    "def broken(k=1):\n    raise ValueError('probe widget boom')\n\n\ninteract(broken, k=(0, 2));",
    "import warnings\nwarnings.warn('probe warning')",
    "raise ValueError('probe boom')",
    "print('not reached: run-all stops at the error')",
]


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for module, hint in (
        ("playwright", "pip install -e '.[browser]'"),
        ("jupyterlab", "the notebooks extra"),
        ("ipykernel", "the notebooks extra"),
        ("nbclient", "the notebooks extra"),
    ):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed ({hint})"
    if find_chromium() is None:
        return "no Chromium found (apt-get install chromium, or set QWENREF_CHROMIUM)"
    return None


def _write_probe(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in PROBE_CELLS]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


class CpuReference:
    """`python -m qwenref.notebooks` executing every notebook headless into OUT/cpu/, started
    in the background so it runs while the browser works; `summary(name)` waits for one."""

    def __init__(self, out: Path, names: list[str], env: dict):
        self.out = out
        self.log = out.parent / "cpu.log"
        cmd = [sys.executable, "-m", "qwenref.notebooks", "--out", str(out), *names]
        with open(self.log, "w") as logf:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=logf, stderr=logf)

    def _reported(self, name: str) -> bool:
        """The runner prints a notebook's ok/FAILED line after writing its executed copy."""
        return any(
            l.split()[1:2] == [name]
            for l in self.log.read_text(errors="replace").splitlines()
            if l.strip().startswith(("ok", "FAILED"))
        )

    def summary(self, name: str, timeout: float):
        deadline = time.monotonic() + timeout
        while not self._reported(name):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the CPU run did not execute {name}; see {self.log}")
            time.sleep(1)
        return output_summary(json.loads((self.out / name).read_text(encoding="utf-8")))

    def stop(self):
        """SIGINT first: the runner then shuts its kernel down; SIGTERM would orphan it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def committed():
    """The committed notebooks' bytes before anything runs."""
    return {p.name: p.read_bytes() for p in NOTEBOOKS}


def _selected(session) -> list[Path]:
    """The notebooks whose test this session runs (all of them, unless -k narrows it)."""
    names = {
        item.callspec.params["nb"].name
        for item in session.items
        if item.name.startswith("test_notebook_in_browser[")
    }
    return [p for p in NOTEBOOKS if p.name in names]


@pytest.fixture(scope="module")
def lab(request, committed):
    """(LabPage, CpuReference): JupyterLab on OUT in headless Chromium, copies in place."""
    why = _missing()
    if why:
        if REQUIRED:
            pytest.fail(f"QWENREF_BROWSER=1 but {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    shutil.rmtree(OUT, ignore_errors=True)
    (OUT / "probe").mkdir(parents=True)
    selected = _selected(request.session)
    for nb in selected:
        strip_outputs(nb, OUT / nb.name)
    _write_probe(OUT / "probe" / "checks.ipynb")

    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    reference = CpuReference(OUT / "cpu", [p.name for p in selected], env) if selected else None
    try:
        with LabServer(OUT, OUT / "jupyterlab.log", pythonpath=[ROOT]) as server:
            with sync_playwright() as pw:
                context = pw.chromium.launch_persistent_context(
                    str(OUT / "chromium-profile"),  # a fresh profile: OUT was just emptied
                    executable_path=find_chromium(),
                    args=CHROMIUM_ARGS,
                    headless=True,
                )
                try:
                    page = context.pages[0] if context.pages else context.new_page()
                    yield LabPage(page, server), reference
                finally:
                    context.close()
    finally:
        if reference:
            reference.stop()


def _run(lab_page: LabPage, path: str):
    """Run one notebook in the page and picture it; closed again whatever happens."""
    try:
        run = lab_page.run(path, TIMEOUT)
        lab_page.screenshot(OUT / "screenshots" / f"{Path(path).stem}.png")
    finally:
        lab_page.close_notebook()
    return run


def test_probe_notebook_shows_the_checks_work(lab):
    """A figure and a slider drawing a figure render; an exception inside a widget, a warning
    and an exception are reported, with the exceptions' text; run-all stops at the exception."""
    lab_page, _ = lab
    run = _run(lab_page, "probe/checks.ipynb")
    found = problems(run)
    assert len(found) == 3, found
    assert "raised (inside a widget) ValueError: probe widget boom" in found[0], found
    assert "wrote to stderr" in found[1] and "probe warning" in found[1], found
    assert "raised ValueError: probe boom" in found[2], found
    plot, slider = run.cells[0], run.cells[1]
    assert (plot["png"], run.dom[0]["png"]) == (1, 1), (plot, run.dom[0])
    shown = run.dom[1]
    assert (slider["widgets"], shown["widgets"], shown["sliders"]) == (1, 1, 1), shown
    assert (slider["png"], slider["widget_png"], shown["widget_png"]) == (0, 1, 1), (slider, shown)
    assert run.cells[-1]["count"] is None, "the cell after the exception ran"


def _compare_with_cpu(name, browser, cpu) -> list[str]:
    """Cells whose figures or widgets differ between the browser run and the headless run."""
    out = []
    for i, (b, c) in enumerate(zip(browser, cpu)):
        if b is None or c is None:
            continue
        for key, what in (
            ("png", "image/png outputs"),
            ("widget_png", "images inside widgets"),
            ("widgets", "widget outputs"),
        ):
            if b[key] != c[key]:
                out.append(f"{name} cell {i}: {b[key]} {what} in the browser, {c[key]} headless")
    return out


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_in_browser(lab, nb):
    lab_page, reference = lab
    run = _run(lab_page, nb.name)
    found = problems(run)
    if found:
        pytest.fail("\n\n".join(found), pytrace=False)
    found = _compare_with_cpu(nb.name, run.cells, reference.summary(nb.name, TIMEOUT))
    if found:
        pytest.fail("\n".join(found), pytrace=False)
    shown = sum(d["png"] + d["widget_png"] for d in run.dom if d)
    print(f"{nb.name}: {shown} figures shown, {run.seconds:.0f} s")


def test_committed_notebooks_untouched(committed):
    now = {p.name: p.read_bytes() for p in NOTEBOOKS}
    changed = sorted(n for n in committed if now.get(n) != committed[n])
    assert not changed and now.keys() == committed.keys(), f"notebooks/ changed: {changed}"
