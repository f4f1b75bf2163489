#!/usr/bin/env python3
"""test-layout.py: the tree a learner reads is findable and whole (make test). One PASS or FAIL line
a check, as common.h's check() prints them:
- every version of a chapter's table (build/chNN --list) names its source file, which exists and
  whose name carries the version: NN-v2-name.cu (NN its place in the reading order, unique in
  the chapter), NN-v15-v18-name.cu for a file of several, x1-name.cu for an exercise;
- every __global__ kernel defined in a version file starts with a version id of that file
  (v2_..., b3_...);
- every version and kernel that make sanitize's MANY_RUNS names exists (a renamed kernel would
  leave its sanitizer run instrumenting nothing);
- make diff (common/version-diff.sh) shows each chapter's first two versions, and each step of a
  file of STEP regions against the one before, with no region left;
- every chapter has a LABBOOK.md, an "## Exercises" section in its README and an exercise version;
- every exercise file marks what the learner writes (/* x1: begin */ .. /* x1: end */) around a
  launcher that calls hx_not_written, and the chapter's LABBOOK.md holds its solution, which
  does not;
- every relative link in the READMEs and lab books points at a file that exists, and every
  image they show (.svg) is well-formed XML with a viewBox;
usage: test-layout.py BUILD_DIR "NN:version:kernel ..." (the MANY_RUNS pairs)
"""
import glob, os, re, shutil, subprocess, sys
import xml.dom.minidom

build = sys.argv[1] if len(sys.argv) > 1 else "build"
many = sys.argv[2].split() if len(sys.argv) > 2 else []
fails = 0


def check(ok, msg):
    global fails
    print(("PASS  " if ok else "FAIL  ") + msg)
    fails += not ok


def ids_of(name):
    """the version ids a file's name carries: 03-v2-name.cu -> [v2]; 20-v15-v18-x.cu -> v15..v18"""
    parts = name[:-3].split("-")
    if re.fullmatch(r"x\d+", parts[0]):
        return [parts[0]]
    if not re.fullmatch(r"\d\d", parts[0]):
        return []
    ids = []
    for p in parts[1:]:
        if not re.fullmatch(r"[vbx]\d+", p):
            break
        ids.append(p)
    if len(ids) == 2 and ids[0][0] == ids[1][0]:  # a range: v15-v18
        ids = [ids[0][0] + str(k) for k in range(int(ids[0][1:]), int(ids[1][1:]) + 1)]
    return ids


KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?void\s+"
                    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")

