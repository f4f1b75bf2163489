# bars.gp: one chapter at its KernelBench shape (data/<gpu>/chNN.csv) on one GPU, a panel per
# scope: every version's median as a bar (log axis, its value above it), PyTorch eager and
# torch.compile beside them where data/<gpu>/pytorch-chNN.csv has that shape (in fp32, and in
# PyTorch's default precision where it has those rows: "eager default"), and the floor,
# max(bytes / copy ceiling, FLOPs / fp32 peak) from the floor_ms column, as a dotted line. All
# versions are shown, so chapter 3's reduction progression (v1..v8) reads left to right; a
# version the GPU skipped has no row and no bar. A bar whose conv ran in TF32 is hatched (below).
# Run by plots/render.sh (make plots), which writes tmp/vars.gp and the .dat files.
load "plots/style.gp"
load tmp . "/vars.gp"

set logscale y 10
set ylabel "median time, ms (log; lower is better)"
set key top right samplen 3 font ",10"
set style fill solid 0.85 border lc rgb "#333333"
set grid noxtics
set xtics scale 0 font ",10"
set bmargin 3.5   # room for the two-line labels of PyTorch's default-precision bars
set style textbox opaque noborder   # a bar's value stays readable where the floor's line crosses it
# a bar whose conv runs in TF32 (ours in tf32, PyTorch's default precision where the scope has a
# conv) is hatched: a TF32 input keeps 10 of fp32's 23 mantissa bits and its products run on the
# tensor cores, so FLOPs over the fp32 peak do not bound it and it can fall under the floor
tf32label = "hatched: the conv in TF32 (10-bit mantissas), which the fp32 floor does not bound"
# two panels a row, or one where a panel has more than 16 bars (chapter 3's whole model: 26),
# so that no two bars' values or labels touch
maxn = 0
do for [i = 1:np] { if (panel("N") > maxn) { maxn = panel("N") } }
cols = maxn > 16 ? 1 : 2
rows = (np + cols - 1) / cols
do for [fmt in "png svg"] {
    eval "set terminal " . term(fmt, 1700, 520 * rows + 40)
    set output out . "." . fmt
    set multiplot layout rows, cols title title font ",14"
    do for [i = 1:np] {
        f = sprintf("%s/%s-bars.dat", tmp, panel("S")); fl = panel("F"); n = panel("N")
        set title panel("T") font ",12"
        xf = n > 12 && cols > 1 ? ",9" : ",10"   # "eager" and "compile" must not touch
        set xtics font xf
        set xrange [-0.6:n - 0.4]
        lo = panel("YB"); hi = panel("YT"); load "plots/logtics.gp"
        # the bars stand on the bottom of the axis (a log axis has no 0)
        plot f using 1:3:($1 - 0.38):($1 + 0.38):(lo):3:(vid(strcol(2))):xtic(xlab(strcol(2))) \
                 with boxxyerror lc variable notitle, \
             f using 1:($4 > 0 ? $3 : NaN):($1 - 0.38):($1 + 0.38):(lo):($4 > 0 ? $3 : NaN) \
                 with boxxyerror fs transparent pattern 5 border lc rgb "#333333" \
                 lc rgb "white" notitle, \
             for [k = 1:(fl > 0)] fl with lines lt 33 title sprintf("%s = %.3g ms", floorlabel, fl), \
             f using 1:3:(sprintf("%.3g", $3)) with labels boxed offset 0,0.8 font ",9" notitle, \
             for [k = 1:(panel("H") > 0)] NaN with boxes fs pattern 5 lc rgb "#555555" title tf32label
    }
    unset multiplot
    set output
}
