#!/bin/sh
# readme-table.sh: the markdown table of a chapter's README, from the committed CSVs: our rows
# (the last run in data/<gpu>/chNN.csv) and PyTorch's at the same shape
# (data/<gpu>/pytorch-chNN.csv, its first row for each scope and version), with speedups against
# eager and torch.compile per scope.
# usage: sh data/readme-table.sh 01 [h100]
ch=$1 gpu=${2:-h100} dir=$(dirname "$0")/$gpu
ours=$dir/ch$ch.csv peers=$dir/pytorch-ch$ch.csv
[ -f "$ours" ] || { echo "no $ours" >&2; exit 2; }
last_date=$(tail -n 1 "$ours" | awk -F, '{print $NF}')
shape=$(tail -n 1 "$ours" | awk -F, '{print $6}')
awk -F, -v shape="$shape" -v ours="$ours" '
    FNR == 1 { next }
    FILENAME != ours { if ($6 == shape && !(($5, $3) in t)) { t[$5, $3] = $7; peer[++np] = $0 } ; next }
    { row[++n] = $0; last[$3, $5] = n }
    END {
        print "| version | what | scope | median ms [min - max] | GB/s | % of copy ceiling | vs v1 | vs eager | vs torch.compile |"
        print "|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= n; i++) {
            split(row[i], f, ",")
            if (last[f[3], f[5]] != i) continue   # the last run of each (version, scope)
            line(f)
        }
        for (i = 1; i <= np; i++) { split(peer[i], f, ","); line(f) }
    }
    function line(f,   e, c, v1) {
        e = t[f[5], "eager"]; c = t[f[5], "compile"]
        printf "| %s | %s | %s | %.4f [%.4f - %.4f] | %.0f | %.1f | %s | %s | %s |\n", f[3], f[4], f[5],
            f[7], f[8], f[9], f[11], f[13], (f[15] == "" ? "-" : sprintf("%.2fx", f[15])),
            (e ? sprintf("%.2fx", e / f[7]) : "-"), (c ? sprintf("%.2fx", c / f[7]) : "-")
    }' "$peers" "$ours"
