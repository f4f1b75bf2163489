#!/bin/sh
# figures.sh: every measured figure in the comments and READMEs cites the CSV row it quotes, and
# this checks that the figure still says what the row says.
#   sh data/figures.sh --check [FILE...]     every tag against its row (make test); exit 1 on a
#                                            figure that disagrees or a tag without its row
#   sh data/figures.sh --fix [FILE...]       rewrite every tagged figure from its row, at the
#                                            digits it shows (after a new make record)
#   sh data/figures.sh --untagged [FILE...]  list the figures with a time, % or x unit that carry
#                                            no tag and no commit (informative: exit 0)
# FILE: by default README.md, chapters/*/README.md, data/h100/README.md and chapters/*/*.cu,
# *.cuh, *.h. --data DIR reads the CSVs of DIR instead of data/h100 (the checker's own test).
#
# A tag is a citation in square brackets right after the figure it quotes (on the same line,
# or at the start of the next); in chapter NN's files it reads data/h100/chNN.csv and the rest:
#   0.425 ms [v2 epilogue_fwd]             the row of version v2, scope epilogue_fwd, at the
#                                          chapter's KernelBench shape (the Makefile's
#                                          SHAPE_NN); the column by the unit: ms, µs or none
#                                          median_ms, GB/s gbps, TFLOP/s tflops
#   84% of the copy ceiling [v2 epilogue_fwd pct_ceiling]
#                                          any other column, by the CSV header's name (a %
#                                          always names one: pct_ceiling, pct_floor)
#   0.3674 ms [0.3665 - 0.3687] [v7 epilogue_fwd median_ms min_ms max_ms]
#                                          k column names quote the last k numbers before the
#                                          tag, in order
#   1.80x v1 [v1/v2 epilogue_fwd]          a ratio, v1's median over v2's; one word of the tag
#                                          holds the slash (v1/v2, ch01/ch03,
#                                          model_fwd/epilogue_fwd, median_ms/floor_ms), or two
#                                          whole rows: [compile train_step / b4 train_step];
#                                          with a % unit, in percent:
#                                          11% [v1 epilogue_fwd/model_fwd]
#   2.0% faster than v4 [v7 vs v4 epilogue_fwd]
#                                          a difference in percent, 100 |v7 / v4 - 1| of the
#                                          medians (the words say which way); in A vs B, an A of
#                                          one word takes B's other words
#   0.175 ms [v3-v5 model_fwd]             a difference of two medians, in ms
#   2.796 ms [eager epilogue_fwd]          PyTorch: versions eager and compile read
#                                          pytorch-chNN.csv, then pytorch-chNN-ops.csv (the
#                                          conv's ops: conv_fwd, conv_dx, conv_dw, ...)
#   0.0480 ms [v5 epilogue_fwd @1]         another shape: @1 is batch 1 of the KernelBench shape,
#                                          @4x32x32x64x64 a whole shape; our rows come from
#                                          chNN.csv, else from the sweep, chNN-sweep.csv
#   [ch03 v11 epilogue_fwd]                another chapter's row (README.md and
#                                          data/h100/README.md belong to none: they name it)
#   [compile train_step default]           any other word selects the value of the precision
#                                          column; without one, a tag quotes the fp32 row (or the
#                                          row's only precision)
# A figure agrees when it equals the CSV value rounded to the figure's own decimals (0.425 for
# 0.42512, 97% for 97.43; a field exactly halfway, 42.05 to one decimal, agrees as 42.0, printf's
# and the README tables' rounding, or as 42.1; --fix writes printf's). Where one (version, scope,
# shape, precision) has several rows, the last counts, as in the README tables. A tag whose row
# is missing, or whose words do not read, is an error. The generated README tables
# (data/readme-table.sh) and inline code (`...`: examples) are skipped.
cd "$(dirname "$0")/.." || exit 2

mode= data=data/h100
while [ $# -gt 0 ]; do
    case $1 in
        --check|--fix|--untagged) mode=${1#--} ;;
        --data) data=$2; shift ;;
        -*) mode= ; break ;;
        *) break ;;
    esac
    shift
