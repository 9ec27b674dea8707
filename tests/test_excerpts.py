"""Kernel excerpts by name (qwenref.nbutil.kernel_excerpt): every excerpt a notebook shows exists,
every literal extern "C" kernel can be cut out by its name, and the cutting itself is not fooled
by braces in comments or strings, templates, macros or structs."""

import ast
import json
import re
import textwrap
from pathlib import Path

import pytest

import qwenref.gpu
from qwenref import excerpts, nbutil
from qwenref.gpu import kernels_dir

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _excerpt_calls():
    """(notebook, cell index, file, name) for every name passed to show_excerpt or
    kernel_excerpt in a notebook's code cells (name None: show_excerpt(..., header=True))."""
    calls = []
    for nb in NOTEBOOKS:
        for i, cell in enumerate(json.loads(nb.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] != "code":
                continue
            # IPython magics and shell lines are not Python; they never hold these calls
            src = "\n".join(
                l
                for l in "".join(cell["source"]).splitlines()
                if not l.lstrip().startswith(("%", "!"))
            )
            for node in ast.walk(ast.parse(src)):
                if not isinstance(node, ast.Call):
                    continue
                fn = (
                    node.func.attr
                    if isinstance(node.func, ast.Attribute)
                    else getattr(node.func, "id", None)
                )
                if fn not in ("show_excerpt", "kernel_excerpt"):
                    continue
                file, *names = [ast.literal_eval(a) for a in node.args]
                calls += [(nb.name, i, file, n) for n in names]
                if any(k.arg == "header" and ast.literal_eval(k.value) for k in node.keywords):
                    calls.append((nb.name, i, file, None))
    return calls


CALLS = _excerpt_calls()


def test_notebooks_show_excerpts_not_files():
    """The stage notebooks show kernel source, and only by name."""
    assert {c[0] for c in CALLS} >= {
        "01_norm.ipynb",
        "05_kvcache_turbo.ipynb",
        "07_attention_split_t.ipynb",
    }, CALLS
    for nb in NOTEBOOKS:
        assert "show_kernel(" not in nb.read_text(encoding="utf-8"), nb.name


@pytest.mark.parametrize(
    "nb,cell,file,name", CALLS, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in CALLS]
)
def test_notebook_excerpt_exists(nb, cell, file, name):
    if name is None:
        assert nbutil.kernel_header(file).startswith("//")
    else:
        assert name in nbutil.kernel_excerpt(file, name), f"{nb} cell {cell}"


def _literal_kernels():
    """(file, name) of every extern "C" kernel spelled out in kernels_cuda/*.cu (not pasted
    together by a macro), found by a regex independent of the excerpt parser."""
    decl = re.compile(
        r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?'
        r"(?!__launch_bounds__)([A-Za-z_]\w*)\s*\("
    )
    out = []
    for p in sorted(kernels_dir().glob("*.cu")):
        code = "\n".join(l.split("//")[0] for l in p.read_text().splitlines())
        out += [(p.name, m.group(1)) for m in decl.finditer(code)]
    return out


LITERAL = _literal_kernels()


def test_literal_kernels_found():
    assert len(LITERAL) > 30 and ("attention_combine.cu", "attn_combine") in LITERAL


@pytest.mark.parametrize("file,name", LITERAL, ids=[f"{f}-{n}" for f, n in LITERAL])
def test_literal_kernel_excerpt(file, name):
    text = nbutil.kernel_excerpt(file, name)
    assert re.search(r"\b" + name + r"\s*\(", text)
    assert text.rstrip().endswith("}"), text[-200:]


# ---- the parser on a file written to exercise it ----------------------------------------------

SAMPLE = textwrap.dedent(r"""
    // sample.cu — a header comment
    // over two lines

    #define SIDES 2

    // braces in a comment: { { {   and a // nested marker
    /* a block comment with } and { */
    __device__ __forceinline__ float brace_fn(float x) {
        const char* s = "}}} {";      // a string with braces
        const char c = '}';           // and a char literal
        const char q = '\'';
        if (x > 0) { return x; }
        return -x;
    }

    template <int N>
    __device__ __forceinline__ float tpl_fn(const float (&v)[N]) {
        float a = 0.f;
        for (int i = 0; i < N; ++i) { a += v[i]; }
        return a;
    }

    // the state one lane keeps
    struct Acc {
        float m, l;
        __device__ void reset() { m = 0.f; l = 0.f; }
    };

    template <int K> struct Pick;
    template <> struct Pick<1> { static constexpr int v = 1; };
    template <> struct Pick<2> { static constexpr int v = 2; };

    namespace {
    __device__ int twice(int x) { return 2 * x; }
    }  // namespace

    namespace other {
    __device__ int twice(int x) { return x + x; }
    }  // namespace other

    // one kernel per width
    #define MAKE_KERNEL(W)                                                    \
        extern "C" __global__ void __launch_bounds__(128) made_w##W(float* y) { \
            y[threadIdx.x] = tpl_fn<W>(nullptr);                              \
        }
    MAKE_KERNEL(4)
    MAKE_KERNEL(8)

    extern "C" __global__ void __launch_bounds__(SIDES * 64)
    plain_kernel(float* y) { y[0] = brace_fn(1.f); }
""").lstrip()


