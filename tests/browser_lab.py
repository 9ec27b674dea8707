"""JupyterLab in headless Chromium, for tests/test_browser.py.

`LabServer` starts JupyterLab on a folder of notebooks (a free localhost port, a fresh token,
its own Jupyter config/data/settings folders, a `python3` kernel on this interpreter) and
`LabPage` drives it through Playwright: open a notebook, run all cells, save it, read back what
the kernel produced (from the saved file) and what the page shows (from the DOM), take a
screenshot of the whole notebook. `problems()` compares the two and lists what is wrong.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CHROMIUM_ARGS",
    "find_chromium",
    "strip_outputs",
    "output_summary",
    "LabServer",
    "LabPage",
    "NotebookRun",
    "problems",
]

# Without the background-networking flags Chromium keeps calling home, and a closed network
# answers with refused connections; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

# JupyterLab user settings (plugin -> values) for a deterministic, fully rendered page:
# windowingMode "none" attaches every cell to the DOM (the default attaches only those in view,
# so images below the fold would not count); no autosave, so only our explicit save writes the
# file; widget state saved with it (as nbclient does), so the figures an `interact` draws into
# its output widget can be counted; no news or update check (they would fetch from the internet
# and show a toast).
LAB_SETTINGS = {
    "@jupyter-widgets/jupyterlab-manager/plugin": {"saveState": True},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none", "scrollPastEnd": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def find_chromium() -> str | None:
    """$QWENREF_CHROMIUM, else the first Chromium-like browser on PATH."""
    env = os.environ.get("QWENREF_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def strip_outputs(src: Path, dest: Path) -> None:
    """Copy a notebook without outputs, execution counts or saved widget state, so that
    everything the page shows afterwards comes from this run."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    nb.get("metadata", {}).pop("widgets", None)
    dest.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _text(x) -> str:
    return "".join(x) if isinstance(x, list) else (x or "")


def _widget_state(nb: dict) -> dict:
    """model id -> model, as saved in the notebook's metadata (empty when none was saved)."""
    saved = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {})
    return saved.get("state", {})


def _model_refs(value) -> list[str]:
    """Ids of the widget models a model's state points at ("IPY_MODEL_<id>"), e.g. children."""
    if isinstance(value, str):
        return [value[len("IPY_MODEL_") :]] if value.startswith("IPY_MODEL_") else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [r for v in value for r in _model_refs(v)]
    return []


def _add_outputs(s: dict, outputs: list, where: str = "") -> None:
    """Count one list of outputs into summary s (where: a note for outputs inside a widget)."""
    for o in outputs:
        data = o.get("data", {})
        s["widget_png" if where else "png"] += "image/png" in data
        s["widgets"] += WIDGET_VIEW in data and not where
        if o.get("output_type") == "stream" and o.get("name") == "stderr":
            s["stderr"].append(where + _text(o.get("text")))
        if o.get("output_type") == "error":
            tb = _ANSI.sub("", "\n".join(o.get("traceback", [])))
            s["errors"].append(f"{where}{o.get('ename')}: {o.get('evalue')}\n{tb}")


def _add_widget(s: dict, state: dict, model_id: str, seen: set) -> None:
    """Count the outputs held by Output widgets in model_id and the widgets it contains
    (an `interact` draws its figure into one)."""
    if model_id in seen or model_id not in state:
        return
    seen.add(model_id)
    model = state[model_id].get("state", {})
    _add_outputs(s, model.get("outputs", []), where="(inside a widget) ")
    for ref in _model_refs(model):
        _add_widget(s, state, ref, seen)


