#!/usr/bin/env bash
# The GPU part of issue 11 in one run of at most ~6 minutes (repo root on the GPU machine,
# .devkit carried): benchmarks/overhead.py first (medians of 3 processes per mode; the compiled
# GPT in its own invocation, plain and pyprof only, as compiling dominates its processes), then
# LeNet and ResNet captured in pyprof's default mode and with --aten (emit_nvtx) for
# benchmarks/attribution_compare.py. Every step has its own time limit and writes its results
# as they come; everything under $OUT is packed into one results.tar.gz at the end.
set -uo pipefail
out=${OUT:-gpu-out}; work=$out/overhead; mkdir -p "$work"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
pack() { tar -C "$out" -czf "$out/results.tar.gz" overhead && rm -rf "$work"; }
trap pack EXIT
bench=(--steps 10 --blocks 3 --warmup 3 --timeout 60 --no-calls)
timeout ${EAGER_LIMIT:-120} python3 benchmarks/overhead.py "${bench[@]}" --models lenet,resnet18,gpt \
  --modes plain,pyprof,pyprof+emit > "$work/overhead_eager.txt" 2>&1 || echo "eager benchmark: rc $?" >> "$work/overhead_eager.txt"
timeout ${COMPILED_LIMIT:-110} python3 benchmarks/overhead.py "${bench[@]}" --models gpt_compiled \
  --modes plain,pyprof > "$work/overhead_compiled.txt" 2>&1 || echo "compiled benchmark: rc $?" >> "$work/overhead_compiled.txt"
for ex in lenet resnet; do
  for mode in default aten; do
    flag=; [ $mode = aten ] && flag=--aten
    OUT=$work timeout ${CAPTURE_LIMIT:-25} bash .devkit/nsys-capture.sh "${ex}_$mode" -- python3 examples/$ex.py $flag \
      > "$work/capture_${ex}_$mode.log" 2>&1 || echo "capture ${ex}_$mode: rc $?" >> "$work/capture_${ex}_$mode.log"
    [ -f "$work/${ex}_$mode.sqlite" ] && xz -f "$work/${ex}_$mode.sqlite"
  done
done
ls -la "$work"
