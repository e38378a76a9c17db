#!/usr/bin/env bash
# The RNN formulas against Nsight Compute on the GPU machine (kit as for pricing_coverage.sh): each
# truth_* case of benchmarks/pricing_coverage.py captured once under nsys and once under ncu (the same
# kernels in the same order), both into $OUT/rnn_truth.tar; then, anywhere:
#   python -m pyprof.parse truth_lstm.sqlite > truth_lstm.jsonl
#   python benchmarks/pricing_coverage.py rnn-truth truth_lstm.jsonl truth_lstm_ncu.csv
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
kit=${KIT:-.devkit}
logs=$out/rnn_truth_log.txt
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
work=$(mktemp -d)
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
metrics=gpu__time_duration.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32.sum,sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum,dram__bytes_read.sum,dram__bytes_write.sum
for case in ${1:-truth_gru truth_lstm}; do
  echo "== $(date +%T) $case" | tee -a "$logs"
  OUT=$work timeout 60 bash "$kit"/nsys-capture.sh "$case" -- python3 benchmarks/pricing_coverage.py capture --models "$case" \
    >> "$logs" 2>&1 || echo "nsys $case failed" | tee -a "$logs"
  timeout 150 "$ncu" --profile-from-start off --metrics "$metrics" --csv \
    python3 benchmarks/pricing_coverage.py capture --models "$case" > "$work/${case}_ncu.csv" 2>> "$logs" \
    || echo "ncu $case failed or timed out" | tee -a "$logs"
  (cd "$work" && tar cf "$out/rnn_truth.tar" ./*.sqlite ./*_ncu.csv 2>/dev/null)
done
ls -la "$work" | tee -a "$logs"
