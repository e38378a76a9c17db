#!/usr/bin/env bash
# Issue 12's goal G2 in one run on a 16-core machine (device kind nvidia-h100-x1): one export of
# HUGE (10M) kernels generated, then `-j JOBS` and `-j 1` started together on it, `-j 1` stopped
# at TIMES (8) x the `-j JOBS` time (+ MARGIN s): if it is still running then, -j JOBS is at least
# TIMES x faster and the records -j 1 wrote are compared with the start of -j JOBS's output;
# if it finishes, the ratio and both SHA-256 (benchmarks/parse_parallel.py race()).
# Output in $OUT/g2.txt as it comes. Export on WORK, outputs on the RAM disk RAM.
# DEADLINE (s after this script starts, default 540): -j 1 is stopped then at the latest, with
# time left to compare and report before the device call's limit.
# usage (repo root; PYTHONPATH must reach pyprof): bash benchmarks/parse_g2_run.sh
# APART=1: -j 1 starts when -j JOBS has finished, so each runs alone (its limit counts from its start).
# Small sizes for a CPU check: HUGE=300000 JOBS=2 TIMES=8
set -uo pipefail
out=${OUT:-g2-out}; mkdir -p "$out"; log=$out/g2.txt
work=${WORK:-/tmp/pyprof-scale}; ram=${RAM:-/dev/shm/pyprof-scale}
jobs=${JOBS:-16}; huge=${HUGE:-10000000}; base=${BASE:-10000}; times=${TIMES:-8}; margin=${MARGIN:-1}; deadline=${DEADLINE:-540}
export PYTHONUNBUFFERED=1
mkdir -p "$work" "$ram"
{ date -u; echo "cpus $(nproc)"; lscpu | grep -E '^(Model name|Core|Thread|L3)'; free -g | head -2
  python3 --version; } >> "$log" 2>&1
step() {
  local limit=$1; shift
  echo "== $(date -u +%T) (limit ${limit} s): $*" >> "$log"
  timeout "$limit" python3 benchmarks/parse_parallel.py "$@" >> "$log" 2>&1 || echo "-> exit $?" >> "$log"
}
step "${GEN_S:-80}" huge --kernels "$huge" --base "$base" --work "$work" --gen-only
left=$((deadline - SECONDS))
step "$((left + 10))" huge --kernels "$huge" --base "$base" --jobs "$jobs" --race "$times" --margin "$margin" ${APART:+--apart} \
  --until "$((left - 3))" --work "$work" --out "$ram"
echo "== done $(date -u +%T)" >> "$log"
