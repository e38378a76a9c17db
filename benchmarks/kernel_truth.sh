#!/usr/bin/env bash
# Per-kernel ground truth on the GPU machine (issue 27): the models of KERNEL_TRUTH_MODELS (cases
# of benchmarks/pricing_coverage.py, none of them a shipped example) captured under nsys in the pricing
# modes asked for, and once under Nsight Compute with the counters benchmarks/kernel_truth.py
# compares pyprof's per-kernel bytes and matrix FLOPs with. Every run executes the same steps, so
# the n-th kernel of each capture is the n-th kernel ncu profiled (kernel_truth.py checks names).
# usage (repo root, on the GPU machine, the kit of ../shared/device carried as .devkit):
#   bash benchmarks/kernel_truth.sh ncu default aten nsyspt
#   ncu: kt_ncu.csv.xz; default, aten: kt_<mode>.sqlite.xz (pyprof.init(), with and without
#   PyTorch's op ranges); plain: emit_nvtx alone; nsyspt: no annotation but
#   `nsys profile --pytorch=autograd-shapes-nvtx`. Then, anywhere:
#   python benchmarks/kernel_truth.py kt_default.sqlite.xz kt_ncu.csv.xz
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
logs=$out/kernel_truth_log.txt
models=${KERNEL_TRUTH_MODELS:-llama_block,efficientnet_b0,unet,gru,recommender}
. "$(dirname "$0")"/device_kit.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$logs"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$logs"
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
run=(python3 "$here"/pricing_coverage.py capture --models "$models" --warmup 2)
for what in "$@"; do
  echo "== $(date +%T) $what" | tee -a "$logs"
  case $what in
    ncu)
      # NCU_MODELS: a subset for ncu alone (its kernels are the same subsequence of every capture).
      timeout "${NCU_LIMIT:-300}" "$ncu" --profile-from-start off --metrics "$TRUTH_METRICS" --csv "${run[@]}" --mode bare \
        ${NCU_MODELS:+--models "$NCU_MODELS"} \
        2>> "$logs" | xz -T0 > "$out/kt_ncu.csv.xz" || echo "ncu failed or timed out" | tee -a "$logs" ;;
    nsyspt)
      OUT=$work timeout 180 bash "$kit"/nsys-capture.sh kt_nsyspt --pytorch=autograd-shapes-nvtx -- "${run[@]}" --mode bare \
        >> "$logs" 2>&1 || echo "capture nsyspt failed" | tee -a "$logs" ;;
    *)
      OUT=$work timeout 180 bash "$kit"/nsys-capture.sh "kt_$what" -- "${run[@]}" --mode "$what" \
        >> "$logs" 2>&1 || echo "capture $what failed" | tee -a "$logs" ;;
  esac
  # Each export to $OUT as soon as it exists, so that a run cut short keeps what it made.
  for f in "$work"/*.sqlite; do [ -f "$f" ] && xz -T0 -9 -c "$f" > "$out/$(basename "$f").xz" && rm "$f"; done
  for f in "$work"/*.sqlite.xz; do [ -f "$f" ] && mv "$f" "$out/"; done
done
ls -la "$out" | tee -a "$logs"