done
if [ -z "$mode" ]; then
    echo "usage: sh data/figures.sh --check | --fix | --untagged [--data DIR] [FILE...]" >&2
    exit 2
fi
[ -d "$data" ] || { echo "figures.sh: no folder $data" >&2; exit 2; }
[ $# -gt 0 ] || set -- README.md chapters/*/README.md data/h100/README.md \
    chapters/*/*.cu chapters/*/*.cuh chapters/*/*.h
for f in "$@"; do
    [ -f "$f" ] || { echo "figures.sh: no file $f" >&2; exit 2; }
done
# the KernelBench shape of each chapter: "01=128x3x16x32x32 02=..."
shapes=$(awk '/^SHAPE_[0-9]+ *:= *[0-9x]+ *$/ { s = $1; sub(/^SHAPE_/, "", s); v = $0
    sub(/^[^=]*= */, "", v); sub(/ *$/, "", v); printf "%s=%s ", s, v }' Makefile)
[ -n "$shapes" ] || { echo "figures.sh: no SHAPE_NN in the Makefile" >&2; exit 2; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

awk -v mode="$mode" -v data="$data" -v shapes="$shapes" -v tmp="$tmp" '
BEGIN {
    default_precision = "fp32"
    nsh = split(shapes, a, " ")
    for (i = 1; i <= nsh; i++) {
        split(a[i], kv, "="); ch = kv[1]; kshape[ch] = kv[2]
        load(ch, "ours", data "/ch" ch ".csv"); load(ch, "ours", data "/ch" ch "-sweep.csv")
        load(ch, "peers", data "/pytorch-ch" ch ".csv")
        load(ch, "peers", data "/pytorch-ch" ch "-ops.csv")
    }
    nfail = 0; ntag = 0; nfig = 0; nfile = 0; nfixed = 0; nuntag = 0
}

# a CSV line into f[1..n]; double quotes allowed around a field
function csvsplit(line, f,   n, q, i, c, cur) {
    n = 0; q = 0; cur = ""
    for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (q && c == "\"" && substr(line, i + 1, 1) == "\"") { cur = cur c; i++ }
        else if (c == "\"") q = !q
        else if (q) cur = cur c
        else if (c == ",") { f[++n] = cur; cur = "" }
        else cur = cur c
    }
    f[++n] = cur
    return n
}

# rows of one CSV: rowv[id, column name]; byk[ch, group, version, scope, shape, file] lists ids
function load(ch, group, file,   line, nh, h, f, n, i, id, k) {
    if ((getline line < file) <= 0) return
    sub(/\r$/, "", line); nh = csvsplit(line, h)
    for (i = 1; i <= nh; i++) iscol[h[i]] = 1
    nfiles[ch, group]++; fileof[ch, group, nfiles[ch, group]] = file
    while ((getline line < file) > 0) {
        sub(/\r$/, "", line); if (line == "") continue
        n = csvsplit(line, f); id = ++nrows
        for (i = 1; i <= nh; i++) rowv[id, h[i]] = (i <= n) ? f[i] : ""
        rowfile[id] = file
        k = ch SUBSEP group SUBSEP f[col(h, nh, "version")] SUBSEP f[col(h, nh, "scope")] \
            SUBSEP f[col(h, nh, "shape")] SUBSEP file
        byk[k] = (k in byk) ? byk[k] " " id : id
        if ("precision" in iscol && col(h, nh, "precision")) hasprec[file] = 1
    }
    close(file)
}
function col(h, nh, name,   i) { for (i = 1; i <= nh; i++) if (h[i] == name) return i; return 0 }

