#!/usr/bin/env bash
# Compiled-model captures and measurements, in one GPU run (the device tool's machine; the kit of
# ../shared/device carried as .devkit):
#   gpt_compiled     examples/compiled.py --model gpt (torch.compile default mode)
#   gpt_graphs       ... --mode reduce-overhead, nsys --cuda-graph-trace=node (kernels of CUDA graphs)
#   gpt_graphs_graph ... the same with nsys's default graph-level tracing (what it leaves to know)
#   gpt_autotune     ... --mode max-autotune (Triton GEMM templates, CUDA graphs), --cuda-graph-trace=node
#   resnet_compiled  examples/compiled.py --model resnet
#   compile_time     GPT default mode, without and with pyprof.init(): first step (compilation
#                    included), recording time, step time; fresh Inductor/Triton caches each run
#   gpt_break, gpt_dynamic, gpt_graphed, gpt_callables
#                    examples/compiled_more.py --variant break / dynamic / graphed / callables
#                    (graph breaks + compiled AdamW; dynamic=True; torch.cuda.graph; make_graphed_callables)
#   compile_time3    the same three ways (no pyprof, pyprof.init() without the recorder, with it),
#                    each twice, interleaved
# usage (repo root, on the GPU machine): bash benchmarks/compiled_gpu.sh [step ...]
# Results go to $OUT (or ./gpu-out): the exports, compile_time.jsonl, logs.txt and NAME.log per capture.
# PARALLEL=1 runs the steps at once (captures only: concurrent runs would distort timings);
# CAPTURE_TIMEOUT (s) bounds each capture.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
steps=${*:-gpt_compiled gpt_graphs compile_time resnet_compiled gpt_graphs_graph}
logs=$out/logs.txt
[ -d /tmp/site/nvtx ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$logs"
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' | tee -a "$logs"

fresh() {  # a command with empty Inductor and Triton caches (compilation measured from scratch)
  TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) "$@"
}
capture() {  # name, nsys options ..., -- command ...
  local name=$1; shift
  local t0=$SECONDS
  fresh timeout "${CAPTURE_TIMEOUT:-150}" env OUT="$out" bash .devkit/nsys-capture.sh "$name" "$@" > "$out/$name.log" 2>&1 \
    || { echo "capture $name failed"; tail -20 "$out/$name.log"; }
  echo "== capture $name: $((SECONDS - t0)) s" >> "$logs"
}
step() {
  local s=$1
  case $s in
    gpt_compiled) capture gpt_compiled -- python3 examples/compiled.py --model gpt ;;
    gpt_graphs) capture gpt_graphs --cuda-graph-trace=node -- python3 examples/compiled.py --model gpt --mode reduce-overhead ;;
    gpt_graphs_graph) capture gpt_graphs_graph -- python3 examples/compiled.py --model gpt --mode reduce-overhead ;;
    gpt_autotune) CAPTURE_TIMEOUT=240 capture gpt_autotune --cuda-graph-trace=node -- python3 examples/compiled.py --model gpt --mode max-autotune ;;
    resnet_compiled) capture resnet_compiled -- python3 examples/compiled.py --model resnet ;;
    gpt_break|gpt_dynamic|gpt_graphed|gpt_callables)
      capture "$s" --cuda-graph-trace=node -- python3 examples/compiled_more.py --variant "${s#gpt_}" ;;
    compile_time)
      for flag in --no-pyprof ""; do
        fresh timeout 120 python3 examples/compiled.py --model gpt --time 50 $flag 2>&1 | grep '^{' | tee -a "$out/compile_time.jsonl"
      done ;;
    compile_time3)
      for rep in 1 2; do
        for flag in --no-pyprof --no-record ""; do
          fresh timeout 120 python3 examples/compiled.py --model gpt --time 100 $flag 2>&1 | grep '^{' | tee -a "$out/compile_time3.jsonl"
        done
      done ;;
  esac
}
# The kit unpacks the libraries nsys's importer needs on its first capture: once, before captures
# run at once (concurrent unpacking fails).
[ -d /opt/devkit-dw ] || for deb in .devkit/libdw1_*.deb .devkit/libelf1_*.deb; do dpkg -x "$deb" /opt/devkit-dw; done
for s in $steps; do
  if [ -n "${PARALLEL:-}" ]; then step "$s" & else step "$s"; fi
done
wait
ls -la "$out"