def output_summary(nb: dict) -> list[dict | None]:
    """Per cell (None for markdown/raw): what its outputs hold, as the saved .ipynb says:
    image/png outputs (`png`), widget views (`widgets`), images inside those widgets
    (`widget_png`, from the saved widget state), stderr texts and error tracebacks, these two
    from the outputs and from inside widgets."""
    state = _widget_state(nb)
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            out.append(None)
            continue
        s = {
            "source": _text(cell["source"]),
            "count": cell.get("execution_count"),
            **dict.fromkeys(("png", "widgets", "widget_png"), 0),
            "stderr": [],
            "errors": [],
        }
        _add_outputs(s, cell.get("outputs", []))
        seen = set()
        for o in cell.get("outputs", []):
            view = o.get("data", {}).get(WIDGET_VIEW)
            if view:
                _add_widget(s, state, view.get("model_id"), seen)
        out.append(s)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """JupyterLab serving `root`, isolated from the user's Jupyter setup. Use as a context
    manager; the server's output goes to `log`."""

    def __init__(self, root: Path, log: Path, pythonpath: list[Path] = (), start_timeout=120):
        self.root = root.resolve()
        self.log = log
        self.pythonpath = [str(p) for p in pythonpath]
        self.start_timeout = start_timeout
        self.token = secrets.token_hex(16)
        self.port = None
        self.proc = None

    def url(self, path: str = "lab") -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def _env(self) -> dict:
        home = self.root / ".lab"
        dirs = {
            "JUPYTER_CONFIG_DIR": home / "config",
            "JUPYTER_DATA_DIR": home / "data",
            "JUPYTER_RUNTIME_DIR": home / "runtime",
            "JUPYTERLAB_SETTINGS_DIR": home / "settings",
            "JUPYTERLAB_WORKSPACES_DIR": home / "workspaces",
        }
        shutil.rmtree(home, ignore_errors=True)
        for d in dirs.values():
            d.mkdir(parents=True)
        # the kernel: ipykernel on this interpreter, whatever `python3` spec is installed
        # elsewhere (the data dir comes first in Jupyter's search path)
        spec = dirs["JUPYTER_DATA_DIR"] / "kernels" / "python3"
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        spec_json = {"argv": argv, "display_name": "Python 3", "language": "python"}
        (spec / "kernel.json").write_text(json.dumps(spec_json))
        for plugin, values in LAB_SETTINGS.items():
            f = dirs["JUPYTERLAB_SETTINGS_DIR"] / f"{plugin}.jupyterlab-settings"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(values))
        path = os.pathsep.join(filter(None, [*self.pythonpath, os.environ.get("PYTHONPATH")]))
        return {**os.environ, **{k: str(v) for k, v in dirs.items()}, "PYTHONPATH": path}

    def __enter__(self):
        self.port = _free_port()
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={self.root}",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # the "pypi" one queries PyPI
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # CI's containers run as root
        self.log.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log, "w")
        self.proc = subprocess.Popen(
            cmd, cwd=self.root, env=self._env(), stdout=logf, stderr=subprocess.STDOUT
        )
        logf.close()
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"JupyterLab did not answer in {self.start_timeout} s")
            time.sleep(0.5)

    def tail(self, n=40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class NotebookRun:
    """One notebook run in the page: the saved file's outputs per cell (`cells`) and what the
    page rendered per cell (`dom`, aligned with `cells`), plus a note when the run did not
    finish (timeout, dead kernel)."""

    name: str
    cells: list = field(default_factory=list)
    dom: list = field(default_factory=list)
    unfinished: str = ""
    seconds: float = 0.0


# --- the JavaScript side; `window.jupyterapp` exists thanks to expose_app_in_browser ----------

# page.evaluate has no timeout of its own: each awaited step here gets one, so that a kernel
# that never starts fails the test instead of hanging it
_JS_WITHIN = """const within = (promise, seconds, what) => Promise.race([promise,
  new Promise((_, reject) => setTimeout(
      () => reject(new Error(`${what}: not done within ${seconds} s`)), seconds * 1000))]);"""

_JS_READY = (
    """async () => {
  %s
  const app = window.jupyterapp;
  await within(app.started, 120, 'JupyterLab start');
  await within(app.restored, 120, 'JupyterLab restore');
  app.shell.mode = 'single-document';
  app.shell.collapseLeft();
  app.shell.collapseRight();
}"""
    % _JS_WITHIN
)

_JS_OPEN = (
    """async (path) => {
  %s
  const app = window.jupyterapp;
  const panel = await within(app.commands.execute('docmanager:open',
      {path, factory: 'Notebook', kernel: {name: 'python3'}}), 120, `opening ${path}`);
  window.qwenrefPanel = panel;
  await within(panel.context.ready, 120, `loading ${path}`);
  await within(panel.sessionContext.ready, 120, `starting the kernel of ${path}`);
  app.shell.activateById(panel.id);
}"""
    % _JS_WITHIN
)

_JS_KERNEL_IDLE = """() => {
  const k = window.qwenrefPanel.sessionContext.session?.kernel;
  return !!k && k.status === 'idle' && k.connectionStatus === 'connected';
}"""

# run-all acts on the current notebook: refuse to run if that is not ours
_JS_RUN_ALL = """() => {
  const app = window.jupyterapp, panel = window.qwenrefPanel;
  app.shell.activateById(panel.id);
  if (app.shell.currentWidget !== panel) throw new Error('the notebook is not the current widget');
  app.commands.execute('notebook:run-all-cells');
}"""

_JS_PROGRESS = """() => {
  const panel = window.qwenrefPanel;
  const k = panel.sessionContext.session?.kernel;
  let todo = 0, errors = 0, last = -1;
  panel.content.widgets.forEach((c, i) => {
    if (c.model.type !== 'code' || !c.model.sharedModel.getSource().trim()) return;
    if (c.model.executionCount === null) todo += 1; else last = i;
    for (let j = 0; j < c.model.outputs.length; j++)
      errors += c.model.outputs.get(j).type === 'error';
  });
  return {status: k ? k.status : 'no kernel', todo, errors, last};
}"""

_JS_SAVE = (
    """async () => {
  %s
  await within(window.qwenrefPanel.context.save(), 120, 'saving the notebook');
}"""
    % _JS_WITHIN
)

# Per cell (null for non-code cells): decoded images with a real size, outside widgets and
# inside them; output items holding a rendered widget; sliders; widgets that failed to render;
# stderr items. A widget's own output area nests inside the cell's, hence the closest() tests.
_JS_DOM = """() => window.qwenrefPanel.content.widgets.map(c => {
  if (c.model.type !== 'code') return null;
  const items = [...c.node.querySelectorAll('.jp-OutputArea-output')]
      .filter(o => !o.parentElement.closest('.jupyter-widgets'));
  const imgs = [...c.node.querySelectorAll('.jp-OutputArea-output img')]
      .filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0);
  return {
    png: imgs.filter(i => !i.closest('.jupyter-widgets')).length,
    widget_png: imgs.filter(i => i.closest('.jupyter-widgets')).length,
    widgets: items.filter(o => o.querySelector('.jupyter-widgets')).length,
    sliders: c.node.querySelectorAll('.jp-OutputArea-output .widget-slider').length,
    widget_errors: items.filter(o => /Error displaying widget/.test(o.textContent)).length,
    stderr: c.node.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]').length,
  };
})"""

# the height the page needs so the notebook's scroll container no longer scrolls
_JS_FULL_HEIGHT = """() => {
  const nb = window.qwenrefPanel.content, s = nb.outerNode ?? nb.node;
  return window.innerHeight + Math.max(0, s.scrollHeight - s.clientHeight);
}"""
_JS_TWO_FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"

# a kernel that will not shut down is left to the server, which stops it on exit
_JS_CLOSE = (
    """async () => {
  %s
  const panel = window.qwenrefPanel;
  window.qwenrefPanel = null;
  if (!panel) return;
  try { await within(panel.sessionContext.shutdown(), 30, 'kernel shutdown'); } catch (e) {}
  panel.dispose();
}"""
    % _JS_WITHIN
)


class LabPage:
    """A Playwright page on a LabServer. `run(name)` opens root/name, runs all cells, saves,
    and returns a NotebookRun; `screenshot(path)` pictures the open notebook whole."""

    WIDTH, HEIGHT = 1280, 900
    MAX_HEIGHT = 32000  # px; bounds one capture (~160 MB of pixels), far above any notebook here

    def __init__(self, page, server: LabServer):
        self.page = page
        self.server = server
        page.set_viewport_size({"width": self.WIDTH, "height": self.HEIGHT})
        page.goto(server.url("lab"), timeout=120_000)
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
        page.evaluate(_JS_READY)

    def _wait(self, js, what, timeout):
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            self.page.wait_for_function(js, timeout=timeout * 1000, polling=250)
        except PlaywrightTimeout as e:
            raise RuntimeError(f"{what} within {timeout} s") from e

    def run(self, name: str, timeout: float) -> NotebookRun:
        t0 = time.monotonic()
        run = NotebookRun(name)
        self.page.evaluate(_JS_OPEN, name)
        self._wait(_JS_KERNEL_IDLE, f"{name}: the kernel was not idle", 120)
        self.page.evaluate(_JS_RUN_ALL)
        stable = 0
        deadline = t0 + timeout
        while True:
            time.sleep(0.5)
            p = self.page.evaluate(_JS_PROGRESS)
            if p["status"] in ("dead", "no kernel", "unknown"):
                run.unfinished = f"the kernel is {p['status']}"
                break
            # finished: every code cell ran, or one raised (run-all stops there); the kernel must
            # be idle on two polls in a row, as it goes idle between cells too
            finished = p["status"] == "idle" and (p["todo"] == 0 or p["errors"] > 0)
            stable = stable + 1 if finished else 0
            if stable >= 2:
                break
            if time.monotonic() > deadline:
                run.unfinished = (
                    f"not finished after {timeout:.0f} s: {p['todo']} code cells still to run, "
                    f"kernel {p['status']}, last finished cell {p['last']}"
                )
                break
        self.page.evaluate(_JS_SAVE)
        run.cells = output_summary(json.loads((self.server.root / name).read_text("utf-8")))
        run.dom = self._settled_dom(run.cells)
        run.seconds = time.monotonic() - t0
        return run

    def _settled_dom(self, cells, timeout=30):
        """The DOM counts, once images have decoded and widgets rendered (both asynchronous):
        polled until they match the file or `timeout` s pass."""
        deadline = time.monotonic() + timeout
        while True:
            dom = self.page.evaluate(_JS_DOM)
            if not problems_in_dom(cells, dom) or time.monotonic() > deadline:
                return dom
            time.sleep(0.5)

    def screenshot(self, path: Path) -> None:
        """Grow the page until the whole notebook fits, then capture it. Growing the page can
        grow the notebook a little (some of its padding follows the page), hence the loop."""
        height = self.HEIGHT
        for _ in range(4):
            need = min(self.page.evaluate(_JS_FULL_HEIGHT), self.MAX_HEIGHT)
            if need <= height:
                break
            height = need
            self.page.set_viewport_size({"width": self.WIDTH, "height": height})
            self.page.evaluate(_JS_TWO_FRAMES)  # the shell lays out again on resize
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        self.page.set_viewport_size({"width": self.WIDTH, "height": self.HEIGHT})

    def close_notebook(self) -> None:
        self.page.evaluate(_JS_CLOSE)


def _where(run_name, i, cell) -> str:
    first = next((l for l in cell["source"].splitlines() if l.strip()), "")
    return f"{run_name} cell {i} ({first[:60]!r})"


def problems_in_dom(cells, dom) -> list[str]:
    """Where the page shows other numbers of images or widgets than the saved file holds."""
    out = []
    for i, (cell, seen) in enumerate(zip(cells, dom)):
        if cell is None or seen is None:
            continue
        for key, what in (
            ("png", "image/png outputs"),
            ("widget_png", "images inside widgets"),
            ("widgets", "widget outputs"),
        ):
            if seen[key] != cell[key]:
                out.append(f"cell {i}: {cell[key]} {what} saved, {seen[key]} shown")
        if seen["widget_errors"]:
            out.append(f"cell {i}: {seen['widget_errors']} widgets failed to display")
    if len(cells) != len(dom):
        out.append(f"{len(cells)} cells in the saved file, {len(dom)} in the page")
    return out


def problems(run: NotebookRun) -> list[str]:
    """Everything wrong with a run: unfinished, cells not run in order, errors (with their
    traceback), anything on stderr, images or widgets the page did not render."""
    out = [f"{run.name}: {run.unfinished}"] if run.unfinished else []
    code = [(i, c) for i, c in enumerate(run.cells) if c is not None and c["source"].strip()]
    for i, c in code:
        for err in c["errors"]:
            out.append(f"{_where(run.name, i, c)} raised {err}")
        for text in c["stderr"]:
            out.append(f"{_where(run.name, i, c)} wrote to stderr:\n{text}")
    counts = [c["count"] for _, c in code]
    if not out and (None in counts or any(b <= a for a, b in zip(counts, counts[1:]))):
        out.append(f"{run.name}: code cells not all run in order: execution counts {counts}")
    out += [f"{run.name} {p}" for p in problems_in_dom(run.cells, run.dom)]
    stderr_shown = sum(d["stderr"] for d in run.dom if d)
    stderr_saved = sum(len(c["stderr"]) for c in run.cells if c)
    if stderr_shown and not stderr_saved:
        out.append(f"{run.name}: the page shows {stderr_shown} stderr outputs")
    return out
