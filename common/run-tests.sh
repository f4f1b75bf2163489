#!/bin/sh
# run-tests.sh: runs each test command given, shows its output, and counts the PASS/FAIL/SKIP
# lines (the check() and skip() helpers of common.h print them). A command that exits non-zero
# without printing a FAIL line counts as one failure. Last line: "N passed, N failed, N skipped".
# The commands run TEST_JOBS at a time (default: the machine's cores), each into its own log;
# the logs are shown in the order the commands were given.
# usage: run-tests.sh 'command 1' 'command 2' ...
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for cmd in "$@"; do
    i=$((i + 1))
    printf '%s\n' "$cmd" >"$tmp/$i.cmd"
done
n=$i
# each index: run its command, its output to i.log, its exit status to i.rc
seq 1 "$n" | xargs -P "$jobs" -I{} sh -c 'sh "$1/$2.cmd" >"$1/$2.log" 2>&1; echo $? >"$1/$2.rc"' \
    run-one "$tmp" {}
pass=0 fail=0 skipped=0
i=0
for cmd in "$@"; do
    i=$((i + 1))
    echo "== $cmd"
    cat "$tmp/$i.log"
    rc=$(cat "$tmp/$i.rc" 2>/dev/null || echo 127)
    p=$(grep -c '^PASS ' "$tmp/$i.log") f=$(grep -c '^FAIL ' "$tmp/$i.log") s=$(grep -c '^SKIP ' "$tmp/$i.log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL  '$cmd' exited $rc"
        f=1
    fi
    pass=$((pass + p)) fail=$((fail + f)) skipped=$((skipped + s))
done
echo "$pass passed, $fail failed, $skipped skipped"
[ "$fail" -eq 0 ]
