#!/usr/bin/env bash
# benchmarks/pricing_coverage.py's models captured in the pricing modes issue 27's goals name, one
# device call (the kit of ../shared/device carried as KIT, default .devkit), each capture parsed
# on the GPU machine by this checkout so that only records come back:
#   1. default: pyprof.init() alone               -> cov_default.jsonl.xz, flops_default.json
#   2. plain: emit_nvtx(record_shapes=True) alone  -> cov_plain.jsonl.xz, flops_plain.json
#   3. nsyspt: neither, `nsys --pytorch=autograd-shapes-nvtx` annotates -> cov_nsyspt.jsonl.xz
#   4. the for-loop Adam and AdamW steps (default mode, two small models): adam_loop.sqlite, a
#      test fixture (tests/data/)
#   5. compiled: pyprof.init(), each model under torch.compile (default mode) -> cov_compiled.jsonl.xz
#   6. graphs: the same in mode reduce-overhead (CUDA graph trees), nsys --cuda-graph-trace=node
#      -> cov_graphs.jsonl.xz
# (5 and 6 count no FLOPs: table them against flops_default.json, the eager step's counts.)
# KEEP_EXPORTS=1 brings each step's export back beside its records.
# Then, anywhere: python benchmarks/pricing_coverage.py table cov_MODE.jsonl.xz flops_MODE.json
# usage (repo root, on the GPU machine): bash benchmarks/coverage_modes.sh [steps [models]]
# steps: comma-separated of default,plain,nsyspt,adam,compiled,graphs (default: the first four; each
# takes up to ~4 minutes, so two device calls: default,plain then nsyspt,adam; compiled and graphs
# compile each model first: up to COMPILE_BUDGET s, default 300, of preparing models each, then the
# capture; for more models in one device call, run several at once, each with its own OUT and
# models: compiling is the CPU's work, and overlapping kernels move durations, not what they are)
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
logs=$out/log.txt
. "$(dirname "$0")"/device_kit.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$logs"
steps=${1:-default,plain,nsyspt,adam}
models=${2:-}
want() { [[ ",$steps," == *",$1,"* ]]; }
work=$(mktemp -d)
step() { echo "== $(date +%T) $*" | tee -a "$logs"; }

# capture NAME LIMIT [nsys options --] ARGS...: NAME.sqlite in $work, parsed to $out/NAME.jsonl.xz
capture() {
  local name=$1 limit=$2; shift 2
  local opts=()
  while [ $# -gt 0 ] && [[ "$1" == --pytorch* || "$1" == --cuda-graph-trace* ]]; do opts+=("$1"); shift; done
  OUT=$work timeout "$limit" bash "$kit"/nsys-capture.sh "$name" ${opts[@]+"${opts[@]}"} -- \
    python3 benchmarks/pricing_coverage.py capture "$@" >> "$logs" 2>&1 \
    || echo "capture $name failed or timed out" | tee -a "$logs"
  [ -f "$work/$name.sqlite.xz" ] && xz -d "$work/$name.sqlite.xz"
  [ -f "$work/$name.sqlite" ] || return 1
  timeout 90 python3 -m pyprof.parse "$work/$name.sqlite" 2>> "$logs" | xz -T0 > "$out/$name.jsonl.xz"
  # KEEP_EXPORTS=1: the export itself too (to look into what parse made of it).
  [ -n "${KEEP_EXPORTS:-}" ] && xz -T0 -c "$work/$name.sqlite" > "$out/$name.sqlite.xz"
  return 0
}

budget=${COMPILE_BUDGET:-300}
want compiled && step "5 compiled" && capture cov_compiled $((budget + 150)) --mode default --compile default \
  --model-timeout 200 --budget "$budget" ${models:+--models "$models"}
want graphs && step "6 graphs" && capture cov_graphs $((budget + 150)) --cuda-graph-trace=node --mode default \
  --compile reduce-overhead --warmup 3 --model-timeout 200 --budget "$budget" ${models:+--models "$models"}
want default && step "1 default" && capture cov_default 170 --mode default --flops "$out/flops_default.json" --model-timeout 40 --budget 100 \
  ${models:+--models "$models"}
want plain && step "2 plain" && capture cov_plain 170 --mode plain --flops "$out/flops_plain.json" --model-timeout 40 --budget 100 \
  ${models:+--models "$models"}
want nsyspt && step "3 nsyspt" && capture cov_nsyspt 170 --pytorch=autograd-shapes-nvtx --mode bare --model-timeout 40 --budget 100 \
  ${models:+--models "$models"}
want adam && step "4 adam loop" && OUT=$work timeout 60 bash "$kit"/nsys-capture.sh adam_loop -- python3 benchmarks/pricing_coverage.py capture \
  --mode default --models fixture_lstm --optim adam-loop >> "$logs" 2>&1 && cp "$work/adam_loop.sqlite" "$out/"
want adam && OUT=$work timeout 60 bash "$kit"/nsys-capture.sh adamw_loop -- python3 benchmarks/pricing_coverage.py capture \
  --mode default --models fixture_encoder --optim adamw-loop >> "$logs" 2>&1 && cp "$work/adamw_loop.sqlite" "$out/"
step "done"
grep -i "skipped\|failed\|error\|captured" "$logs" | tail -20
ls -la "$out"
