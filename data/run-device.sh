#!/bin/bash
# run-device.sh: what produced data/h100/ on the GPU machine, in one call (the device is lent by
# the minute, so build, test, time and check go together). Each stage logs to build/out/NAME.log
# and prints one summary line; at the end build/out/ and the recorded CSVs are packed into
# $OUT/results.tgz (default OUT=build/out-pack) to bring back. Last, every run's peak host and
# device memory (build/out/memory.txt).
# usage: bash data/run-device.sh [stage ...]
# A whole re-record on an H100 fits a lease as four calls, each under the 10 minutes a call may
# take: `golden test` (about 2 minutes), `peers-kb` (about 7), `kb` (about 4.5), `sweep` (about
# 6.5). Run peers-kb before kb: each chapter's notes print PyTorch's conv ops beside ours from
# pytorch-chNN-ops.csv as it stands when the chapter runs. The CSVs each call writes come back in
# its results.tgz; a later call starts from the working tree again, so take each call's own files.
#   test       make test (every chapter's GPU checks), sm_90 build
#   sanitize   make sanitize (memcheck, racecheck, synccheck, initcheck on small shapes)
#   record     make record: every chapter at its KernelBench shape and the batch sweep, into
#              data/<gpu>/ (the tutorial's recorded data)
#   check      make check-pytorch CH=N for every chapter (PyTorch on exactly the dumped tensors, float64)
#   golden     make golden (PyTorch's float64 model on the CPU, small shapes; CH=N for each chapter
#              of ONLY): data/golden/ is packed into results.tgz too, to bring the tensors back
#   peers      make peers CH=N for every chapter: PyTorch eager and torch.compile timings in fp32
#              (TF32 off) and in PyTorch's default precision (cudnn.allow_tf32 on) into
#              data/<gpu>/pytorch-chNN.csv itself (RECORD=1, as record: the rows the READMEs
#              quote), the conv's ops alone (-ops.csv) and their error against float64
#              (-error.csv): peers-kb, then peers-sweep, each chapter's parts as steps of their own
#   peers-kb   the KernelBench shape's rows, the ops and the error (make peers-kb CH=N)
#   peers-sweep  the sweep's other batch sizes (make peers-sweep CH=N; BATCHES=1,2,4 limits them,
#              to split a chapter whose sweep would pass a call's time: torch.compile compiles
#              once per batch size, scope and precision, and each compile's time is printed;
#              PRECISIONS=fp32 or default limits peers, peers-kb and peers-sweep to one)
#   sm80       an sm_80 build on this GPU (its PTX runs by JIT): make test, and chapter 3's table
#              at a small shape, to show the Hopper-only versions skipped with their reason
#   ncu        make profile CH=$NCU_CH V=$NCU_V (NCU_ARGS passed on)
#   ncu2       chapter 2's own convs (v6 .. v9 kernels, b3's dx and dw) at 1x32x16x128x128: time, tensor and FMA
#              pipes, issue slots, shared-memory bank conflicts, warps active, and the stall
#              reasons (Nsight Compute's WarpStateStats)
#   ncu5       chapter 5's v7 at the KernelBench shape: each of its three kernels' time, DRAM
#              bytes, SM and FMA-pipe use and warps active (Nsight Compute)
#   dram       Nsight Compute's DRAM bytes (read, written) and time of every statistics, apply,
#              team and own-conv kernel of chapter 4's v4..v9 and b3 at 32x8x128x128 (c 130 MB,
#              2.6 L2s),
#              L2 not flushed between kernels
#              (--cache-control none): whether the apply's read of c comes from DRAM or L2
#   nocudnn    a build without cuDNN (make CUDNN=0): make test, memcheck and initcheck on the
#              small shapes, and make chapter-N for every
#              chapter (into data/<gpu>-mine/, not the recorded data); run it last, the next
#              stage's build is the cuDNN one again
#   chapters   make chapter-N for every chapter (data/<gpu>-mine/: compare with data/<gpu>/)
#   findlog    every chapter's library conv set up at its KernelBench shape with CONV_FIND_LOG=1
#              (common/conv.h): every engine each search considered and timed, into
#              build/out/findlogN.log (b1 run with 3 reps: all three directions are searched)
#   ops        part of peers-kb: each chapter's conv ops alone in PyTorch, in both precisions
#              (pytorch_peer.py ops, RECORD=1: data/<gpu>/pytorch-chNN-ops.csv), which the
#              chapters' per-op tables read; run it before the stages that print those tables
#   train      every backward version of each chapter at its KernelBench shape into the recorded
#              data/<gpu>/chNN.csv (their rows replaced; no sweep): the training steps after a
#              change to the library conv, without a whole record
#   sweep      the batch sweeps alone (RECORD=1 make bench) into data/<gpu>/chNN-sweep.csv: every
#              version at each sweep shape, the KernelBench-shape CSVs untouched
#   version    V=b3 ONLY=2: that version alone at the KernelBench shape and at each sweep shape,
#              its rows in data/<gpu>/chNN.csv and chNN-sweep.csv replaced (a new version added
#              without re-recording the others)
#   kb         every version of each chapter at its KernelBench shape into data/<gpu>/chNN.csv
#              (record without the sweep)
#   torch      make torch-test: every chapter library's PyTorch tests (python/tests/)
#   exports    make kernelbench-export CH=N for every chapter with a library, then each export
#              imported once, all at the same time (load_inline compiles it into
#              build/torch_ext: about 30 s on an H100 host), so that a later stage loads them
#   kernelbench  make kernelbench CH=N for every chapter (KernelBench's protocol on ModelNew, into
#              data/<gpu>/kernelbench.csv, RECORD=1); SCOPES=forward,train_step limits the scopes,
#              EXPORT=1 times the exports too (run exports first), KB_TIMEOUT (seconds, default
#              560) stops one chapter's run. All five chapters with every scope, both precisions
#              and the exports take about 7 minutes: two calls (ONLY="1 2", then ONLY="3 4 5")
#   (none given: test record check sanitize sm80)
# ONLY="4" (chapter numbers, space-separated) limits chapters, check, golden, peers (and its
# parts), ops, record, sweep, sanitize and nocudnn's chapter runs to those chapters; test always
# runs every chapter.
set -uo pipefail
OUT=${OUT:-build/out-pack}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/build/torch_ext} # the exports' builds
LOGS=build/out
mkdir -p "$OUT" "$LOGS"
stages=${*:-test record check sanitize sm80}
status=0
pack_golden= # data/golden once the golden stage has run: packed with the results
CHAPTER_NUMBERS=${ONLY:-$(sed -n 's/^CHAPTERS := //p' Makefile | sed 's/\<0//g')} # "1 2 3 4"
ONLY_MAKE=${ONLY:+CHAPTERS=$(for c in $ONLY; do printf '0%s ' $c; done)}
step() { # step NAME COMMAND...: run, log to $LOGS/NAME.log, one summary line
    local name=$1; shift
    local t0=$SECONDS
    "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && status=1
    printf '%-12s rc=%d %4ds  %s\n' "$name" $rc $((SECONDS - t0)) "$(tail -n 1 "$LOGS/$name.log")"
}
args_of() { # the Makefile's ARGS_0N of chapter N (chapter 1's seed), as make record passes them
    make -s --no-print-directory --eval "args: ; @echo \$(ARGS_0$1)" args | tail -n 1
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$LOGS/gpu.txt"
step build make -s -j16 all ARCH=sm_90
for s in $stages; do
    case $s in
    test) step test env TEST_JOBS=${TEST_JOBS:-6} make -s test ARCH=sm_90 ;; # 6 at a time: the
          # PyTorch tests share the GPU's memory (about 5 minutes in all on an H100 host)
    sanitize) step sanitize make -s sanitize ARCH=sm_90 ${ONLY_MAKE:+"$ONLY_MAKE"} ;;
    record) step record make -s record ARCH=sm_90 ${ONLY_MAKE:+"$ONLY_MAKE"} ;;
    sweep) step sweep env RECORD=1 make -s bench ARCH=sm_90 ${ONLY_MAKE:+"$ONLY_MAKE"} ;;
    check) for c in $CHAPTER_NUMBERS; do step check$c make -s check-pytorch CH=$c ARCH=sm_90; done ;;
    golden) if [ -n "${ONLY:-}" ]; then for c in $ONLY; do step golden$c make -s golden CH=$c; done
            else step golden make -s golden; fi
            pack_golden=data/golden ;;
    peers) for c in $CHAPTER_NUMBERS; do step peers$c-kb env RECORD=1 make -s peers-kb CH=$c
               step peers$c-sweep env RECORD=1 make -s peers-sweep CH=$c; done ;;
    peers-kb) for c in $CHAPTER_NUMBERS; do step peers$c-kb env RECORD=1 make -s peers-kb CH=$c
              done ;;
    peers-sweep) for c in $CHAPTER_NUMBERS; do step peers$c-sweep env RECORD=1 make -s peers-sweep \
                     CH=$c; done ;;
    sm80) step sm80-build make -s -j16 all ARCH=sm_80
          step sm80-test make -s test ARCH=sm_80
          step sm80-ch03 build/ch03 --shape 4x3x16x32x32 --reps 5 ;;
    nocudnn) step nocudnn-build make -s -j16 all ARCH=sm_90 CUDNN=0
             step nocudnn-test make -s test ARCH=sm_90 CUDNN=0
             step nocudnn-memcheck make -s sanitize ARCH=sm_90 CUDNN=0 SANITIZERS="memcheck initcheck" ${ONLY_MAKE:+"$ONLY_MAKE"}
             for c in $CHAPTER_NUMBERS; do step nocudnn-ch$c make -s chapter-$c ARCH=sm_90 CUDNN=0
                 cp "$(sh common/datadir.sh)/ch0$c.csv" "$LOGS/nocudnn-ch0$c.csv"; done
             step build make -s -j16 all ARCH=sm_90 ;;
    chapters) for c in $CHAPTER_NUMBERS; do step chapter-$c make -s chapter-$c ARCH=sm_90
                  cp "$(sh common/datadir.sh)/ch0$c.csv" "$LOGS/chapter-ch0$c.csv"; done ;;
    dram) for v in v4 v5 v6 v7 v8 v9 b3; do step dram-$v ncu --cache-control none --metrics \
              dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
              --kernel-name regex:'(k|[vb][0-9])_(stats|apply|team|conv)' \
              --launch-count 4 build/ch04 --version $v --reps 1 --shape 32x8x128x128; done ;;
    findlog) for c in $CHAPTER_NUMBERS; do step findlog$c env CONV_FIND_LOG=1 build/ch0$c \
                 --version b1 --reps 3; done ;;
    ops) for c in $CHAPTER_NUMBERS; do step ops$c env RECORD=1 python3 data/pytorch_peer.py ops \
             --chapter $c; done ;;
    train) d=$(RECORD=1 sh common/datadir.sh)
           for c in $CHAPTER_NUMBERS; do
               for v in $(build/ch0$c --list | awk '$1 ~ /^b[0-9]+$/ {print $1}'); do
                   step train$c-$v build/ch0$c $(args_of $c) --version $v --csv $d/ch0$c.csv
               done; done ;;
    version) d=$(RECORD=1 sh common/datadir.sh) # V=b3 ONLY=2: one version's rows, replaced
             for c in $CHAPTER_NUMBERS; do
                 step version$c-$V build/ch0$c $(args_of $c) --version $V --csv $d/ch0$c.csv
                 for sh in $(make -s --no-print-directory --eval "sweep: ; @echo \$(SWEEP_0$c)" sweep | tail -1); do
                     step version$c-$V-$sh build/ch0$c $(args_of $c) --version $V --shape $sh \
                         --csv $d/ch0$c-sweep.csv
                 done; done ;;
    kb) d=$(RECORD=1 sh common/datadir.sh)
        for c in $CHAPTER_NUMBERS; do
            step kb$c build/ch0$c $(args_of $c) --csv $d/ch0$c.csv; done ;;
    torch) step torch make -s torch-test ARCH=sm_90 ;;
    exports) for c in $CHAPTER_NUMBERS; do [ -f chapters/0$c-*/api.cu ] || continue
                 step export$c make -s kernelbench-export CH=$c ARCH=sm_90; done
             for f in build/kernelbench/0[$(echo $CHAPTER_NUMBERS | tr -d ' ')]_*.py; do
                 (timeout 300 python3 -c 'import runpy, sys; runpy.run_path(sys.argv[1])' "$f" \
                     > "$LOGS/compile-$(basename "$f" .py).log" 2>&1; echo "compiled $f: rc=$?") &
             done; wait ;;
    kernelbench) for c in $CHAPTER_NUMBERS; do step kernelbench$c env RECORD=1 timeout ${KB_TIMEOUT:-560} \
                     make -s kernelbench CH=$c ${SCOPES:+SCOPES=$SCOPES} ${EXPORT:+EXPORT=1}; done ;;
    ncu2) for v in v6 v7 v8 v9 b3; do n=1; [ $v = b3 ] && n=2 # b3: dx, then dw
          step ncu2-$v ncu --section WarpStateStats --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum \
              --kernel-name regex:'(v6_conv_ffma|v7_conv_mma|v9_fused|b3_dw_3xtf32)' --launch-count $n build/ch02 \
              --version $v --shape 1x32x16x128x128 --reps 1; done ;;
    ncu5) step ncu5-v7 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active \
              --kernel-name regex:'v7_(weights|convt|rows)' --launch-count 3 build/ch05 --version v7 \
              --reps 1 ;;
    ncu) step ncu make -s profile CH=${NCU_CH:-3} V=${NCU_V:-v1} ARCH=sm_90 NCU_ARGS="${NCU_ARGS:-}" ;;
    *) echo "unknown stage $s"; status=1 ;;
    esac
done
cp build/record-ch*.log "$LOGS/" 2>/dev/null
# every run's peak host and device memory (the harness's "memory:" line), one line a log
awk 'FNR == 1 { what = "" } /^== / { what = $0 } /^memory:/ { f = FILENAME; sub(/.*\//, "", f); print f, what, $0 }' \
    "$LOGS"/*.log 2>/dev/null | tee "$LOGS/memory.txt"
tar czf "$OUT/results.tgz" "$LOGS" $(ls -d data/*/ 2>/dev/null | grep -v golden) $pack_golden 2>/dev/null
exit $status
