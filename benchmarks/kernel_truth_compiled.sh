#!/usr/bin/env bash
# kernel_truth.sh for a compiled step (issue 27: per-kernel bytes of Inductor's kernels against
# Nsight Compute): examples/compiled.py (the GPT by default, torch.compile default mode, pyprof.init())
# captured under nsys, then run again under ncu with kernel_truth.sh's counters (TRUTH_METRICS); the same
# compilation each time (fresh caches), so the n-th kernel of the capture is the n-th profiled.
# usage (repo root, on the GPU machine, the kit of ../shared/device carried as .devkit):
#   bash benchmarks/kernel_truth_compiled.sh [gpt|resnet]
# -> $OUT/ktc_<model>.sqlite(.xz), ktc_<model>_ncu.csv.xz; then, anywhere:
#   python benchmarks/kernel_truth.py --records compiled=ktc_gpt.sqlite --ncu 'ktc_gpt_ncu.csv.xz=*' --models '*'
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
model=${1:-gpt}
. "$(dirname "$0")"/device_kit.sh
fresh() { TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) "$@"; }
echo "== $(date +%T) nsys"
fresh timeout "${CAPTURE_LIMIT:-120}" env OUT="$out" bash "$kit"/nsys-capture.sh "ktc_$model" -- \
  python3 examples/compiled.py --model "$model" > "$out/ktc_$model.log" 2>&1 || echo "capture failed"
echo "== $(date +%T) ncu"
fresh timeout "${NCU_LIMIT:-150}" "$ncu" --profile-from-start off --metrics "$TRUTH_METRICS" --csv \
  python3 examples/compiled.py --model "$model" 2>> "$out/ktc_$model.log" | xz -T0 > "$out/ktc_${model}_ncu.csv.xz" \
  || echo "ncu failed or timed out"
echo "== $(date +%T) done"
ls -la "$out"
