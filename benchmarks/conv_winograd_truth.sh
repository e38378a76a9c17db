#!/usr/bin/env bash
# Nsight Compute on the convolution kernels of pricing_coverage.py's vision models that cuDNN runs
# as Winograd transforms and GEMMs, grouped CUTLASS kernels and split-K reductions (issue 27), with
# the bytes each kernel's loads and stores moved (smsp__sass_data_bytes_mem_global_op_{ld,st})
# besides L2's and DRAM's, and its FP32 instructions.
# usage (repo root, on the GPU machine): bash benchmarks/conv_winograd_truth.sh [MODEL...]
#   -> $OUT/$NAME.csv.xz (NAME default conv_ncu_winograd: tests/data/kernel_truth/, the default
#   models, H100, torch 2.11, cuDNN 9.19; tests/prof/test_prof_conv_winograd.py reads it).
# KERNELS (an ncu -k regex) picks other kernel families of the same models' steps: the helper
# kernels of GEMMs and convolutions (split-K reductions, layout transforms, padding) behind
# tests/data/kernel_truth/helpers_ncu.csv.xz, for one.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"; name=${NAME:-conv_ncu_winograd}
export PYTHONPATH=$PWD/benchmarks:$PWD PYTHONUNBUFFERED=1
models=${*:-squeezenet1_1 wide_resnet50_2 regnet_y_400mf shufflenet_v2_x1_0 densenet121}
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
m=$m,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum
m=$m,smsp__sass_data_bytes_mem_global_op_ld.sum,smsp__sass_data_bytes_mem_global_op_st.sum
m=$m,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum
m=$m,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
# shellcheck disable=SC2086
timeout "${NCU_LIMIT:-330}" "$ncu" --profile-from-start off --kernel-name-base demangled \
  -k "regex:${KERNELS:-winograd|Kernel|xmma_gemm|splitK|wgrad2d}|spin_kernel" --metrics "$m" --csv \
  python3 benchmarks/conv_winograd.py $models 2> "$out/$name.log" \
  | xz -T0 > "$out/$name.csv.xz" || echo "ncu failed or timed out"
tail -5 "$out/$name.log"
