#!/usr/bin/env python3
"""test_export.py: the KernelBench exports (python/export_kernelbench.py) checked on the CPU.

    test_export.py --nvcc "nvcc FLAGS" [--ldlibs "LIBS"] --chapter NN SRC,SRC,... [...]
    (make test passes the Makefile's compiler, flags and each library chapter's sources)

For each chapter: the export is written to build/kernelbench/ and must be Python, define
ModelNew, call load_inline, hold __global__, name its commit and how to regenerate it, and pass
the benchmark's static checks; its CUDA_SOURCE, the whole library in one translation unit, must
compile with nvcc (sm_90a: every version) and link as a shared library with no undefined symbol;
that library's chNN_check_shape (host code, no GPU needed) must give the verdicts and messages
of the Makefile's build/libchNN.so on shapes inside and past the limits. Where PyTorch is
installed, HOST_SOURCE (the binding) is compiled against its headers too; without it, one SKIP.
Then the merger itself on small made-up sources: a static name two files define is renamed, a
file that includes itself is written in once, a header's name defined twice is refused, a
planted try clause is caught. PASS / FAIL / SKIP lines (common/run-tests.sh counts them).
"""
import argparse
import ast
import ctypes
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON)
sys.path.insert(0, PYTHON)
import export_kernelbench as kb  # noqa: E402

failed = 0


def check(ok, msg):
    global failed
    print(("PASS  " if ok else "FAIL  ") + "export: " + msg, flush=True)
    failed += not ok


def run(cmd, cwd=REPO):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr)


def tail(text, n=15):
    return "\n".join(text.strip().split("\n")[-n:])


def string_constant(tree, name):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    return None


# shapes for chNN_check_shape: the KernelBench shape, small ones, and ones past each limit
SHAPES = {
    "01": [(128, 3, 16, 32, 32), (1, 3, 1, 1, 1), (1, 4, 2, 2, 2), (0, 3, 2, 2, 2),
           (65536, 3, 1, 1, 1), (8, 3, 129, 129, 129)],
    "02": [(4, 32, 32, 128, 128), (1, 32, 2, 2, 2), (1, 31, 4, 4, 4), (1, 32, 1, 4, 4),
           (70000, 32, 2, 2, 2), (64, 32, 64, 128, 128)],
    "03": [(128, 3, 16, 32, 32), (1, 3, 3, 3, 3), (1, 4, 3, 3, 3), (1, 3, 2, 3, 3)],
    "04": [(128, 8, 128, 128), (1, 8, 3, 3), (1, 7, 9, 9), (1, 8, 2, 9), (70000, 8, 3, 3),
           (512, 8, 512, 512)],
    "05": [(32, 32, 32, 64, 64), (1, 32, 2, 2, 2), (1, 31, 4, 4, 4), (1, 32, 1, 4, 4),
           (512, 32, 64, 128, 128)],
}


def same_checks(key, merged_so):
    """chNN_check_shape of the merged library against the Makefile's, shape by shape."""
    built = os.path.join(REPO, "build", "libch%s.so" % key)
    if not os.path.isfile(built):
        print("SKIP  export: ch%s: build/libch%s.so is not built (make lib CH=%d): the merged "
              "library's shape checks not compared" % (key, key, int(key)))
        return
    libs = [ctypes.CDLL(p) for p in (merged_so, built)]
    fn, err = "ch%s_check_shape" % key, "ch%s_last_error" % key
    for lib in libs:
        getattr(lib, fn).argtypes = [ctypes.c_longlong] * len(SHAPES[key][0])
        getattr(lib, err).restype = ctypes.c_char_p
    same, verdicts = True, []
    for shape in SHAPES[key]:
        got = [(getattr(lib, fn)(*shape), getattr(lib, err)() or b"") for lib in libs]
        same &= got[0][0] == got[1][0] and (got[0][0] == 0 or got[0][1] == got[1][1])
        verdicts.append(got[1][0])
    check(same and 0 in verdicts and any(verdicts),
          "ch%s: the merged library's ch%s_check_shape gives build/libch%s.so's verdicts and "
          "messages on %d shapes (%d refused)" % (key, key, key, len(verdicts),
                                                   sum(v != 0 for v in verdicts)))


