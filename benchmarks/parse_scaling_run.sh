#!/usr/bin/env bash
# Issue 12's two parse-scaling goals on one 16-core machine (device kind nvidia-h100-x1), in one
# run, each step under its own time limit, everything written to $OUT/scaling.txt as it comes:
#   1. one export of HUGE (10M) kernels: -j JOBS, then -j 1 for at most SINGLE_S seconds (when
#      its first record came, its rate, and whether its bytes begin -j JOBS's output)
#   2. RANKS (64) exports of KERNELS (100k) kernels: -j JOBS against the largest alone, and JOBS
#      exports parsed by JOBS separate processes at once (the machine's own slowdown)
#   3. one export of 1M kernels: -j JOBS against -j 1 in full, SHA-256 of both outputs
# Exports are generated on the machine's disk (WORK), outputs written to a RAM disk (RAM).
# usage (repo root; PYTHONPATH must reach pyprof and SQLAlchemy): bash benchmarks/parse_scaling_run.sh
# Small sizes for a CPU check: HUGE=300000 RANKS=4 KERNELS=5000 JOBS=2 SINGLE_S=5 ONE=200000 BASE=10000
set -uo pipefail
out=${OUT:-scaling-out}; mkdir -p "$out"; log=$out/scaling.txt
work=${WORK:-/tmp/pyprof-scale}; ram=${RAM:-/dev/shm/pyprof-scale}
jobs=${JOBS:-16}; huge=${HUGE:-10000000}; ranks=${RANKS:-64}; kernels=${KERNELS:-100000}
one=${ONE:-1000000}; base=${BASE:-10000}; single_s=${SINGLE_S:-45}
export PYTHONUNBUFFERED=1
mkdir -p "$work" "$ram"
{ date -u; echo "cpus $(nproc)"; lscpu | grep -E '^(Model name|Socket|Core|Thread|CPU max MHz|L3)'
  free -g | head -2; df -h "$work" "$ram" | tail -2; python3 --version; } >> "$log" 2>&1
step() {
  local limit=$1; shift
  echo "== $(date -u +%T) (limit ${limit} s): ${*:2}" >> "$log"
  timeout "$limit" python3 benchmarks/parse_parallel.py "$@" >> "$log" 2>&1 || echo "-> exit $?" >> "$log"
}
step "${GEN_S:-70}" huge --kernels "$huge" --base "$base" --single "$one" --work "$work" --gen-only
step "${HUGE_S:-130}" huge --kernels "$huge" --base "$base" --jobs "$jobs" --single-limit "$single_s" --work "$work" --out "$ram"
rm -rf "$ram"/* "$work/workload-$huge.sqlite"
step "${GEN_RANKS_S:-40}" ranks --ranks "$ranks" --kernels "$kernels" --gen-procs "$(nproc)" --work "$work" --gen-only
step "${RANKS_S:-45}" ranks --ranks "$ranks" --kernels "$kernels" --jobs "$jobs" --together --work "$work" --out "$ram"
step "${ONE_S:-45}" huge --kernels "$one" --base "$base" --jobs "$jobs" --single-full --work "$work" --out "$ram"
echo "== done $(date -u +%T)" >> "$log"
