#!/bin/sh
# run-tests.sh: runs each test command given, shows its output, and counts the PASS/FAIL/SKIP
# lines (the check() and skip() helpers of common.h print them). A command that exits non-zero
# without printing a FAIL line counts as one failure. Last line: "N passed, N failed, N skipped".
# usage: run-tests.sh 'command 1' 'command 2' ...
log=$(mktemp)
pass=0 fail=0 skipped=0
for cmd in "$@"; do
    echo "== $cmd"
    sh -c "$cmd" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(grep -c '^PASS ' "$log") f=$(grep -c '^FAIL ' "$log") s=$(grep -c '^SKIP ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL  '$cmd' exited $rc"
        f=1
    fi
    pass=$((pass + p)) fail=$((fail + f)) skipped=$((skipped + s))
done
rm -f "$log"
echo "$pass passed, $fail failed, $skipped skipped"
[ "$fail" -eq 0 ]