def chapter(key, sources, nvcc, ldlibs, out):
    try:
        text = kb.export(int(key), sources)
    except (kb.ExportError, OSError, SyntaxError) as e:
        check(False, "ch%s: the export is made: %s" % (key, e))
        return
    path = os.path.join(out, "%s_%s.py" % (key, kb.problem_name(int(key))))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    tree = ast.parse(text)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and
             isinstance(n.func, ast.Name)}
    imports = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
               for a in n.names} | {n.module.split(".")[0] for n in ast.walk(tree)
                                    if isinstance(n, ast.ImportFrom) and n.module}
    cuda, host = string_constant(tree, "CUDA_SOURCE"), string_constant(tree, "HOST_SOURCE")
    check("ModelNew" in classes and "load_inline" in calls and cuda and "__global__" in cuda
          and not imports - {"glob", "importlib", "inspect", "os", "sysconfig", "torch"},
          "ch%s: %s is Python with class ModelNew, a load_inline call and __global__ kernels, "
          "importing torch and the standard library alone" % (key, kb.rel(path)))
    check("make kernelbench-export CH=%d" % int(key) in text and kb.describe() in text
          and "MIT License" in text,
          "ch%s: it carries the license, its commit (%s) and the command that regenerates it"
          % (key, kb.describe()))
    problems = kb.static_problems(text)
    check(not problems, "ch%s: the benchmark's static checks (no try/except or pass, threads, "
          "tensor subclasses or timers; __global__, load_inline, a thread index)%s"
          % (key, "" if not problems else ": " + "; ".join("%s %s" % p for p in problems)))
    cu = os.path.join(out, "ch%s-merged.cu" % key)
    obj, so = cu[:-3] + ".o", cu[:-3] + ".so"
    with open(cu, "w", encoding="utf-8") as f:
        f.write(cuda)
    rc, log = run(shlex.split(nvcc) + ["-Xcompiler", "-fPIC", "-c", "-o", obj, cu])
    check(rc == 0, "ch%s: CUDA_SOURCE (%d lines, the library in one unit) compiles: %s%s"
          % (key, cuda.count("\n"), nvcc, "" if rc == 0 else "\n" + tail(log)))
    if rc != 0:
        return
    rc, log = run(shlex.split(nvcc) + ["-shared", "-Xlinker", "--no-undefined", "-o", so, obj]
                  + shlex.split(ldlibs))
    check(rc == 0, "ch%s: and links as a shared library with no undefined symbol%s"
          % (key, "" if rc == 0 else "\n" + tail(log)))
    if rc == 0:
        same_checks(key, so)
    host_compile(key, host, out)


def host_compile(key, host, out):
    """HOST_SOURCE against PyTorch's headers, where PyTorch is installed."""
    r = subprocess.run([sys.executable, "-c", "import torch.utils.cpp_extension as c, sysconfig;"
                        "print('\\n'.join(c.include_paths() + [sysconfig.get_paths()['include'],"
                        " c.CUDA_HOME or '']))"], capture_output=True, text=True)
    if r.returncode != 0:
        print("SKIP  export: ch%s: HOST_SOURCE not compiled: PyTorch is not installed (a GPU "
              "run of data/kernelbench.py --export builds the whole export)" % key)
        return
    paths = r.stdout.split()
    cuda_home = paths.pop()
    cpp = os.path.join(out, "ch%s-host.cpp" % key)
    with open(cpp, "w", encoding="utf-8") as f:
        f.write(host)
    cmd = ["c++", "-std=c++20", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=handfused_ch%s" % key,
           "-I" + os.path.join(cuda_home, "include")] + ["-isystem" + p for p in paths] + [cpp]
    rc, log = run(cmd)
    check(rc == 0, "ch%s: HOST_SOURCE (the binding of api.h) compiles against PyTorch's "
          "headers%s" % (key, "" if rc == 0 else "\n" + tail(log)))


