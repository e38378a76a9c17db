#!/usr/bin/env bash
# Everything issue 12 needs from a two-GPU machine (device kind nvidia-h200-x2), in one run:
#   - DDP and FSDP2 steps of examples/distributed.py (examples/gpt.py's model) on the two GPUs,
#     one nsys SQLite export per rank, xz-compressed (tests/data/ddp_*.sqlite.xz, fsdp_*)
#   - benchmarks/parse_parallel.py: 64 rank exports of 100k kernels (-j 16 and -j 32), and one
#     export of 10M kernels (-j 16), with the 1M-kernel export parsed by one process and by 16
#     (synthetic exports generated there, in RAM, while the GPUs capture)
# usage (repo root, on the GPU machine, the device kit carried as KIT, default .devkit):
#   bash benchmarks/multigpu_run.sh
# Results go to $OUT (or ./gpu-out): the compressed exports, bench.txt, logs.txt.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
kit=${KIT:-.devkit}
logs=$out/logs.txt; bench=$out/bench.txt
work=${WORK:-/dev/shm/pyprof-mg}; mkdir -p "$work" /tmp/cap
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# NVLink multicast stays off (the machine's rule), also for the programs torchrun starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'; } | tee -a "$logs"

# Synthetic exports for the benchmarks, generated while the GPUs capture.
( timeout 200 python3 benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --gen-procs 24 --work "$work" --gen-only ) > "$work/gen_ranks.log" 2>&1 &
( timeout 200 python3 benchmarks/parse_parallel.py huge --kernels 10000000 --single 1000000 --work "$work" --gen-only ) > "$work/gen_huge.log" 2>&1 &

# nsys as .devkit/nsys-capture.sh finds and equips it.
if [ ! -d /opt/devkit-dw ]; then for deb in "$kit"/libdw1_*.deb "$kit"/libelf1_*.deb; do dpkg -x "$deb" /opt/devkit-dw; done; fi
export LD_LIBRARY_PATH=/opt/devkit-dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nsys=$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)
"$nsys" --version | tee -a "$logs"
for mode in ddp fsdp; do
  echo "== capture $mode" | tee -a "$logs"
  timeout 100 torchrun --nproc-per-node 2 --no-python "$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none \
    -c cudaProfilerApi --capture-range-end=stop -f true --export sqlite -o "/tmp/cap/${mode}_%q{RANK}" \
    python3 examples/distributed.py --mode "$mode" >> "$logs" 2>&1 || echo "capture $mode failed: $?" | tee -a "$logs"
done
for f in /tmp/cap/*.sqlite; do xz -T4 -c "$f" > "$out/$(basename "$f").xz"; done
ls -la /tmp/cap "$out" | tee -a "$logs"
[ -f "${DIAG:-}" ] && timeout 60 python3 "$DIAG" /tmp/cap >> "$logs" 2>&1

wait
cat "$work"/gen_*.log | tee -a "$bench"
timeout 90 python3 benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --jobs 16 --work "$work" 2>&1 | tee -a "$bench"
timeout 45 python3 benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --jobs 32 --work "$work" 2>&1 | tee -a "$bench"
timeout 120 python3 benchmarks/parse_parallel.py huge --kernels 10000000 --jobs 16 --single 1000000 --work "$work" 2>&1 | tee -a "$bench"
ls -la "$out"
