#!/usr/bin/env python3
"""A chapter's ModelNew as one self-contained file in KernelBench's submission format.

  export_kernelbench.py --chapter N --out DIR SOURCE...      (make kernelbench-export CH=N)

SOURCE...: the files of the chapter's C library (the Makefile's lib rule: the chapter's .cu
files but main.cu, problem.cu and the exercises, then common/'s host code). Writes
DIR/NN_<problem>.py holding:
  - the CUDA source: every SOURCE with the project's headers written in where they are
    included (each guarded header once), merged into one translation unit (below: what that
    takes);
  - a host layer in C++ (no C++ enters a kernel): one Python function per function of the
    chapter's api.h, taking what ctypes passes to the library (pointers as integers, None for
    NULL, the stream as an integer) and returning what it returns;
  - torch.utils.cpp_extension.load_inline on both, with the Makefile's flags for the GPU it
    runs on (sm_90a on compute capability 9.0, the GPU's own code elsewhere) and cuDNN where
    the Makefile would find it;
  - the chapter's Python module (python/handfused/chNN.py, with what it uses of _torch.py and
    _lib.py) on that extension instead of ctypes: the same checks, the same kernels without
    and with autograd, the same backward.
It imports torch alone: not handfused, not the repository. Its comments are left out of the
CUDA source, and the word pass out of its C code (checker_safe): the benchmark's static checker
refuses a submission holding a try, an except or the word pass anywhere outside a '#' or '//'
comment (static_problems holds the export to its rules; python/tests/test_export.py checks).

Merging translation units. Files compiled apart may each define a static function, a type or
a macro of the same name; in one unit they collide. So:
  - a macro a source file defines is #undef'd after that file (a header's stay: later files
    that include the header use them);
  - a name two files define (a function with a body, a type, an enumerator, a static or const
    variable) is renamed in the file where it is local (name__<file>), in that file's own
    text, never in a header; a collision between headers, or between names that are not
    local, stops the export with both places named;
  - a file that includes itself (one body compiled once per #define of a step) is written in
    at each of its self-includes; inside those copies its self-includes are left out, which is
    what the preprocessor does there, where the copy's guard macro is defined (a self-include
    active there would recurse without end in any compiler).
#line directives keep every line's own file and number for the compiler's messages.
"""
import argparse
import ast
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
INCLUDE_DIRS = [os.path.join(REPO, "common")]  # the Makefile's -Icommon


class ExportError(Exception):
    pass


def rel(path):
    return os.path.relpath(path, REPO)


# ---- C text: comments, preprocessor lines, tokens ----
_TOKEN = re.compile(r'''
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[\w.]|[eEpP][+-])*)
  | (?P<punct>->|::|<<<|>>>|<<|>>|\S)
  | (?P<space>\s+)
''', re.S | re.X)


def tokens(text):
    """(kind, text, offset) for every token of C text, comments and spaces included."""
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:  # cannot happen: \S matches any other character
            raise ExportError("cannot tokenize at %r" % text[pos:pos + 20])
        out.append((m.lastgroup, m.group(), pos))
        pos = m.end()
    return out


def logical_lines(text):
    """The lines of text with backslash continuations joined: (first line number, text)."""
    out, buf, start = [], [], None
    for i, line in enumerate(text.split("\n"), 1):
        if start is None:
            start = i
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        out.append((start, "\n".join(buf)))
        buf, start = [], None
    if buf:
        out.append((start, "\n".join(buf)))
    return out


_DIRECTIVE = re.compile(r'^\s*#\s*(\w+)\s*(.*)$', re.S)
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
_DEFINE = re.compile(r'^\s*#\s*define\s+([A-Za-z_]\w*)')


def strip_comments(text):
    """text with every comment replaced by a space (newlines kept), strings left alone."""
    out = []
    for kind, t, _ in tokens(text):
        out.append(re.sub(r"[^\n]", " ", t) if kind == "comment" else t)
    return "".join(out)


def include_guard(text):
    """The macro guarding a header (#ifndef X / #define X ... #endif around all of it), "" for
    #pragma once, None when unguarded."""
    code = [(n, l.strip()) for n, l in logical_lines(strip_comments(text)) if l.strip()]
    if any(re.match(r"#\s*pragma\s+once\b", l) for _, l in code):
        return ""
    if len(code) >= 3:
        m1 = re.match(r"#\s*ifndef\s+(\w+)$", code[0][1])
        m2 = re.match(r"#\s*define\s+(\w+)\b", code[1][1])
        if m1 and m2 and m1.group(1) == m2.group(1) and re.match(r"#\s*endif\b", code[-1][1]):
            # the #endif must close the first #ifndef: count the nesting
            depth = 0
            for i, (_, l) in enumerate(code):
                if re.match(r"#\s*if(n?def)?\b", l):
                    depth += 1
                elif re.match(r"#\s*endif\b", l):
                    depth -= 1
                    if depth == 0 and i != len(code) - 1:
                        return None
            return m1.group(1)
    return None