# one side of a tag, its words in w[1..nw]: [chNN] VERSION SCOPE [@shape] [column ...] [precision]
# sets S_ch, S_ver, S_scope, S_shape, S_prec, S_ncol, S_col[1..]; returns "" or an error
function parse_spec(words, ch,   w, nw, i, t, rest) {
    nw = split(words, w, " ")
    S_ch = ch; S_ver = ""; S_scope = ""; S_shape = ""; S_prec = ""; S_ncol = 0
    i = 1
    if (w[i] ~ /^ch[0-9][0-9]$/) { S_ch = substr(w[i], 3); i++ }
    if (S_ch == "") return "which chapter? (ch01 .. ch" sprintf("%02d", nsh) " in this file)"
    if (!(S_ch in kshape)) return "no chapter " S_ch " (no SHAPE_" S_ch " in the Makefile)"
    if (w[i] !~ /^([vb][0-9]+|eager|compile)$/) return "a version (v1, b2, eager, compile) first"
    S_ver = w[i++]
    if (w[i] !~ /^[a-z][a-z_]*$/ || w[i] in iscol) return "a scope after the version"
    S_scope = w[i++]
    for (; i <= nw; i++) {
        t = w[i]
        if (t ~ /^@[0-9]+$/) {
            rest = kshape[S_ch]; sub(/^[0-9]+/, "", rest); S_shape = substr(t, 2) rest
        } else if (t ~ /^@[0-9]+(x[0-9]+)+$/) S_shape = substr(t, 2)
        else if (t in iscol) S_col[++S_ncol] = t
        else if (t ~ /^[A-Za-z0-9_.+-]+$/ && S_prec == "") S_prec = t
        else return "cannot read \"" t "\""
    }
    if (S_shape == "") S_shape = kshape[S_ch]
    return ""
}

# the row of the parsed spec: its id, or 0 with ERR set
function resolve(   g, j, file, k, ids, n, i, id, p, m, pick, precs, seen, cand, nc) {
    g = (S_ver == "eager" || S_ver == "compile") ? "peers" : "ours"
    for (j = 1; j <= nfiles[S_ch, g]; j++) {
        file = fileof[S_ch, g, j]
        k = S_ch SUBSEP g SUBSEP S_ver SUBSEP S_scope SUBSEP S_shape SUBSEP file
        if (!(k in byk)) continue
        n = split(byk[k], ids, " ")
        nc = 0; pick = 0; precs = ""; split("", seen)
        for (i = 1; i <= n; i++) {
            id = ids[i]; p = hasprec[file] ? rowv[id, "precision"] : ""
            if (!(p in seen)) {
                seen[p] = 1; precs = precs (precs == "" ? "" : ", ") (p == "" ? "(none)" : p)
            }
            if (S_prec != "") { if (p == S_prec) pick = id }
            else cand[++nc] = id
        }
        if (S_prec != "") {
            if (pick) return pick
            ERR = "no row of precision " S_prec " in " file " (it has " precs ")"; return 0
        }
        # no precision named: the fp32 rows, else the only precision there is
        pick = 0
        for (i = 1; i <= nc; i++) {
            p = hasprec[file] ? rowv[cand[i], "precision"] : ""
            if (p == "" || p == default_precision) pick = cand[i]
        }
        if (pick) return pick
        m = 0; for (p in seen) m++
        if (m == 1) return cand[nc]
        ERR = S_ver " " S_scope " has rows of precisions " precs " in " file ": name one"; return 0
    }
    ERR = "no row " S_ver " " S_scope " at " S_shape " in"
    for (j = 1; j <= nfiles[S_ch, g]; j++) ERR = ERR " " fileof[S_ch, g, j]
    if (nfiles[S_ch, g] == 0) ERR = ERR " (no CSV of chapter " S_ch " for " g ")"
    return 0
}

function rowname(id, c) {
    return rowfile[id] ": " rowv[id, "version"] " " rowv[id, "scope"] " " rowv[id, "shape"] \
        (rowv[id, "precision"] != "" ? " " rowv[id, "precision"] : "") " " c " " rowv[id, c]
}

