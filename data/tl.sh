#!/bin/bash
# experiment (temporary): per-block timelines of v10 and v14's forms (TL=dir)
OUT=${OUT:-build/out-pack}; mkdir -p "$OUT/tl"
make -s -j16 all ARCH=sm_90 > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
TL=$OUT/tl build/ch03 --version v10 --reps 3 > "$OUT/tl-v10.log" 2>&1; echo "v10 rc=$?"
for f in 2 4la; do
    TL=$OUT/tl V14X=$f build/ch03 --version v14 --reps 3 > "$OUT/tl-v14-$f.log" 2>&1; echo "v14 $f rc=$?"
    mv "$OUT/tl/v14.csv" "$OUT/tl/v14-$f.csv"
done
ls -la "$OUT/tl"
