# style.gp: the look every plot shares, loaded by sweep.gp and bars.gp.
# One colour (and point shape) per version id, the same in every panel and chapter, so that
# "v4" is the same green in chapter 1's sweep and in its bar chart; ours are solid lines,
# PyTorch's dashed, the floor black dotted. vid(v) maps an id to its line type:
#   v1..v16 -> 1..16, b1..b6 -> 17..22 (23..26 left for b7..b10), eager -> 27,
#   compile -> 28, the floor -> 29, and PyTorch in its default precision (cudnn.allow_tf32 on):
#   eager_default -> 30, compile_default -> 31, their fp32 colours lighter and dotted-dashed.
# v1 and b1 (the eager-like and autograd-like baselines) are greys: the start, not a result.

set linetype  1 lc rgb "#7f7f7f" lw 2 pt 7  ps 1.0 dt 1   # v1
set linetype  2 lc rgb "#1f77b4" lw 2 pt 5  ps 1.0 dt 1   # v2
set linetype  3 lc rgb "#ff7f0e" lw 2 pt 9  ps 1.2 dt 1   # v3
set linetype  4 lc rgb "#2ca02c" lw 2 pt 11 ps 1.2 dt 1   # v4
set linetype  5 lc rgb "#9467bd" lw 2 pt 13 ps 1.2 dt 1   # v5
set linetype  6 lc rgb "#8c564b" lw 2 pt 7  ps 1.0 dt 1   # v6
set linetype  7 lc rgb "#e377c2" lw 2 pt 5  ps 1.0 dt 1   # v7
set linetype  8 lc rgb "#17becf" lw 2 pt 9  ps 1.2 dt 1   # v8
set linetype  9 lc rgb "#bcbd22" lw 2 pt 11 ps 1.2 dt 1   # v9
set linetype 10 lc rgb "#1a237e" lw 2 pt 13 ps 1.2 dt 1   # v10
set linetype 11 lc rgb "#00897b" lw 2 pt 7  ps 1.0 dt 1   # v11
set linetype 12 lc rgb "#f9a825" lw 2 pt 5  ps 1.0 dt 1   # v12
set linetype 13 lc rgb "#ad1457" lw 2 pt 9  ps 1.2 dt 1   # v13
set linetype 14 lc rgb "#33691e" lw 2 pt 11 ps 1.2 dt 1   # v14
set linetype 15 lc rgb "#0091ea" lw 2 pt 13 ps 1.2 dt 1   # v15
set linetype 16 lc rgb "#d81b60" lw 2 pt 5  ps 1.0 dt 1   # v16
set linetype 17 lc rgb "#555555" lw 2 pt 7  ps 1.0 dt 1   # b1
set linetype 18 lc rgb "#0d47a1" lw 2 pt 5  ps 1.0 dt 1   # b2
set linetype 19 lc rgb "#e65100" lw 2 pt 9  ps 1.2 dt 1   # b3
set linetype 20 lc rgb "#2e7d32" lw 2 pt 11 ps 1.2 dt 1   # b4
set linetype 21 lc rgb "#00acc1" lw 2 pt 13 ps 1.2 dt 1   # b5
set linetype 22 lc rgb "#6d4c41" lw 2 pt 7  ps 1.0 dt 1   # b6
set linetype 27 lc rgb "#d62728" lw 2.5 pt 6 ps 1.0 dt 2  # PyTorch eager
set linetype 28 lc rgb "#6a1b9a" lw 2.5 pt 4 ps 1.0 dt 2  # torch.compile
set linetype 29 lc rgb "black"   lw 2.5 pt 0 ps 0   dt 3  # the floor
set linetype 30 lc rgb "#f4a3a3" lw 2.5 pt 6 ps 1.0 dt 4  # PyTorch eager, default precision
set linetype 31 lc rgb "#c39bd3" lw 2.5 pt 4 ps 1.0 dt 4  # torch.compile, default precision
set linetype cycle 31

vid(v) = v eq "eager" ? 27 : v eq "compile" ? 28 : v eq "eager_default" ? 30 \
    : v eq "compile_default" ? 31 : v[1:1] eq "b" ? 16 + v[2:] : v[2:] + 0
# a bar's label under the axis: the id, PyTorch's default-precision ones on two lines
xlab(v) = v eq "eager_default" ? "eager\ndefault" : v eq "compile_default" ? "compile\ndefault" : v
# panel i's variable from vars.gp: panel("S") is S_1 in panel 1 (no arrays before gnuplot 5.2)
panel(name) = value(sprintf("%s_%d", name, i))
floorlabel = "floor: max(bytes/copy ceiling, FLOPs/fp32 peak)"

# png: pngcairo where this gnuplot has it (render.sh checks), else the plain png terminal
# noenhanced: ids and names hold "_" and "^", printed as written
term(fmt, w, h) = fmt eq "svg" \
    ? sprintf("svg size %d,%d font 'sans,12' background rgb 'white' noenhanced", w, h) \
    : sprintf("%s size %d,%d font 'sans,11' noenhanced", pngterm, w, h)
set grid xtics ytics mytics lc rgb "#dddddd"
set format y "%g"
set format x "%g"
