#!/usr/bin/env bash
# The GPU part of issue 11 in ONE device call of at most 560 s (repo root on the GPU machine,
# .devkit carried): benchmarks/overhead.py, medians of 3 processes per mode, plain and pyprof's
# default, modes interleaved. Two invocations, each with its own budget (overhead.py starts no
# process that would not fit in what is left of it) and an outer limit a little above it:
#   eager    LeNet-5, ResNet-18, GPT in each process            (EAGER_BUDGET, default 190 s)
#   compiled the compiled GPT alone: compiling dominates those  (COMPILED_BUDGET, default 230 s; 0: skip)
# then, if the clock allows, the per-call table on the GPU host's CPU (CALLS_FIRST=1: before the
# eager run instead; HANDOVER=1 runs benchmarks/handover_probe.py first), then (SINGLE_BUDGET, default
# 0: off; cut to end by SINGLE_BEFORE s) one process each of emit_nvtx, pyprof+emit and torch.profiler
# (their ratios to plain: against the eager run's plain medians, other processes), then (NSYS_BUDGET,
# default 0: off; cut to end by NSYS_BEFORE s) plain and pyprof processes of NSYS_MODELS (default
# lenet,resnet18) under `nsys profile -t cuda,nvtx` (overhead.py --nsys: a live NVTX domain, reports
# discarded), then (ACCOUNT_IF_BEFORE s, default 0: off) benchmarks/overhead_account.py on ResNet-18
# (counts per step; markers off / on / on without backward hooks, in one process). MODES adds modes
# (e.g. MODES=plain,pyprof,pyprof+emit) when the budgets allow. Results are packed into
# $OUT/results.tar.gz as they stand when the script ends. Logic check on a CPU machine, in
# seconds: EXTRA=--smoke EAGER_BUDGET=30 COMPILED_BUDGET=60 CALLS_IF_BEFORE=0 OUT=/tmp/o bash benchmarks/overhead_gpu.sh
set -uo pipefail
out=${OUT:-gpu-out}; work=$out/overhead; mkdir -p "$work"
kit=${KIT:-.devkit}  # the GPU kit (.devkit/README.md), carried
[ -d "$kit/wheels" ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
pack() { tar -C "$out" -czf "$out/results.tar.gz" overhead && rm -rf "$work"; }
trap pack EXIT
# The C hit path (pyprof/nvtx/_hot.c), built here (the GPU image has gcc); the line below says which
# path ran.
if ! python3 -c "import pyprof.nvtx._hot" 2>/dev/null; then
  python3 setup.py -q build_ext --inplace > "$work/build_hot.txt" 2>&1
fi
python3 -c "import pyprof.nvtx.memo as m; print('hit path:', 'C' if m._hot else 'Python')" 2>&1 | tee -a "$work/build_hot.txt"
if [ -n "${HANDOVER:-}" ]; then
  timeout 90 python3 benchmarks/handover_probe.py > "$work/handover.txt" 2>&1 || echo "handover: rc $?" >> "$work/handover.txt"
fi
calls() { timeout 150 python3 benchmarks/overhead.py --calls > "$work/overhead_calls.txt" 2>&1 || echo "calls: rc $?" >> "$work/overhead_calls.txt"; }
[ -n "${CALLS_FIRST:-}" ] && calls
modes=${MODES:-plain,pyprof}
eager=${EAGER_BUDGET:-190}; compiled=${COMPILED_BUDGET:-230}
bench=(--steps 10 --blocks 3 --warmup 3 --no-calls --repeats 3 --modes "$modes" ${EXTRA:-})
timeout $((eager + 15)) python3 benchmarks/overhead.py "${bench[@]}" --models "${EAGER_MODELS:-lenet,resnet18,gpt}" \
  --budget "$eager" --timeout 90 > "$work/overhead_eager.txt" 2>&1 || echo "eager benchmark: rc $?" >> "$work/overhead_eager.txt"
if [ "$compiled" -gt 0 ]; then
  timeout $((compiled + 15)) python3 benchmarks/overhead.py "${bench[@]}" --models gpt_compiled \
    --budget "$compiled" --timeout 150 > "$work/overhead_compiled.txt" 2>&1 || echo "compiled benchmark: rc $?" >> "$work/overhead_compiled.txt"
fi
if [ -z "${CALLS_FIRST:-}" ] && [ "$SECONDS" -lt "${CALLS_IF_BEFORE:-425}" ]; then
  calls
fi
single=$(( ${SINGLE_BUDGET:-0} < ${SINGLE_BEFORE:-520} - SECONDS ? ${SINGLE_BUDGET:-0} : ${SINGLE_BEFORE:-520} - SECONDS ))
if [ "$single" -gt 20 ]; then
  timeout $((single + 15)) python3 benchmarks/overhead.py --steps 10 --blocks 3 --warmup 3 --no-calls --repeats 1 \
    --modes "${SINGLE_MODES:-emit_nvtx,pyprof+emit,torch.profiler}" --models "${EAGER_MODELS:-lenet,resnet18,gpt}" ${EXTRA:-} --budget "$single" \
    --timeout 60 > "$work/overhead_single.txt" 2>&1 || echo "single: rc $?" >> "$work/overhead_single.txt"
fi
nsys_budget=$(( ${NSYS_BUDGET:-0} < ${NSYS_BEFORE:-520} - SECONDS ? ${NSYS_BUDGET:-0} : ${NSYS_BEFORE:-520} - SECONDS ))
if [ "$nsys_budget" -gt 30 ]; then
  # nsys's report importer needs libdw/libelf, which the GPU image lacks (.devkit/README.md).
  if [ ! -d /opt/devkit-dw ] && [ -d "$kit" ]; then
    for deb in "$kit"/libdw1_*.deb "$kit"/libelf1_*.deb; do dpkg -x "$deb" /opt/devkit-dw; done
  fi
  export LD_LIBRARY_PATH=/opt/devkit-dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nsys=${NSYS:-$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
  timeout $((nsys_budget + 20)) python3 benchmarks/overhead.py --nsys "$nsys" --steps 10 --blocks 3 --warmup 3 --no-calls \
    --repeats "${NSYS_REPEATS:-3}" --modes plain,pyprof --models "${NSYS_MODELS:-lenet,resnet18}" ${EXTRA:-} \
    --budget "$nsys_budget" --timeout 120 > "$work/overhead_nsys.txt" 2>&1 || echo "nsys: rc $?" >> "$work/overhead_nsys.txt"
fi
if [ "$SECONDS" -lt "${ACCOUNT_IF_BEFORE:-0}" ]; then
  timeout 60 python3 benchmarks/overhead_account.py --model resnet18 --scaler > "$work/overhead_account.txt" 2>&1 \
    || echo "account: rc $?" >> "$work/overhead_account.txt"
fi
echo "script seconds: $SECONDS" >> "$work/overhead_eager.txt"
ls -la "$work"