# ---- what a unit defines at file scope ----
_ATTRIBUTES = {"__launch_bounds__", "__align__", "__attribute__", "alignas", "__declspec",
               "__cluster_dims__", "__maxnreg__", "decltype", "sizeof", "static_assert"}
_NOT_NAMES = {"operator", "if", "while", "for", "switch", "return", "const", "volatile"}


def definitions(text):
    """The names text defines at file scope: {name: kind}, kind one of "function" (a body),
    "local" (a static function with a body, a static or const variable, a type, an
    enumerator, a typedef: nothing another unit can link to) or "declared"
    (a prototype without static: a name some other unit defines)."""
    toks = [(k, t) for k, t, _ in tokens(strip_preprocessor(text))
            if k not in ("comment", "space")]
    defs, i, n = {}, 0, len(toks)

    def put(name, kind):
        if name in _NOT_NAMES or name in _ATTRIBUTES:
            return
        old = defs.get(name)
        if old is None or (old == "declared" and kind != "declared"):
            defs[name] = kind
        elif old == "local" and kind == "function":
            pass  # a static prototype, then its body: local

    def skip_group(j, open_, close):
        depth = 0
        while j < n:
            if toks[j][1] == open_:
                depth += 1
            elif toks[j][1] == close:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return j

    def group_end(head, j, open_, close):
        """the index of the token closing the group head[j] opens (">>" closes two)"""
        depth = 0
        while j < len(head):
            w = head[j][1]
            depth += (w == open_) - (w == close) - 2 * (close == ">" and w == ">>")
            if depth <= 0:
                return j
            j += 1
        return j

    def head_name(head):
        """the name a declaration head declares: before its first '(' (a function), skipping
        attributes' parentheses; or before '[', '=' or the end (a variable)"""
        j, last = 0, None
        while j < len(head):
            k, t = head[j]
            if t == "(":
                if last is not None and last not in _ATTRIBUTES:
                    return last, True
                j = group_end(head, j, "(", ")")  # an attribute's arguments: skipped
                last = None
            elif t in ("[", "=", ":"):
                return last, False
            elif t == "<":  # template arguments
                j = group_end(head, j, "<", ">")
            elif k == "ident":
                last = t
            j += 1
        return last, False

    def split_template(head):
        """(head without a leading template <...>, whether there was one)"""
        if not head or head[0][1] != "template":
            return head, False
        depth = 0
        for j, (_, w) in enumerate(head[1:], 1):
            depth += (w == "<") - (w == ">") - 2 * (w == ">>")
            if depth <= 0:
                return head[j + 1:], True
        return head, True

    def top_words(head):
        """the head's words outside parentheses and brackets"""
        out, depth = [], 0
        for _, w in head:
            if w in "([":
                depth += 1
            elif w in ")]":
                depth -= 1
            elif depth == 0:
                out.append(w)
        return out

    head = []
    while i < n:
        k, t = toks[i]
        if t == ";":
            head, templ = split_template(head)
            words = [w for _, w in head]
            if words and words[0] == "namespace":  # namespace cg = ...;  (an alias: repeatable)
                pass
            elif words and words[0] in ("typedef", "using"):
                name, _ = head_name(head[1:]) if words[0] == "typedef" else (words[1], False)
                if words[0] == "typedef" and "(" in words:  # typedef void (*fn)(...)
                    name = next((w for a, w in zip(words, words[1:]) if a == "*"), name)
                # typedef struct x x; names a type others define (and may be repeated)
                plain = len(words) == 4 and words[1] in ("struct", "union", "enum")
                put(name, "declared" if plain else "local")
            elif words and words[0] not in ("extern", "template"):
                name, is_fn = head_name(head)
                if name:
                    local = "static" in words or (not is_fn and ("const" in words or
                                                                "constexpr" in words))
                    if is_fn:
                        put(name, "local" if local else "declared")
                    elif local:
                        put(name, "local")
                    elif "struct" in words or "enum" in words or "union" in words:
                        if len(words) == 2:  # struct x;  a forward declaration
                            put(words[1], "declared")
            head = []
            i += 1
            continue
        if t == "{":
            head, templ = split_template(head)
            words = [w for _, w in head]
            if words[:1] == ["extern"] or words[:1] == ["namespace"]:
                head = []  # extern "C" { ... }: its contents are at file scope
                i += 1
                continue
            tag = next((words[j + 1] for j, w in enumerate(words[:-1])
                        if w in ("struct", "union", "enum", "class") and
                        re.match(r"[A-Za-z_]", words[j + 1])), None)
            is_type = tag is not None or (words and words[-1] in ("struct", "union", "enum")) \
                or (len(words) >= 2 and words[-2] in ("struct", "union", "enum"))
            if "=" in top_words(head):  # an initialised variable: static int t[] = {...};
                name, _ = head_name(head)
                if name and ("static" in words or "const" in words or "constexpr" in words):
                    put(name, "local")
                i = skip_group(i, "{", "}")
                while i < n and toks[i][1] != ";":
                    i += 1
            elif is_type and "(" not in words:
                if tag:
                    put(tag, "local")
                end = skip_group(i, "{", "}")
                if "enum" in words:  # its enumerators
                    body, depth, expect = toks[i + 1:end - 1], 0, True
                    for bk, bt in body:
                        if bt in "([{":
                            depth += 1
                        elif bt in ")]}":
                            depth -= 1
                        elif depth == 0 and bt == ",":
                            expect = True
                        elif depth == 0 and expect and bk == "ident":
                            put(bt, "local")
                            expect = False
                i = end
                while i < n and toks[i][1] != ";":  # } name, *pname;
                    if toks[i][0] == "ident" and ("typedef" in words or "static" in words):
                        put(toks[i][1], "local")
                    i += 1
            else:  # a function's body (a template's: each file instantiates its own)
                name, _ = head_name(head)
                if name:
                    put(name, "local" if "static" in words or templ else "function")
                i = skip_group(i, "{", "}")
                head = []
                continue
            head = []
            i += 1
            continue
        if t == "}":  # the end of an extern "C" { block
            head = []
            i += 1
            continue
        head.append((k, t))
        i += 1
    return defs


