# style.gp: the look every plot shares, loaded by sweep.gp and bars.gp.
# One colour (and point shape) per version id, the same in every panel and chapter, so that
# "v4" is the same green in chapter 1's sweep and in its bar chart, and no two ids share a colour
# (the closest two, v1 and b1 or b2 and b6, are 17 apart in CIELAB's delta E); ours are solid
# lines, PyTorch's dashed, the floor black dotted. vid(v) maps an id to its line type:
#   v1..v20 -> 1..20, b1..b10 -> 21..30, eager -> 31, compile -> 32, the floor -> 33, PyTorch
#   in its default precision (cudnn.allow_tf32 on): eager_default -> 34, compile_default -> 35
#   (their fp32 colours lighter, dotted-dashed), the exercises x1..x4 -> 36..39 (a learner's
#   own run, once written), any other id -> 40 (light grey, dashed).
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
set linetype 16 lc rgb "#aa00ff" lw 2 pt 7  ps 1.0 dt 1   # v16
set linetype 17 lc rgb "#00e676" lw 2 pt 5  ps 1.0 dt 1   # v17
set linetype 18 lc rgb "#3e2723" lw 2 pt 9  ps 1.2 dt 1   # v18
set linetype 19 lc rgb "#ffe082" lw 2 pt 11 ps 1.2 dt 1   # v19
set linetype 20 lc rgb "#80cbc4" lw 2 pt 13 ps 1.2 dt 1   # v20
set linetype 21 lc rgb "#555555" lw 2 pt 7  ps 1.0 dt 1   # b1
set linetype 22 lc rgb "#0d47a1" lw 2 pt 5  ps 1.0 dt 1   # b2
set linetype 23 lc rgb "#e65100" lw 2 pt 9  ps 1.2 dt 1   # b3
set linetype 24 lc rgb "#827717" lw 2 pt 11 ps 1.2 dt 1   # b4
set linetype 25 lc rgb "#00bfa5" lw 2 pt 13 ps 1.2 dt 1   # b5
set linetype 26 lc rgb "#5c6bc0" lw 2 pt 7  ps 1.0 dt 1   # b6
set linetype 27 lc rgb "#ff80ab" lw 2 pt 5  ps 1.0 dt 1   # b7
set linetype 28 lc rgb "#004d40" lw 2 pt 9  ps 1.2 dt 1   # b8
set linetype 29 lc rgb "#ffd600" lw 2 pt 11 ps 1.2 dt 1   # b9
set linetype 30 lc rgb "#aed581" lw 2 pt 13 ps 1.2 dt 1   # b10
set linetype 31 lc rgb "#d62728" lw 2.5 pt 6  ps 1.0 dt 2   # PyTorch eager
set linetype 32 lc rgb "#6a1b9a" lw 2.5 pt 4  ps 1.0 dt 2   # torch.compile
set linetype 33 lc rgb "black"   lw 2.5 pt 0  ps 0   dt 3   # the floor
set linetype 34 lc rgb "#f4a3a3" lw 2.5 pt 6  ps 1.0 dt 4   # PyTorch eager, default precision
set linetype 35 lc rgb "#c39bd3" lw 2.5 pt 4  ps 1.0 dt 4   # torch.compile, default precision
set linetype 36 lc rgb "#ff00ff" lw 2 pt 8  ps 1.2 dt 1   # x1 (an exercise, once written)
set linetype 37 lc rgb "#c6ff00" lw 2 pt 10 ps 1.2 dt 1   # x2 (an exercise, once written)
set linetype 38 lc rgb "#2962ff" lw 2 pt 12 ps 1.2 dt 1   # x3 (an exercise, once written)
set linetype 39 lc rgb "#18ffff" lw 2 pt 14 ps 1.2 dt 1   # x4 (an exercise, once written)
set linetype 40 lc rgb "#bdbdbd" lw 2 pt 1  ps 1.0 dt 5   # any other id
set linetype cycle 40

vidn(v) = v[2:] + 0
vid(v) = v eq "eager" ? 31 : v eq "compile" ? 32 : v eq "eager_default" ? 34 \
    : v eq "compile_default" ? 35 \
    : v[1:1] eq "v" && vidn(v) >= 1 && vidn(v) <= 20 ? vidn(v) \
    : v[1:1] eq "b" && vidn(v) >= 1 && vidn(v) <= 10 ? 20 + vidn(v) \
    : v[1:1] eq "x" && vidn(v) >= 1 && vidn(v) <= 4 ? 35 + vidn(v) : 40
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
