# Chapter ch (default 01): time against batch size beside the DRAM floor (bytes the scope must move over the
# measured copy ceiling). Where a line meets its floor, only fewer bytes can make it faster.
if (!exists("gpu")) gpu = "h100"
if (!exists("ch")) ch = "01"
if (!exists("dir")) dir = "data/" . gpu
sweep = dir . "/ch" . ch . "-sweep.csv"
gpuname = system("awk -F, 'NR==2 {print toupper($1)}' " . sweep)
ours(scope, ver, col) = sprintf("< awk -F, -v s=%s -v v=%s 'NR > 1 && $5 == s && $3 == v {split($6, d, \"x\"); print d[1], $%d}' %s | sort -n", scope, ver, col, sweep)
versions(scope) = system(sprintf("awk -F, -v s=%s 'NR > 1 && $5 == s {print $3}' %s | sort -u | tr '\\n' ' '", scope, sweep))
label(ver) = system(sprintf("awk -F, -v v=%s 'NR > 1 && $3 == v {print v \": \" $4; exit}' %s", ver, sweep))

set datafile separator whitespace
set logscale xy
rest = system("awk -F, 'NR==2 {sub(/^[0-9]+x/, \"\", $6); gsub(/x/, \" x \", $6); print $6}' " . sweep)
set xlabel "batch size (input N x " . rest . ")"
set ylabel "median time, ms (lower is better)"
set key below font ",9" maxrows 4
set grid
maxb = system("awk -F, 'NR>1 {split($6, d, \"x\"); if (d[1] > m) m = d[1]} END {print m}' " . sweep) + 0
set xrange [0.8:maxb * 1.25]
do for [fmt in "png svg"] {
    if (fmt eq "png") { set terminal pngcairo size 1400,640 font ",11" } else { set terminal svg size 1400,640 font "sans,11" }
    set output sprintf("plots/ch%s-floor.%s", ch, fmt)
    set multiplot layout 1,2 title sprintf("Chapter %d on %s: time against the DRAM floor", ch + 0, gpuname)
    set title "epilogue alone"
    plot for [v in versions("epilogue_fwd")] ours("epilogue_fwd", v, 7) using 1:2 with linespoints lw 2 title label(v), \
         ours("epilogue_fwd", "v1", 14) using 1:2 with lines lw 3 lc "black" dt 2 title "DRAM floor (1 read + 1 write)"
    set title "whole model"
    plot for [v in versions("model_fwd")] ours("model_fwd", v, 7) using 1:2 with linespoints lw 2 title label(v), \
         ours("model_fwd", "v1", 14) using 1:2 with lines lw 3 lc "black" dt 2 title "DRAM floor (x in, y out)"
    unset multiplot
}
