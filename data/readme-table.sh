#!/bin/sh
# readme-table.sh: the markdown tables of the READMEs, made from the committed CSVs, so that no
# number in a README is typed by hand.
#   sh data/readme-table.sh 01 [h100]   print chapter 01's table for data/h100/ (the default)
#   sh data/readme-table.sh glance 01   the top README's summary: per scope and PyTorch precision,
#                                       our fastest version at that precision or better, its % of
#                                       the floor, and PyTorch's times beside it
#   sh data/readme-table.sh kernelbench [h100]  the top README's KernelBench-protocol table
#                                       (data/<gpu>/kernelbench.csv beside the published means)
#   sh data/readme-table.sh --check     compare every table block of README.md and
#                                       chapters/*/README.md with its CSVs (make test); exit 1 on
#                                       a difference
#   sh data/readme-table.sh --update    rewrite those blocks from the CSVs (after a new make record)
# A block is the lines between "<!-- table: sh data/readme-table.sh NN [gpu] -->" and
# "<!-- end table -->" (blank lines inside are ignored).
#
# Every row names its precision (the CSVs' precision column): ours fp32, 3xtf32 (tensor cores in
# 3xTF32, fp32's accuracy) or tf32; PyTorch's fp32 (TF32 off) or default (its flags as shipped:
# cudnn.allow_tf32 on, so cuDNN may run a conv in TF32). A file without that column is read as
# fp32, a row whose name carries "[TF32]" as tf32.
#
# The table: our rows of data/<gpu>/chNN.csv at the KernelBench shape (the shape of the file's
# last row: the programs write the default shape last), the last row of each version and scope,
# in version-table order (v1, v2, ..., v10, then b1, ...); then PyTorch's rows of
# data/<gpu>/pytorch-chNN.csv at that shape, eager then torch.compile, fp32 then default. Columns
# are found by their header names. PyTorch's GB/s, % of ceiling, TFLOP/s and % of floor use our
# byte and FLOP counts and ceilings for the same scope (the problem's, counted in full; the peer's
# own train_step bytes are a placeholder), its own columns only where we have no such row. The
# "vs" columns are the peer's median over the row's, per precision of the peer, "(behind)" where
# the row is slower; "-" where the peer has no row (not yet timed in that precision). After it,
# PyTorch's error against float64 from data/<gpu>/pytorch-chNN-error.csv (errtable).
cd "$(dirname "$0")/.." || exit 2

# the awk functions both tables share: prec(), the precision of a row (by column name, or from
# the name in files without the column); ratio(), a peer's median over ours
COMMON_AWK='
function prec(p, name) { return p != "" ? p : index(name, "[TF32]") ? "tf32" : "fp32" }
function ratio(peer, ours,   r) {
    if (peer == "" || ours == "" || ours + 0 <= 0) return "-"
    r = sprintf("%.2f", peer / ours)
    return r "x" (r + 0 < 1 ? " (behind)" : "")
}
function plabel(p) {
    return p == "fp32" ? "fp32 (TF32 off)" : p == "default" ? "default (TF32 convs allowed)" : p
}'

