# Sourced by the benchmarks' GPU scripts, each one device call on the device tool's machine, from
# the repo root: the kit of ../shared/device carried as KIT (default .devkit), its wheels (nvtx,
# SQLAlchemy, for the machine's Python) installed, this checkout importable. Sets `kit`, `ncu`
# (Nsight Compute's command), RNN_METRICS (the counters rnn_truth holds the RNN formulas against:
# FP32 instructions, TF32 Tensor Core ops, DRAM bytes, time) and TRUTH_METRICS, the counters
# kernel_truth compares pyprof's per-kernel numbers with: what a kernel read from DRAM (ncu flushes the caches before each kernel, so its inputs come
# from DRAM once) and wrote (L2 write sectors: written bytes stay in L2), Tensor Core ops (Hopper's
# warpgroup hgmma paths and the older hmma ones) and time. No SASS-counted FLOPs: those instrument
# every kernel and made a first run 0.45 s a kernel (2,877 kernels: 21 minutes).
kit=${KIT:-.devkit}
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
TRUTH_METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_write.sum
for p in hgmma_src_fp16 hgmma_src_bf16_dst_fp32 hgmma_src_tf32_dst_fp32 hmma_src_fp16 hmma_src_bf16_dst_fp32 hmma_src_tf32_dst_fp32; do
  TRUTH_METRICS=$TRUTH_METRICS,sm__ops_path_tensor_op_$p.sum
done
RNN_METRICS=gpu__time_duration.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32.sum,sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum,dram__bytes_read.sum,dram__bytes_write.sum
