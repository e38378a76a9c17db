#!/usr/bin/env bash
# The RNN formulas against Nsight Compute on the GPU machine (kit as for pricing_coverage.sh): each
# truth_* case of benchmarks/pricing_coverage.py captured once under nsys and once under ncu (the same
# kernels in the same order), both into $OUT/rnn_truth.tar; then, anywhere:
#   python -m pyprof.parse truth_lstm.sqlite > truth_lstm.jsonl
#   python benchmarks/pricing_coverage.py rnn-truth truth_lstm.jsonl truth_lstm_ncu.csv
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
logs=$out/rnn_truth_log.txt
. "$(dirname "$0")"/device_kit.sh
work=$(mktemp -d)
for case in ${1:-truth_gru truth_lstm}; do
  echo "== $(date +%T) $case" | tee -a "$logs"
  OUT=$work timeout 60 bash "$kit"/nsys-capture.sh "$case" -- python3 benchmarks/pricing_coverage.py capture --models "$case" \
    >> "$logs" 2>&1 || echo "nsys $case failed" | tee -a "$logs"
  timeout 150 "$ncu" --profile-from-start off --metrics "$RNN_METRICS" --csv \
    python3 benchmarks/pricing_coverage.py capture --models "$case" > "$work/${case}_ncu.csv" 2>> "$logs" \
    || echo "ncu $case failed or timed out" | tee -a "$logs"
  (cd "$work" && tar cf "$out/rnn_truth.tar" ./*.sqlite ./*_ncu.csv 2>/dev/null)
done
ls -la "$work" | tee -a "$logs"
