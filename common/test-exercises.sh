#!/bin/sh
# test-exercises.sh: a chapter's exercise versions on a GPU: the learner's stub reports "not
# written yet" (and nothing fails), and the build with the lab book's solutions in place
# (make solved) passes --test on every test shape like any version. Without a GPU: one SKIP line
# (the stubs and solutions are checked by test-layout.py, the solutions compile in make test).
# usage: test-exercises.sh PROGRAM SOLVED_PROGRAM SMALL_SHAPE
prog=$1 solved=$2 small=$3
ids=$("$prog" --list | awk 'NR > 1 && $1 ~ /^x[0-9]+$/ { print $1 }')
[ -n "$ids" ] || { echo "FAIL  $prog has no exercise version (x1, ...) in --list"; exit 1; }
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP  exercises $ids of $prog on the GPU: no CUDA device"
    exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for x in $ids; do
    "$prog" --test --version "$x" --shape "$small" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^SKIP  $x *not written yet: see the chapter's exercises" "$out" &&
        ! grep -q '^FAIL' "$out"; then
        echo "PASS  exercise $x of $prog as given: reported not written yet"
    else
        echo "FAIL  exercise $x of $prog as given: exit $rc, want a 'not written yet' skip:"
        grep -E '^(FAIL|SKIP)' "$out" | head -n 5
    fi
    # the solved build: every test shape and case, its PASS/FAIL lines counted; the CPU checks
    # it repeats are the plain build's, counted there
    "$solved" --test --version "$x" >"$out" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|SKIP)' "$out" | grep -E " $x " || true
    if grep -q "not written yet" "$out" || ! grep -qE "^PASS  $x " "$out"; then
        echo "FAIL  exercise $x solved ($solved): no verified run"
    fi
    [ "$rc" -eq 0 ] || echo "FAIL  exercise $x solved ($solved) exited $rc"
done
exit 0
