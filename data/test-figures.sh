#!/bin/sh
# test-figures.sh: the figure checker (data/figures.sh) on planted cases, so that make test shows
# it catching what it is for. A fixture data folder (chapter 1's KernelBench shape, its columns in
# another order than the real CSVs, a precision column, a repeated row) and a fixture file whose
# tags use every form must pass; a figure planted one digit off, a tag whose row is missing and a
# % without its column must fail, naming the file and line; --fix must rewrite the planted figure
# and change nothing else; and a figure planted off in a copy of a real tagged version file must
# fail against data/h100. One PASS or FAIL line per case.
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
shape=$(awk '$1 == "SHAPE_01" { print $3 }' Makefile)
[ -n "$shape" ] || { echo "FAIL  figures test: no SHAPE_01 in the Makefile"; exit 1; }
batch1=1x${shape#*x}
mkdir -p "$tmp/data" "$tmp/chapters/01-fixture"
cat > "$tmp/data/ch01.csv" <<EOF
precision,scope,median_ms,version,shape,pct_floor,min_ms,max_ms,floor_ms
fp32,epilogue_fwd,0.99999,v2,$shape,1.0,0.9,1.1,0.35799
fp32,epilogue_fwd,0.42512,v2,$shape,84.25,0.42333,0.42851,0.35799
tf32,epilogue_fwd,0.30011,v2,$shape,119.3,0.3,0.31,0.35799
fp32,epilogue_fwd,0.76651,v1,$shape,46.7,0.76438,0.77008,0.35799
fp32,model_fwd,6.99346,v1,$shape,1.1,6.99168,7.04042,0.07465
EOF
cat > "$tmp/data/ch01-sweep.csv" <<EOF
precision,scope,median_ms,version,shape,pct_floor,min_ms,max_ms,floor_ms
fp32,epilogue_fwd,0.02496,v1,$batch1,11.2,0.02387,0.02608,0.00280
fp32,epilogue_fwd,0.76000,v1,$shape,46.9,0.76,0.77,0.35799
EOF
cat > "$tmp/data/pytorch-ch01.csv" <<EOF
version,name,scope,shape,median_ms,precision
compile,"torch.compile, ""default"" mode",epilogue_fwd,$shape,0.367136,fp32
compile,torch.compile,epilogue_fwd,$shape,0.250000,default
EOF
cat > "$tmp/data/pytorch-ch01-ops.csv" <<EOF
version,scope,shape,median_ms
eager,conv_fwd,$shape,6.10443
EOF
good=$tmp/chapters/01-fixture/v9-fixture.cu
cat > "$good" <<'EOF'
/*
 * Measured: 0.425 ms [v2 epilogue_fwd] (also 0.43 ms [v2 epilogue_fwd]), 84% of the floor
 * [v2 epilogue_fwd pct_floor] (84.2% or 84.3% [v2 epilogue_fwd pct_floor]: 84.25 is halfway),
 * 0.4251 [0.4233 - 0.4285] [v2 epilogue_fwd median_ms min_ms max_ms],
 * 1.80x v1 [v1/v2 epilogue_fwd], 11% of the model [v1 epilogue_fwd/model_fwd], 2.1x the floor
 * [v1 epilogue_fwd median_ms/floor_ms], 45% faster than v1 [v2 vs v1 epilogue_fwd], 23.3x
 * [v1 model_fwd / v2 epilogue_fwd tf32]: in TF32 0.300 ms [v2 epilogue_fwd tf32]; at batch 1
 * 0.025 ms [v1 epilogue_fwd @1] or 25 µs [v1 epilogue_fwd @1], 0.0250 ms
 * [ch01 v1 epilogue_fwd @BATCH1]; torch.compile 0.3671 ms [compile epilogue_fwd], by default
 * 0.250 [compile epilogue_fwd default], and eager's conv
 * 6.10 ms [eager conv_fwd]; v2 saves 0.341 ms [v1-v2 epilogue_fwd]; a[b1 + 2] and v[ch] are
 * code, [0.1 - 0.2] a range, and `9.999 ms [v2 epilogue_fwd]` an example.
 */
EOF
sed "s/@BATCH1/@$batch1/" "$good" > "$tmp/x" && cat "$tmp/x" > "$good"
check() { sh data/figures.sh "$@" > "$tmp/out" 2>&1; }

if check --check --data "$tmp/data" "$good"; then
    n=$(grep -o '[0-9]* tagged' "$tmp/out")
    echo "PASS  figures test: every tag form agrees with its fixture row ($n)"
else
    echo "FAIL  figures test: the fixture file should pass:"
    sed 's/^/    /' "$tmp/out"
fi

bad=$tmp/chapters/01-fixture/v9-planted.cu
sed 's/0\.425 ms \[v2 epilogue_fwd\]/0.426 ms [v2 epilogue_fwd]/' "$good" > "$bad"
if ! check --check --data "$tmp/data" "$bad" && \
   grep -q "v9-planted.cu:2: 0.426 ms \[v2 epilogue_fwd\]: the CSV gives 0.425" "$tmp/out" && \
   [ "$(grep -c '^FAIL' "$tmp/out")" = 1 ]; then
    echo "PASS  figures test: a planted 0.426 ms for v2's 0.42512 is caught, at its line"
else
    echo "FAIL  figures test: a planted 0.426 ms for v2's 0.42512 was not caught (or not alone):"
    sed 's/^/    /' "$tmp/out"
fi

if check --fix --data "$tmp/data" "$bad" && cmp -s "$bad" "$good" && \
   check --check --data "$tmp/data" "$bad"; then
    echo "PASS  figures test: --fix rewrites the planted figure to 0.425 and nothing else"
else
    echo "FAIL  figures test: --fix did not restore the fixture:"
    diff "$good" "$bad" | sed 's/^/    /'
fi
cp "$good" "$tmp/same.cu"
if check --fix --data "$tmp/data" "$good" && cmp -s "$good" "$tmp/same.cu"; then
    echo "PASS  figures test: --fix changes nothing where every figure agrees"
else
    echo "FAIL  figures test: --fix changed an agreeing file:"
    diff "$tmp/same.cu" "$good" | sed 's/^/    /'
fi

printf ' * gone: 1.0 ms [v9 epilogue_fwd], not measured: 1.0 ms [v2 train_step]\n' > "$bad"
if ! check --check --data "$tmp/data" "$bad" && \
   grep -q "v9-planted.cu:1: .*no row v9 epilogue_fwd" "$tmp/out" && \
   grep -q "v9-planted.cu:1: .*no row v2 train_step" "$tmp/out"; then
    echo "PASS  figures test: tags whose rows are missing are errors"
else
    echo "FAIL  figures test: tags whose rows are missing were not caught:"
    sed 's/^/    /' "$tmp/out"
fi

printf ' * 84%% [v2 epilogue_fwd], 0.4 ms [v2 epilogue_fwd fp16]\n' > "$bad"
if ! check --check --data "$tmp/data" "$bad" && grep -q "name the column" "$tmp/out" && \
   grep -q "no row of precision fp16" "$tmp/out"; then
    echo "PASS  figures test: a % without its column, and a precision without its row, are errors"
else
    echo "FAIL  figures test: a % without its column or a missing precision was not caught:"
    sed 's/^/    /' "$tmp/out"
fi

# a real version file, its first tagged figure planted off, against the recorded data
src=chapters/01-convtranspose-lse/02-v2-fused-epilogue.cu
mkdir -p "$tmp/chapters/01-convtranspose-lse"
copy=$tmp/chapters/01-convtranspose-lse/02-v2-fused-epilogue.cu
awk '!done && match($0, /[0-9]+\.[0-9]+ ms \[v[0-9]+ [a-z_]+\]/) {
         $0 = substr($0, 1, RSTART - 1) "9" substr($0, RSTART); done = 1
         print FNR > "/dev/stderr"
     }
     { print }' "$src" > "$copy" 2> "$tmp/line"
line=$(cat "$tmp/line")
if [ -z "$line" ]; then
    echo "FAIL  figures test: $src has no tagged ms figure to plant a change in"
elif ! check --check "$copy" && grep -q "02-v2-fused-epilogue.cu:$line: 9" "$tmp/out"; then
    echo "PASS  figures test: a figure planted off in a copy of $src is caught against data/h100"
else
    echo "FAIL  figures test: a figure planted off in a copy of $src was not caught:"
    sed 's/^/    /' "$tmp/out"
fi