table() {  # $1 chapter (01 or 1), $2 gpu
    case $1 in [0-9]) ch=0$1 ;; *) ch=$1 ;; esac
    ours=data/$2/ch$ch.csv peers=data/$2/pytorch-ch$ch.csv
    [ -f "$ours" ] || { echo "no $ours" >&2; return 2; }
    [ -f "$peers" ] || peers=/dev/null
    awk -F, -v ours="$ours" "$COMMON_AWK"'
    FNR == 1 { split("", c); for (i = 1; i <= NF; i++) c[$i] = i; nf++; next }
    {
        for (k in c) f[k] = $c[k]   # a row by column name
        p = prec(f["precision"], f["name"])
        if (nf == 1) { n++; shape = f["shape"]; id = f["version"] SUBSEP f["scope"] }
        else id = "peer" SUBSEP f["version"] SUBSEP p SUBSEP f["scope"]
        # the last row of each (version, precision, scope) at each shape
        key = f["shape"] SUBSEP id
        if (!(key in row)) order[++nk] = key
        row[key] = $0; cols[key] = nf; rp[key] = p
        if (nf == 1) for (k in c) colof[k] = c[k]
        else for (k in c) pcolof[k] = c[k]
    }
    function field(key, name,   a) {
        split(row[key], a, ",")
        if (cols[key] == 1) return (name in colof) ? a[colof[name]] : ""
        return (name in pcolof) ? a[pcolof[name]] : ""
    }
    function vkey(v) {
        return v == "eager" ? 1000 : v == "compile" ? 1002 : v ~ /^v[0-9]+$/ ? substr(v, 2) + 0 \
             : v ~ /^b[0-9]+$/ ? 100 + substr(v, 2) : 2000
    }
    function skey(s) {
        return s == "epilogue_fwd" ? 0 : s == "model_fwd" ? 1 : s == "epilogue_fwdbwd" ? 2 \
             : s == "train_step" ? 3 : s == "stats" ? 4 : 9
    }
    function num(x, fmt) { return x == "" ? "-" : sprintf(fmt, x) }
    END {
        if (n == 0) { print "no rows in " ours > "/dev/stderr"; exit 2 }
        m = 0
        for (i = 1; i <= nk; i++) {
            split(order[i], q, SUBSEP)
            if (q[1] != shape) continue
            k = order[i]; v = field(k, "version"); s = field(k, "scope")
            # eager fp32, eager default, compile fp32, compile default
            sel[++m] = k
            sk[m] = ((q[2] == "peer") * 10000 + vkey(v) + (rp[k] == "default")) * 10 + skey(s)
            if (q[2] == "peer") t[v, rp[k], s] = field(k, "median_ms")
            else our[s] = k
        }
        for (i = 2; i <= m; i++)   # insertion sort, stable: the rows are few
            for (j = i; j > 1 && sk[j - 1] > sk[j]; j--) {
                x = sk[j]; sk[j] = sk[j - 1]; sk[j - 1] = x
                x = sel[j]; sel[j] = sel[j - 1]; sel[j - 1] = x
            }
        print "| version | what | precision | scope | median ms [min - max] | GB/s " \
              "| % of copy ceiling | TFLOP/s | % of floor | vs eager fp32 " \
              "| vs torch.compile fp32 | vs eager default | vs torch.compile default |"
        print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= m; i++) {
            k = sel[i]; v = field(k, "version"); s = field(k, "scope"); med = field(k, "median_ms")
            gbps = field(k, "gbps"); pc = field(k, "pct_ceiling"); fl = field(k, "floor_ms")
            flops = field(k, "flops"); tf = field(k, "tflops"); pf = field(k, "pct_floor")
            if (cols[k] == 2 && (s in our)) {   # PyTorch: the problem counted as ours counts it
                o = our[s]; b = field(o, "bytes"); ceil = field(o, "ceiling_gbps") + 0
                flops = field(o, "flops"); fl = field(o, "floor_ms"); pf = ""; tf = ""
                gbps = b / med / 1e6; pc = (ceil > 0) ? 100 * gbps / ceil : ""
            }
            if (flops + 0 <= 0) tf = ""
            else if (tf == "") tf = flops / med / 1e9
            if (pf == "" && fl + 0 > 0) pf = 100 * fl / med
            tf32 = cols[k] == 1 && rp[k] == "tf32" # a TF32 row: beside the default precision only
            printf "| %s | %s | %s | %s | %.4f [%.4f - %.4f] | %s | %s | %s | %s | %s | %s | %s " \
                "| %s |\n", v, field(k, "name"), rp[k], s, med, field(k, "min_ms"),
                field(k, "max_ms"), num(gbps, "%.0f"), num(pc, "%.1f"), num(tf, "%.2f"),
                num(pf, "%.1f"),
                tf32 ? "-" : ratio(t["eager", "fp32", s], med), \
                tf32 ? "-" : ratio(t["compile", "fp32", s], med),
                ratio(t["eager", "default", s], med), ratio(t["compile", "default", s], med)
        }
        print ""
        print "precision: ours fp32, 3xtf32 (tensor cores, fp32 accuracy) or tf32; PyTorch fp32"
        print "(TF32 off) or default (its flags as shipped: cuDNN may run a conv in TF32). vs: the"
        print "peer'"'"'s median over the row'"'"'s, \"(behind)\" where the row is slower; \"-\": no such"
        print "peer row, or a TF32 row beside PyTorch in fp32 (TF32 rows compare with its default"
        print "precision only). The floor is fp32'"'"'s: a conv in TF32 on tensor cores can pass it."
    }' "$ours" "$peers"
    echo
    errtable "$1" "$2"
}

