#!/bin/sh
# exercise.sh: an exercise version's file with its solution in place of the stub.
#   sh common/exercise.sh XFILE LABBOOK OUT
# XFILE (chapters/NN-.../x1-....cu) holds what the learner writes between the lines
#   /* x1: begin */   and   /* x1: end */
# LABBOOK (the chapter's LABBOOK.md) holds the answer: the line "<!-- solution x1 -->" and, on
# the next line, a ```cuda fenced block. OUT is XFILE with the lines between the markers
# replaced by the block's lines (the markers kept). `make solved CH=N` builds the chapter with
# it (build/chNN-solved); `make test` checks that it passes where the stub reports "not written".
# Exit status 1, with the reason, when a marker or the block is missing.
set -eu
x=$1 book=$2 out=$3
id=$(basename "$x" | sed -n 's/^\(x[0-9][0-9]*\)-.*/\1/p')
[ -n "$id" ] || { echo "exercise.sh: $x: not an exercise file (x1-name.cu)" >&2; exit 1; }
tmp=$out.tmp
awk -v id="$id" -v x="$x" -v book="$book" '
    BEGIN { begin = "/* " id ": begin */"; end = "/* " id ": end */"; tag = "<!-- solution " id " -->" }
    FNR == 1 { file++ }
    file == 1 {                     # the lab book: collect the block after the tag
        if (state == 0 && index($0, tag)) { state = 1; next }
        if (state == 1) { if ($0 ~ /^```cuda[ \t]*$/) { state = 2; next } else exit_bad("no ```cuda block right after " tag " in " book) }
        if (state == 2) { if ($0 ~ /^```[ \t]*$/) state = 3; else sol[n++] = $0 }
        next
    }
    {                               # the exercise file: copy, replacing the marked lines
        if (state != 3) exit_bad(state ? "the solution block of " id " in " book " is not closed" : "no line \"" tag "\" in " book)
        if (skipping && index($0, end)) { skipping = 0; done = 1 }
        if (skipping) next
        print
        if (index($0, begin)) { for (i = 0; i < n; i++) print sol[i]; skipping = 1 }
    }
    function exit_bad(msg) { print "exercise.sh: " msg > "/dev/stderr"; bad = 1; exit 1 }
    END {
        if (bad) exit 1
        if (!done) { print "exercise.sh: " x " lacks the lines " begin " and " end > "/dev/stderr"; exit 1 }
    }' "$book" "$x" > "$tmp" || { rm -f "$tmp"; exit 1; }
mv "$tmp" "$out"
