# prep.awk: turns one chapter's CSVs into the small files sweep.gp and bars.gp draw, in tmp/:
#   mode=sweep  <scope>-<id>.dat "batch median_ms" in batch order, <scope>-floor.dat
#   mode=bars   <scope>-bars.dat "position id median_ms hatched", the KernelBench shape (the
#               shape of the last row of chNN.csv, as in data/readme-table.sh); hatched is 1 for
#               a bar whose conv runs in TF32
#   vars.gp     the title, axes, and per panel i its scope S_i, title T_i, ids V_i in version
#               order, y range YB_i..YT_i, bars N_i, floor F_i, hatched bars H_i (plain
#               variables: gnuplot's arrays need 5.2)
# Doing the CSV work here keeps the gnuplot scripts about drawing. Columns are found by their
# header names, so any file with gpu, version, name, scope, shape, median_ms (floor_ms when
# present) reads. PyTorch rows (second file, optional) come in as the ids eager and compile in
# fp32 (TF32 off, or a file without a precision column) and eager_default and compile_default in
# PyTorch's default precision (cudnn.allow_tf32 on).
# usage: awk -f plots/prep.awk -v mode=sweep|bars -v tmp=DIR -v dir=h100 -v chname="1 (...)" \
#            OURS.csv [PYTORCH.csv [PYTORCH-error.csv]]
BEGIN {
    FS = ","
    nsc = split("epilogue_fwd model_fwd epilogue_fwdbwd train_step stats", sorder, " ")
    title["epilogue_fwd"] = "epilogue forward (input: the conv output)"
    title["model_fwd"] = "whole model forward (input: x)"
    title["epilogue_fwdbwd"] = "epilogue forward + backward"
    title["train_step"] = "training step (forward and every gradient)"
    # the statistics panel: chapter 3's instance norm (a mean and variance per (n, c)), chapter
    # 4's group norm (per (n, group)); chname holds the chapter's folder name
    title["stats"] = chname ~ /instnorm/ ? "instance-norm statistics alone: the reduction progression" \
        : chname ~ /groupnorm/ ? "group-norm statistics alone: a shared-memory tree, warp shuffles, CUB" \
        : "normalisation statistics alone"
}
FNR == 1 { split("", col); for (i = 1; i <= NF; i++) col[$i] = i; nfile++; next }
# PyTorch's errors against float64 (pytorch-chNN-error.csv, optional, bars only): which of its
# default-precision rows ran a conv in TF32
FILENAME ~ /-error\.csv$/ { err[$col["version"], $col["scope"], $col["precision"]] = $col["rel_l2"]; nerr++; next }
{
    v = $col["version"]; s = $col["scope"]; sh = $col["shape"]; t = $col["median_ms"]
    if (nfile > 1 && ("precision" in col) && $col["precision"] == "default") v = v "_default"
    fl = ("floor_ms" in col) ? $col["floor_ms"] : ""
    b = sh; sub(/x.*/, "", b); rest = sh; sub(/^[0-9]+x/, "", rest)
    if (nfile == 1) {
        if (gpu == "") { gpu = toupper($col["gpu"]); rest0 = rest }
        if (!(s in seen)) { seen[s] = 1; if (!(s in title)) sorder[++nsc] = s }
        name[v] = v ": " $col["name"]; last = sh
        pr = ("precision" in col) ? $col["precision"] : index($col["name"], "[TF32]") ? "tf32" : "fp32"
        if (pr != "fp32") prec[v] = pr
        if (s == "stats") stats[v] = 1
    } else if (rest != rest0 || !((mode == "sweep" ? s : sh SUBSEP s) in have)) next
    else if (mode == "sweep" && !(b in batch)) next   # PyTorch only where ours were timed
    key = (mode == "sweep" ? s SUBSEP v SUBSEP b : sh SUBSEP s SUBSEP v)
    if (!(key in med)) ids[v] = 1
    med[key] = t; haveid[mode == "sweep" ? s SUBSEP v : sh SUBSEP s SUBSEP v] = 1
    have[mode == "sweep" ? s : sh SUBSEP s] = 1
    # the floor belongs to the problem: ours first (it counts FLOPs), PyTorch's where ours is not
    fk = (mode == "sweep" ? s SUBSEP b : sh SUBSEP s)
    if (fl != "" && fl > 0 && !(fk in floor)) floor[fk] = fl
    if (mode == "sweep" && !(b in batch)) { batch[b] = 1; nb++ }
}
# v1, v2, ... first, then b1, b2, ..., then the exercises x1, ..., then eager and compile, each in
# fp32 then in the default precision
function vkey(v) {
    return v == "eager" ? 1000 : v == "eager_default" ? 1001 : v == "compile" ? 1002 \
         : v == "compile_default" ? 1003 : v ~ /^v[0-9]+$/ ? substr(v, 2) + 0 \
         : v ~ /^b[0-9]+$/ ? 100 + substr(v, 2) : v ~ /^x[0-9]+$/ ? 200 + substr(v, 2) : 2000
}
function sortkeys(arr, out, byver,   n, k, i, j, x) {
    n = 0
    for (k in arr) out[++n] = k
    for (i = 2; i <= n; i++)
        for (j = i; j > 1 && (byver ? vkey(out[j - 1]) > vkey(out[j]) \
                                    : out[j - 1] + 0 > out[j] + 0); j--) {
            x = out[j]; out[j] = out[j - 1]; out[j - 1] = x
        }
    return n
}
# a gnuplot string; "\n" in it stays a line break
function q(str) { gsub(/"/, "\\\"", str); return "\"" str "\"" }
END {
    if (gpu == "") exit 1
    nv = sortkeys(ids, V, 1)
    gpuname = gpu (tolower(gpu) == dir ? "" : " (data/" dir ")")
    vars = tmp "/vars.gp"
    name["eager"] = "PyTorch eager, fp32"; name["compile"] = "torch.compile, fp32"
    name["eager_default"] = "PyTorch eager, default precision (TF32 convs allowed)"
    name["compile_default"] = "torch.compile, default precision (TF32 convs allowed)"
    for (i = 1; i <= nv; i++) print "L_" V[i] " = " q(name[V[i]]) > vars
    if (mode == "sweep") sweep(); else bars()
}
function min(a, b) { return a == "" || b + 0 < a + 0 ? b + 0 : a + 0 }
function max(a, b) { return a == "" || b + 0 > a + 0 ? b + 0 : a + 0 }
# the powers of ten just below and just above x (no log(): some small awks lack it)
function decade_lo(x,   p) { p = 1; while (p > x) p /= 10; while (p * 10 <= x) p *= 10; return p }
function decade_hi(x,   p) { p = 1; while (p < x) p *= 10; while (p / 10 >= x) p /= 10; return p }
function sweep(   nbs, B, i, j, k, s, n, np, list, ns, S, hide, note, f, lo, hi, t, fwd) {
    nbs = sortkeys(batch, B, 0)
    # chapter 3: versions with a stats row differ only in their statistics kernel; the forward
    # panels keep the first and the last of them (v1, v8), the stats panel shows them all
    ns = sortkeys(stats, S, 1)
    for (i = 2; i < ns; i++) hide[S[i]] = 1
    if (ns > 3) note = "\\n" S[2] "-" S[ns - 1] " left out: they differ from " S[ns] \
                       " only in the statistics kernel (see the stats panel)"
    else if (ns == 3) note = "\\n" S[2] " left out: it differs from " S[3] \
                       " only in the statistics kernel (see the stats panel)"
    printf "title = %s\n", q("Chapter " chname " on " gpuname ": median time against batch " \
        "size, beside the floor and PyTorch;\\n" precnote() "; L2 flushed, medians") > vars
    printf "xlab = %s\n", q("batch size N (input N x " spaced(rest0) ")") > vars
    printf "xmin = %g; xmax = %g\nset xtics (", B[1] / 1.25, B[nbs] * 1.25 > vars
    for (i = 1; i <= nbs; i++) printf "%s\"%s\" %s", (i > 1 ? ", " : ""), B[i], B[i] > vars
    print ")" > vars
    for (k = 1; k <= nsc; k++) {
        s = sorder[k]
        if (!(s in seen)) continue
        list = ""; lo = hi = ""
        fwd = (s == "epilogue_fwd" || s == "model_fwd")
        for (i = 1; i <= nv; i++) {
            if (!((s, V[i]) in haveid) || fwd && (V[i] in hide)) continue
            list = list (list == "" ? "" : " ") V[i]
            f = tmp "/" s "-" V[i] ".dat"
            for (j = 1; j <= nbs; j++) {
                if (!((s, V[i], B[j]) in med)) continue
                t = med[s, V[i], B[j]]; print B[j], t > f; lo = min(lo, t); hi = max(hi, t)
            }
            close(f)
        }
        n = 0; f = tmp "/" s "-floor.dat"
        for (j = 1; j <= nbs; j++) {
            if (!((s, B[j]) in floor)) continue
            t = floor[s, B[j]]; print B[j], t > f; n++; lo = min(lo, t)
        }
        close(f)
        np++
        # whole decades, as gnuplot's own log autoscale would give
        printf "S_%d = %s; V_%d = %s; HF_%d = %d; YB_%d = %g; YT_%d = %g\n", np, q(s), np, q(list),
            np, (n > 0), np, decade_lo(lo), np, decade_hi(hi) > vars
        printf "T_%d = %s\n", np, q((s in title ? title[s] : s) (fwd ? note : "")) > vars
    }
    printf "np = %d\n", np > vars
}
function bars(   i, k, s, n, np, f, lo, hi, t, h, nh) {
    printf "title = %s\n", q("Chapter " chname " on " gpuname ", KernelBench shape " last \
        ": every version against its floor;\\n" precnote() "; L2 flushed, medians") > vars
    for (k = 1; k <= nsc; k++) {
        s = sorder[k]
        if (!((last, s) in have)) continue
        n = 0; f = tmp "/" s "-bars.dat"; lo = hi = ""; nh = 0
        for (i = 1; i <= nv; i++) {
            if (!((last, s, V[i]) in med)) continue
            t = med[last, s, V[i]] + 0
            # hatched: a conv in TF32, which the fp32 floor does not bound (ours in tf32, and
            # PyTorch's default precision where the scope holds a conv)
            h = prec[V[i]] == "tf32" || V[i] ~ /_default$/ && ran_tf32(V[i], s)
            print n++, V[i], t, h > f
            lo = min(lo, t); hi = max(hi, t); nh += h
        }
        close(f)
        t = ((last, s) in floor) ? floor[last, s] + 0 : -1
        if (t > 0 && t < lo) lo = t
        np++
        printf "S_%d = %s; T_%d = %s; N_%d = %d; F_%d = %g; H_%d = %d; YB_%d = %g; YT_%d = %g\n",
            np, q(s), np, q(s in title ? title[s] : s), np, n, np, t, np, nh,
            np, lo / 2.5, np, hi * 3 > vars
    }
    printf "np = %d\n", np > vars
}
# PyTorch's default precision allows cuDNN TF32 convs; whether one ran shows in the error: more
# than 10x fp32's (TF32 keeps 10 of fp32's 23 mantissa bits). The model's own error for the
# forward (chapter 4's eager forward picks an fp32 engine), the conv's gradients for the training
# step; without an error file, every default row of a scope with a conv.
function tf32err(v, s) { return (v, s, "default") in err && (v, s, "fp32") in err \
                                && err[v, s, "default"] > 10 * err[v, s, "fp32"] }
function ran_tf32(v, s,   b) {
    b = v; sub(/_default$/, "", b)
    if (s != "model_fwd" && s != "train_step") return 0
    if (nerr == 0) return 1
    return s == "model_fwd" ? tf32err(b, s) : tf32err("eager", "conv_dx") || tf32err("eager", "conv_dw")
}
# "ours fp32 (v7: tf32; v8, v9: 3xtf32), PyTorch fp32 and default": the precisions plotted
function precnote(   n, P, i, t, d, out, order, no) {
    n = sortkeys(prec, P, 1)
    for (i = 1; i <= n; i++) {
        t = prec[P[i]]
        if (!(t in d)) { d[t] = P[i]; order[++no] = t } else d[t] = d[t] ", " P[i]
    }
    for (i = 1; i <= no; i++) out = out (i > 1 ? "; " : "") d[order[i]] ": " order[i]
    return "ours fp32" (out == "" ? "" : " (" out ")") ", PyTorch fp32 and default precision"
}
# "3x16x32x32" -> "3 x 16 x 32 x 32"
function spaced(str) { gsub(/x/, " x ", str); return str }
