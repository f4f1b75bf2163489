#!/bin/sh
# compare.sh: two runs of one chapter side by side, per version, precision and scope, at the
# shapes they share: medians, their ratio, and whether the difference exceeds the spread of the
# runs (a ratio inside both runs' [min, max] ranges is noise, and is marked so).
# usage: sh data/compare.sh A.csv B.csv      e.g. data/h100/ch01.csv data/a100/ch01.csv
# Columns are found by their header names (version, scope, shape, median_ms, min_ms, max_ms, and
# precision where the file has it), so the CSVs of the C programs and of data/pytorch_peer.py
# read alike. A file without a precision column was written before it existed: its rows are
# fp32, or tf32 where the name carries "[TF32]"; where one of the files has no precision column,
# rows match on version, scope and shape alone.
[ $# -eq 2 ] && [ -f "$1" ] && [ -f "$2" ] || { echo "usage: sh data/compare.sh A.csv B.csv" >&2; exit 2; }
awk -F, '
    BEGIN { split("version scope shape median_ms min_ms max_ms", nn, " "); for (i in nn) need[nn[i]] = 1 }
    FNR == 1 {
        split("", c); for (i = 1; i <= NF; i++) c[$i] = i
        for (k in need) if (!(k in c)) {
            printf "%s: no %s column\n", FILENAME, k > "/dev/stderr"; bad = 1; exit 2
        }
        fi++; if (fi == 1) haveA = ("precision" in c); else haveB = ("precision" in c)
        next
    }
    {
        p = ("precision" in c) ? $c["precision"] \
          : ("name" in c) && index($c["name"], "[TF32]") ? "tf32" : "fp32"
        k = $c["version"] SUBSEP p SUBSEP $c["scope"] SUBSEP $c["shape"]
        if (fi == 1) {
            am[k] = $c["median_ms"]; alo[k] = $c["min_ms"]; ahi[k] = $c["max_ms"]
            if (!(k in seen)) { seen[k] = 1; order[++n] = k }
        } else { bm[k] = $c["median_ms"]; blo[k] = $c["min_ms"]; bhi[k] = $c["max_ms"] }
    }
    # the key of row k of A in B: with the precision where both files have one, else without
    function inB(k,   f, g, j) {
        if (haveA && haveB) return k
        split(k, f, SUBSEP)
        for (j in bm) {
            split(j, g, SUBSEP)
            if (g[1] == f[1] && g[3] == f[3] && g[4] == f[4]) return j
        }
        return ""
    }
    END {
        if (bad) exit 2
        printf "%-7s %-9s %-16s %-18s %12s %12s %8s  %s\n", "ver", "precision", "scope", "shape",
            "A ms", "B ms", "B/A", "beyond the spread?"
        for (i = 1; i <= n; i++) {
            k = order[i]; j = inB(k)
            if (j == "" || !(j in bm)) continue
            split(k, f, SUBSEP)
            noise = (bm[j] <= ahi[k] && bm[j] >= alo[k]) || (am[k] <= bhi[j] && am[k] >= blo[j])
            printf "%-7s %-9s %-16s %-18s %12.4f %12.4f %8.3f  %s\n", f[1], f[2], f[3], f[4],
                am[k], bm[j], bm[j] / am[k],
                noise ? "no (within min-max)" : (bm[j] > am[k] ? "yes, slower" : "yes, faster")
        }
    }' "$1" "$2"
