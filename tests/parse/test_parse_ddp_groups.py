"""DDP's bucket all-reduces get their group size, on a real two-rank capture:
examples/ddp_groups.py under pyprof.init() on two H100s (benchmarks/collectives_capture.sh with
NAME=ddp_groups SCRIPT=examples/ddp_groups.py ARGS=: torch 2.11, NCCL 2.28.9, nsys 2025.3.1, exported
with --include-blobs). Three communicators, each sized by another source (parse/nccl.py,
comm_sizes): DDP `early`'s (made before the capture; only DDP's module marker, around the
BatchNorm buffer broadcast of its forward, says its size), DDP `late`'s (made inside the capture:
NCCL's ncclCommInitRankConfig payload says it) and the default group's (pyprof's markers of
broadcast and all_to_all_single). ddp_groups_truth.json holds DDP's own bucket sizes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from captures import unpacked
from pyprof.parse.export import Export
from pyprof.parse.nccl import Schemas, comm_sizes
from pyprof.prof.comms.collectives import ALLREDUCE, of_record
from pyprof.prof.comms.passes import Comms

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TRUTH = json.loads((DATA / "ddp_groups_truth.json").read_text())
EARLY, LATE, DEFAULT = "a3e8b06de9f1cd5e", "939c1881841eaa9b", "af1549d3b9507da6"


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp_groups")
    return [unpacked(DATA / f"ddp_groups_blobs_{r}.sqlite.xz", folder) for r in (0, 1)]


@pytest.fixture(scope="module")
def recs(exports, tmp_path_factory):
    out = tmp_path_factory.mktemp("parsed") / "job.dict"
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", *exports, "-o", out], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def nccl_kernels(recs, rank=None):
    return [r for r in recs if of_record(r) is not None and (rank is None or r["rank"] == rank)]


def test_every_nccl_kernel_has_bytes_and_bus_bandwidth(recs):
    kernels = nccl_kernels(recs)
    assert len(kernels) == 52
    assert sum(of_record(r).size is not None and of_record(r).busbw(r["kDuration"]) is not None
               for r in kernels) == 52


def test_each_communicator_has_its_size_from_its_own_source(exports, recs):
    for path in exports:
        with Export(str(path)) as exp:
            assert comm_sizes(exp) == {EARLY: 2, LATE: 2, DEFAULT: 2}
            schemas = Schemas(exp)
            created = [schemas.comm_size(dom, blob) for dom, blob in exp.rows(
                "SELECT n.domainId, n.binaryData FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
                "WHERE s.value LIKE 'ncclComm%' AND n.binaryData IS NOT NULL")]
        assert created == [(2, LATE)]   # only `late`'s communicator was made inside the capture
    # No op marker encloses a call on `early`'s communicator: its size came from DDP's module marker.
    early = [r for r in nccl_kernels(recs) if r["nccl"][0]["comm"] == EARLY]
    assert len(early) == 16 and all(r["marker"] is None for r in early)
    assert {r["module"] for r in early if r["dir"] == "fprop"} == {"DistributedDataParallel"}


def test_ddp_buckets_carry_ddps_own_bytes_and_their_communicators_size(recs):
    for truth in TRUTH:
        buckets = [(r["nccl"][0]["comm"], r["nccl"][0]["bytes"], r["nccl"][0]["ranks"])
                   for r in nccl_kernels(recs, truth["rank"]) if r["dir"] == "bprop"]
        early = [(EARLY, b, 2) for b in truth["early_bucket_bytes"]]
        late = [(LATE, b, 2) for b in truth["late_bucket_bytes"]]
        # Step 1: `late`'s first backward runs one bucket of all its parameters (DDP rebuilds its
        # buckets after it); step 2: the rebuilt ones.
        assert buckets == early + [(LATE, sum(truth["late_bucket_bytes"]), 2)] + early + late
    first = next(r for r in nccl_kernels(recs, 0) if r["dir"] == "bprop")
    coll = of_record(first)
    assert (coll.kind, coll.size, coll.ranks, first["kDuration"]) == (ALLREDUCE, 6297600, 2, 44065)
    assert coll.busbw(first["kDuration"]) == pytest.approx(6297600 / 44065 * 2 * (2 - 1) / 2)


def test_stragglers_give_every_instance_its_transfer_and_bus_bandwidth(recs):
    comms = Comms()
    for r in recs:
        comms.add(r)
    rows = comms.report()["instances"]
    assert len(rows) == 26 and not comms.unsized
    assert all(row["ranks"] == 2 and None not in (row["size"], row["transfer_ns"], row["busbw"]) for row in rows)
    assert [row["index"] for row in rows if row["kind"] == "Send 0->1"] == [0, 1]
