"""Collectives sized in exports without NCCL's payloads, on real two-rank captures made with
this pyprof (tests/data/bare_exports: two H100s, torch 2.11, NCCL 2.28.9, nsys 2025.3.1;
benchmarks/collectives_capture.sh with NAME=coll ARGS="--bucket-mb 1 --steps 3" and NAME=ddp_groups
SCRIPT=examples/ddp_groups.py ARGS="--steps 6"). NAME_{0,1} is nsys's default export (no
payloads: what `nsys profile --export sqlite` writes), NAME_blobs_{0,1} the same report exported
with --include-blobs, where NCCL's own payloads size every kernel: the truth each sized kernel of
the bare export is held to. DDP's bucket all-reduces are sized from DDP's module marker
(parse/ddp_buckets.py), batch_isend_irecv from its own marker (nvtx/distributed.py)."""
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from captures import unpacked
from pyprof.prof.comms.collectives import ALLREDUCE, SENDRECV, of_record

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "bare_exports"


def _parse(paths, out):
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", *map(str, paths), "-o", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _nccl(recs):
    """(rank, correlation id) -> (record, its collective) of every NCCL kernel."""
    return {(r.get("rank"), r["correlationId"]): (r, c) for r in recs for c in [of_record(r)] if c is not None}


_PARSED = {}


def _twins(name, tmp_path_factory):
    """(name, bare export's NCCL kernels, blobs export's, DDP's own bucket sizes), parsed once."""
    if name in _PARSED:
        return _PARSED[name]
    folder = tmp_path_factory.mktemp(name)
    bare = [unpacked(DATA / f"{name}_{r}.sqlite.xz", folder) for r in (0, 1)]
    blobs = [unpacked(DATA / f"{name}_blobs_{r}.sqlite.xz", folder) for r in (0, 1)]
    truth = json.loads((DATA / f"{name}_truth.json").read_text())
    _PARSED[name] = name, _nccl(_parse(bare, folder / "bare.dict")), _nccl(_parse(blobs, folder / "blobs.dict")), truth
    return _PARSED[name]


