#!/usr/bin/env bash
# The GPU part of issue 11 in one run (repo root on the GPU machine, .devkit carried):
# the examples captured in pyprof's default mode and with --aten (emit_nvtx), then
# benchmarks/overhead.py. Results under $OUT; each step has its own time limit, so a slow
# step leaves the others' results.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for ex in lenet resnet gpt; do
  for mode in default aten; do
    flag=; [ $mode = aten ] && flag=--aten
    OUT=$out timeout 90 bash .devkit/nsys-capture.sh "${ex}_$mode" -- python3 examples/$ex.py $flag > "$out/capture_${ex}_$mode.log" 2>&1 \
      || echo "capture ${ex}_$mode failed: $(tail -3 "$out/capture_${ex}_$mode.log")"
    [ -f "$out/${ex}_$mode.sqlite" ] && xz -f -k "$out/${ex}_$mode.sqlite" && rm "$out/${ex}_$mode.sqlite"
  done
done
ls -la "$out"
timeout ${OVERHEAD_LIMIT:-300} python3 benchmarks/overhead.py ${OVERHEAD_ARGS:-} 2>&1 | tee "$out/overhead.txt"
