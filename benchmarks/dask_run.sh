#!/usr/bin/env bash
# Issue 32's Dask goal on a 32-core device kind (nvidia-h100-x2 / nvidia-h200-x2): 64 synthetic
# rank exports of 100k kernels parsed with `parse --dask` on a running LocalCluster of 32
# single-threaded worker processes, against the largest export parsed alone (-j 1), its bytes
# against -j 32's; then once more with the LocalCluster started by the parse itself.
# The device has no dask: its wheels travel in .whl (pip download ... --python-version 3.12:
# dask, distributed, partd, locket, tblib, zict, tornado; and sqlalchemy, which parse needs).
#   bash benchmarks/dask_run.sh        # carry: [".whl"]; writes $OUT/dask.txt, and -v's per-part
#                                      # times of -j 32 and --dask in $OUT/running/, $OUT/own/
# PARSE_OUT: where the parses write their records (default the work folder; /dev/shm/... takes the
# machine's disk out of the ratio: 64 parts write 7 GB and the output is a copy of them).
# lscpu first: whether the 32 CPUs are 32 cores or 16 with two hyperthreads each. The last run's
# --together (the 32 largest exports, each by a -j 1 process of its own, all at once) is the floor:
# with 64 exports on 32 workers, 2x that time.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"; work=/tmp/pyprof-dask; parse_out=${PARSE_OUT:-$work}; mkdir -p "$parse_out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
exec > >(tee -a "$out/dask.txt") 2>&1
date -u; lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|L3 cache)'
echo "$(nproc) CPUs; records written under $parse_out ($(df --output=fstype "$parse_out" | tail -1))"; python3 -c 'import dask, distributed; print("dask", dask.__version__, "distributed", distributed.__version__)'
timeout 150 python3 benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --gen-procs "$(nproc)" --work "$work" --gen-only
# A script file, not stdin: the cluster's worker processes start by importing the main module.
cat > /tmp/cluster.py <<'PY'
import time
from distributed import LocalCluster
if __name__ == "__main__":
    with LocalCluster(n_workers=32, threads_per_worker=1, processes=True, scheduler_port=8786, dashboard_address=None):
        open("/tmp/cluster-ready", "w").close()
        time.sleep(400)
PY
python3 /tmp/cluster.py &
cluster=$!
for _ in $(seq 120); do [ -f /tmp/cluster-ready ] && break; sleep 0.5; done
echo "cluster up: $([ -f /tmp/cluster-ready ] && echo yes || echo no)"
timeout 150 python3 benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --jobs 32 --work "$work" \
  --out "$parse_out" --dask --dask-at tcp://127.0.0.1:8786 --notes "$out/running"
kill "$cluster" 2>/dev/null; wait "$cluster" 2>/dev/null
timeout 150 python3 benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --jobs 32 --work "$work" \
  --out "$parse_out" --dask --together --notes "$out/own"
date -u