# errtable: PyTorch's results against float64 from the same float32 inputs, at the KernelBench
# shape, per precision (data/<gpu>/pytorch-chNN-error.csv, make peers): the conv's forward, dx
# and dw alone (eager) and the whole model's forward, eager and torch.compile; "-" where the file
# has no such row
errtable() {  # $1 chapter, $2 gpu
    case $1 in [0-9]) ch=0$1 ;; *) ch=$1 ;; esac
    errs=data/$2/pytorch-ch$ch-error.csv
    [ -f "$errs" ] || errs=/dev/null
    awk -F, -v shape="$(kb_shape "$ch" "$2")" "$COMMON_AWK"'
    FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["shape"] == shape { e[$c["version"], $c["precision"], $c["scope"]] = $c["rel_l2"] }
    function cell(v, p, s) { return ((v, p, s) in e) ? e[v, p, s] : "-" }
    END {
        print "| PyTorch against float64 (relative L2 error) | conv forward | conv dx | conv dw " \
              "| model forward, eager | model forward, torch.compile |"
        print "|---|---|---|---|---|---|"
        split("fp32 default", ps, " ")
        for (i = 1; i <= 2; i++)
            printf "| %s | %s | %s | %s | %s | %s |\n", plabel(ps[i]),
                cell("eager", ps[i], "conv_fwd"), cell("eager", ps[i], "conv_dx"),
                cell("eager", ps[i], "conv_dw"), cell("eager", ps[i], "model_fwd"),
                cell("compile", ps[i], "model_fwd")
    }' "$errs"
}

# the KernelBench shape of a chapter: the shape of the last row of data/<gpu>/chNN.csv
kb_shape() {  # $1 chapter (01), $2 gpu
    awk -F, 'FNR == 1 { for (i = 1; i <= NF; i++) if ($i == "shape") s = i; next }
             { last = $s } END { print last }' "data/$2/ch$1.csv"
}

# glance: per scope at the KernelBench shape, one row per PyTorch precision: against its fp32
# (TF32 off), our fastest version at fp32's accuracy (fp32 or 3xtf32); against its default
# (TF32 convs), our fastest at that precision or better (tf32 too). Then errtable
glance() {  # $1 chapter, $2 gpu
    case $1 in [0-9]) ch=0$1 ;; *) ch=$1 ;; esac
    ours=data/$2/ch$ch.csv peers=data/$2/pytorch-ch$ch.csv
    [ -f "$ours" ] || { echo "no $ours" >&2; return 2; }
    [ -f "$peers" ] || peers=/dev/null
    awk -F, -v ours="$ours" "$COMMON_AWK"'
    FNR == 1 { split("", c); for (i = 1; i <= NF; i++) c[$i] = i; nf++; next }
    nf == 1 { shape = $c["shape"]; n++; r[n] = $0; for (k in c) oc[k] = c[k]; next }
    {
        p = prec(("precision" in c) ? $c["precision"] : "", $c["name"])
        t[$c["shape"], $c["version"], p, $c["scope"]] = $c["median_ms"]; has[$c["scope"]] = 1
    }
    function fld(line, name,   a) { split(line, a, ","); return (name in oc) ? a[oc[name]] : "" }
    function ms(x) { return x == "" ? "-" : sprintf("%#.4g ms", x) }
    END {
        if (n == 0) { print "no rows in " ours > "/dev/stderr"; exit 2 }
        split("epilogue_fwd model_fwd epilogue_fwdbwd train_step stats", sc, " ")
        split("epilogue forward (input: the conv output)|whole model forward|" \
              "epilogue forward + backward|training step (forward and every gradient)|" \
              "normalisation statistics alone", title, "|")
        split("fp32 default", ps, " ")
        print "| scope | PyTorch'"'"'s precision | ours: fastest version at that precision or " \
              "better | % of floor | PyTorch eager | torch.compile | speedup over torch.compile |"
        print "|---|---|---|---|---|---|---|"
        for (j = 1; j <= 5; j++) {
            # a row per PyTorch precision; one (fp32) where PyTorch has no such scope
            for (q = 1; q <= (sc[j] in has ? 2 : 1); q++) {
                best = ""
                for (i = 1; i <= n; i++) { # a TF32 version only beside the TF32 convs of PyTorch
                    pr = prec(fld(r[i], "precision"), fld(r[i], "name"))
                    if (fld(r[i], "shape") == shape && fld(r[i], "scope") == sc[j] && \
                        (pr != "tf32" || ps[q] == "default") && (best == "" || \
                        fld(r[i], "median_ms") + 0 < fld(best, "median_ms") + 0))
                        best = r[i]
                }
                if (best == "") continue
                med = fld(best, "median_ms")
                what = sprintf("%s ms (%s, %s: %s)", sprintf("%#.4g", med), fld(best, "version"),
                               prec(fld(best, "precision"), fld(best, "name")), fld(best, "name"))
                e = t[shape, "eager", ps[q], sc[j]]; tc = t[shape, "compile", ps[q], sc[j]]
                printf "| %s | %s | %s | %.0f%% | %s | %s | %s |\n", title[j], plabel(ps[q]), what,
                    fld(best, "pct_floor"), ms(e), ms(tc), ratio(tc, med)
            }
        }
    }' "$ours" "$peers"
    echo
    errtable "$1" "$2"
}

