# sweep.gp: one chapter's batch sweep on one GPU, a panel per scope: median time (ms, log)
# against batch size (log2), each version a line, PyTorch eager and torch.compile dashed (in fp32,
# and dot-dashed in lighter colours in PyTorch's default precision where the CSV has it), and the
# floor, max(bytes / copy ceiling, FLOPs / fp32 peak) from the floor_ms column, dotted black.
#
# Why time against the floor, not a speedup: the floor says how much faster a version could
# still get, and on a log axis the gap to it reads as a ratio (one decade = 10x), as does the gap
# to PyTorch eager and torch.compile. A speedup plot hides both the absolute time (where launch
# overhead rules, at small batch) and the headroom; "speedup over v1" also changes meaning from
# chapter to chapter. The README tables give the ratios as numbers (vs eager, vs torch.compile,
# % of floor), the bar chart (bars.gp) every version at the KernelBench shape.
#
# Chapter 3's v2..v7 differ from v8 only in their statistics kernel, chapter 4's v2 from v3: the
# stats panel shows the whole reduction progression, the forward panels only its first and last
# (prep.awk).
# Run by plots/render.sh (make plots), which writes tmp/vars.gp and the .dat files.
load "plots/style.gp"
load tmp . "/vars.gp"

set logscale x 2
set logscale y 10
set xrange [xmin:xmax]
set xlabel xlab
set ylabel "median time, ms (log; lower is better)"
# the key to the right of each panel, one panel a row: a key below its panel met the x label,
# and chapter 3's whole model (19 entries) squeezed its plot to a strip
set key outside right top vertical Left reverse samplen 3 spacing 1.1 font ",10"
set lmargin 10
set rmargin at screen 0.68   # every panel the same width, whatever its key
do for [fmt in "png svg"] {
    eval "set terminal " . term(fmt, 1600, 460 * np + 70)
    set output out . "." . fmt
    set multiplot layout np, 1 title title font ",14"
    do for [i = 1:np] {
        set title panel("T") font ",12"
        s = panel("S"); vl = panel("V")
        lo = panel("YB"); hi = panel("YT"); load "plots/logtics.gp"
        plot for [v in vl] sprintf("%s/%s-%s.dat", tmp, s, v) using 1:2 \
                 with linespoints lt vid(v) title value("L_" . v), \
             for [k = 1:panel("HF")] sprintf("%s/%s-floor.dat", tmp, s) using 1:2 \
                 with lines lt 33 title floorlabel
    }
    unset multiplot
    set output
}