def strip_preprocessor(text):
    """text without comments and without preprocessor lines (blank lines in their place)."""
    out = []
    for _, line in logical_lines(strip_comments(text)):
        out.append("\n" * line.count("\n") if _DIRECTIVE.match(line) else line)
    return "\n".join(out)


def defined_macros(text):
    return sorted({m.group(1) for _, l in logical_lines(strip_comments(text))
                   for m in [_DEFINE.match(l)] if m})


def rename(text, names):
    """text with each identifier of names (old -> new) replaced, but not in comments, strings,
    #include lines or after . and -> (a member of the same name)."""
    out, prev = [], None
    for kind, t, _ in tokens(text):
        if kind == "ident" and t in names and prev not in (".", "->"):
            t = names[t]
        out.append(t)
        if kind not in ("space", "comment"):
            prev = t
    return "".join(out)


# ---- merging ----
class Merger:
    """The sources as one translation unit (merge())."""

    def __init__(self, sources, strip=False, local_macros=True):
        self.sources = [os.path.abspath(s) for s in sources]
        self.strip, self.local_macros = strip, local_macros
        self.texts = {}

    def text(self, path):
        """path's text (without its comments, lines kept, where the merger strips them)"""
        if path not in self.texts:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            self.texts[path] = strip_text(text) if self.strip else text
        return self.texts[path]

    def resolve(self, name, including):
        for d in [os.path.dirname(including)] + INCLUDE_DIRS:
            p = os.path.normpath(os.path.join(d, name))
            if os.path.isfile(p):
                return p
        return None

    def headers_of(self, path, seen=None):
        """Every project file path includes, directly or not (itself excluded)."""
        seen = set() if seen is None else seen
        for _, line in logical_lines(strip_comments(self.text(path))):
            m = _INCLUDE.match(line)
            if m:
                p = self.resolve(m.group(1), path)
                if p and p not in seen and p != path:
                    seen.add(p)
                    self.headers_of(p, seen)
        return seen

    def renames(self):
        """{source: {name: new name}} for every name two units define (a unit: a source's own
        text, or a header); ExportError where no side is local to a source."""
        units = {}  # path -> definitions
        for s in self.sources:
            units[s] = definitions(self.text(s))
            for h in self.headers_of(s):
                if h not in units:
                    units[h] = definitions(self.text(h))
        where = {}
        for path, defs in units.items():
            for name, kind in defs.items():
                if kind != "declared":
                    where.setdefault(name, []).append((path, kind))
        out = {s: {} for s in self.sources}
        for name, places in sorted(where.items()):
            if len(places) < 2:
                continue
            fixed = [(p, k) for p, k in places if p not in out or k != "local"]
            if len(fixed) > 1:
                raise ExportError("%s is defined in %s: not renameable (a header's, or a "
                                  "function other files link to); rename one"
                                  % (name, " and ".join(rel(p) for p, _ in fixed)))
            for p, k in places:
                if p in out and k == "local" and (fixed or p != places[0][0]):
                    out[p][name] = "%s__%s" % (name, re.sub(r"\W", "_", os.path.splitext(
                        os.path.basename(p))[0]))
        return out

    def merge(self):
        """The merged source text."""
        renames = self.renames()
        self.done = set()  # guards of headers written in
        parts = []
        for s in self.sources:
            self.current = s
            parts.append("\n// ======== %s\n" % rel(s))
            parts.append(self.expand(s, [], renames[s]))
            macros = defined_macros(self.text(s)) if self.local_macros else []
            if macros:
                parts.append("// the macros of %s, local to it\n" % rel(s))
                parts.extend("#undef %s\n" % m for m in macros)
        return "".join(parts)

    def expand(self, path, stack, names):
        text = self.text(path)
        if names and path == self.current:  # a source's own text (headers keep theirs)
            text = rename(text, names)
        out = ['#line 1 "%s"\n' % rel(path)]
        lines = text.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            m = _INCLUDE.match(strip_comments(line))
            if not m:
                out.append(line + "\n")
                i += 1
                continue
            target = self.resolve(m.group(1), path)
            if target is None:  # not ours (a system header in quotes): as written
                out.append(line + "\n")
            elif target == path or target in stack:
                if stack.count(target) + (target == path) >= 2 or target in stack:
                    out.append("/* #include \"%s\": left out (inside its own copy, where "
                               "its guard is defined) */\n" % m.group(1))
                else:
                    out.append(self.expand(target, stack + [path], {}))
                    out.append('#line %d "%s"\n' % (i + 2, rel(path)))
            else:
                guard = include_guard(self.text(target))
                key = target if guard is not None else None
                if key is not None and key in self.done:
                    out.append("/* #include \"%s\": written in above */\n" % m.group(1))
                else:
                    if key is not None:
                        self.done.add(key)
                    out.append(self.expand(target, stack + [path], {}))
                    out.append('#line %d "%s"\n' % (i + 2, rel(path)))
            i += 1
        return "".join(out)



