# Chapter ch (default 01): speedup over the scope's first version (v1 forward, b1 backward) against batch size,
# a line per version; PyTorch eager and torch.compile too when data/<gpu>/pytorch-chNN.csv
# exists. Four panels: epilogue forward (input = the conv output), whole model forward,
# epilogue forward + backward, training step. Run from the repository root: make plots
if (!exists("gpu")) gpu = "h100"
if (!exists("ch")) ch = "01"
if (!exists("dir")) dir = "data/" . gpu
sweep = dir . "/ch" . ch . "-sweep.csv"
peers = dir . "/pytorch-ch" . ch . ".csv"
have_peers = system("test -s " . peers . " && echo 1 || echo 0") + 0
gpuname = system("awk -F, 'NR==2 {print toupper($1)}' " . sweep)

# "batch speedup" rows of one (scope, version) of our sweep, in batch order
ours(scope, ver) = sprintf("< awk -F, -v s=%s -v v=%s 'NR > 1 && $5 == s && $3 == v {split($6, d, \"x\"); print d[1], $15}' %s | sort -n", scope, ver, sweep)
# PyTorch's rows as a speedup over our v1 at the same batch
theirs(scope, ver, first) = sprintf("< awk -F, -v s=%s -v v=%s -v f=%s 'FNR == 1 {next} NR == FNR {if ($5 == s && $3 == f) {split($6, d, \"x\"); t[d[1]] = $7}; next} $5 == s && $3 == v {split($6, d, \"x\"); if (d[1] in t) print d[1], t[d[1]] / $7}' %s %s | sort -n", scope, ver, first, sweep, peers)
versions(scope) = system(sprintf("awk -F, -v s=%s 'NR > 1 && $5 == s {print $3}' %s | sort -u | tr '\\n' ' '", scope, sweep))
label(ver) = system(sprintf("awk -F, -v v=%s 'NR > 1 && $3 == v {print v \": \" $4; exit}' %s", ver, sweep))

set datafile separator whitespace
set logscale x 2
set logscale y 10
rest = system("awk -F, 'NR==2 {sub(/^[0-9]+x/, \"\", $6); gsub(/x/, \" x \", $6); print $6}' " . sweep)
set xlabel "batch size (input N x " . rest . ")"
set ylabel "speedup over v1 (median, higher is better)"
set key below font ",9" maxrows 4
set grid
maxb = system("awk -F, 'NR>1 {split($6, d, \"x\"); if (d[1] > m) m = d[1]} END {print m}' " . sweep) + 0
set xrange [0.8:maxb * 1.25]

do for [fmt in "png svg"] {
    if (fmt eq "png") { set terminal pngcairo size 1400,1150 font ",11" } else { set terminal svg size 1400,1150 font "sans,11" }
    set output sprintf("plots/ch%s-speedup.%s", ch, fmt)
    set multiplot layout 2,2 title sprintf("Chapter %d on %s: speedup over the scope's first version (v1 or b1); fp32, L2 flushed, medians", ch + 0, gpuname)
    do for [i = 1:4] {
        scope = (i == 1 ? "epilogue_fwd" : i == 2 ? "model_fwd" : i == 3 ? "epilogue_fwdbwd" : "train_step")
        first = (i <= 2 ? "v1" : "b1")
        set title (i == 1 ? "epilogue forward (input = the conv output)" : i == 2 ? "whole model forward" : i == 3 ? "epilogue forward + backward" : "training step (forward + every gradient)")
        if (strlen(versions(scope)) == 0) { set multiplot next } else {
        plot for [v in versions(scope)] ours(scope, v) using 1:2 with linespoints lw 2 title label(v), \
             for [p in (have_peers ? "eager compile" : "")] theirs(scope, p, first) using 1:2 with linespoints dt 2 lw 2 title "PyTorch ".p
        }
    }
    unset multiplot
}