# numbers of s (a line or its tail) from character lo to hi: N_st, N_len, N_txt, N_unit [1..nn]
function scan(s, lo, hi,   off, rest, st, len, b, a, after, u, nn) {
    nn = 0; off = lo - 1; rest = substr(s, lo, hi - lo + 1)
    while (match(rest, /[0-9]+(\.[0-9]+)?/)) {
        st = off + RSTART; len = RLENGTH
        off = st + len - 1; rest = substr(s, off + 1, hi - off)
        b = st > 1 ? substr(s, st - 1, 1) : ""
        a = substr(s, st + len, 1); after = substr(s, st + len, 12)
        if (b ~ /[A-Za-z0-9_.-]/) continue
        if (a ~ /[A-Za-z0-9_]/ && !(after ~ /^x([^A-Za-z0-9_]|$)/)) continue
        u = ""
        if (after ~ /^x([^A-Za-z0-9_]|$)/) u = "x"
        else if (after ~ /^%/) u = "%"
        else if (after ~ /^ ?ms([^A-Za-z0-9_]|$)/) u = "ms"
        else if (after ~ /^ ?(µs|us)([^A-Za-z0-9_]|$)/) u = "us"
        else if (after ~ /^ ?GB\/s/) u = "GB/s"
        else if (after ~ /^ ?TFLOP\/s/) u = "TFLOP/s"
        nn++; N_st[nn] = st; N_len[nn] = len; N_txt[nn] = substr(s, st, len); N_unit[nn] = u
    }
    return nn
}
function figtext(q,   u) {
    u = F_unit[q]
    return F_txt[q] (u == "" || u == "%" || u == "x" ? u : u == "us" ? " µs" : " " u)
}
function decimals(t,   i) { i = index(t, "."); return i ? length(t) - i : 0 }
# a CSV field to d decimals as decimal text, half up (42.05 -> 42.1, as a reader rounds it);
# printf (as data/readme-table.sh rounds) may give 42.0 for the same field, and either agrees
function rounded(v, d,   neg, ip, fp, i, digits, c, n, out) {
    if (v !~ /^-?[0-9]+(\.[0-9]*)?$/) return sprintf("%." d "f", v)
    neg = (substr(v, 1, 1) == "-"); if (neg) v = substr(v, 2)
    i = index(v, "."); ip = i ? substr(v, 1, i - 1) : v; fp = i ? substr(v, i + 1) : ""
    while (length(fp) <= d) fp = fp "0"
    digits = ip substr(fp, 1, d); c = (substr(fp, d + 1, 1) >= "5")
    for (n = length(digits); n >= 1 && c; n--) {
        i = substr(digits, n, 1) + 1; c = (i == 10)
        digits = substr(digits, 1, n - 1) (c ? 0 : i) substr(digits, n + 1)
    }
    if (c) digits = "1" digits
    n = length(digits) - d
    out = d ? substr(digits, 1, n) "." substr(digits, n + 1) : digits
    sub(/^0+/, "", out); if (out ~ /^(\.|$)/) out = "0" out
    if (neg && out ~ /[1-9]/) out = "-" out
    return out
}
function unitcol(u) {
    if (u == "ms" || u == "us" || u == "") return "median_ms"
    return u == "GB/s" ? "gbps" : u == "TFLOP/s" ? "tflops" : ""
}

