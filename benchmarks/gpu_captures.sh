#!/usr/bin/env bash
# Everything pyprof needs from a GPU machine, in one run (the device tool's machine; see
# ../shared/device/README.md, whose kit must be carried as .devkit):
#   - nsys SQLite captures of examples/lenet.py, examples/gpt.py, examples/resnet.py and benchmarks/tc_zoo.py
#   - Nsight Compute counters of the same zoo (Tensor Core ops, CUDA-core FLOPs, DRAM bytes)
#   - benchmarks/overhead.py (annotation cost), plain and under nsys (real NVTX pushes)
# usage (repo root, on the GPU machine): bash benchmarks/gpu_captures.sh [lenet gpt resnet zoo ncu overhead overhead_nsys]
# Results go to $OUT (or ./gpu-out): the exports, tc_zoo_ncu.csv.xz, overhead*.txt and one
# logs.txt (the device tool brings back at most 8 files).
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
steps=${*:-lenet gpt resnet zoo ncu overhead overhead_nsys}
logs=$out/logs.txt
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

capture() {  # name, command...
  local name=$1; shift
  echo "== capture $name" >> "$logs"
  OUT=$out bash .devkit/nsys-capture.sh "$name" -- "$@" >> "$logs" 2>&1 || { echo "capture $name failed"; tail -20 "$logs"; }
}
for s in $steps; do
  case $s in
    lenet) capture lenet python3 examples/lenet.py ;;
    gpt) capture gpt python3 examples/gpt.py ;;
    resnet) capture resnet python3 examples/resnet.py ;;
    zoo) capture tc_zoo python3 benchmarks/tc_zoo.py ;;
    ncu)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
      "$ncu" --query-metrics --chip gh100 > /tmp/metrics.txt 2>&1
      want=$(grep -oE '^(sm__ops_path_tensor_op_[a-z0-9_]+|sm__inst_executed_pipe_tensor_op_[a-z0-9_]+|smsp__sass_thread_inst_executed_op_[hfd](fma|add|mul)_pred_on|dram__bytes_(read|write)|gpu__time_duration)\b' /tmp/metrics.txt | sort -u | sed 's/$/.sum/' | paste -sd,)
      echo "ncu metrics: $want"
      echo "== ncu" >> "$logs"
      timeout 420 "$ncu" --profile-from-start off --metrics "$want" --csv python3 benchmarks/tc_zoo.py > /tmp/tc_zoo_ncu.csv 2>> "$logs" || { echo "ncu failed"; tail -20 "$logs"; }
      wc -l /tmp/tc_zoo_ncu.csv; xz -c /tmp/tc_zoo_ncu.csv > "$out/tc_zoo_ncu.csv.xz" ;;
    overhead) python3 benchmarks/overhead.py 2>&1 | tee "$out/overhead.txt" ;;
    overhead_nsys)
      # Under nsys the NVTX domain is live: every push of both modes reaches the tool.
      nsys=$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)
      LD_LIBRARY_PATH=/opt/devkit-dw/usr/lib/x86_64-linux-gnu timeout 300 "$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none \
        -c none -f true -o /tmp/overhead python3 benchmarks/overhead.py --no-force --models lenet,gpt --repeats 5 2>&1 \
        | grep -v '^\[' | tee "$out/overhead_nsys.txt" ;;
  esac
done
ls -la "$out"
