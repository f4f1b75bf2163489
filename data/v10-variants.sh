#!/bin/bash
# experiment (temporary): chapter 3's v10 forms (V10X bits: 1 split exit barrier, 2 one-pass
# shifted sums), tested and timed interleaved. Logs to $OUT.
set -u
OUT=${OUT:-build/out-pack}; mkdir -p "$OUT"
make -s -j16 all ARCH=sm_90 > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
for x in ${TESTS-1 2 3}; do
    V10X=$x build/ch03 --test --version v10 > "$OUT/test10-$x.log" 2>&1
    echo "test v10x$x rc=$? $(grep -c PASS $OUT/test10-$x.log) pass $(grep -c FAIL $OUT/test10-$x.log) fail"
done
for round in ${ROUNDS:-1 2}; do
    for x in ${FORMS:-0 1 2 3}; do
        V10X=$x build/ch03 --version v10 > "$OUT/t10-$x-$round.log" 2>&1
        grep "^v10 .*epilogue_fwd" "$OUT/t10-$x-$round.log" | awk -v f="$x" -v r=$round '{print "r" r, "v10x" f, $(NF-7), $(NF-6), $(NF-5), $(NF-4), $(NF-3)}'; grep FAILED "$OUT/t10-$x-$round.log"
    done
done