# the value a tag gives for a figure of unit u, its k-th column of kc; sets VAL, SRC or ERR
function tagvalue(content, ch, u, k, kc,   c, halves, nh, w, nw, i, slash, left, right, ia, ib,
                  ca, cb, sc, vs, op) {
    ERR = ""; SRC = ""; vs = 0; ASTEXT = 0
    if (index(content, " vs ")) {            # a difference: A vs B, in percent
        vs = 1; nh = split(content, halves, " vs ")
        if (nh != 2) { ERR = "one \" vs \" a tag"; return }
        if (split(halves[1], w, " ") == 1) { # v7 vs v4 epilogue_fwd: v7 takes the other words
            nw = split(halves[2], sc, " ")
            for (i = 2; i <= nw; i++) halves[1] = halves[1] " " sc[i]
        }
        if (u != "%") { ERR = "a difference (vs) is in %"; return }
    } else nh = split(content, halves, " / ")
    if (nh == 1 && content ~ /[^ ]\/[^ ]|[a-z0-9]-[a-z]/) {   # one word holds a/b or a-b
        nw = split(content, w, " "); slash = 0
        for (i = 1; i <= nw; i++) if (w[i] ~ /^[^\/-]+[\/-][^\/-]+$/) {
            if (slash) { ERR = "one a/b or a-b a tag"; return }; slash = i
        }
        if (!slash) { ERR = "cannot read it"; return }
        op = index(w[slash], "/") ? "/" : "-"; left = ""; right = ""
        for (i = 1; i <= nw; i++) {
            if (i == slash) { split(w[i], sc, op); left = left " " sc[1]; right = right " " sc[2] }
            else { left = left " " w[i]; right = right " " w[i] }
        }
        halves[1] = left; halves[2] = right; nh = 2
        if (op == "-") vs = 2
    }
    if (vs == 2 && u != "ms" && u != "us" && u != "") { ERR = "a difference (a-b) is in ms"; return }
    if (nh > 2) { ERR = "one \" / \" a tag"; return }
    if (nh == 1) {
        if ((ERR = parse_spec(halves[1], ch)) != "") return
        if (S_ncol > 0 && k > S_ncol) { ERR = "quotes " S_ncol " columns"; return }
        c = S_ncol > 0 ? S_col[k] : unitcol(u)
        if (c == "") {
            ERR = "name the column: a figure in " u " (" (u == "%" ? "pct_ceiling, pct_floor" : \
                  "median_ms, ...") ")"; return
        }
        if (!(ia = resolve())) return
        if (rowv[ia, c] == "") { ERR = rowfile[ia] " has no " c " for " S_ver " " S_scope; return }
        VAL = rowv[ia, c] * ((u == "us" && c ~ /_ms$/) ? 1000 : 1)
        ASTEXT = !(u == "us" && c ~ /_ms$/); if (ASTEXT) VAL = rowv[ia, c]
        SRC = rowname(ia, c)
        return
    }
    if (vs != 2 && (u == "ms" || u == "us" || u == "GB/s" || u == "TFLOP/s")) {
        ERR = "a ratio has no unit " u; return
    }
    if ((ERR = parse_spec(halves[1], ch)) != "") return
    ca = S_ncol ? S_col[1] : "median_ms"
    if (S_ncol > 1) { ERR = "a ratio quotes one column a side"; return }
    if (!(ia = resolve())) return
    if ((ERR = parse_spec(halves[2], ch)) != "") return
    cb = S_ncol ? S_col[1] : "median_ms"
    if (!(ib = resolve())) return
    if (rowv[ia, ca] == "" || rowv[ib, cb] == "" || (vs != 2 && rowv[ib, cb] + 0 == 0)) {
        ERR = "no value to divide"; return
    }
    if (vs == 2) {
        VAL = (rowv[ia, ca] - rowv[ib, cb]) * (u == "us" ? 1000 : 1)
        SRC = rowname(ia, ca) " - " rowname(ib, cb)
        return
    }
    VAL = rowv[ia, ca] / rowv[ib, cb]
    if (vs) VAL = 100 * (VAL >= 1 ? VAL - 1 : 1 - VAL)
    else if (u == "%") VAL *= 100
    SRC = rowname(ia, ca) (vs ? " vs " : " / ") rowname(ib, cb)
}

function report(what) {
    if (mode == "untagged") return
    print what
}

# s with its inline code (between backquotes) blanked, the positions kept: an example of a
# citation in code is not one
function mask(s,   out, i, c, code) {
    if (!index(s, "`")) return s
    out = ""; code = 0
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "`") code = !code
        else if (code) c = " "
        out = out c
    }
    return out
}

