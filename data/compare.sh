#!/bin/sh
# compare.sh: two runs of one chapter side by side, per version and scope, at the shape they
# share: medians, their ratio, and whether the difference exceeds the spread of the runs
# (a ratio inside both runs' [min, max] ranges is noise, and is marked so).
# usage: sh data/compare.sh A.csv B.csv      e.g. data/h100/ch01.csv data/a100/ch01.csv
# Reads either CSV format the programs have written (the median is column 7, min 8, max 9).
[ $# -eq 2 ] && [ -f "$1" ] && [ -f "$2" ] || { echo "usage: sh data/compare.sh A.csv B.csv" >&2; exit 2; }
awk -F, -v A="$1" -v B="$2" '
    FNR == 1 { next }
    FILENAME == A { k = $3 SUBSEP $5 SUBSEP $6; am[k] = $7; alo[k] = $8; ahi[k] = $9; if (!(k in seen)) { seen[k] = 1; order[++n] = k }; next }
    { k = $3 SUBSEP $5 SUBSEP $6; bm[k] = $7; blo[k] = $8; bhi[k] = $9 }
    END {
        printf "%-5s %-16s %-18s %12s %12s %8s  %s\n", "ver", "scope", "shape", "A ms", "B ms", "B/A", "beyond the spread?"
        for (i = 1; i <= n; i++) {
            k = order[i]
            if (!(k in bm)) continue
            split(k, f, SUBSEP)
            noise = (bm[k] <= ahi[k] && bm[k] >= alo[k]) || (am[k] <= bhi[k] && am[k] >= blo[k])
            printf "%-5s %-16s %-18s %12.4f %12.4f %8.3f  %s\n", f[1], f[2], f[3], am[k], bm[k], bm[k] / am[k], noise ? "no (within min-max)" : (bm[k] > am[k] ? "yes, slower" : "yes, faster")
        }
    }' "$1" "$2"
