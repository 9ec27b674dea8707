"""Kernel excerpts by name: the notebooks show single definitions cut out of kernels_cuda/ by
name, so rewording a comment or moving code around in a .cu never breaks a notebook, and a
renamed kernel fails loudly (tests/test_excerpts.py checks every name a notebook shows).

kernel_excerpt(file, name) returns one definition's source with the comment above it,
kernel_header(file) the comment block a file opens with, show_excerpt() displays them."""

from __future__ import annotations

import functools
import re
from pathlib import Path

__all__ = [
    "kernel_excerpt",
    "kernel_header",
    "show_excerpt",
    "Excerpts",
    "line_span",
    "lines_between",
    "show_lines",
    "show_kernel_lines",
    "in_notebook",
]

# (tests/test_excerpts.py checks every name a notebook shows).

# identifiers that take parentheses in a declaration without being its name
_NOT_NAMES = {
    "__launch_bounds__",
    "__align__",
    "__attribute__",
    "__declspec",
    "alignas",
    "decltype",
    "sizeof",
    "alignof",
    "noexcept",
    "static_assert",
    "operator",
}
_IDENT_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(<[^<>(){};]*>)?\s*\(")
_DEFINE = re.compile(r"[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\()?")


def _decl_name(head, pos=0):
    """The first `name(` or `name<args>(` in head from pos on that is not an attribute such as
    __launch_bounds__(...) (whose parentheses are skipped whole); None if there is none."""
    while m := _IDENT_CALL.search(head, pos):
        if m.group(1) not in _NOT_NAMES:
            return m
        pos = _match(head, m.end() - 1) + 1
    return None


def _mask(text):
    """text with comments blanked and string / char literal contents blanked (same length, same
    line breaks), so braces, quotes and names inside them are never read as code."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 1
            continue
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def _match(code, i, open_="(", close=")"):
    """Index of the bracket that closes the one at code[i] (len(code) if it never closes)."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def _split_args(s):
    """Top-level comma-separated arguments of a macro invocation's parenthesised text."""
    args, depth, cur = [], 0, ""
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += c
    return args + [cur.strip()] if cur.strip() or args else []


def _line_of(text, pos):
    return text.count("\n", 0, pos)


def _parse_cu(text):
    """The definitions in one kernel source: a list of dicts (name, targs, kind, first and last
    line of the definition, 0-based); the function-like macros and their invocations; and for
    each line whether it holds a comment and nothing else."""
    code = _mask(text)
    lines, clines = text.split("\n"), code.split("\n")
    comment_only = [bool(t.strip()) and not c.strip() for t, c in zip(lines, clines)]
    defs, macros = [], {}
    # preprocessor lines (with their continuations) are recorded, then blanked for the scan
    k = 0
    while k < len(clines):
        if not clines[k].lstrip().startswith("#"):
            k += 1
            continue
        first = k
        while clines[k].rstrip().endswith("\\") and k + 1 < len(clines):
            k += 1
        if m := _DEFINE.match(clines[first]):
            defs.append(dict(name=m.group(1), targs="", kind="macro", first=first, last=k))
            if m.group(2):
                body = " ".join(c.rstrip().rstrip("\\") for c in clines[first : k + 1])
                p0 = body.index("(", body.index(m.group(1)))
                p1 = _match(body, p0)
                macros.setdefault(m.group(1), []).append(
                    (_split_args(body[p0 + 1 : p1]), body[p1 + 1 :], first)
                )
        for j in range(first, k + 1):
            clines[j] = " " * len(clines[j])
        k += 1
    code = "\n".join(clines)
    invocations = []
    if macros:
        call = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\s*\(")
        for m in call.finditer(code):
            end = _match(code, m.end() - 1)
            invocations.append((m.group(1), _split_args(code[m.end() : end]), m.start(), end))
    _scan(code, 0, len(code), defs, set(macros))
    return defs, macros, invocations, comment_only


def _skip_template(head):
    """head without its leading `template <...>` clauses."""
    while True:
        m = re.match(r"\s*template\s*<", head)
        if not m:
            return head
        head = head[_match(head, m.end() - 1, "<", ">") + 1 :]


def _definition(match, kind, first, last):
    """One entry of _scan's list: a name match (group 1 the name, group 2 template arguments or
    None), its kind, and its first and last lines."""
    targs = re.sub(r"\s+", "", match.group(2) or "")
    return dict(name=match.group(1), targs=targs, kind=kind, first=first, last=last)


def _scan(code, lo, hi, defs, macro_names):
    """Record the functions and structs defined at namespace scope in code[lo:hi]."""
    pos, start, depth = lo, None, 0
    while pos < hi:
        c = code[pos]
        if c.isspace():
            pos += 1
            continue
        if start is None:
            start = pos
            # a macro invocation at namespace scope (`KERNELS(16)`) has no `;` to end it
            m = re.match(r"([A-Za-z_]\w*)\s*\(", code[pos:hi])
            if m and (m.group(1) in macro_names or m.group(1).isupper()):
                pos = _match(code, pos + m.end() - 1) + 1
                start = None
                continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == ";" and depth == 0:
            start = None
        elif c == "{" and depth == 0:
            close = _match(code, pos, "{", "}")
            head = code[start:pos]
            rest = _skip_template(head)
            first = _line_of(code, start)
            if re.match(r"\s*(namespace\b|extern\s*\"\s*\"\s*$)", head):
                _scan(code, pos + 1, close, defs, macro_names)
                start = None
            elif m := re.match(
                r"\s*(?:struct|class|union)\s+(?:__align__\s*\([^)]*\)\s*)?"
                r"([A-Za-z_]\w*)\s*(<[^{:]*>)?",
                rest,
            ):
                semi = code.find(";", close)
                end = close if semi < 0 else semi
                defs.append(_definition(m, "struct", first, _line_of(code, end)))
                start = close  # the statement ends at the `;` after the brace
            else:
                name = None
                if "(" in rest and "=" not in rest[: rest.index("(")]:
                    name = _decl_name(rest)
                if name:
                    defs.append(_definition(name, "function", first, _line_of(code, close)))
                    start = None
                else:
                    start = close  # enum, initializer: ends at its `;`
            pos = close + 1
            continue
        pos += 1


def _expand(name, args, macros, used, depth=0):
    """The text a function-like macro invocation expands to (parameters substituted, `##`
    pasted, nested invocations of the file's macros expanded); `used` collects the macros."""
    for params, body, line in macros.get(name, []):
        if len(params) != len(args):
            continue
        used.add((name, line))
        sub = dict(zip(params, args))
        text = re.sub(r"\b\w+\b", lambda m: sub.get(m.group(), m.group()), body)
        text = re.sub(r"\s*##\s*", "", text)
        if depth > 8:
            return text
        call = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\s*\(")
        out, pos = "", 0
        for m in call.finditer(text):
            if m.start() < pos:
                continue
            end = _match(text, m.end() - 1)
            out += text[pos : m.start()] + _expand(
                m.group(1), _split_args(text[m.end() : end]), macros, used, depth + 1
            )
            pos = end + 1
        return out + text[pos:]
    return ""


def _generated_kernels(parsed):
    """{kernel name: [(macros used, invocation line)]} for kernels that a macro invocation in
    the file defines (`KV_APPEND_TURBO(256)` -> kv_append_turbo_n256)."""
    _, macros, invocations, _ = parsed
    out = {}
    for name, args, start, _ in invocations:
        used = set()
        text = _expand(name, args, macros, used)
        for g in re.finditer(r"__global__", text):
            m = _decl_name(text, g.end())
            if m:
                out.setdefault(m.group(1), []).append((used, start))
    return out


@functools.lru_cache(maxsize=64)
def _parsed(path, mtime_ns, size):
    text = Path(path).read_text()
    return text, _parse_cu(text)


def _kernel_file(file):
    """kernels_cuda/<file>; a stem ("attention_v0") finds the .cu, else the .cuh."""
    from . import gpu

    kdir = gpu.kernels_dir()
    name = Path(file).name
    cands = (
        [kdir / name]
        if Path(name).suffix in (".cu", ".cuh")
        else [kdir / f"{name}.cu", kdir / f"{name}.cuh"]
    )
    for p in cands:
        if p.is_file():
            return p
    raise FileNotFoundError(f"kernel source {file!r} not found in {kdir}")


def _load(file):
    p = _kernel_file(file)
    st = p.stat()
    return p, *_parsed(str(p), st.st_mtime_ns, st.st_size)


def _leading_comment(lines, comment_only, first):
    """Index of the first line of the comment block that ends just above line `first` (lines
    of comments only; single-line #defines may sit in it, as constants placed right above the
    kernel that uses them)."""
    while first > 0:
        s = lines[first - 1].strip()
        if comment_only[first - 1] or (s.startswith("#define") and not s.endswith("\\")):
            first -= 1
        else:
            break
    return first


def _excerpt_lines(lines, comment_only, d):
    """(first, last) line of a definition's excerpt: its comment block and, for a macro, the
    invocations that follow it directly (the definitions it generates)."""
    first, last = _leading_comment(lines, comment_only, d["first"]), d["last"]
    if d["kind"] == "macro":
        call = re.compile(r"\s*" + re.escape(d["name"]) + r"\s*\(.*\)\s*(//.*)?$")
        k = last + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        while k < len(lines) and call.match(lines[k]):
            last = k
            k += 1
    return first, last


def _label(d):
    return d["name"] + d["targs"]


def kernel_excerpt(file, name):
    """The source of one definition in kernels_cuda/<file> ("attention_v0.cu", "kv_load.cuh",
    or the stem) by its name: a function or kernel, a struct, or a #define (with the invocations
    right below it), each with the comment block just above it. A template specialisation is
    named with its arguments ("Gran<KQ8>"); a kernel that a macro invocation generates
    ("kv_append_turbo_n256") gives the macros that build it and that invocation. Raises
    ValueError when the name is not defined there, or is defined more than once."""
    path, text, parsed = _load(file)
    defs, comment_only = parsed[0], parsed[3]
    lines = text.split("\n")
    key = re.sub(r"\s+", "", name)
    hits = [d for d in defs if _label(d) == key] or [d for d in defs if d["name"] == key]
    if len(hits) == 1:
        first, last = _excerpt_lines(lines, comment_only, hits[0])
        return "\n".join(lines[first : last + 1])
    if hits:
        cands = ", ".join(f"{_label(d)} ({d['kind']}, line {d['first'] + 1})" for d in hits)
        raise ValueError(f"{name!r} is ambiguous in kernels_cuda/{path.name}: {cands}")
    gen = _generated_kernels(parsed).get(key, [])
    if len(gen) == 1:
        used, start = gen[0]
        spans = []
        for _, line in used:
            d = next(d for d in defs if d["kind"] == "macro" and d["first"] == line)
            spans.append(_excerpt_lines(lines, comment_only, d))
        inv = _line_of(text, start)
        spans.append((inv, inv))
        merged = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return "\n// ...\n".join("\n".join(lines[a : b + 1]) for a, b in merged)
    if gen:
        where = ", ".join(f"line {_line_of(text, s) + 1}" for _, s in gen)
        raise ValueError(f"{name!r} is ambiguous in kernels_cuda/{path.name}: generated at {where}")
    elsewhere = [
        p.name
        for p in sorted(path.parent.glob("*.cu*"))
        if p != path and any(d["name"] == key for d in _load(p.name)[2][0])
    ]
    hint = f"; defined in {', '.join(elsewhere)}" if elsewhere else ""
    raise ValueError(f"{name!r} is not defined in kernels_cuda/{path.name}{hint}")


def kernel_header(file):
    """The comment block that opens kernels_cuda/<file>: what the file computes, its launch
    shapes, the bytes it must move and how it differs from the golden model."""
    path, text, parsed = _load(file)
    lines, comment_only = text.split("\n"), parsed[3]
    k = 0
    while k < len(lines) and comment_only[k]:
        k += 1
    if not k:
        raise ValueError(f"kernels_cuda/{path.name} does not open with a comment block")
    return "\n".join(lines[:k])


class Excerpts:
    """Titled excerpts: in a notebook a fenced code block, which Jupyter, VS Code, GitHub and
    nbconvert all highlight; as plain text one short line per excerpt, so a stored notebook
    carries the source once and an nbval comparison does not hinge on it."""

    def __init__(self, parts):
        self.parts = parts  # [(title, text)]

    def __str__(self):
        return "\n\n".join(f"{t}\n{s}" for t, s in self.parts)

    def __repr__(self):
        return "\n".join(f"{t} ({s.count(chr(10)) + 1} lines)" for t, s in self.parts)

    def _repr_markdown_(self):
        text = str(self)
        # "cpp": the fence language every one of those renderers knows (few know "cuda")
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", text)), default=0))
        return f"{fence}cpp\n{text}\n{fence}"


def in_notebook():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def _show(parts):
    """Display Excerpts(parts): highlighted in a notebook, printed elsewhere."""
    if in_notebook():
        from IPython.display import display

        display(Excerpts(parts))
    else:
        print(Excerpts(parts))


def show_excerpt(file, *names, header=False):
    """Show kernel_excerpt(file, name) for each name (after kernel_header(file) when header),
    each under a `// kernels_cuda/<file>: <name>` title: highlighted in a notebook, printed
    elsewhere."""
    fname = _kernel_file(file).name
    parts = [(f"// kernels_cuda/{fname}: header", kernel_header(file))] if header else []
    parts += [(f"// kernels_cuda/{fname}: {n}", kernel_excerpt(file, n)) for n in names]
    _show(parts)


def line_span(text, first, last, more=0):
    """(i, j): the index of text's first line containing `first`, and of the next one containing
    `last`, plus `more` lines (the closing brace of a block), within the text. ValueError naming
    the marker that is missing."""
    lines = text.split("\n")
    i = next((n for n, line in enumerate(lines) if first in line), None)
    if i is None:
        raise ValueError(f"first: no line contains {first!r}")
    j = next((n for n in range(i, len(lines)) if last in lines[n]), None)
    if j is None:
        raise ValueError(f"last: no line after {first!r} contains {last!r}")
    return i, min(j + more, len(lines) - 1)


def lines_between(text, first, last, more=0):
    """The lines of text that line_span(text, first, last, more) spans, as one string."""
    i, j = line_span(text, first, last, more)
    return "\n".join(text.split("\n")[i : j + 1])


def show_lines(text, title, first, last, more=0, numbered=True, dedent=False):
    """Show lines_between(text, first, last, more) under `// title` (with `, lines i-j` of the
    text when numbered; dedented to the cut's own indent when dedent)."""
    i, j = line_span(text, first, last, more)
    lines = text.split("\n")[i : j + 1]
    if dedent:
        indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
        lines = [ln[indent:] for ln in lines]
    head = f"// {title}, lines {i + 1}-{j + 1}" if numbered else f"// {title}"
    _show([(head, "\n".join(lines))])


def show_kernel_lines(file, name, first, last, more=0, dedent=False):
    """show_lines of kernel_excerpt(file, name) under `// kernels_cuda/<file>: <name>`: the
    lines of one rung that changed, cut by text markers inside the definition."""
    title = f"kernels_cuda/{_kernel_file(file).name}: {name}"
    show_lines(kernel_excerpt(file, name), title, first, last, more, dedent=dedent)