@pytest.fixture
def sample(tmp_path, monkeypatch):
    (tmp_path / "sample.cu").write_text(SAMPLE)
    monkeypatch.setattr(qwenref.gpu, "kernels_dir", lambda: tmp_path)
    return "sample.cu"


def test_braces_in_comments_strings_and_chars(sample):
    text = nbutil.kernel_excerpt(sample, "brace_fn")
    assert text.startswith("// braces in a comment")
    assert text.endswith("    return -x;\n}")


def test_stem_and_comment_block_stops_at_blank_line(sample):
    text = nbutil.kernel_excerpt("sample", "tpl_fn")
    assert text.startswith("template <int N>\n") and text.endswith("return a;\n}")


def test_struct_and_specialisations(sample):
    text = nbutil.kernel_excerpt(sample, "Acc")
    assert text.startswith("// the state one lane keeps\nstruct Acc {") and text.endswith("};")
    assert nbutil.kernel_excerpt(sample, "Pick<2>").endswith("v = 2; };")
    with pytest.raises(ValueError, match=r"Pick<1>.*Pick<2>"):
        nbutil.kernel_excerpt(sample, "Pick")


def test_macro_and_generated_kernel(sample):
    text = nbutil.kernel_excerpt(sample, "MAKE_KERNEL")
    assert text.startswith("// one kernel per width\n#define MAKE_KERNEL(W)")
    assert text.endswith("MAKE_KERNEL(4)\nMAKE_KERNEL(8)")
    gen = nbutil.kernel_excerpt(sample, "made_w8")
    assert "#define MAKE_KERNEL(W)" in gen and "MAKE_KERNEL(8)" in gen
    assert nbutil.kernel_excerpt(sample, "SIDES") == "#define SIDES 2"


def test_kernel_after_macro_invocations(sample):
    text = nbutil.kernel_excerpt(sample, "plain_kernel")
    assert text == (
        'extern "C" __global__ void __launch_bounds__(SIDES * 64)\n'
        "plain_kernel(float* y) { y[0] = brace_fn(1.f); }"
    )


def test_ambiguous_and_missing_names(sample):
    with pytest.raises(
        ValueError,
        match=r"'twice' is ambiguous in kernels_cuda/sample\.cu.*"
        r"line 34.*line 38",
    ):
        nbutil.kernel_excerpt(sample, "twice")
    with pytest.raises(ValueError, match=r"'reset' is not defined in kernels_cuda/sample\.cu"):
        nbutil.kernel_excerpt(sample, "reset")  # a member, not a definition at file scope
    with pytest.raises(FileNotFoundError):
        nbutil.kernel_excerpt("missing.cu", "brace_fn")


def test_header_and_show_excerpt_plain_text(sample, capsys):
    assert nbutil.kernel_header(sample) == "// sample.cu — a header comment\n// over two lines"
    nbutil.show_excerpt(sample, "Acc", "SIDES", header=True)
    out = capsys.readouterr().out
    assert "\x1b" not in out
    titles = [l for l in out.splitlines() if l.startswith("// kernels_cuda/")]
    assert titles == [
        "// kernels_cuda/sample.cu: header",
        "// kernels_cuda/sample.cu: Acc",
        "// kernels_cuda/sample.cu: SIDES",
    ]


def test_notebook_display_is_short_text_and_code_block(sample):
    parts = [("// kernels_cuda/sample.cu: brace_fn", nbutil.kernel_excerpt(sample, "brace_fn"))]
    shown = excerpts.Excerpts(parts)
    assert repr(shown) == "// kernels_cuda/sample.cu: brace_fn (9 lines)"
    md = shown._repr_markdown_()
    assert md.startswith("```cpp\n// kernels_cuda/sample.cu: brace_fn\n// braces in a comment")
    assert md.endswith("return -x;\n}\n```") and "\x1b" not in md
