#!/usr/bin/env bash
# Nsight Compute on the convolution kernels of pricing_coverage.py's vision models that cuDNN runs
# as Winograd transforms and GEMMs, grouped or depthwise kernels (issue 27), with the bytes each
# kernel's loads and stores moved (smsp__sass_data_bytes_mem_global_op_{ld,st}) besides L2's and
# DRAM's, and its FP32 instructions.
# usage (repo root, on the GPU machine): bash benchmarks/conv_winograd_truth.sh MODEL...
#   -> $OUT/conv_ncu_winograd.csv.xz
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export PYTHONPATH=$PWD/benchmarks:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics=$metrics,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum
metrics=$metrics,smsp__sass_data_bytes_mem_global_op_ld.sum,smsp__sass_data_bytes_mem_global_op_st.sum
metrics=$metrics,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum
metrics=$metrics,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum
metrics=$metrics,sm__ops_path_tensor_op_hmma_src_fp16.sum,sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32.sum
metrics=$metrics,smsp__sass_thread_inst_executed_op_hfma_pred_on.sum,smsp__sass_thread_inst_executed_op_hadd_pred_on.sum
kernels='regex:winograd|Kernel|xmma_gemm|splitK|wgrad2d|spin_kernel'
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
timeout "${NCU_LIMIT:-500}" "$ncu" --profile-from-start off --kernel-name-base demangled -k "$kernels" \
  --metrics "$metrics" --csv python3 benchmarks/conv_winograd.py "$@" 2> "$out/conv_ncu_winograd.log" \
  | xz -T0 -9 > "$out/conv_ncu_winograd.csv.xz" || echo "ncu failed or timed out"
tail -5 "$out/conv_ncu_winograd.log"
ls -la "$out"
