#!/usr/bin/env bash
# Nsight Compute on cuDNN's convolution helper kernels (issue 27): examples/resnet.py's training
# step, benchmarks/conv_helpers.py's cases and conv_workspace.py's weight gradients, with
# kernel_truth.sh's counters (plus L2 read sectors and the bytes the kernels' stores wrote),
# filtered to the helpers and the convolution kernels they serve.
# usage (repo root, on the GPU machine, the kit of ../shared/device carried as .devkit):
#   bash benchmarks/conv_helpers_truth.sh      # $OUT/conv_ncu_{resnet,cases,workspace}.csv.xz
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
. "$here"/device_kit.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
metrics=$TRUTH_METRICS,lts__t_sectors_srcunit_tex_op_read.sum,smsp__sass_data_bytes_mem_global_op_st.sum
kernels='regex:nhwcAddPadding|init_device_workspace|wgrad|ReduceSplitK|ImplicitGemmConvolution|first_layer|splitK|split_k|spin_kernel'
run() {  # NAME COMMAND...
  local name=$1; shift
  timeout "${NCU_LIMIT:-170}" "$ncu" --profile-from-start off --kernel-name-base demangled -k "$kernels" \
    --metrics "$metrics" --csv "$@" 2> "$out/$name.log" | xz -T0 -9 > "$out/$name.csv.xz" || echo "$name: ncu failed or timed out"
  tail -3 "$out/$name.log"
}
run conv_ncu_resnet python3 examples/resnet.py
run conv_ncu_cases python3 "$here"/conv_helpers.py
run conv_ncu_workspace python3 "$here"/conv_workspace.py
ls -la "$out"
