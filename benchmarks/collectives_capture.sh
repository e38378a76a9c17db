#!/usr/bin/env bash
# The two-rank captures behind tests/data/coll_*.sqlite.xz and ddp_groups_*.sqlite.xz (issue 32),
# on a two-GPU device kind (nvidia-h100-x2 / nvidia-h200-x2), the device kit carried as KIT
# (default .devkit):
#   bash benchmarks/collectives_capture.sh                                   # coll_*
#   NAME=ddp_groups SCRIPT=examples/ddp_groups.py ARGS= bash benchmarks/collectives_capture.sh
# writes $OUT/NAME_{0,1}.sqlite.xz (nsys's default export), $OUT/NAME_blobs_{0,1}.sqlite.xz (the
# same reports exported with --include-blobs: NVTX extended payloads, NCCL's message sizes among
# them), $OUT/NAME_truth_{0,1}.json (DDP's own bucket sizes) and $OUT/log.txt (versions, the
# payloads seen, pyprof's views of the capture).
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"; kit=${KIT:-.devkit}; work=/tmp/coll; mkdir -p "$work"
name=${NAME:-coll}; script=${SCRIPT:-examples/collectives.py}; args=${ARGS---bucket-mb ${BUCKET_MB:-1}}
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ ! -d /opt/devkit-dw ]; then for deb in "$kit"/libdw1_*.deb "$kit"/libelf1_*.deb; do dpkg -x "$deb" /opt/devkit-dw; done; fi
export LD_LIBRARY_PATH=/opt/devkit-dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nsys=$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)
exec > >(tee -a "$out/log.txt") 2>&1
date -u; "$nsys" --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
timeout "${CAPTURE_S:-300}" torchrun --nproc-per-node 2 --no-python "$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none \
  -c cudaProfilerApi --capture-range-end=stop -f true --export sqlite -o "$work/${name}_%q{RANK}" \
  python3 "$script" $args --truth "$out/${name}_truth_%r.json"
# NCCL's own NVTX ranges carry their message size as an extended payload, exported only on request.
for r in 0 1; do
  "$nsys" export --type sqlite --include-blobs=true -f true -o "$work/${name}_blobs_$r.sqlite" "$work/${name}_$r.nsys-rep" >/dev/null
  xz -T0 -9 -c "$work/${name}_blobs_$r.sqlite" > "$out/${name}_blobs_$r.sqlite.xz"
done
python3 - "$work/${name}_blobs_0.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for row in db.execute("SELECT s.value, n.domainId, hex(n.binaryData), n.uint64Value FROM NVTX_EVENTS n "
                      "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.binaryData IS NOT NULL "
                      "ORDER BY s.value LIKE 'ncclComm%' DESC LIMIT 16"):
    print(row)
for row in db.execute("SELECT * FROM NVTX_PAYLOAD_SCHEMAS"):
    print(row)
for row in db.execute("SELECT * FROM NVTX_PAYLOAD_SCHEMA_ENTRIES"):
    print(row)
PY
echo "== NCCL ranges and payload columns in the export"
python3 - "$work/${name}_0.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
q = ("SELECT coalesce(n.text, s.value), count(*), count(n.binaryData), count(n.jsonText), count(n.uint64Value), "
     "count(n.int64Value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
     "WHERE n.domainId IN (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'NCCL') GROUP BY 1")
for row in db.execute(q):
    print(row)
for t in ("NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES"):
    print(t, db.execute(f"SELECT count(*) FROM {t}").fetchone())
print([r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE '%NVTX%'")])
PY
for r in 0 1; do
  python3 -m pyprof.parse "$work/${name}_$r.sqlite" -o "$work/${name}_$r.dict"
  xz -T0 -9 -c "$work/${name}_$r.sqlite" > "$out/${name}_$r.sqlite.xz"
  ls -la "$work/${name}_$r".*
done
for kind in "" _blobs; do
  python3 -m pyprof.parse "$work/${name}${kind}_0.sqlite" "$work/${name}${kind}_1.sqlite" -o "$work/${name}${kind}.dict"
  python3 -c 'import sys; from pyprof.parse.export import Export; from pyprof.parse.nccl import comm_sizes
for p in sys.argv[1:]:
    with Export(p) as exp: print(p, "communicator sizes", comm_sizes(exp))' "$work/${name}${kind}"_[01].sqlite
  python3 -m pyprof.prof -c rank,op,kernel,coll,collbytes,ranks,busbw "$work/${name}${kind}.dict" | grep -i nccl
  python3 -m pyprof.prof --stragglers "$work/${name}${kind}.dict"
done
cat "$out"/"${name}"_truth_*.json