# a whole file, its lines in L[1..n] (M: the same, its inline code blanked)
function dofile(file, n,   ch, i, j, s, intable, rest, st, len, content, nn, k, kc, lo, off,
                 want, w, changed, out, d, used, q, mm) {
    if (file == "") return
    nfile++
    ch = ""
    if (match(file, /chapters\/[0-9][0-9]-/)) ch = substr(file, RSTART + 9, 2)
    intable = 0; changed = 0; split("", used)
    for (i = 1; i <= n; i++) {
        s = M[i]
        if (s ~ /^<!-- table: /) { intable = 1; continue }
        if (s ~ /^<!-- end table -->/) { intable = 0; continue }
        if (intable) { skip[i] = 1; continue }
        # tags on this line, left to right; a tag quotes numbers after the previous tag
        lo = 1; off = 0; rest = s
        while (match(rest, /\[[^][]*\]/)) {
            st = off + RSTART; len = RLENGTH; off = st + len - 1; rest = substr(s, off + 1)
            content = substr(s, st + 1, len - 2)
            if (content !~ /^(ch[0-9][0-9](\/ch[0-9][0-9])? )?([vb][0-9]+|eager|compile)[ \/-]/)
                continue
            if (content !~ / [a-z]/) continue
            ntag++
            # how many figures: its column words (one for a ratio, or none named)
            kc = 1
            if (content !~ /\/| vs |[a-z0-9]-[a-z]/ && parse_spec(content, ch) == "" && S_ncol > 1)
                kc = S_ncol
            nn = scan(s, lo, st - 1)
            for (q = 1; q <= nn; q++) { F_line[q] = i; F_st[q] = N_st[q]; F_len[q] = N_len[q]
                                        F_txt[q] = N_txt[q]; F_unit[q] = N_unit[q] }
            # too few before it on this line: the tail of the line before lends the rest
            if (nn < kc && i > 1 && !skip[i - 1] && lo == 1) {
                mm = scan(M[i - 1], tail[i - 1] ? tail[i - 1] : 1, length(M[i - 1]))
                for (q = nn; q >= 1; q--) { j = q + mm; F_line[j] = F_line[q]; F_st[j] = F_st[q]
                    F_len[j] = F_len[q]; F_txt[j] = F_txt[q]; F_unit[j] = F_unit[q] }
                for (q = 1; q <= mm; q++) { F_line[q] = i - 1; F_st[q] = N_st[q]; F_len[q] = N_len[q]
                                            F_txt[q] = N_txt[q]; F_unit[q] = N_unit[q] }
                nn += mm
            }
            lo = off + 1; tail[i] = lo
            if (nn < kc) {
                nfail++
                report("FAIL  figure " file ":" i ": [" content "] quotes " kc " figure" \
                       (kc > 1 ? "s" : "") ", found " nn " before it")
                continue
            }
            for (k = 1; k <= kc; k++) {
                q = nn - kc + k; nfig++
                used[F_line[q], F_st[q]] = 1
                tagvalue(content, ch, F_unit[q], k, kc)
                if (ERR != "") {
                    nfail++
                    report("FAIL  figure " file ":" i ": " figtext(q) " [" content "]: " ERR)
                    continue
                }
                d = decimals(F_txt[q]); want = sprintf("%." d "f", VAL)
                if (want == F_txt[q] || (ASTEXT && rounded(VAL, d) == F_txt[q])) continue
                if (mode == "fix") {
                    j = F_line[q]
                    L[j] = substr(L[j], 1, F_st[q] - 1) want substr(L[j], F_st[q] + F_len[q])
                    # later figures of that line move with the new width
                    for (w = q + 1; w <= nn; w++)
                        if (F_line[w] == j) F_st[w] += length(want) - F_len[q]
                    if (j == i) { off += length(want) - F_len[q]; lo += length(want) - F_len[q]
                                  tail[i] = lo; s = M[i] = mask(L[i]); rest = substr(s, off + 1) }
                    else M[j] = mask(L[j])
                    changed = 1; nfixed++
                    print "fixed " file ":" F_line[q] ": " F_txt[q] " -> " want " [" content "] (" \
                          SRC ")"
                    F_txt[q] = want
                } else if (mode == "check") {
                    nfail++
                    print "FAIL  figure " file ":" F_line[q] ": " figtext(q) " [" content "]: " \
                          "the CSV gives " want " (" SRC ")"
                }
            }
        }
    }
    if (mode == "untagged") untagged(file, n, used)
    if (changed) {
        out = tmp "/f" nfile
        for (i = 1; i <= n; i++) print L[i] > out
        close(out)
        print file > (tmp "/changed"); print out > (tmp "/changed")
    }
}

