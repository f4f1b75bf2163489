#!/bin/sh
# test-cli.sh: a chapter program must refuse bad input with one clear line and exit 2, and must
# say "no CUDA device" (exit 2) instead of crashing when there is none.
# usage: test-cli.sh PROGRAM SMALL_SHAPE     (SMALL_SHAPE: a valid --shape for PROGRAM)
prog=$1 small=$2
out=$(mktemp)
expect() { # expect RC PATTERN DESCRIPTION -- ARGS...
    rc_want=$1 pat=$2 what=$3; shift 4
    "$prog" "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq "$rc_want" ] && grep -qiE -e "$pat" "$out"; then
        echo "PASS  cli: $what -> exit $rc"
    else
        echo "FAIL  cli: $what -> exit $rc (want $rc_want and /$pat/):"; head -n 3 "$out"
    fi
}
dims=$(echo "$small" | tr 'x' ' ' | wc -w)
bad_channels=$(echo "$small" | awk -Fx '{ $2 = $2 + 1; OFS = "x"; $1 = $1; print }')
expect 2 "unknown option" "unknown flag" -- --frobnicate
expect 2 "bad --shape" "malformed shape" -- --shape 2xx3
expect 2 "bad --shape" "zero dim" -- --shape "$(echo "$small" | sed 's/^[0-9]*/0/')"
expect 2 "(expected|more than) $dims dims" "wrong number of dims" -- --shape "${small}x2"
expect 2 "impossible --shape" "wrong channel count ($bad_channels)" -- --shape "$bad_channels"
expect 2 "impossible --shape" "shape too large for 32-bit indexing" -- --shape "$(echo "$small" | sed 's/^[0-9]*/60000/; s/x[0-9]*$/x40000/')"
expect 2 "bad --reps" "zero repetitions" -- --reps 0
expect 2 "no version" "version that does not exist" -- --version 99
layout=NxCxDxHxW
[ "$dims" -eq 4 ] && layout=NxCxHxW
expect 0 "--shape $layout " "--help names the input's layout ($layout)" -- --help
expect 0 "^v1 " "--list" -- --list
if nvidia-smi -L >/dev/null 2>&1; then
    expect 0 "^v1 " "a run at a small shape on the GPU" -- --shape "$small" --reps 2
else
    expect 2 "no CUDA device" "no CUDA device: clear error, no crash" -- --shape "$small" --reps 2
fi
rm -f "$out"
