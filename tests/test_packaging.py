"""Packaging stays honest: pyproject.toml and environment.yml name the same packages, every
Python subpackage and every kernels_cuda/*.cu is shipped, and a real wheel contains them."""

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _key(spec: str) -> tuple:
    r = Requirement(spec)
    return re.sub(r"[-_.]+", "-", r.name).lower(), str(r.specifier)


def test_environment_yml_lists_the_pyproject_packages():
    proj = PYPROJECT["project"]
    want = {_key(s) for s in proj["dependencies"]}
    for extra in proj["optional-dependencies"].values():
        want |= {_key(s) for s in extra}

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_lists = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert len(pip_lists) == 1, "environment.yml: expected one pip: section"
    # skip pip options and the project itself ("-e .")
    got = {_key(s) for s in pip_lists[0] if not s.startswith("-")}
    assert got == want, (
        f"only in pyproject: {sorted(want - got)}; only in environment.yml: {sorted(got - want)}"
    )

    conda_python = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert conda_python == [f"python{proj['requires-python']}"]


def test_every_python_package_is_listed():
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "qwenref").rglob("__init__.py")
    }
    listed = set(SETUPTOOLS["packages"])
    assert on_disk <= listed, f"packages missing from pyproject.toml: {sorted(on_disk - listed)}"


def test_kernels_are_package_data():
    assert SETUPTOOLS["package-dir"].get("qwenref.kernels_cuda") == "kernels_cuda"
    assert "qwenref.kernels_cuda" in SETUPTOOLS["packages"]
    patterns = SETUPTOOLS["package-data"]["qwenref.kernels_cuda"]
    for cu in [*(ROOT / "kernels_cuda").glob("*.cu"), *(ROOT / "kernels_cuda").glob("*.cuh")]:
        assert any(fnmatch.fnmatch(cu.name, p) for p in patterns), f"{cu.name} is not package data"


def test_wheel_contains_package_and_kernels(tmp_path):
    """Build a real (non-editable) wheel from a copy of the sources and look inside."""
    pytest.importorskip("setuptools", reason="a wheel built without isolation needs setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.o")
    shutil.copytree(ROOT / "qwenref", src / "qwenref", ignore=ignore)
    shutil.copytree(ROOT / "kernels_cuda", src / "kernels_cuda", ignore=ignore)
    # a kernel named here proves the glob, even before real kernels exist
    (src / "kernels_cuda" / "zz_probe.cu").write_text('extern "C" __global__ void zz() {}\n')

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = (tmp_path / "dist").glob("qwenref-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())

    want = {f"qwenref/kernels_cuda/{p.name}" for p in (src / "kernels_cuda").glob("*.cu*")}
    want |= {str(p.relative_to(src)) for p in (src / "qwenref").rglob("*.py")}
    assert want <= names, f"missing from the wheel: {sorted(want - names)}"
    assert not any(n.startswith("kernels_cuda/") for n in names), "kernels must sit under qwenref/"


# ---- the entry points the README names ---------------------------------------------------------


def test_demo_runs():
    r = subprocess.run(
        [sys.executable, "-m", "qwenref.demo", "--decode", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = dict(re.findall(r"^(turbo[2348])\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.e+-]+)", r.stdout, re.M))
    assert set(rows) == {"turbo8", "turbo4", "turbo3", "turbo2"}, r.stdout
    # fewer bits, larger error: a demo printing the same number for every kind would fail here
    errs = [float(rows[k]) for k in ("turbo8", "turbo4", "turbo3", "turbo2")]
    assert errs == sorted(errs) and errs[0] > 0, rows


def test_readme_library_snippet_prints_what_it_says():
    """The README's "As a library" snippet runs and prints the lines its closing comments show."""
    readme = (ROOT / "README.md").read_text()
    part = readme[readme.index("## As a library") :]
    code = re.search(r"```python\n(.*?)```", part, re.S).group(1)
    shown = [
        l[2:] for l in code.splitlines() if l.startswith("# prefill:") or l.startswith("# decode:")
    ]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert shown and r.stdout.splitlines() == shown, r.stdout


def _write_nb(path, sources):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)


def test_notebook_runner_executes_copies(tmp_path):
    """python -m qwenref.notebooks: executed copies + HTML in --out, sources untouched, the
    kernel's cwd is the notebook folder, and one failing notebook fails the run."""
    pytest.importorskip("nbclient")
    pytest.importorskip("nbconvert")
    src = tmp_path / "notebooks"
    src.mkdir()
    _write_nb(
        src / "01_ok.ipynb", ["import os, qwenref; print('cwd', os.path.basename(os.getcwd()))"]
    )
    _write_nb(src / "02_bad.ipynb", ["raise ValueError('boom')"])
    before = {p.name: p.read_bytes() for p in src.iterdir()}

    out = tmp_path / "build"
    # this checkout first on the path, installed or not (the kernel inherits it)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    r = subprocess.run(
        [sys.executable, "-m", "qwenref.notebooks", "--src", str(src), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 ok, 1 failed" in r.stdout and "ValueError: boom" in r.stdout, r.stdout
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before, "sources were modified"
    assert (out / "01_ok.html").is_file() and (out / "02_bad.html").is_file()
    assert "cwd notebooks" in (out / "01_ok.ipynb").read_text()
