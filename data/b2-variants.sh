# b2-variants.sh (experiment, issue 15): B2X selects a form of b2's two-positions-a-thread backward
# kernel; each form is tested (--test --version b2) and timed twice, interleaved.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
make -s -j16 build/ch01 ARCH=sm_90 2>&1 | tail -2
V="0 1 2 3 4 5 6 7"
for k in $V; do B2X=$k build/ch01 --test --version b2 > $OUT/test$k.log 2>&1; echo "test $k rc=$? $(grep -c PASS $OUT/test$k.log) $(grep -c FAIL $OUT/test$k.log)"; done
for rep in 1 2; do for k in $V; do B2X=$k build/ch01 --version b2 --reps 30 > $OUT/t.log 2>&1; echo "B2X=$k $(grep "^b2 .*epilogue_fwdbwd" $OUT/t.log | tr -s ' ' | cut -d' ' -f11-15)"; done; done
rm -f $OUT/t.log
