#!/usr/bin/env bash
# benchmarks/coverage.py's GPU stage in one command (the device tool's machine; the kit of
# ../shared/device carried, its path in KIT, default .devkit):
#   - every model captured under nsys in one process, parsed to coverage.jsonl.xz, with
#     FlopCounterMode's totals in flops.json, and the table (table.txt)
#   - the small fixture captures (fixture_lstm.sqlite, fixture_encoder.sqlite) for tests/data/
#   - Nsight Compute counters of the fixture LSTM step (fixture_lstm_ncu.csv.xz)
# usage (repo root, on the GPU machine): bash benchmarks/coverage.sh [models]
# Results go to $OUT (or ./gpu-out); the device tool brings back at most 8 files.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
kit=${KIT:-.devkit}
logs=$out/log.txt
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
models=${1:-}
work=$(mktemp -d)
OUT=$work timeout 400 bash "$kit"/nsys-capture.sh coverage -- \
  python3 benchmarks/coverage.py capture --flops "$out/flops.json" ${models:+--models "$models"} >> "$logs" 2>&1 \
  || { echo "capture failed"; tail -30 "$logs"; }
[ -f "$work/coverage.sqlite.xz" ] && xz -d "$work/coverage.sqlite.xz"
python3 -m pyprof.parse "$work/coverage.sqlite" 2>> "$logs" | xz -T0 > "$out/coverage.jsonl.xz"
ls -la "$work" "$out"
python3 benchmarks/coverage.py table "$out/coverage.jsonl.xz" "$out/flops.json" --missing 4 | tee "$out/table.txt"
OUT=$out bash "$kit"/nsys-capture.sh fixture_lstm -- python3 benchmarks/coverage.py capture --models fixture_lstm >> "$logs" 2>&1
OUT=$out bash "$kit"/nsys-capture.sh fixture_encoder -- \
  python3 benchmarks/coverage.py capture --models fixture_encoder,fixture_encoder_eval >> "$logs" 2>&1
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
metrics=gpu__time_duration.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32.sum,sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32.sum,dram__bytes_read.sum,dram__bytes_write.sum
timeout 150 "$ncu" --profile-from-start off --metrics "$metrics" --csv \
  python3 benchmarks/coverage.py capture --models fixture_lstm --warmup 1 > "$work/ncu.csv" 2>> "$logs" \
  || echo "ncu failed or timed out"
xz -c "$work/ncu.csv" > "$out/fixture_lstm_ncu.csv.xz"
tail -5 "$logs"
ls -la "$out"