def strip_text(text):
    """text without its comments (each replaced by the newlines it held, so that every line
    keeps its number), trailing spaces dropped."""
    return "\n".join(l.rstrip() for l in strip_comments(text).split("\n"))


def checker_safe(text):
    """text with the word pass, which the benchmark's static checker reads anywhere as Python's
    pass statement, out of the C code: an identifier pass (the verification's field) becomes
    passed; in a string literal, "one-pass" becomes "one-p" "ass", the same string."""
    out = []
    for kind, t, _ in tokens(text):
        if kind == "ident" and t == "pass":
            t = "passed"
        elif kind == "string" and t.startswith('"'):
            t = re.sub(r"\bp(ass)\b", r'p" "\1', t)
        out.append(t)
    return "".join(out)


def compact(text):
    """text without blank lines: a run of more than two is replaced by a #line directive that
    keeps the next line's number (text holds #line directives wherever a file starts or
    resumes)."""
    out, where, line, blank = [], None, 0, 0
    for l in text.split("\n"):
        m = re.match(r'#line (\d+) "([^"]*)"$', l)
        if m:
            line, where, blank = int(m.group(1)), m.group(2), 0
            if out and out[-1].startswith("#line "):
                out.pop()  # a file whose first lines were all comment
            out.append(l)
            continue
        if not l.strip():
            blank += 1
            line += 1
            continue
        if blank > 2 and where is not None:
            out.append('#line %d "%s"' % (line, where))
        elif blank:
            out.extend([""] * blank)
        blank = 0
        out.append(l)
        line += 1
    return "\n".join(out).strip("\n") + "\n"


# ---- the chapter's C API (api.h) and its Python binding ----
_PROTOTYPE = re.compile(r"([A-Za-z_][\w\s\*]*?)\b(ch\d\d_\w+)\s*\(([^()]*)\)\s*;")


