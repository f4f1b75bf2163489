#!/bin/sh
# version-diff.sh: what one version changed over another, as `diff -u` (make diff CH=3 A=v15 B=v16).
#   sh common/version-diff.sh BINARY A B
# The files come from the chapter's version table (BINARY --list). Two versions in two files:
# diff -u of the files. Two versions in one file whose steps are written as regions
# `#if STEP >= 16 ... #else ... #endif` on a macro STEP, the version's number (chapter 3's v15 to
# v18): the file as unifdef leaves it with -DSTEP=<A's number> against -DSTEP=<B's number>,
# exactly the lines one step adds or changes. Two versions in one file of separate kernels
# (chapter 3's v2 to v6, b4 to b6): the two versions' sections, each from its header on.
# (Where a STEP region also names __CUDA_ARCH_FEAT_SM90_ALL, the diff shows the sm_90a code, the
# code an H100 runs.)
# Exit status: 0 (diff's 1, "they differ", is the expected answer), 2 on an unknown version or
# without unifdef where it is needed.
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
if ! grep -q '^#if STEP' "$fa"; then
    # separate kernels in one file: each version's section, from its header (a comment opening
    # "/*" then " * <id>") to the next version's header
    ids=$("$bin" --list | awk -v f="$(basename "$fa")" 'NR > 1 { for (i = 2; i <= NF; i++) if ($i == f) print $1 }' | tr '\n' ' ')
    section() { # the section whose header names $1 first: "/*" then " * <id>" opens a section
        awk -v id="$1" -v ids="$ids" '
            BEGIN { n = split(ids, a, " "); for (i = 1; i <= n; i++) isid[a[i]] = 1 }
            { line[NR] = $0 }
            prev == "/*" && match($0, /^ \* [vbx][0-9]+[ :(]/) && substr($0, 4, RLENGTH - 4) in isid {
                start[++ns] = NR - 1
            }
            !found && match($0, /^ \* [vbx][0-9]+[ :(]/) && substr($0, 4, RLENGTH - 4) == id {
                found = NR
            }
            { prev = $0 }
            END {
                if (!found) exit
                for (k = ns; k >= 1 && start[k] > found; k--) ;
                if (k < 1) exit
                last = k < ns ? start[k + 1] - 1 : NR
                for (i = start[k]; i <= last; i++) print line[i]
            }' "$fa"
    }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    section "$a" > "$tmp/$a.cu"
    section "$b" > "$tmp/$b.cu"
    if [ ! -s "$tmp/$a.cu" ] || [ ! -s "$tmp/$b.cu" ] || cmp -s "$tmp/$a.cu" "$tmp/$b.cu"; then
        echo "$a and $b share the code of $fa under one header, which says what differs between them"
        exit 0
    fi
    (cd "$tmp" && diff -u --label "$fa ($a's section)" --label "$fa ($b's section)" "$a.cu" "$b.cu") || [ $? -eq 1 ]
    exit 0
fi
command -v unifdef >/dev/null || { echo "version-diff.sh: $a and $b share $fa; unifdef is needed (apt-get install unifdef)" >&2; exit 2; }
na=$(echo "$a" | tr -dc 0-9) nb=$(echo "$b" | tr -dc 0-9)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unifdef -DSTEP="$na" -D__CUDA_ARCH_FEAT_SM90_ALL "$fa" > "$tmp/$a.cu" || [ $? -eq 1 ]
unifdef -DSTEP="$nb" -D__CUDA_ARCH_FEAT_SM90_ALL "$fa" > "$tmp/$b.cu" || [ $? -eq 1 ]
(cd "$tmp" && diff -u --label "$fa (STEP=$na, $a)" --label "$fa (STEP=$nb, $b)" "$a.cu" "$b.cu") || [ $? -eq 1 ]