def merger_checks(nvcc):
    """The merger on made-up sources: each rule, and each refusal."""
    with tempfile.TemporaryDirectory() as d:
        def put(name, text):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
            return os.path.join(d, name)
        put("shared.h", "#ifndef SHARED_H\n#define SHARED_H\n#define WIDTH 4\n"
            "static inline int twice(int v) { return 2 * v; }\n#endif\n")
        a = put("a.cu", '#include "shared.h"\n#define TILE 8 /* a.cu\'s */\n'
                "static __global__ void k(int *p) { p[threadIdx.x] = TILE + WIDTH; }\n"
                "static int helper(void) { return twice(1); }\n"
                "void run_a(int *p) { k<<<1, 1>>>(p); helper(); }\n")
        b = put("b.cu", '#include "shared.h"\n#define TILE 16\n'
                "static __global__ void k(float *p) { p[threadIdx.x] = TILE; }\n"
                "struct helper { int v; };\n"
                "void run_b(float *p) { struct helper h = {1}; k<<<1, 1>>>(p); (void)h; }\n")
        c = put("c.cu", "#ifndef STEP\n#define STEP 1\n#include \"c.cu\"\n#undef STEP\n"
                "#define STEP 2\n#include \"c.cu\"\n#undef STEP\n#else\n"
                "#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\n"
                "int CAT(step, STEP)(void) { return STEP; }\n#endif\n")
        merged = kb.Merger([a, b, c], strip=True).merge()
        check("k__b" in merged and "helper__b" in merged and "k__a" not in merged
              and merged.count("static inline int twice") == 1 and "#undef TILE" in merged,
              "merger: a static kernel and a name two files define are renamed in the second "
              "(k__b, helper__b), the guarded header written in once, each file's macros "
              "#undef'd after it")
        check(merged.count("int CAT(step, STEP)") == 3 and merged.count("left out") == 4,
              "merger: a file that includes itself is written in at each of its two "
              "self-includes, the self-includes inside those copies left out")
        cu = os.path.join(d, "merged.cu")
        with open(cu, "w") as f:
            f.write(merged + "int use(void) { return step1() + step2(); }\n")
        rc, log = run(shlex.split(nvcc) + ["-c", "-o", cu[:-3] + ".o", cu], cwd=d)
        check(rc == 0, "merger: the made-up merged unit compiles (step1 and step2 both "
              "defined)%s" % ("" if rc == 0 else "\n" + tail(log)))
        put("other.h", "#pragma once\nstatic inline int twice(int v) { return v + v; }\n")
        e = put("e.cu", '#include "other.h"\nint run_e(void) { return twice(2); }\n')
        try:
            kb.Merger([a, e]).renames()
            check(False, "merger: a static function two headers define is refused")
        except kb.ExportError as err:
            check("twice" in str(err), "merger: a static function two headers define is "
                  "refused, both named: %s" % err)
    planted = 'x = 1\n"""doc"""\ntry:\n    y = 2\nexcept ValueError:\n    y = 3\n'
    found = [w for w, _ in kb.static_problems(planted)]
    check("a try clause" in found and "no __global__" in found,
          "static checks: a planted try/except and a missing __global__ are caught")
    check(not kb.static_problems("# try: except ValueError: pass\n__global__ load_inline "
                                 "threadIdx.x\n"),
          "static checks: the same words after a '#' are not (the benchmark cuts lines there)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True, help="nvcc and the Makefile's flags")
    ap.add_argument("--ldlibs", default="", help="the libraries a chapter links (cuDNN)")
    ap.add_argument("--chapter", nargs=2, action="append", default=[],
                    metavar=("NN", "SOURCES"), help="a chapter and its library's sources, "
                    "comma-separated")
    args = ap.parse_args()
    out = os.path.join(REPO, "build", "kernelbench")
    os.makedirs(out, exist_ok=True)
    merger_checks(args.nvcc)
    for key, sources in args.chapter:
        chapter(key, sources.split(","), args.nvcc, args.ldlibs, out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