def api_functions(api_text):
    """[(return type, name, [(type, parameter name)])] for each chNN_ function api.h declares."""
    code = " ".join(strip_preprocessor(api_text).split())
    out = []
    for m in _PROTOTYPE.finditer(code):
        ret = " ".join(m.group(1).replace("*", " * ").split()).replace(" *", "*")
        ret = ret.split("extern \"C\"")[-1].strip() if "extern" in ret else ret
        params = []
        if m.group(3).strip() not in ("", "void"):
            for p in m.group(3).split(","):
                p = " ".join(p.replace("*", " * ").split())
                pm = re.match(r"(.*?)\s*\b([A-Za-z_]\w*)$", p)
                if not pm or not pm.group(1):
                    raise ExportError("api.h: cannot read the parameter %r of %s"
                                      % (p, m.group(2)))
                params.append((pm.group(1).replace(" *", "*"), pm.group(2)))
        out.append((ret, m.group(2), params))
    if not out:
        raise ExportError("api.h declares no chNN_ function")
    return out


_NUMBERS = {"int", "unsigned", "unsigned int", "long", "long long", "unsigned long long",
            "size_t", "float", "double"}


def binding(functions):
    """C++ host code: for each function of api.h a wrapper taking what ctypes passes
    (pointers as integers or None, the stream as an integer), and the module's table."""
    out = [
        "/* One Python function per function of the chapter's api.h, taking what its ctypes",
        " * loader passes: a pointer as an integer (None for NULL), the stream as an integer.",
        " * Each releases the GIL while the library works, as a ctypes call does. */",
        "static inline uintptr_t kb_pointer(const std::optional<uintptr_t> &p)",
        "{",
        "    return p ? *p : 0;",
        "}",
        "",
    ]
    table = []
    for ret, name, params in functions:
        args, call = [], []
        for ctype, pname in params:
            if ctype == "cudaStream_t":
                args.append("uintptr_t %s" % pname)
                call.append("(cudaStream_t)%s" % pname)
            elif ctype.endswith("*"):
                args.append("std::optional<uintptr_t> %s" % pname)
                call.append("(%s)kb_pointer(%s)" % (ctype, pname))
            elif ctype in _NUMBERS or ctype.replace("const ", "") in _NUMBERS:
                args.append("%s %s" % (ctype, pname))
                call.append(pname)
            else:
                raise ExportError("api.h: %s's parameter %s has a type (%s) the export does not "
                                  "bind" % (name, pname, ctype))
        body = "%s(%s)" % (name, ", ".join(call))
        if ret == "const char*":
            out += ["static pybind11::bytes kb_%s(%s)" % (name, ", ".join(args)), "{",
                    "    return pybind11::bytes(%s);" % body, "}", ""]
        elif ret == "void" or ret in _NUMBERS:
            out += ["static %s kb_%s(%s)" % (ret, name, ", ".join(args)), "{",
                    "    pybind11::gil_scoped_release unlocked;",
                    "    %s%s;" % ("" if ret == "void" else "return ", body), "}", ""]
        else:
            raise ExportError("api.h: %s returns %s, a type the export does not bind"
                              % (name, ret))
        table.append('    m.def("%s", &kb_%s);' % (name, name))
    out += ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)", "{"] + table + ["}"]
    return "\n".join(out) + "\n"


# ---- the Python side: the chapter's ctypes module, on the extension ----
PACKAGE = os.path.join(HERE, "handfused")
# what the export defines itself, in place of the package's loader (_lib.load and its path)
OWN_NAMES = {"load"}


def _pieces(path):
    """[(names a top-level statement defines, names it uses, its text)] of a module, leaving
    out its docstring, its imports and a try that holds imports alone."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    tree, lines = ast.parse(src), src.split("\n")
    out, prev_end = [], 0
    for k, node in enumerate(tree.body):
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        skip = (k == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) \
            or isinstance(node, (ast.Import, ast.ImportFrom)) \
            or (isinstance(node, ast.Try) and
                all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body))
        # the comment lines just above a statement belong to it
        first = start - 1
        while first - 1 >= prev_end and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        prev_end = node.end_lineno
        if skip:
            continue
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined = {node.name}
        else:
            defined = {t.id for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AnnAssign))
                       for tgt in (n.targets if isinstance(n, ast.Assign) else [n.target])
                       for t in ast.walk(tgt) if isinstance(t, ast.Name)}
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
               {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and
                isinstance(n.value, ast.Name) and n.value.id == "_lib"}
        text = "\n".join(lines[first:node.end_lineno])
        out.append((defined, used, re.sub(r"\b_lib\.", "", text)))
    return out


def _join(pieces):
    """the pieces' texts, two blank lines around a function or class, as PEP 8 has them"""
    out, prev_block = [], False
    for k, (_, _, text) in enumerate(pieces):
        block = re.match(r"\s*(#.*\n\s*)*(@|def |class )", text + "\n") is not None
        if k:
            out.append("\n\n\n" if block or prev_block else "\n")
        out.append(text)
        prev_block = block
    return "".join(out)


