# v4-variants.sh (experiment, issue 15): V4X selects a form of v4's epilogue kernel; each form is
# tested (--test --version v4) and timed three times, interleaved. Run on the device from the repository root.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
make -s -j16 build/ch01 ARCH=sm_90 2>&1 | tail -2
V="0 1 2 3 4 5 6 7 8 9 10"
for k in $V; do V4X=$k build/ch01 --test --version v4 > $OUT/test$k.log 2>&1; echo "test $k rc=$? $(grep -c PASS $OUT/test$k.log) $(grep -c FAIL $OUT/test$k.log)"; done
for rep in 1 2 3; do for k in $V; do V4X=$k build/ch01 --version v4 --reps 50 > $OUT/t.log 2>&1; echo "V4X=$k $(grep "^v4 .*epilogue_fwd" $OUT/t.log | tr -s ' ' | cut -d' ' -f8-12)"; done; done
rm -f $OUT/t.log
