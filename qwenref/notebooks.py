"""Execute the notebooks headless and render each to HTML (what `make run` does).

    python -m qwenref.notebooks [NAME ...] [--src DIR] [--out DIR] [--timeout S] [--in-place]

By default each notebooks/<name>.ipynb is executed as a copy, written to build/<name>.ipynb
together with build/<name>.html: the committed notebooks carry the outputs of a GPU run and a
CPU machine must not overwrite them. Cells run with notebooks/ as the working directory (as in
Jupyter and under nbval), in a kernel on this interpreter, so the venv that installed qwenref is
the one the notebooks see. Without a GPU the notebooks still run: their GPU cells plot the
recorded results/ instead (that is the notebooks' own job, not this runner's).

--in-place writes the executed notebooks back to notebooks/: the deliberate refresh on a GPU
machine (`make gpu-refresh`), never part of `make run`.

NAME selects notebooks whose file name contains it (`python -m qwenref.notebooks 03 wht`).
A failing notebook is still saved and rendered up to the failing cell (for reading the
traceback in HTML); the others go on, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["find_notebooks", "execute_notebook", "main"]

_REPO = Path(__file__).resolve().parent.parent


def find_notebooks(src: Path, names: list[str] | None = None) -> list[Path]:
    """src/*.ipynb in name order (their numbering is the reading order), filtered by names."""
    nbs = sorted(p for p in src.glob("*.ipynb") if not p.name.startswith("."))
    if names:
        nbs = [p for p in nbs if any(n in p.name for n in names)]
    return nbs


def _current_env_kernel_manager():
    """A kernel manager that starts ipykernel on sys.executable, whatever kernelspec the
    notebook names (a `python3` spec installed elsewhere could point at another interpreter)."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    class _ThisInterpreter(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return self.kernel_spec_class(
                resource_dir=ipykernel.kernelspec.RESOURCES,
                **ipykernel.kernelspec.get_kernel_dict(),
            )

    return KernelManager(kernel_name="python3", kernel_spec_manager=_ThisInterpreter())


def execute_notebook(
    src: Path,
    dest: Path,
    html: Path | None,
    cwd: Path,
    timeout: int,
    on_cell=None,
    kernel_log: Path | None = None,
    dest_on_error: Path | None = None,
) -> tuple[bool, str, bool]:
    """Execute src, write the executed notebook to dest and its HTML rendering to html.

    On a failing cell the notebook goes to dest_on_error instead, when given (so an in-place
    refresh never replaces a good notebook with a broken run).
    The kernel process's own stderr (ipykernel's start-up warnings, a crash) goes to
    kernel_log when given, so it does not tear through the progress bar.
    Returns (ok, message, html_written): message is the failing cell's error when not ok.
    on_cell(done, total) is called after each code cell.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(src, as_version=4)
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    done = 0

    def hook(**_):
        nonlocal done
        done += 1
        if on_cell:
            on_cell(done, n_code)

    km = _current_env_kernel_manager()
    client = NotebookClient(
        nb,
        km=km,
        timeout=timeout,
        allow_errors=False,
        resources={"metadata": {"path": str(cwd)}},
        on_cell_executed=hook,
    )
    ok, msg = True, ""
    log = None
    if kernel_log is not None:
        kernel_log.parent.mkdir(parents=True, exist_ok=True)
        log = open(kernel_log, "w")
    try:
        client.execute(**({"stderr": log} if log else {}))
    except CellExecutionError as e:
        ok, msg = False, f"{e.ename}: {e.evalue}"
    except (CellTimeoutError, DeadKernelError) as e:
        ok, msg = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        # we own the kernel manager (passed in), so nbclient leaves the kernel to us
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        if log:
            log.close()

    if not ok and dest_on_error is not None:
        dest = dest_on_error
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    if html is not None:
        try:
            from nbconvert import HTMLExporter
        except ImportError:  # the GPU machine's wheelhouse has no nbconvert; --in-place needs none
            return ok, msg, False
        body, _ = HTMLExporter().from_notebook_node(nb)  # images inline: one self-contained file
        html.parent.mkdir(parents=True, exist_ok=True)
        html.write_text(body, encoding="utf-8")
    return ok, msg, html is not None


def _default_src() -> Path:
    here = Path("notebooks")
    return here if here.is_dir() else _REPO / "notebooks"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m qwenref.notebooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("names", nargs="*", help="run only notebooks whose file name contains one")
    ap.add_argument("--src", type=Path, default=None, help="notebook folder (default notebooks/)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where executed copies and HTML go (default build/ beside --src)",
    )
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per cell (default 1200)")
    ap.add_argument(
        "--in-place",
        action="store_true",
        help="write executed notebooks back into --src (GPU refresh only)",
    )
    args = ap.parse_args(argv)

    from tqdm import tqdm

    src = (args.src or _default_src()).resolve()
    out = (args.out or src.parent / "build").resolve()
    nbs = find_notebooks(src, args.names)
    if not nbs:
        which = f" matching {' '.join(args.names)}" if args.names else ""
        print(f"qwenref.notebooks: no notebooks{which} in {src}")
        return 1

    mode = "in place" if args.in_place else f"as copies into {out}"
    print(f"qwenref.notebooks: executing {len(nbs)} notebook(s) from {src} {mode}; HTML in {out}")
    failed = []
    t_all = time.perf_counter()
    # disable=None: the bar shows on a terminal; in a CI log only the per-notebook lines do
    with tqdm(nbs, unit="nb", file=sys.stdout, dynamic_ncols=True, disable=None) as bar:
        for nb_path in bar:
            bar.set_postfix_str(nb_path.stem)

            def on_cell(done, total, _stem=nb_path.stem):
                bar.set_postfix_str(f"{_stem} cell {done}/{total}")

            copy = out / nb_path.name
            log = out / f"{nb_path.stem}.kernel.log"
            html = out / f"{nb_path.stem}.html"
            t0 = time.perf_counter()
            ok, msg, wrote_html = execute_notebook(
                nb_path,
                nb_path if args.in_place else copy,
                html,
                cwd=src,
                timeout=args.timeout,
                on_cell=on_cell,
                kernel_log=log,
                dest_on_error=copy,
            )
            dt = time.perf_counter() - t0
            if ok:
                log.unlink(missing_ok=True)  # only start-up noise when all went well
            else:
                msg += f"\n         (executed copy: {copy}; kernel stderr: {log})"
            status = "ok    " if ok else "FAILED"
            where = html if wrote_html else "(no HTML: nbconvert not installed)"
            tqdm.write(
                f"  {status} {nb_path.name:<32} {dt:7.1f} s   -> {where}"
                + (f"\n         {msg}" if msg else ""),
                file=sys.stdout,
            )
            if not ok:
                failed.append(nb_path.name)
    dt_all = time.perf_counter() - t_all
    print(
        f"qwenref.notebooks: {len(nbs) - len(failed)} ok, {len(failed)} failed, {dt_all:.1f} s"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
