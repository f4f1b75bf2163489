#!/bin/sh
# version-diff.sh: what one version changed over another, as `diff -u` (make diff CH=3 A=v15 B=v16).
#   sh common/version-diff.sh BINARY A B
# The files come from the chapter's version table (BINARY --list). Two versions in two files:
# diff -u of the files. Two versions in one file: that file's steps are written as regions
# `#if STEP >= 16 ... #else ... #endif` on a macro STEP, the version's number; the diff is of the
# file as unifdef leaves it with -DSTEP=<A's number> and with -DSTEP=<B's number>: exactly the
# lines one step adds or changes. Exit status: 0 (diff's 1, "they differ", is the expected
# answer), 2 on an unknown version or without unifdef where it is needed.
set -eu
bin=$1 a=$2 b=$3
file_of() {
    f=$("$bin" --list | awk -v id="$1" '$1 == id { for (i = 2; i <= NF; i++) if ($i ~ /\.cu$/) { print $i; exit } }')
    [ -n "$f" ] || { echo "version-diff.sh: no version '$1' with a file in $bin --list" >&2; exit 2; }
    echo "$f"
}
dir=$(ls -d chapters/"$(basename "$bin" | sed 's/^ch//')"-*/ | head -n 1)
fa=$dir$(file_of "$a") fb=$dir$(file_of "$b")
if [ "$fa" != "$fb" ]; then
    diff -u "$fa" "$fb" || [ $? -eq 1 ]
    exit 0
fi
command -v unifdef >/dev/null || { echo "version-diff.sh: $a and $b share $fa; unifdef is needed (apt-get install unifdef)" >&2; exit 2; }
grep -q 'STEP' "$fa" || { echo "version-diff.sh: $a and $b share $fa, which has no STEP regions" >&2; exit 2; }
na=$(echo "$a" | tr -dc 0-9) nb=$(echo "$b" | tr -dc 0-9)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unifdef -DSTEP="$na" "$fa" > "$tmp/$a.cu" || [ $? -eq 1 ]
unifdef -DSTEP="$nb" "$fa" > "$tmp/$b.cu" || [ $? -eq 1 ]
(cd "$tmp" && diff -u --label "$fa (STEP=$na, $a)" --label "$fa (STEP=$nb, $b)" "$a.cu" "$b.cu") || [ $? -eq 1 ]
