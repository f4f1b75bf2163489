#!/bin/sh
# test-deps.sh: editing a header must rebuild exactly what includes it. For every header under
# chapters/ and common/, make's "what if this file were new" (-W) must
#   - make every binary that includes it out of date (relinked in make -n's plan; make -q fails), and
#   - rebuild exactly the objects whose source includes it, directly or through another header
#     (make -n lists them; the expected list comes from the sources' own #include "..." lines,
#     read here independently of the dependency files the compilers write);
# and a missing object must make its binary out of date.
# Runs after a build (make test builds first): if the tree is not up to date, that is a failure.
# usage: test-deps.sh MAKE [VAR=value ...]    e.g. sh common/test-deps.sh make ARCH=sm_90
make_cmd="$*"
fail=0
say() { echo "$@"; }
if ! $make_cmd -q all >/dev/null 2>&1; then
    say "FAIL  deps: the build is not up to date before the test ($make_cmd -q all)"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# every source and the object or program it is compiled into
{
    for f in chapters/*/*.cu; do
        case $f in */api.cu) continue ;; esac # a C library's (make lib), not the programs'
        o=${f#chapters/}; echo "$f build/obj/${o%.cu}.o"
    done
    for f in common/*.cu common/common.c common/conv_ref.c; do
        b=${f#common/}; echo "$f build/${b%.*}.o"
    done
    echo "common/test_common.c build/test_common"
    echo "common/gpu-tag.c build/gpu-tag"
} >"$tmp/sources"
# the include graph: "FILE HEADER" for each #include "..." that resolves to a file of the tree
# (the including file's folder first, then common/, as -Icommon does)
for f in chapters/*/* common/*; do
    case $f in *.cu | *.cuh | *.h | *.c) ;; *) continue ;; esac
    d=$(dirname "$f")
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        while read -r h; do
            if [ -f "$d/$h" ]; then echo "$f $d/$h"; elif [ -f "common/$h" ]; then echo "$f common/$h"; fi
        done
done >"$tmp/edges"
# the headers each source reaches, directly or not: "HEADER OBJECT" lines (one awk, a closure by
# depth-first search over the include graph)
awk 'FNR == NR { kids[$1] = kids[$1] " " $2; next }
     function visit(f, obj,    n, k, i) {
         n = split(kids[f], k, " ")
         for (i = 1; i <= n; i++)
             if (!((k[i], obj) in seen)) { seen[k[i], obj] = 1; print k[i], obj; visit(k[i], obj) }
     }
     { visit($1, $2) }' "$tmp/edges" "$tmp/sources" >"$tmp/includers"
headers=$(ls chapters/*/*.h chapters/*/*.cuh common/*.h common/*.cuh 2>/dev/null)
n=0
for h in $headers; do
    n=$((n + 1))
    awk -v h="$h" '$1 == h { print $2 }' "$tmp/includers" | sort -u >"$tmp/want"
    $make_cmd -n -W "$h" all >"$tmp/plan" 2>/dev/null
    sed -n 's/.* -c .*-o \([^ ]*\).*/\1/p; s/.* -o \(build\/test_common\|build\/gpu-tag\) .*/\1/p' \
        "$tmp/plan" | sort -u >"$tmp/got"
    if ! cmp -s "$tmp/want" "$tmp/got"; then
        fail=1
        say "FAIL  deps: touching $h rebuilds:"
        diff "$tmp/want" "$tmp/got" | sed -n 's/^< /    missing: /p; s/^> /    extra:   /p'
        continue
    fi
    # the binaries: a chapter's for its objects; every chapter's for the harness's objects; each
    # must be relinked in the plan, and make -q must call them out of date
    bins=$(sed -n 's/^build\/obj\/\([0-9][0-9]\)-.*/build\/ch\1/p; s/^build\/\(test_common\|gpu-tag\)$/build\/\1/p
                   s/^build\/[a-z_]*\.o$/ALL/p' "$tmp/want" | sort -u)
    case $bins in *ALL*) bins="$(echo "$bins" | grep -v ALL) $(ls -d chapters/[0-9][0-9]-* | sed 's/chapters\/\([0-9][0-9]\)-.*/build\/ch\1/')" ;; esac
    for b in $bins; do
        if ! grep -q -- "-o $b " "$tmp/plan"; then
            fail=1
            say "FAIL  deps: touching $h leaves $b up to date"
        fi
    done
    if [ -n "$bins" ] && $make_cmd -q -W "$h" $bins >/dev/null 2>&1; then
        fail=1
        say "FAIL  deps: touching $h, make -q still calls $(echo $bins) up to date"
    fi
done
[ "$n" -gt 0 ] || { say "FAIL  deps: no headers found"; exit 1; }
# a missing object must be remade even though its binary is newer than every source (the trap of
# an intermediate file): move one aside, ask, put it back untouched
o=$(ls build/obj/*/*.o 2>/dev/null | head -n 1)
if [ -n "$o" ]; then
    b=build/ch$(echo "$o" | sed 's/^build\/obj\/\([0-9][0-9]\)-.*/\1/')
    mv "$o" "$tmp/aside.o"
    if $make_cmd -q "$b" >/dev/null 2>&1; then
        fail=1
        say "FAIL  deps: with $o missing, $b is still up to date"
    else
        say "PASS  deps: with $o missing, $b is out of date"
    fi
    mv "$tmp/aside.o" "$o"
fi
[ $fail -eq 0 ] && say "PASS  deps: each of $n headers rebuilds exactly the objects that include it, and their binaries"
exit $fail
