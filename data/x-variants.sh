# x-variants.sh (experiment, issue 15): chapter 1's x7 (v7 with cache hints, X7=0..8) and
# chapter 3's b3 with g by cp.async (B3G=1) and float4 dc stores (B3G=2); each form tested, then
# timed in interleaved rounds; and cuDNN's engine search for chapter 1's conv, three times.
set -u
OUT=${OUT:-build/out-pack}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
make -s -j16 build/ch01 build/ch03 ARCH=sm_90 2>&1 | tail -1
X="0 1 2 3 4 5 6 7 8"; G="0 1 2"
for k in $X; do X7=$k build/ch01 --test --version x7 > $OUT/tx$k.log 2>&1; echo "test X7=$k rc=$? $(grep -c ^PASS $OUT/tx$k.log) PASS, $(grep -c ^FAIL $OUT/tx$k.log) FAIL"; done
for k in $G; do B3G=$k build/ch03 --test --version b3 > $OUT/tg$k.log 2>&1; echo "test B3G=$k rc=$? $(grep -c ^PASS $OUT/tg$k.log) PASS, $(grep -c ^FAIL $OUT/tg$k.log) FAIL"; done
for k in 1 2; do B3G=$k compute-sanitizer --tool memcheck build/ch03 --version b3 --shape 2x3x4x5x6 --reps 1 > $OUT/sg$k.log 2>&1; echo "memcheck B3G=$k rc=$? $(grep -E 'ERROR SUMMARY' $OUT/sg$k.log | head -1)"
    B3G=$k compute-sanitizer --tool racecheck build/ch03 --version b3 --shape 2x3x4x5x6 --reps 1 > $OUT/rg$k.log 2>&1; echo "racecheck B3G=$k rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/rg$k.log | head -1)"; done
for rep in 1 2 3; do
  for k in $X; do X7=$k build/ch01 --version x7 --reps 50 > $OUT/t.log 2>&1; echo "r$rep X7=$k $(grep '^x7 .*epilogue_fwd' $OUT/t.log | tr -s ' ' | cut -d' ' -f8-12)"; done
  for k in $G; do B3G=$k build/ch03 --version b3 --reps 50 > $OUT/t.log 2>&1; echo "r$rep B3G=$k $(grep '^b3 .*epilogue_fwdbwd' $OUT/t.log | tr -s ' ' | cut -d' ' -f1,6-12)"; done
done
for rep in 1 2 3; do CONV_FIND_LOG=1 build/ch01 --version v1 --reps 3 > $OUT/find$rep.log 2>&1
  echo "find$rep: $(grep -E '^  forward engine' $OUT/find$rep.log | sed 's/, workspace.*//' | tr -s ' ' | tr '\n' ';')"; done
tar czf $OUT/logs.tgz $OUT/*.log 2>/dev/null; rm -f $OUT/*.log
