#!/bin/bash
# run-device.sh: what produced data/<gpu>/ on the GPU machine, in one call (the device is lent
# by the hour, so build, test, time and check go together). Logs go to $OUT (default build/out).
# usage: CHS="1 2" bash data/run-device.sh [stage ...]
#        stages: test test1 chapter sanitize dump bench peers sass ncu variants initcheck
#        (test1: each of CHS's --test alone; BENCH_CHAPTERS="03" limits bench and sanitize;
#        NCU_CH, NCU_KERNEL, NCU_SKIP, NCU_ARGS: what ncu profiles)
#        (none given: test chapter sanitize dump); CHS: the chapters of chapter, dump, peers
#        (default 1)
set -uo pipefail
OUT=${OUT:-build/out}
mkdir -p "$OUT"
stages=${*:-test chapter sanitize dump}
status=0
step() { # step NAME COMMAND...: run, log to $OUT/NAME.log, one summary line
    local name=$1; shift
    local t0=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && status=1
    printf '%-10s rc=%d %4ds  %s\n' "$name" $rc $((SECONDS - t0)) "$(tail -n 1 "$OUT/$name.log")"
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
make -s all ARCH=sm_90 >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
for s in $stages; do
    case $s in
    test) step test make -s test ARCH=sm_90 ;;
    chapter) for c in ${CHS:-1}; do step chapter$c make -s chapter-$c ARCH=sm_90; done ;;
    sanitize) step sanitize make -s sanitize ARCH=sm_90 ${BENCH_CHAPTERS:+CHAPTERS="$BENCH_CHAPTERS"} ;;
    dump) for c in ${CHS:-1}; do step check$c make -s check-pytorch CH=$c ARCH=sm_90; done ;;
    bench) step bench make -s bench ARCH=sm_90 ${BENCH_CHAPTERS:+CHAPTERS="$BENCH_CHAPTERS"} ;;
    test1) for c in ${CHS:-1}; do step test$c build/ch0$c --test; done ;;
    peers) for c in ${CHS:-1}; do step peers$c python3 data/pytorch_peer.py bench --chapter $c; done ;;
    sass) step sass sh -c 'cuobjdump -sass build/ch01 | awk "/Function : .*k_model_fused_v6/{f=1} /Function : /&&!/k_model_fused_v6/{f=0} f" | grep -oE "FFMA|LDC|MUFU|LDS|STG|HFMA2|FMUL|FADD|FMNMX|LDG[.A-Z0-9]*" | sort | uniq -c' ;;
    ncu) step ncu ncu --clock-control none --kernel-name "regex:${NCU_KERNEL:-k_model_fused}" --launch-skip "${NCU_SKIP:-3}" --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
            --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats \
            --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
            build/ch${NCU_CH:-01} ${NCU_ARGS:---version 6} --reps 1 ;;
    variants) # v6 built with each -D flag set of $VARIANTS ("A=1,B=2 A=2"), timed side by side
        i=0; for v in ${VARIANTS:-V6_MIN_BLOCKS=5}; do i=$((i+1))
            nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -fopenmp $(echo ",$v" | sed 's/,/ -D/g') \
                -o build/ch01_var$i chapters/01-*/01-*.cu build/common.o build/gpu.o -lcudnn -lgomp -lm & done; wait
        i=0; for v in ${VARIANTS:-V6_MIN_BLOCKS=5}; do i=$((i+1))
            step "var$i" sh -c "echo $v; build/ch01_var$i ${VERSION:+--version $VERSION} --reps 20 | grep -E '${GREP:-^v[0-9].*epilogue|^v[56]}'"; done ;;
    initcheck) step initcheck compute-sanitizer --tool initcheck --print-limit 10 \
            build/ch01 --test --shape 2x3x3x5x7 ;;
    *) echo "unknown stage $s"; status=1 ;;
    esac
done
exit $status
