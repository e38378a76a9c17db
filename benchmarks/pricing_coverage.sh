#!/usr/bin/env bash
# benchmarks/pricing_coverage.py's GPU stage in one command (the device tool's machine; the kit of
# ../shared/device carried, its path in KIT, default .devkit). Most important first, each step
# under its own time limit and writing to $OUT as it goes, so that a slow step costs only itself:
#   1. every model captured under nsys with pyprof.init() in one process, parsed to
#      coverage.jsonl.xz, FlopCounterMode's totals in flops.json
#   2. the test fixtures, in fixtures.tar: fixture_lstm.sqlite, fixture_encoder.sqlite (training
#      and the eval fast path), fixture_plain.sqlite (no pyprof.init(): emit_nvtx ranges alone),
#      and Nsight Compute counters of the fixture LSTM step (fixture_lstm_ncu.csv)
#   3. the table of step 1 (table.txt)
#   4. a few models captured without pyprof.init() (plain.jsonl.xz, plain_flops.json)
# usage (repo root, on the GPU machine): bash benchmarks/pricing_coverage.sh [models]
# Results go to $OUT (or ./gpu-out): 7 files (the device tool brings back at most 8).
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
logs=$out/log.txt
. "$(dirname "$0")"/device_kit.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$logs"
models=${1:-}
work=$(mktemp -d)
fix=$work/fixtures; mkdir -p "$fix"
step() { echo "== $(date +%T) $*" | tee -a "$logs"; }

# nsys-capture.sh NAME; the export lands in $work as NAME.sqlite (decompressed when it was xz'd).
capture() {
  local name=$1 limit=$2; shift 2
  OUT=$work timeout "$limit" bash "$kit"/nsys-capture.sh "$name" -- python3 benchmarks/pricing_coverage.py capture "$@" \
    >> "$logs" 2>&1 || echo "capture $name failed or timed out" | tee -a "$logs"
  [ -f "$work/$name.sqlite.xz" ] && xz -d "$work/$name.sqlite.xz"
  [ -f "$work/$name.sqlite" ]
}

step "1 capture all models"
if capture coverage 200 --flops "$out/flops.json" --model-timeout 40 --budget 110 ${models:+--models "$models"}; then
  timeout 60 python3 -m pyprof.parse "$work/coverage.sqlite" 2>> "$logs" | xz -T0 > "$out/coverage.jsonl.xz"
fi

step "2 fixtures"
capture fixture_lstm 45 --models fixture_lstm --model-timeout 30 && cp "$work/fixture_lstm.sqlite" "$fix/"
capture fixture_encoder 45 --models fixture_encoder,fixture_encoder_eval --model-timeout 30 \
  && cp "$work/fixture_encoder.sqlite" "$fix/"
capture fixture_plain 45 --plain --models fixture_encoder,fixture_lstm --model-timeout 30 \
  && cp "$work/fixture_plain.sqlite" "$fix/"
step "2b ncu fixture_lstm"
timeout 90 "$ncu" --profile-from-start off --metrics "$RNN_METRICS" --csv \
  python3 benchmarks/pricing_coverage.py capture --models fixture_lstm > "$fix/fixture_lstm_ncu.csv" 2>> "$logs" \
  || echo "ncu failed or timed out" | tee -a "$logs"
(cd "$fix" && ls -la && tar cf "$out/fixtures.tar" .)

step "3 table"
[ -s "$out/coverage.jsonl.xz" ] && timeout 40 python3 benchmarks/pricing_coverage.py table "$out/coverage.jsonl.xz" \
  "$out/flops.json" --missing 4 > "$out/table.txt" 2>> "$logs"
cat "$out/table.txt" 2>/dev/null | head -45

step "4 plain captures"
if capture plain 80 --plain --flops "$out/plain_flops.json" --model-timeout 30 --budget 35 \
    --models transformer_encoder,llama_block,resnet50,lstm,unet; then
  timeout 40 python3 -m pyprof.parse "$work/plain.sqlite" 2>> "$logs" | xz -T0 > "$out/plain.jsonl.xz"
fi
step "done"
grep -i "skipped\|failed\|error\|captured" "$logs" | tail -20
ls -la "$out"