def python_layer(chapter):
    """The chapter module's code (python/handfused/chNN.py) after what it uses of _torch.py and
    _lib.py, with `_lib.` dropped: load() is the export's own."""
    module = os.path.join(PACKAGE, "ch%02d.py" % chapter)
    if not os.path.isfile(module):
        raise ExportError("%s does not exist: the export is made from the chapter's module"
                          % rel(module))
    chapter_pieces = _pieces(module)
    helpers = _pieces(os.path.join(PACKAGE, "_torch.py")) + \
        _pieces(os.path.join(PACKAGE, "_lib.py"))
    wanted = set().union(*(u for _, u, _ in chapter_pieces)) - OWN_NAMES
    chosen, grew = [], True
    while grew:  # the helpers' closure under use
        grew = False
        for piece in helpers:
            if piece not in chosen and piece[0] & wanted and not piece[0] & OWN_NAMES:
                chosen.append(piece)
                wanted |= piece[1] - OWN_NAMES
                grew = True
    chosen.sort(key=helpers.index)  # in their modules' order: _torch's, then _lib's
    seen = set(OWN_NAMES)
    for defined, _, _ in chosen + chapter_pieces:
        if defined & seen:
            raise ExportError("%s is defined twice among %s, _torch.py and _lib.py"
                              % (", ".join(sorted(defined & seen)), rel(module)))
        seen |= defined
    helpers_text, module_text = _join(chosen), _join(chapter_pieces)
    with open(module, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return doc, helpers_text, module_text


# ---- KernelBench's problem, the checks its submissions must pass ----
def problem_name(chapter):
    """data/kernelbench.py's PROBLEMS[NN]["problem"], read without running the script."""
    path = os.path.join(REPO, "data", "kernelbench.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PROBLEMS"
                                                for t in node.targets):
            for key, value in zip(node.value.keys, node.value.values):
                if ast.literal_eval(key) == "%02d" % chapter:
                    for kw in value.keywords:
                        if kw.arg == "problem":
                            return ast.literal_eval(kw.value)
    raise ExportError("data/kernelbench.py's PROBLEMS has no chapter %02d" % chapter)


# The benchmark's static checker (its kernel_static_checker.py, as its documentation describes
# it) refuses a submission whose text, once each line is cut at '#' and '//', holds a try or
# except clause or the word pass (a fallback to PyTorch), threading or multiprocessing, a
# tensor subclass, or a reassigned timer; and one without __global__, load_inline or
# cpp_extension, and a thread index. The export is held to the same rules.
FORBIDDEN = [
    (r"\btry\s*:", "a try clause"), (r"\bexcept\s*:", "an except clause"),
    (r"\bexcept\s+\w+", "an except clause (or the word except before another word)"),
    (r"\bpass\b", "the word pass"),
    (r"import\s+threading|from\s+threading\s+import|threading\.Thread\s*\(", "threading"),
    (r"import\s+multiprocessing|multiprocessing\.(Process|Pool|Manager|Queue|Pipe)|"
     r"concurrent\.futures|ThreadPoolExecutor|ProcessPoolExecutor", "processes or pools"),
    (r"_make_subclass|class\s+\w+.*\((torch\.)?Tensor\)|torch\.Tensor\.__new__",
     "a tensor subclass"),
    (r"torch\.cuda\.Event(\.record|\.elapsed_time)?\s*=|torch\.cuda\.synchronize\s*=|"
     r"time\.perf_counter\s*=|time\.time\s*=", "a reassigned timer"),
]
REQUIRED = [(r"__global__", "__global__"), (r"load_inline|cpp_extension", "load_inline"),
            (r"\b(threadIdx|blockIdx|blockDim|gridDim)\.", "a thread index")]


def checker_text(text):
    """text as the checker reads it: each line cut at its first '#' and then at '//'."""
    return "\n".join(l.split("#", 1)[0].split("//", 1)[0] for l in text.split("\n"))


def static_problems(text):
    """What the benchmark's static checker would refuse in text: [(what, the line)]."""
    cut = checker_text(text)
    out = []
    for pattern, what in FORBIDDEN:
        m = re.search(pattern, cut)
        if m:
            line = cut.count("\n", 0, m.start()) + 1
            out.append((what, "line %d: %s" % (line, text.split("\n")[line - 1].strip()[:90])))
    for pattern, what in REQUIRED:
        if not re.search(pattern, cut):
            out.append(("no " + what, ""))
    return out


# ---- the file ----
Q3 = "'" * 3  # the quotes around the sources in the export
TEMPLATE = """\
{license}
#
# Generated from the tutorial's sources at {describe} by python/export_kernelbench.py:
#     make kernelbench-export CH={chapter}
# Do not edit it: edit the chapter's sources and run that again.
\"\"\"Chapter {chapter}'s CUDA kernels as KernelBench's ModelNew, in its submission format (one
file; it imports torch alone), for level 2's problem
    {problem}

CUDA_SOURCE is the chapter's C library: its api.cu, the versions it calls (in
{chapter_dir}/) and common/'s host code, merged into one
translation unit, its comments left out (the #line
directives name each line's own file and number). HOST_SOURCE binds the functions of its api.h
for Python. load_inline compiles both when this file is imported (PyTorch keeps the build),
with the tutorial Makefile's flags: sm_90a (Hopper's own target: the warpgroup MMA, thread-block
clusters) on a GPU of compute capability 9.0, the GPU's own code on another; cuDNN where the
Makefile would find it (cudnn.h and libcudnn in $CUDNN_HOME, the CUDA toolkit, /usr/local or
/usr), else PyTorch's own (its nvidia-cudnn package), else the chapter's conv without it, as
`make CUDNN=0` builds. CUDNN=0 in the environment builds without it, CUDNN=1 makes a missing
cuDNN an error. Where no GPU is visible, TORCH_CUDA_ARCH_LIST's first entry (9.0, 8.0, ...)
names the GPU to build for; VERBOSE=1 shows the build. The code below load() is
python/handfused/ch{nn}.py's, on this extension instead of build/libch{nn}.so.

{module_doc}
\"\"\"
import glob
import importlib.util
import inspect
import os
import sysconfig

import torch
import torch.nn as nn
from torch.utils.cpp_extension import CUDA_HOME, load_inline

CUDA_SOURCE = r{q3}
{cuda}{q3}

HOST_SOURCE = r{q3}
{host}{q3}


def _target():
    \"\"\"(major, minor): the compute capability to build for.\"\"\"
    if torch.cuda.is_available():
        return torch.cuda.get_device_capability()
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ").split()
    if not arch:
        raise RuntimeError("no CUDA GPU is visible: set TORCH_CUDA_ARCH_LIST (e.g. 9.0) to build "
                           "for one")
    major, minor = arch[0].split("+")[0].split(".")
    return int(major), int(minor)


def _cudnn():
    \"\"\"(include folder, library file) of the cuDNN to build with, or None.\"\"\"
    want = os.environ.get("CUDNN", "")
    if want == "0":
        return None
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for root in [os.environ.get("CUDNN_HOME"), CUDA_HOME, "/usr/local", "/usr"]:
        if not root:
            continue
        heads = [h for h in (os.path.join(root, "include", "cudnn.h"),
                             os.path.join(root, "include", multiarch, "cudnn.h"))
                 if os.path.isfile(h)]
        libs = [f for f in (os.path.join(root, "lib64", "libcudnn.so"),
                            os.path.join(root, "lib", "libcudnn.so"),
                            os.path.join(root, "lib", multiarch, "libcudnn.so"))
                if os.path.isfile(f)]
        if heads and libs:
            return os.path.dirname(heads[0]), libs[0]
    if importlib.util.find_spec("nvidia") is not None:  # PyTorch's own cuDNN
        spec = importlib.util.find_spec("nvidia.cudnn")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            libs = sorted(glob.glob(os.path.join(folder, "lib", "libcudnn.so*")), key=len)
            if os.path.isfile(os.path.join(folder, "include", "cudnn.h")) and libs:
                return os.path.join(folder, "include"), libs[0]
    if want == "1":
        raise RuntimeError("CUDNN=1, but no cudnn.h and libcudnn.so in $CUDNN_HOME, the CUDA "
                           "toolkit, /usr/local, /usr or PyTorch's nvidia-cudnn package")
    return None


def _build():
    \"\"\"The extension: CUDA_SOURCE and HOST_SOURCE compiled and loaded (load_inline).\"\"\"
    major, minor = _target()
    sm90a = (major, minor) == (9, 0)
    code = "90a" if sm90a else "%d%d" % (major, minor)
    cudnn = _cudnn()
    # -fno-gnu-unique: a static inside a template function stays this extension's own, not
    # one object with the same template's in build/libch{nn}.so when a process loads both
    cuda_flags = ["-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fno-gnu-unique",
                  "-gencode=arch=compute_%s,code=sm_%s" % (code, code),
                  "-DHAVE_SM90A=%d" % sm90a, "-DHAVE_CUDNN=%d" % (cudnn is not None)]
    options = dict(name="handfused_ch{nn}", cpp_sources=[HOST_SOURCE],
                   cuda_sources=[CUDA_SOURCE], extra_cuda_cflags=cuda_flags,
                   extra_cflags=["-fno-gnu-unique"],
                   verbose=os.environ.get("VERBOSE") == "1")
    if cudnn is not None:
        options.update(extra_include_paths=[cudnn[0]],
                       extra_ldflags=[cudnn[1], "-Wl,-rpath," + os.path.dirname(cudnn[1])])
    if "no_implicit_headers" in inspect.signature(load_inline).parameters:
        options["no_implicit_headers"] = True  # CUDA_SOURCE needs no PyTorch header
    return load_inline(**options)


_extension = _build()


def load(chapter):
    \"\"\"The chapter's library: the extension built above.\"\"\"
    return _extension


{helpers}


{module}
"""


def license_comment():
    with open(os.path.join(REPO, "LICENSE"), encoding="utf-8") as f:
        return "\n".join(("# " + l).rstrip() for l in f.read().strip().split("\n"))


def describe():
    r = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "an unknown commit"


def export(chapter, sources):
    """The export's text for chapter (sources: the library's files, the Makefile's list)."""
    nn = "%02d" % chapter
    apis = [s for s in sources if os.path.basename(s) == "api.cu"]
    if len(apis) != 1:
        raise ExportError("the sources must hold the chapter's api.cu once, not %d times"
                          % len(apis))
    chapter_dir = os.path.dirname(os.path.abspath(apis[0]))
    api_h = os.path.join(chapter_dir, "api.h")
    with open(api_h, encoding="utf-8") as f:
        functions = api_functions(f.read())
    merger = Merger(sources, strip=True)
    if "passed" in {t for k, t, _ in tokens(merger.merge()) if k == "ident"}:
        raise ExportError("the sources name something passed: checker_safe's new name for pass")
    cuda = compact(checker_safe(merger.merge()))
    api = compact(Merger([api_h], strip=True, local_macros=False).merge())
    host = ("#include <torch/extension.h>\n#include <pybind11/stl.h>\n\n#include <optional>\n"
            "#include <stdint.h>\n\n" + api + "\n" + binding(functions))
    for name, text in (("CUDA_SOURCE", cuda), ("HOST_SOURCE", host)):
        if Q3 in text:
            raise ExportError("%s holds %s, which would end the string that carries it"
                              % (name, Q3))
    doc, helpers, module = python_layer(chapter)
    text = TEMPLATE.format(license=license_comment(), describe=describe(), chapter=chapter,
                           nn=nn, problem=problem_name(chapter), chapter_dir=rel(chapter_dir),
                           module_doc=doc, cuda=cuda, host=host, helpers=helpers, module=module,
                           q3=Q3)
    problems = static_problems(text)
    if problems:
        raise ExportError("the export would fail the benchmark's static checker: " +
                          "; ".join("%s (%s)" % p for p in problems))
    ast.parse(text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chapter", type=int, required=True, help="1 to 5")
    ap.add_argument("--out", required=True, help="the folder to write NN_<problem>.py into")
    ap.add_argument("sources", nargs="+", help="the library's source files (make passes them)")
    args = ap.parse_args(argv)
    try:
        text = export(args.chapter, args.sources)
        path = os.path.join(args.out, "%02d_%s.py" % (args.chapter, problem_name(args.chapter)))
        os.makedirs(args.out, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except (ExportError, OSError, SyntaxError) as e:
        print("export_kernelbench: error: %s" % e, file=sys.stderr)
        return 2
    print("export_kernelbench: chapter %d -> %s" % (args.chapter, rel(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