# kernelbench: data/<gpu>/kernelbench.csv (make kernelbench, KernelBench's protocol) as one table,
# chapter by chapter: per scope (forward, train_step) and PyTorch precision, Model eager and
# torch.compile against ModelNew (means of the trials, ms), the speedups, ModelNew's correctness
# trials, the export's mean and trials (make kernelbench EXPORT=1) where it was timed; beside the
# forward in PyTorch's default precision, KernelBench's published means
# (data/kernelbench-published.csv, PyTorch 2.5)
kbtable() {  # $1 gpu
    kb=data/$1/kernelbench.csv pub=data/kernelbench-published.csv
    [ -f "$kb" ] || { echo "no $kb" >&2; return 2; }
    grep -v '^#' "$pub" | awk -F, '
    FNR == 1 { split("", c); for (i = 1; i <= NF; i++) c[$i] = i; f++; next }
    f == 1 { pe[$c["problem"]] = $c["eager_mean_ms"]; pc[$c["problem"]] = $c["compile_mean_ms"]; next }
    {
        k = $c["chapter"] SUBSEP $c["scope"] SUBSEP $c["precision"]
        m[k, $c["model"]] = $c["mean_ms"]
        if ($c["model"] == "ModelNew") ok[k] = $c["correct"]
        if ($c["model"] == "export") exok[k] = $c["correct"]
        prob[$c["chapter"]] = $c["problem"]; sh[$c["chapter"]] = $c["shape"]; gpu = $c["gpu"]
    }
    function ms(x) { return x == "" ? "-" : sprintf("%#.4g", x) }
    function sp(a, b,   r) {
        if (a == "" || b == "" || b + 0 <= 0) return "-"
        r = sprintf("%.2f", a / b); return r "x" (r + 0 < 1 ? " (behind)" : "")
    }
    END {
        print "| chapter (KernelBench level 2) | scope | PyTorch precision | Model eager | " \
              "torch.compile | ModelNew | vs eager | vs compile | ModelNew correct | " \
              "export (load_inline) | published eager / compile |"
        print "|---|---|---|---|---|---|---|---|---|---|---|"
        for (ch = 1; ch <= 5; ch++) {
            key = sprintf("%02d", ch)
            if (!(key in prob)) continue
            split(prob[key], pn, "_"); first = 1
            ns = split("forward train_step", scopes, " ")
            for (i = 1; i <= ns; i++) for (j = 1; j <= 2; j++) {
                pr = j == 1 ? "fp32" : "default"; k = key SUBSEP scopes[i] SUBSEP pr
                if (!((k, "ModelNew") in m)) continue
                pubcell = (scopes[i] == "forward" && pr == "default" && (prob[key] in pe)) ? \
                    pe[prob[key]] " / " pc[prob[key]] : "-"
                ex = ((k, "export") in m) ? ms(m[k, "export"]) " (" exok[k] ")" : "-"
                printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", \
                    first ? sprintf("%d (#%s, %s)", ch, pn[1], sh[key]) : "", scopes[i], \
                    pr == "fp32" ? "fp32 (TF32 off)" : "default (TF32 convs)", \
                    ms(m[k, "eager"]), ms(m[k, "compile"]), ms(m[k, "ModelNew"]), \
                    sp(m[k, "eager"], m[k, "ModelNew"]), sp(m[k, "compile"], m[k, "ModelNew"]), \
                    ok[k], ex, pubcell
                first = 0
            }
        }
    }' - "$kb"
}

# blocks FILE: one line per table block, "NN GPU FIRST LAST" (the marker lines; LAST is - when
# the block has no end marker)
marker='^<!-- table: sh data/readme-table[.]sh ((glance )?[0-9]+|kernelbench)( [A-Za-z0-9._-]+)? -->[ \t]*$'
blocks() {
    awk -v re="$marker" '{ sub(/\r$/, "") }
    $0 ~ re {
        if (open) print a[1], a[2], start, "-"
        s = $0; sub(/^<!-- table: sh [^ ]+ /, "", s); sub(/ *-->.*/, "", s)
        g = sub(/^glance /, "", s); split(s, a, " ")
        if (a[2] == "") a[2] = "h100"
        if (g) a[1] = "glance:" a[1]
        open = 1; start = NR; next
    }
    /^<!-- end table -->[ \t]*$/ && open { print a[1], a[2], start, NR; open = 0 }
    END { if (open) print a[1], a[2], start, "-" }' "$1"
}

# check | update: every block of every README
readmes() {
    tmp=$(mktemp -d) || exit 2
    trap 'rm -rf "$tmp"' EXIT
    nb=0 bad=0
    for f in README.md chapters/*/README.md; do
        [ -f "$f" ] || continue
        blocks "$f" > "$tmp/blocks"
        k=0 broken=0
        while read -r ch gpu first last; do
            k=$((k + 1)) nb=$((nb + 1))
            what="readme table $f (line $first: $ch $gpu)"
            if [ "$last" = - ]; then
                echo "FAIL  $what: no <!-- end table --> after it"; bad=1 broken=1; continue
            fi
            case $ch in glance:*) ch=${ch#glance:} mode=glance ;; kernelbench) mode=kbtable ;;
                *) mode=table ;; esac
            if ! { if [ $mode = kbtable ]; then kbtable "$gpu"; else $mode "$ch" "$gpu"; fi; } > "$tmp/want.$k" 2> "$tmp/err"; then
                echo "FAIL  $what: cannot be made: $(cat "$tmp/err")"; bad=1 broken=1; continue
            fi
            case $ch in [0-9]) ch=0$ch ;; esac
            src="data/$gpu/ch$ch.csv, pytorch-ch$ch*.csv"
            [ $mode = kbtable ] && src="data/$gpu/kernelbench.csv, data/kernelbench-published.csv"
            awk -v a="$first" -v b="$last" 'NR > a && NR < b { sub(/\r$/, ""); if (NF) print }' \
                "$f" > "$tmp/have"
            awk 'NF' "$tmp/want.$k" > "$tmp/want"   # blank lines are ignored on both sides
            if cmp -s "$tmp/have" "$tmp/want"; then
                [ "$1" = check ] && echo "PASS  readme table $f ($ch $gpu) matches $src"
                [ "$1" = update ] && echo "same     $f ($ch $gpu)"
            elif [ "$1" = check ]; then
                echo "FAIL  readme table $f ($ch $gpu) differs from $src (- README, + CSV):"
                diff -U 1 "$tmp/have" "$tmp/want" | sed -n '3,$p' | head -n 16 | sed 's/^/    /'
                bad=1
            else
                echo "updated  $f ($ch $gpu) from $src"
            fi
        done < "$tmp/blocks"
        # update: each block's lines become its table; a file with a broken block is left alone
        if [ "$1" = update ] && [ "$k" -gt 0 ] && [ "$broken" = 0 ]; then
            awk -v dir="$tmp" -v re="$marker" '{ sub(/\r$/, "") }
            $0 ~ re { print; k++; skip = 1
                while ((getline l < (dir "/want." k)) > 0) print l
                next }
            /^<!-- end table -->/ && skip { skip = 0 }
            !skip' "$f" > "$tmp/new" && cat "$tmp/new" > "$f"
        fi
    done
    [ "$nb" -gt 0 ] || echo "SKIP  readme table: no '<!-- table: sh data/readme-table.sh NN [gpu] -->'" \
        "block in README.md or chapters/*/README.md"
    return $bad
}

case $1 in
    --check) readmes check ;;
    --update) readmes update ;;
    [0-9]|[0-9][0-9]) table "$1" "${2:-h100}" ;;
    glance) glance "$2" "${3:-h100}" ;;
    kernelbench) kbtable "${2:-h100}" ;;
    *) echo "usage: sh data/readme-table.sh [glance] NN [gpu] | kernelbench [gpu] | --check | --update" >&2
       exit 2 ;;
esac
