#!/bin/sh
# datadir.sh: the folder where a run on this machine's GPU writes its CSVs, created if needed.
#   data/<gpu>/        for a GPU without recorded data (a100, l4, rtx-4090, ...)
#   data/<gpu>-mine/   when data/<gpu>/ holds the tutorial's recorded runs (it has a README.md),
#                      so `make chapter-N` never rewrites them; RECORD=1 (make record) writes there
# The tag comes from build/gpu-tag, the rule the programs use for their CSV rows.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$name" ]; then
    echo "error: no CUDA device visible (nvidia-smi found none): nothing to time" >&2
    exit 2
fi
tag=$(build/gpu-tag "$name") || exit 2
dir=data/$tag
if [ -f "$dir/README.md" ] && [ -z "$RECORD" ]; then
    dir=data/$tag-mine
fi
mkdir -p "$dir" && echo "$dir"
