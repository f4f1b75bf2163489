#!/bin/bash
# experiment (temporary): chapter 3's v14 forms (V14X) tested and timed interleaved beside v10
# and v11 (V11X: its next sample's copies issued after the cluster barrier). Logs to $OUT.
set -u
OUT=${OUT:-build/out-pack}; mkdir -p "$OUT"
make -s -j16 all ARCH=sm_90 > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
forms=${FORMS:-"2 3 3la 4 4la 6la 2:cp 4la:cp"}
t0=$SECONDS
for f in ${TESTS-$forms}; do
    V14X=${f//:/,} build/ch03 --test --version v14 > "$OUT/test-$f.log" 2>&1
    echo "test $f rc=$? $(grep -c PASS $OUT/test-$f.log) pass $(grep -c FAIL $OUT/test-$f.log) fail $((SECONDS - t0))s"
done
for round in ${ROUNDS:-1 2}; do
    for v in v10; do
        build/ch03 --version $v > "$OUT/t-$v-$round.log" 2>&1
        grep "^$v .*epilogue_fwd" "$OUT/t-$v-$round.log" | awk -v r=$round '{print "r" r, $1, $(NF-7), $(NF-6), $(NF-5), $(NF-4), $(NF-3)}'
    done
    for f in $forms; do
        V14X=${f//:/,} build/ch03 --version v14 > "$OUT/t-$f-$round.log" 2>&1
        grep "^v14 .*epilogue_fwd" "$OUT/t-$f-$round.log" | awk -v f="$f" -v r=$round '{print "r" r, f, $(NF-7), $(NF-6), $(NF-5), $(NF-4), $(NF-3)}'; grep -c FAILED "$OUT/t-$f-$round.log"
    done
    echo "round $round $((SECONDS - t0))s"
done
