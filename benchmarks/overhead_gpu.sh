#!/usr/bin/env bash
# The GPU part of issue 11 in ONE device call of at most 560 s (repo root on the GPU machine,
# .devkit carried): benchmarks/overhead.py, medians of 3 processes per mode, plain and pyprof's
# default, modes interleaved. Two invocations, each with its own budget (overhead.py starts no
# process that would not fit in what is left of it) and an outer limit a little above it:
#   eager    LeNet-5, ResNet-18, GPT in each process            (EAGER_BUDGET, default 190 s)
#   compiled the compiled GPT alone: compiling dominates those  (COMPILED_BUDGET, default 230 s)
# then, if the clock allows, the per-call table on the GPU host's CPU, then (SINGLE_BUDGET, default
# 0: off; cut to end by SINGLE_BEFORE s) one process each of emit_nvtx, pyprof+emit and torch.profiler
# (their ratios to plain: against the eager run's plain medians, other processes). MODES adds modes
# (e.g. MODES=plain,pyprof,pyprof+emit) when the budgets allow. Results are packed into
# $OUT/results.tar.gz as they stand when the script ends. Logic check on a CPU machine, in
# seconds: EXTRA=--smoke EAGER_BUDGET=30 COMPILED_BUDGET=60 CALLS_IF_BEFORE=0 OUT=/tmp/o bash benchmarks/overhead_gpu.sh
set -uo pipefail
out=${OUT:-gpu-out}; work=$out/overhead; mkdir -p "$work"
[ -d .devkit/wheels ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
pack() { tar -C "$out" -czf "$out/results.tar.gz" overhead && rm -rf "$work"; }
trap pack EXIT
modes=${MODES:-plain,pyprof}
eager=${EAGER_BUDGET:-190}; compiled=${COMPILED_BUDGET:-230}
bench=(--steps 10 --blocks 3 --warmup 3 --no-calls --repeats 3 --modes "$modes" ${EXTRA:-})
timeout $((eager + 15)) python3 benchmarks/overhead.py "${bench[@]}" --models "${EAGER_MODELS:-lenet,resnet18,gpt}" \
  --budget "$eager" --timeout 90 > "$work/overhead_eager.txt" 2>&1 || echo "eager benchmark: rc $?" >> "$work/overhead_eager.txt"
timeout $((compiled + 15)) python3 benchmarks/overhead.py "${bench[@]}" --models gpt_compiled \
  --budget "$compiled" --timeout 150 > "$work/overhead_compiled.txt" 2>&1 || echo "compiled benchmark: rc $?" >> "$work/overhead_compiled.txt"
if [ "$SECONDS" -lt "${CALLS_IF_BEFORE:-425}" ]; then
  timeout 40 python3 benchmarks/overhead.py --calls > "$work/overhead_calls.txt" 2>&1 || echo "calls: rc $?" >> "$work/overhead_calls.txt"
fi
single=$(( ${SINGLE_BUDGET:-0} < ${SINGLE_BEFORE:-520} - SECONDS ? ${SINGLE_BUDGET:-0} : ${SINGLE_BEFORE:-520} - SECONDS ))
if [ "$single" -gt 20 ]; then
  timeout $((single + 15)) python3 benchmarks/overhead.py --steps 10 --blocks 3 --warmup 3 --no-calls --repeats 1 \
    --modes "${SINGLE_MODES:-emit_nvtx,pyprof+emit,torch.profiler}" --models "${EAGER_MODELS:-lenet,resnet18,gpt}" ${EXTRA:-} --budget "$single" \
    --timeout 60 > "$work/overhead_single.txt" 2>&1 || echo "single: rc $?" >> "$work/overhead_single.txt"
fi
echo "script seconds: $SECONDS" >> "$work/overhead_eager.txt"
ls -la "$work"