# does s name a commit: a word of 7 to 40 hex digits, letters and digits both
function cites(s,   w, n, i) {
    n = split(s, w, /[^0-9A-Za-z]+/)
    for (i = 1; i <= n; i++)
        if (length(w[i]) >= 7 && length(w[i]) <= 40 && w[i] ~ /^[0-9a-f]+$/ && w[i] ~ /[a-f]/ \
            && w[i] ~ /[0-9]/) return 1
    return 0
}

# the figures with a time, % or x unit that no tag quotes and whose sentence cites no commit
function untagged(file, n, used,   i, s, p, para, np, t, nn, q, sent, a, b, k, body) {
    i = 1
    while (i <= n) {
        # a paragraph: lines up to a blank one (a comment line with nothing after its * or //)
        np = 0; t = ""
        while (i <= n) {
            s = L[i]; body = s
            sub(/^[ \t]*(\/\*+|\*+\/?|\/\/+)?[ \t]?/, "", body); sub(/[ \t]*\*\/[ \t]*$/, "", body)
            if (skip[i] || body ~ /^[ \t]*$/) { i++; break }
            np++; para[np] = i; pstart[np] = length(t) + 1; t = t s " "; i++
        }
        if (np == 0) continue
        # sentence boundaries: ". " before a capital, a parenthesis or a line break
        for (p = 1; p <= np; p++) {
            s = M[para[p]]
            nn = scan(s, 1, length(s))
            for (q = 1; q <= nn; q++) {
                if (N_unit[q] !~ /^(ms|us|%|x)$/ || ((para[p], N_st[q]) in used)) continue
                k = pstart[p] + N_st[q] - 1
                a = k
                while (a > 1 && !(substr(t, a - 2, 2) ~ /^[.;:] $/ && substr(t, a, 1) ~ /[A-Z(]/)) a--
                b = k
                while (b < length(t) && !(substr(t, b, 2) ~ /^[.;:] $/ && substr(t, b + 2, 1) ~ /[A-Z(]/))
                    b++
                sent = (L[para[p]] ~ /^[ \t]*\|/) ? L[para[p]] : substr(t, a, b - a + 1)
                if (cites(sent)) continue
                nuntag++; perfile[file]++
                print file ":" para[p] ": " N_txt[q] (N_unit[q] == "us" ? " µs" : \
                      N_unit[q] == "ms" ? " ms" : N_unit[q])
            }
        }
    }
}

FNR == 1 {
    if (NR > 1) dofile(cur, nl)
    cur = FILENAME; nl = 0; split("", L); split("", M); split("", skip); split("", tail)
}
{ sub(/\r$/, ""); L[++nl] = $0; M[nl] = mask($0) }
END {
    if (NR > 0) dofile(cur, nl)
    if (mode == "check") {
        if (nfail == 0)
            print "PASS  figures: " nfig " tagged figures (" ntag " tags) in " nfile \
                  " files agree with " data "/"
        else print nfail " figure(s) disagree with " data "/ or cite no row (sh data/figures.sh" \
                   " --fix rewrites the figures from the rows)"
    } else if (mode == "fix") {
        print nfixed " figure(s) rewritten" (nfail ? "; " nfail " tag(s) without a row left as" \
              " they are" : "")
    } else {
        for (f in perfile) print perfile[f], f | "sort -k2"
        close("sort -k2")
        print nuntag " figure(s) with a time, % or x unit carry no tag and no commit; " nfig \
              " tagged"
    }
    exit (nfail && mode != "untagged") ? 1 : 0
}' "$@"
rc=$?
if [ "$mode" = fix ] && [ -f "$tmp/changed" ]; then
    while read -r f && read -r new; do cat "$new" > "$f"; done < "$tmp/changed"
fi
exit $rc
