#!/usr/bin/env bash
# Issue 11, backward attribution by PyTorch's node ranges (pyprof.nvtx.node_ranges), in ONE device
# call (repo root on the GPU machine, .devkit carried):
#   captures  examples/{lenet,gpt,resnet}.py in profiled()'s default mode (node ranges + op-range
#             payloads) and with --aten (emit_nvtx), each pair in one run, for
#             benchmarks/attribution_compare.py; examples/compiled.py --model gpt / resnet in the
#             default mode (compiled-graph calls swap the node ranges for op ranges)
#   overhead  benchmarks/overhead_gpu.sh (plain vs pyprof's default, in-process on/off) with what
#             is left of BUDGET (default 560 s), eager models first
# Results: $OUT/captures.tar.gz (the exports, xz) and $OUT/results.tar.gz (overhead_gpu.sh's).
# Logic check on a CPU machine: NO_CAPTURE=1 EXTRA=--smoke BUDGET=120 OUT=/tmp/o bash benchmarks/node_ranges_gpu.sh
set -uo pipefail
out=${OUT:-gpu-out}; cap=$out/captures; mkdir -p "$cap"
budget=${BUDGET:-560}
[ -d .devkit/wheels ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
capture() {  # name, nsys options ..., -- command ...
  local name=$1; shift
  local t0=$SECONDS
  timeout "${CAPTURE_TIMEOUT:-120}" env OUT="$cap" bash .devkit/nsys-capture.sh "$name" "$@" > "$cap/$name.log" 2>&1 \
    || { echo "capture $name failed"; tail -5 "$cap/$name.log"; }
  echo "capture $name: $((SECONDS - t0)) s" | tee -a "$cap/logs.txt"
}
if [ -z "${NO_CAPTURE:-}" ]; then
  for ex in lenet gpt resnet; do
    capture "${ex}_nodes" -- python3 "examples/$ex.py"
    capture "${ex}_aten" -- python3 "examples/$ex.py" --aten
  done
  for m in gpt resnet; do
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) capture "${m}_compiled_nodes" -- python3 examples/compiled.py --model "$m"
  done
  (cd "$cap" && for f in *.sqlite; do [ -f "$f" ] && xz -T4 -6 "$f"; done)
  tar -C "$out" -czf "$out/captures.tar.gz" captures && rm -rf "$cap"
fi
left=$((budget - SECONDS - 40))
echo "overhead budget: $left s"
if [ "$left" -gt 60 ]; then
  eager=$(( left * 45 / 100 )); compiled=$(( left * 35 / 100 ))
  OUT=$out EAGER_BUDGET=$eager COMPILED_BUDGET=$compiled CALLS_IF_BEFORE=$((budget - 60)) \
    timeout $((left + 20)) bash benchmarks/overhead_gpu.sh
fi
echo "script seconds: $SECONDS"
