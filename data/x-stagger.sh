# x-stagger.sh (experiment, issue 15): chapter 3's v10 and b3 with the first wave of clusters
# started over a span (V10SPAN / B3SPAN, ns; 0: all at once): tested, timed in interleaved rounds
# over spans, and under ncu at the GPU's own clocks with and without.
set -u
OUT=${OUT:-build/out-pack}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
rm -f build/ch03; make -s -j16 build/ch03 ARCH=sm_90 2>&1 | tail -1
for rep in 1 2 3; do
  for k in 0 7000 10000 13000; do V10SPAN=$k build/ch03 --version v10 --reps 50 > $OUT/t.log 2>&1; echo "r$rep V10SPAN=$k $(grep '^v10 .*epilogue_fwd' $OUT/t.log | sed 's/.*epilogue_fwd//' | tr -s ' ')"; done
  for k in 0 6000 9000 12000; do B3SPAN=$k build/ch03 --version b3 --reps 50 > $OUT/t.log 2>&1; echo "r$rep B3SPAN=$k $(grep '^b3 .*epilogue_fwdbwd' $OUT/t.log | sed 's/.*epilogue_fwd//' | tr -s ' ')"; done
  V10SPAN=0 B3SPAN=0 build/ch03 --version b3 --reps 50 > $OUT/t.log 2>&1; echo "r$rep both 0 $(grep '^b3 .*epilogue_fwdbwd' $OUT/t.log | sed 's/.*epilogue_fwd//' | tr -s ' ')"
done
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for f in "v10 cluster_epilogue V10SPAN" "b3 cluster_backward B3SPAN"; do set -- $f
  for sp in 0 default; do
    if [ $sp = 0 ]; then export $3=0; else unset $3; fi
    ncu --clock-control none -k regex:$2 -c 1 --metrics "$M" build/ch03 --version $1 --reps 1 > $OUT/n.log 2>&1
    echo "ncu $1 $3=$sp: $(grep -E 'gpu__time_duration|dram__|warps_active' $OUT/n.log | tr -s ' ' | cut -d' ' -f2-4 | tr '\n' ';')"
    grep -E 'stalled' $OUT/n.log | awk '$3+0 >= 0.3 {sub("smsp__average_warps_issue_stalled_",""); sub("_per_issue_active.ratio",""); printf "%s=%s ", $1, $3} END {print ""}'
  done; unset $3; done
tar czf $OUT/xlogs.tgz $OUT/*.log 2>/dev/null; rm -f $OUT/*.log
