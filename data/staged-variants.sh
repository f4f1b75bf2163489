# staged-variants.sh (experiment, issue 15): B2X selects b2's backward kernel, V7X v7's (and so
# b2's forward); each form is tested (--test --version) and timed twice, interleaved.
set -u
OUT=${OUT:-build/out-pack}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
make -s -j16 build/ch01 ARCH=sm_90 2>&1 | tail -2
B="0 1 2 3 4 5"; F="0 1 2 3 4"
for k in $B; do B2X=$k build/ch01 --test --version b2 > $OUT/tb$k.log 2>&1; echo "test B2X=$k rc=$? $(tail -n 1 $OUT/tb$k.log)"; done
for k in $F; do V7X=$k build/ch01 --test --version v7 > $OUT/tf$k.log 2>&1; echo "test V7X=$k rc=$? $(tail -n 1 $OUT/tf$k.log)"; done
for rep in 1 2; do
  for k in $B; do B2X=$k build/ch01 --version b2 --reps 30 > $OUT/t.log 2>&1; echo "B2X=$k $(grep "^b2 .*epilogue_fwdbwd" $OUT/t.log | tr -s ' ')"; done
  for k in $F; do V7X=$k build/ch01 --version v7 --reps 30 > $OUT/t.log 2>&1; echo "V7X=$k $(grep "^v7 .*epilogue_fwd" $OUT/t.log | tr -s ' ')"; done
done
B2X=${B2BEST:-2} V7X=${V7BEST:-2} build/ch01 --version b2 --reps 30 > $OUT/t.log 2>&1; echo "B2X=${B2BEST:-2} V7X=${V7BEST:-2} $(grep "^b2 .*epilogue_fwdbwd" $OUT/t.log | tr -s ' ')"
tar czf $OUT/tests.tgz $OUT/t*.log 2>/dev/null; rm -f $OUT/t*.log
for k in 0 2; do
  B2X=$k ncu -k regex:backward -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum build/ch01 --version b2 --reps 1 > $OUT/ncu-b2x$k.txt 2>&1
  echo "ncu B2X=$k rc=$? $(grep -E 'Duration|DRAM Throughput|dram__bytes|Achieved Occupancy' $OUT/ncu-b2x$k.txt | tr -s ' ' | tr '\n' ';')"
done