@pytest.fixture(scope="module", params=["coll", "ddp_groups"])
def twins(request, tmp_path_factory):
    return _twins(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def coll(tmp_path_factory):
    return _twins("coll", tmp_path_factory)


@pytest.fixture(scope="module")
def ddp_groups(tmp_path_factory):
    return _twins("ddp_groups", tmp_path_factory)


def test_what_the_bare_export_sizes_is_what_nccl_s_payloads_said(twins):
    _, bare, blobs, _ = twins
    assert bare.keys() == blobs.keys()
    sized = [k for k, (_, c) in bare.items() if c.size is not None]
    assert sized
    for k in sized:
        (r, c), (_, truth) = bare[k], blobs[k]
        assert (c.kind, c.size, c.ranks) == (truth.kind, truth.size, truth.ranks), r["kShortName"]
        assert c.busbw(r["kDuration"]) == pytest.approx(truth.busbw(r["kDuration"]))


def test_coll_every_nccl_kernel_has_bytes_and_bus_bandwidth_without_payloads(coll):
    """examples/collectives.py warms its DDP up before the capture: all 72 kernels are sized."""
    _, bare, _, truth = coll
    assert len(bare) == 72
    assert all(c.size is not None and c.busbw(r["kDuration"]) is not None for r, c in bare.values())
    # Its three DDP buckets, all-reduced in each of the 3 captured steps on each rank, in launch order.
    for rank in (0, 1):
        buckets = [c.size for (rk, _), (r, c) in sorted(bare.items()) if rk == rank and c.kind == ALLREDUCE
                   and r["op"] is None]
        assert buckets == truth[rank]["bucket_bytes"] * 3
    batches = [c for r, c in bare.values() if r["op"] == "batch_isend_irecv"]
    assert len(batches) == 6 and {(c.kind, c.size) for c in batches} == {(SENDRECV, 2 * 3000 * 4)}  # a send and a receive of 3000 float32


def test_ddp_groups_unsized_kernels_are_those_no_marker_can_say(ddp_groups):
    """DDP `late` is built inside the capture: its reducer rebuilds its buckets in its second
    forward and logs them in its third, so the marker gives them from the fourth step on, and
    the first three steps' all-reduces (1 initial bucket, then 4 and 4) stay unsized. DDP's
    other C++ collectives (its construction's parameter broadcast and shape check, `early`'s
    BatchNorm buffer broadcast at each forward) have no marker and no layout: unsized too."""
    _, bare, blobs, truth = ddp_groups
    unsized = [(blobs[k][1].kind, blobs[k][1].size) for k, (_, c) in sorted(bare.items()) if c.size is None]
    allreduces = sorted(s for kind, s in unsized if kind == ALLREDUCE)
    late = truth[0]["late_bucket_bytes"]
    assert allreduces == sorted(([sum(late)] + late + late) * 2)
    assert {kind for kind, _ in unsized} == {ALLREDUCE, "Broadcast", "AllGather"}
    assert (len(bare), len(unsized)) == (148, 52)


def _with_coalesced_markers(src, dst):
    """`src` with a `_broadcast_coalesced` marker around each forward of DDP `early` (the one with
    a BatchNorm), as pyprof.init() now writes one around DDP's buffer broadcast: its float32
    running statistics (2 x 1024 x 4 B), then its int64 num_batches_tracked. The capture predates
    that marker; its broadcasts' launches and NCCL's payloads in the blobs twin are real."""
    shutil.copy(src, dst)
    db = sqlite3.connect(dst)
    marker = json.dumps({"v": 1, "kind": "op", "mod": "torch.distributed", "op": "_broadcast_coalesced", "args": [],
                         "kwargs": {"bucketBytes": [8192, 8], "src": 0},
                         "dist": {"rank": 0, "world": 2, "group": "1", "groupRank": 0, "groupSize": 2}},
                        separators=(",", ":"))
    new = db.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (new, marker))
    forwards = db.execute("SELECT n.start, n.end, n.globalTid, n.eventType, n.domainId FROM NVTX_EVENTS n "
                          "JOIN StringIds s ON s.id = n.textId WHERE s.value LIKE ?",
                          ('%"cls":"DistributedDataParallel"%"group":"1"%',)).fetchall()
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, globalTid, eventType, domainId, textId) VALUES (?, ?, ?, ?, ?, ?)",
                   [(start + 1, end - 1, tid, kind, dom, new) for start, end, tid, kind, dom in forwards])
    db.commit()
    db.close()
    return dst, len(forwards)


def test_ddp_s_buffer_broadcasts_are_sized_from_the_coalesced_marker(tmp_path):
    bare = unpacked(DATA / "ddp_groups_0.sqlite.xz", tmp_path)
    blobs = unpacked(DATA / "ddp_groups_blobs_0.sqlite.xz", tmp_path)
    marked, calls = _with_coalesced_markers(bare, tmp_path / "marked_0.sqlite")
    got = _nccl(_parse([marked], tmp_path / "marked.dict"))
    truth = _nccl(_parse([blobs], tmp_path / "blobs.dict"))
    inside = [(got[k][1].size, truth[k][1].size) for k in sorted(got)
              if got[k][1].kind == "Broadcast" and got[k][0]["module"] == "DistributedDataParallel"
              and got[k][1].size is not None]
    assert calls == 6 and inside == [(8192, 8192), (8, 8)] * 6


def test_an_export_cut_into_windows_sizes_ddp_s_collectives_as_one_parse_does(tmp_path):
    """The DDP calls are read once for the whole export (zones.survey) and handed to every
    window's worker: rank 0's export (159 kernels) cut for 3 workers gives the bytes of one parse."""
    bare = unpacked(DATA / "coll_0.sqlite.xz", tmp_path)
    code = ("from pyprof.errors import run_cli; from pyprof.parse import parallel; "
            "from pyprof.parse.__main__ import main; parallel.MIN_WINDOW = 50; run_cli('pyprof.parse', main)")
    for jobs, out in (("1", "whole.dict"), ("3", "windows.dict")):
        res = subprocess.run([sys.executable, "-c", code, str(bare), "-j", jobs, "-q", "-o", str(tmp_path / out)],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert res.returncode == 0, res.stderr
    whole = (tmp_path / "whole.dict").read_text()
    assert (tmp_path / "windows.dict").read_text() == whole
    assert whole.count('"comm":null') == 9  # the DDP's 3 buckets in each of the 3 steps
