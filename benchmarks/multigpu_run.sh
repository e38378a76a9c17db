#!/usr/bin/env bash
# What issue 12 needs from a two-GPU machine (device kind nvidia-h200-x2), in one run, each step
# under its own time limit and its results written to $OUT as soon as they exist:
#   1. DDP and FSDP2 steps of examples/data_parallel.py (examples/gpt.py's model) on the two GPUs,
#      one nsys SQLite export per rank, xz-compressed ($OUT/ddp_0.sqlite.xz, ..., fsdp_1...)
#   2. those exports parsed there (parse.txt: what pyprof.parse said)
#   3. benchmarks/parse_parallel.py ranks: 64 synthetic rank exports of 100k kernels, -j 16
#      against the largest alone (bench.txt), generated after the captures so as not to load
#      the CPUs the captured steps launch from
# usage (repo root, on the GPU machine, the device kit carried as KIT, default .devkit):
#   bash benchmarks/multigpu_run.sh
# DRY=1 runs the same steps without nsys (a CPU check of everything but the capture).
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
kit=${KIT:-.devkit}
logs=$out/logs.txt; bench=$out/bench.txt
work=${WORK:-/tmp/pyprof-mg}; cap=$work/cap; mkdir -p "$work" "$cap"
ranks=${RANKS:-64}; kernels=${KERNELS:-100000}; jobs=${JOBS:-16}
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# NVLink multicast stays off (the machine's rule), also for the programs torchrun starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, "gpus", torch.cuda.device_count(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'; } 2>&1 | tee -a "$logs"

if [ -n "${DRY:-}" ]; then
  profile=()
else
  # nsys as .devkit/nsys-capture.sh finds and equips it.
  if [ ! -d /opt/devkit-dw ]; then for deb in "$kit"/libdw1_*.deb "$kit"/libelf1_*.deb; do dpkg -x "$deb" /opt/devkit-dw; done; fi
  export LD_LIBRARY_PATH=/opt/devkit-dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nsys=$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)
  "$nsys" --version 2>&1 | tee -a "$logs"
  profile=("$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none -c cudaProfilerApi --capture-range-end=stop
           -f true --export sqlite)
fi
for mode in ddp fsdp; do
  echo "== capture $mode $(date -u +%T)" | tee -a "$logs"
  if [ -n "${DRY:-}" ]; then
    timeout "${CAPTURE_S:-80}" torchrun --nproc-per-node 2 examples/data_parallel.py --mode "$mode" --steps 2 \
      --layers 2 --dim 64 >> "$logs" 2>&1 || echo "capture $mode failed: $?" | tee -a "$logs"
    continue
  fi
  timeout "${CAPTURE_S:-80}" torchrun --nproc-per-node 2 --no-python "${profile[@]}" -o "$cap/${mode}_%q{RANK}" \
    python3 examples/data_parallel.py --mode "$mode" --steps 2 >> "$logs" 2>&1 || echo "capture $mode failed: $?" | tee -a "$logs"
  for f in "$cap/${mode}"_*.sqlite; do [ -f "$f" ] && xz -9 -T4 -c "$f" > "$out/$(basename "$f").xz"; done
  ls -la "$cap" "$out" >> "$logs"
  timeout 30 python3 -m pyprof.parse "$cap/${mode}"_*.sqlite -o "$work/$mode.dict" >> "$out/parse.txt" 2>&1 &&
    xz -T4 -c "$work/$mode.dict" > "$out/$mode.dict.xz"
done
echo "== bench $(date -u +%T)" | tee -a "$logs"
timeout "${GEN_S:-70}" python3 benchmarks/parse_parallel.py ranks --ranks "$ranks" --kernels "$kernels" \
  --gen-procs "$(nproc)" --work "$work" --gen-only 2>&1 | tee -a "$bench"
timeout "${BENCH_S:-80}" python3 benchmarks/parse_parallel.py ranks --ranks "$ranks" --kernels "$kernels" --jobs "$jobs" \
  --work "$work" 2>&1 | tee -a "$bench"
echo "== done $(date -u +%T)" | tee -a "$logs"
