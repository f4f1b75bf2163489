#!/bin/sh
# render.sh: every GPU's plots from its data, plots/<gpu>/ from data/<gpu>/ (make plots).
# For each data/<gpu>/ (h100, h100-mine, a100, ...) and each chapter NN it has data for:
#   chNN-sweep.csv -> plots/<gpu>/chNN-time.png, .svg  time against batch size (sweep.gp)
#   chNN.csv       -> plots/<gpu>/chNN-bars.png, .svg  each version at the KernelBench shape
#                                                      against its floor (bars.gp)
# with PyTorch's rows from pytorch-chNN.csv where that file exists (and, for the bars, its errors
# from pytorch-chNN-error.csv: which of its default-precision convs ran in TF32). Every GPU with
# data is drawn, data/h100/ included: plots/h100/ is redrawn from the committed CSVs (the same
# figures unless data/h100/ or these scripts changed). A learner's own runs on an H100 go to
# data/h100-mine/ (the Makefile), so their plots go to plots/h100-mine/. One line per file written.
# DATA and PLOTS override data/ and plots/ (to try the scripts on other CSVs).
# Exit 2 without gnuplot, 1 if a plot failed.
command -v gnuplot >/dev/null 2>&1 || {
    echo "error: gnuplot is not installed (e.g. apt-get install gnuplot-nox); no plots drawn" >&2
    exit 2
}
cd "$(dirname "$0")/.." || exit 2
data=${DATA:-data} plots=${PLOTS:-plots}
# pngcairo draws smoother lines and text; some gnuplot builds have only the libgd png terminal
pngterm=pngcairo
gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 || pngterm=png
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
rc=0 drawn=0
for d in "$data"/*/; do
    [ -d "$d" ] || continue
    d=${d%/} g=$(basename "$d")
    for ch in $(ls "$d" | sed -n 's/^ch\([0-9][0-9]\)\(-sweep\)\{0,1\}\.csv$/\1/p' | sort -u); do
        # "3 (conv3d-instnorm-max)" from the chapter's folder name, "3" where there is none
        chname=$(ls -d chapters/"$ch"-* 2>/dev/null | head -n 1 | sed 's|.*/[0-9]*-\(.*\)|(\1)|')
        chname="${ch#0} $chname"
        peers=$d/pytorch-ch$ch.csv errs=$d/pytorch-ch$ch-error.csv
        [ -f "$peers" ] || peers= errs=
        [ -f "$errs" ] || errs=
        for kind in time bars; do
            src=$d/ch$ch.csv script=bars mode=bars
            [ $kind = time ] && src=$d/ch$ch-sweep.csv script=sweep mode=sweep
            [ -f "$src" ] || continue
            out=$plots/$g/ch$ch-$kind
            mkdir -p "$plots/$g" && rm -rf "$tmp"/* && rm -f "$out.png" "$out.svg"
            if ! awk -f plots/prep.awk -v mode=$mode -v tmp="$tmp" -v dir="$g" -v chname="$chname" \
                    "$src" $peers $([ $mode = bars ] && echo "$errs"); then
                echo "FAILED: $src: no rows, or awk could not read it" >&2; rc=1; continue
            fi
            if gnuplot -e "tmp='$tmp'; out='$out'; pngterm='$pngterm'" plots/$script.gp \
                    2>"$tmp/log" && [ -s "$out.png" ] && [ -s "$out.svg" ]; then
                echo "wrote $out.png"; echo "wrote $out.svg"; drawn=$((drawn + 1))
            else  # no half-drawn file left behind
                echo "FAILED: $out.png, $out.svg; gnuplot said:" >&2; cat "$tmp/log" >&2
                rm -f "$out.png" "$out.svg"; rc=1
            fi
        done
    done
done
[ $drawn -gt 0 ] ||
    echo "nothing to plot: no $data/<gpu>/chNN.csv or chNN-sweep.csv (make chapter-N, make bench)"
exit $rc