for chdir in sorted(glob.glob("chapters/[0-9][0-9]-*/")):
    num = os.path.basename(chdir.rstrip("/"))[:2]
    binary = os.path.join(build, "ch" + num)
    if not os.path.exists(binary):
        check(False, f"layout ch{num}: {binary} is not built")
        continue
    out = subprocess.run([binary, "--list"], capture_output=True, text=True).stdout
    rows = [l.split() for l in out.splitlines()[1:] if l.strip()]
    bad, files = [], {}
    for r in rows:
        vid = r[0]
        f = next((t for t in r[1:] if t.endswith(".cu")), None)
        if not f or not os.path.isfile(chdir + f):
            bad.append(f"{vid}: file {f or '(none)'} not in {chdir}")
        elif vid not in ids_of(f):
            bad.append(f"{vid}: {f} does not carry the id (NN-{vid}-name.cu or x1-name.cu)")
        else:
            files.setdefault(f, []).append(vid)
    check(not bad and rows, f"layout ch{num}: {len(rows)} versions in --list, each in a file named "
          f"by its place and id" + ("" if not bad else ": " + "; ".join(bad)))
    nums = [f[:2] for f in files if re.match(r"\d\d-", f)]
    dup = sorted({n for n in nums if nums.count(n) > 1})
    check(not dup, f"layout ch{num}: reading-order numbers unique" + (f": {dup} repeat" if dup else ""))
    bad = []
    for f, vids in sorted(files.items()):
        text = open(chdir + f, encoding="utf-8").read()
        for k in KERNEL.findall(text):
            if not any(k.startswith(v + "_") for v in ids_of(f)):
                bad.append(f"{f}: {k}")
    check(not bad, f"layout ch{num}: every kernel of a version file starts with its id"
          + ("" if not bad else ": " + ", ".join(bad)))
    kernels = set()
    for f in glob.glob(chdir + "*.cu") + glob.glob(chdir + "*.cuh"):
        kernels.update(KERNEL.findall(open(f, encoding="utf-8").read()))
    for pair in many:
        n, v, k = pair.split(":")
        if n == num:
            check(any(r[0] == v for r in rows) and any(k in name for name in kernels),
                  f"layout ch{num}: make sanitize's run of {v} instruments kernels named *{k}*")
    # make diff: two versions' files, or the steps of a STEP file one after another
    for f, vids in sorted(files.items()):
        pairs = list(zip(vids, vids[1:])) if len(vids) > 1 else []
        if "#if STEP" not in open(chdir + f, encoding="utf-8").read():
            continue
        if not shutil.which("unifdef"):
            print(f"SKIP  make diff CH={int(num)} of {f}'s steps: unifdef is not installed")
            continue
        for a_, b_ in pairs:
            d = subprocess.run(["sh", "common/version-diff.sh", binary, a_, b_], capture_output=True, text=True)
            body = [l for l in d.stdout.splitlines() if l[:1] in "+-" and not l.startswith(("+++", "---"))]
            check(d.returncode == 0 and body and not any("#if STEP" in l or "#endif" in l for l in body),
                  f"make diff CH={int(num)} A={a_} B={b_}: {len(body)} changed lines of {f}, no STEP region left")
    ids = [r[0] for r in rows]
    if len(ids) > 1:
        d = subprocess.run(["sh", "common/version-diff.sh", binary, ids[0], ids[1]], capture_output=True, text=True)
        check(d.returncode == 0 and d.stdout.startswith("---"),
              f"make diff CH={int(num)} A={ids[0]} B={ids[1]}: a unified diff")
    xs = [r[0] for r in rows if re.fullmatch(r"x\d+", r[0])]
    readme = open(chdir + "README.md", encoding="utf-8").read()
    check(xs and os.path.exists(chdir + "LABBOOK.md") and re.search(r"^## Exercises", readme, re.M),
          f"layout ch{num}: a LABBOOK.md, an '## Exercises' section and an exercise version ({' '.join(xs) or 'none'})")
    book = chdir + "LABBOOK.md"
    booktext = open(book, encoding="utf-8").read() if os.path.exists(book) else ""
    for f, vids in sorted(files.items()):
        if not f.startswith("x"):
            continue
        x = vids[0]
        text = open(chdir + f, encoding="utf-8").read()
        m = re.search(re.escape(f"/* {x}: begin */") + r"(.*?)" + re.escape(f"/* {x}: end */"), text, re.S)
        check(bool(m) and "hx_not_written(" in m.group(1),
              f"exercise ch{num} {x}: {f} marks the learner's part, whose launcher calls hx_not_written")
        s = re.search(r"<!-- solution " + x + r" -->\n```cuda\n(.*?)\n```", booktext, re.S)
        check(bool(s) and "hx_not_written(" not in s.group(1),
              f"exercise ch{num} {x}: LABBOOK.md holds the solution, written")

docs = ["README.md"] + sorted(glob.glob("chapters/*/*.md")) + sorted(glob.glob("data/*/README.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
for d in docs:
    text = open(d, encoding="utf-8").read()
    bad, images = [], []
    for t in LINK.findall(text):
        if re.match(r"[a-z]+:", t) or t.startswith("#"):
            continue
        p = os.path.normpath(os.path.join(os.path.dirname(d), t.split("#")[0]))
        if not os.path.exists(p):
            bad.append(t)
        elif p.endswith(".svg"):
            images.append(p)
    check(not bad, f"links {d}: every relative link resolves" + ("" if not bad else ": " + ", ".join(bad)))
    for p in images:
        try:
            svg = xml.dom.minidom.parse(p).documentElement
            ok = svg.tagName == "svg" and svg.getAttribute("viewBox") != ""
        except Exception:
            ok = False
        check(ok, f"image {p} (shown in {d}): well-formed SVG with a viewBox")
sys.exit(1 if fails else 0)
