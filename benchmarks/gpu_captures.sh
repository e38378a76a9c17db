#!/usr/bin/env bash
# Everything pyprof needs from a GPU machine, in one run (the device tool's machine; see
# ../shared/device/README.md, whose kit must be carried as .devkit):
#   - nsys SQLite captures of examples/lenet.py, examples/gpt.py and benchmarks/tc_zoo.py
#   - Nsight Compute counters of the same zoo (Tensor Core ops, CUDA-core FLOPs, DRAM bytes)
#   - benchmarks/overhead.py (annotation cost), unless SKIP_OVERHEAD=1
# usage (repo root, on the GPU machine): bash benchmarks/gpu_captures.sh [lenet gpt zoo ncu overhead]
# Results go to $OUT (or ./gpu-out).
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
steps=${*:-lenet gpt zoo ncu overhead}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

capture() {  # name, command...
  local name=$1; shift
  OUT=$out bash .devkit/nsys-capture.sh "$name" -- "$@" > "$out/$name.log" 2>&1 || { echo "capture $name failed"; tail -20 "$out/$name.log"; }
}
for s in $steps; do
  case $s in
    lenet) capture lenet python3 examples/lenet.py ;;
    gpt) capture gpt python3 examples/gpt.py ;;
    zoo) capture tc_zoo python3 benchmarks/tc_zoo.py ;;
    ncu)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
      "$ncu" --query-metrics --chip gh100 > /tmp/metrics.txt 2>&1
      want=$(grep -oE '^(sm__ops_path_tensor_op_[a-z0-9_]+|sm__inst_executed_pipe_tensor_op_[a-z0-9_]+|smsp__sass_thread_inst_executed_op_[hfd](fma|add|mul)_pred_on|dram__bytes_(read|write)|gpu__time_duration)\b' /tmp/metrics.txt | sort -u | sed 's/$/.sum/' | paste -sd,)
      echo "ncu metrics: $want"
      grep -E 'tensor_op|pipe_tensor' /tmp/metrics.txt > "$out/ncu_tensor_metrics.txt"
      timeout 420 "$ncu" --profile-from-start off --metrics "$want" --csv python3 benchmarks/tc_zoo.py > "$out/tc_zoo_ncu.csv" 2> "$out/ncu.log" || { echo "ncu failed"; tail -20 "$out/ncu.log"; }
      wc -l "$out/tc_zoo_ncu.csv" ;;
    overhead) python3 benchmarks/overhead.py 2>&1 | tee "$out/overhead.txt" ;;
  esac
done
ls -la "$out"
