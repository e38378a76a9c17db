"""NCCL's own NVTX payloads (parse/nccl.py, prof/collectives.py) on a real two-rank capture:
examples/collectives.py under pyprof.init() on two H100s (benchmarks/collectives_capture.sh: torch
2.11, NCCL 2.28.9, nsys 2025.3.1): one DDP step of three gradient buckets (all-reduced by DDP's C++
reducer, no pyprof marker), then broadcast, all_to_all_single, send/recv, batch_isend_irecv,
reduce_scatter_tensor, all_gather_into_tensor, all_gather, reduce and all_reduce.
tests/data/coll_{0,1} are nsys's default export, coll_blobs_{0,1} the same reports exported with
--include-blobs; coll_truth.json holds DDP's own bucket sizes."""
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from captures import unpacked
from pyprof.parse import parallel, parse
from pyprof.parse.export import Export
from pyprof.parse.nccl import Groups, Schemas
from pyprof.parse.window import Window
from pyprof.prof.comms.collectives import (ALLREDUCE, NO_PAYLOADS, SENDRECV, from_marker, from_nccl_calls, of_record,
                                     size_warning)
from pyprof.prof.comms.passes import Comms

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TRUTH = json.loads((DATA / "coll_truth.json").read_text())
COMM = "932e7695e706a364"  # the default process group's communicator (NCCL's hash, the same on both ranks)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coll")
    return {name: [unpacked(DATA / f"{name}_{r}.sqlite.xz", folder) for r in (0, 1)] for name in ("coll", "coll_blobs")}


def parsed(exports, name, tmp_path_factory):
    out = tmp_path_factory.mktemp(name) / "job.dict"
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", *exports[name], "-o", out], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return out, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def blobs(exports, tmp_path_factory):
    return parsed(exports, "coll_blobs", tmp_path_factory)


@pytest.fixture(scope="module")
def plain(exports, tmp_path_factory):
    return parsed(exports, "coll", tmp_path_factory)


def nccl_kernels(recs, rank=None):
    return [r for r in recs if of_record(r) is not None and (rank is None or r["rank"] == rank)]


def test_ddp_bucket_all_reduces_carry_ddps_own_bucket_bytes_in_order(blobs):
    _, recs = blobs
    for truth in TRUTH:
        ddp = [r for r in nccl_kernels(recs, truth["rank"]) if r["marker"] is None and r["dir"] == "bprop"]
        assert [r["nccl"] for r in ddp] == [[{"call": "ncclAllReduce", "bytes": b, "comm": COMM, "ranks": 2}]
                                            for b in truth["bucket_bytes"]]
        assert [(c.kind, c.size, c.ranks, c.via) for c in map(of_record, ddp)] == [
            (ALLREDUCE, b, 2, "nccl") for b in truth["bucket_bytes"]]


def test_ddp_buckets_take_the_size_of_their_communicator_from_the_marked_collectives_on_it(blobs):
    """No marker encloses DDP's bucket all-reduces; the marked collectives of the default group
    ran on the same communicator and said its size (2): so their busbw is known, per kernel."""
    _, recs = blobs
    first = next(r for r in nccl_kernels(recs, 0) if r["marker"] is None and r["dir"] == "bprop")
    assert (first["kDuration"], first["nccl"][0]["bytes"]) == (31329, 2099200)
    assert of_record(first).busbw(first["kDuration"]) == pytest.approx(2099200 / 31329 * 2 * 1 / 2)
    # The p2p pair's own communicator taught nothing (a marker's group size is not its size).
    assert [r["nccl"] for r in nccl_kernels(recs) if r["marker"] and r["marker"]["op"] in ("send", "recv")] == [
        [{"call": "ncclSend", "bytes": 65536, "comm": "46e972d16d48837a"}],
        [{"call": "ncclRecv", "bytes": 65536, "comm": "46e972d16d48837a"}]]


@pytest.mark.parametrize("name, bus", [("coll_blobs", 24), ("coll", 16)])
def test_nccl_kernels_with_bus_bandwidth_per_capture(exports, tmp_path_factory, name, bus):
    """Of the 24 NCCL kernels, all have busbw with NCCL's payloads; without them, DDP's 6 bucket
    all-reduces and the 2 kernels of the send/receive batch have no size (nothing in the export
    says it), so no busbw."""
    _, recs = parsed(exports, name, tmp_path_factory)
    kernels = nccl_kernels(recs)
    assert (len(kernels), sum(of_record(r).busbw(r["kDuration"]) is not None for r in kernels)) == (24, bus)


def test_the_batch_of_a_send_and_a_receive_carries_both_messages(blobs):
    _, recs = blobs
    for rank in (0, 1):
        batch = [r for r in nccl_kernels(recs, rank) if r["marker"] is None and r["dir"] == "fprop"]
        assert len(batch) == 1 and batch[0]["ranges"] == ["NCCL:ncclGroupEnd"]
        assert batch[0]["nccl"] == [{"call": "ncclSend", "bytes": 12000, "comm": COMM, "ranks": 2},
                                    {"call": "ncclRecv", "bytes": 12000, "comm": COMM, "ranks": 2}]
        coll = of_record(batch[0])
        assert (coll.kind, coll.size, coll.busbw(batch[0]["kDuration"])) == (
            SENDRECV, 24000, 24000 / batch[0]["kDuration"])


def test_every_nccl_kernel_has_bytes_and_every_instance_bus_bandwidth_and_transfer(blobs):
    _, recs = blobs
    kernels = nccl_kernels(recs)
    assert len(kernels) == 24 and all("nccl" in r for r in kernels)
    assert all(of_record(r).size is not None and size_warning(r, of_record(r)) is None for r in kernels)
    comms = Comms()
    for r in recs:
        comms.add(r)
    rows = comms.report()["instances"]
    assert len(rows) == 12 and not comms.unsized
    assert all(row[k] is not None for row in rows for k in ("size", "transfer_ns", "busbw"))
    # The send and its receive are one instance: the receive was posted 235 us before the send
    # came; the transfer runs from the send's start to the first end after it, not the
    # receive's whole wait (it was one rank's instance each, 242.5 us for the receive).
    (p2p,) = [row for row in rows if row["kind"] == "Send 0->1"]
    send, recv = (next(r for r in kernels if r["marker"] and r["marker"]["op"] == op) for op in ("send", "recv"))
    assert (send["rank"], recv["rank"], p2p["ranks"], p2p["slowest"]) == (0, 1, 2, 0)
    assert p2p["transfer_ns"] == min(send["kEnd"], recv["kEnd"]) - send["kStart"] < 7_000 < recv["kDuration"]
    # The reduce's non-root rank ends before the root arrives (NCCL buffers what it sends): the
    # transfer is the root's, from the last arrival to its end.
    reduce = next(row for row in rows if row["kind"] == "Reduce")
    ends = {r["rank"]: r["kEnd"] for r in kernels if r["kShortName"].startswith("ncclDevKernel_Reduce_")}
    assert min(ends.values()) < reduce["last_ns"] and reduce["transfer_ns"] == max(ends.values()) - reduce["last_ns"]


def test_markers_and_nccls_payloads_give_the_same_size(blobs):
    """NCCL counts an all-gather's send buffer, a reduce-scatter's output, an all-to-all's
    message to one peer: S = n x that, as the marker's formula gives it."""
    _, recs = blobs
    marked = [r for r in nccl_kernels(recs) if r["marker"] is not None]
    assert len(marked) == 16
    for r in marked:
        coll = from_marker(r["marker"])
        assert from_nccl_calls(r["nccl"], coll.ranks)[:2] == (coll.kind, coll.size), r["marker"]["op"]


def test_without_blobs_marker_sizes_stay_and_the_rest_say_how_to_get_theirs(plain, blobs):
    out, recs = plain
    _, with_blobs = blobs
    kernels = nccl_kernels(recs)
    assert not any("nccl" in r for r in recs)
    sized = [r for r in kernels if of_record(r).size is not None]
    assert [(r["rank"], of_record(r).size) for r in sized] == [(r["rank"], of_record(r).size)
                                                               for r in nccl_kernels(with_blobs) if r["marker"]]
    unsized = [r for r in kernels if of_record(r).size is None]
    assert len(unsized) == 8 and {size_warning(r, of_record(r)) for r in unsized} == {NO_PAYLOADS}
    res = subprocess.run([sys.executable, "-m", "pyprof.prof", out, "--stragglers"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0
    assert res.stderr == ("pyprof.prof: warning: --stragglers: 8 NCCL kernels: collective size unknown: the export "
                          "has NCCL's ranges without their payloads (export the report with `nsys export --type "
                          "sqlite --include-blobs=true`)\n")
    res = subprocess.run([sys.executable, "-m", "pyprof.prof", out], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert res.stderr.splitlines()[1:] == [
        f"  {NO_PAYLOADS}: 8 kernels: AllReduce (6), SendRecv (2)", "  no op marker: 12 kernels: None.None (12)"]


def test_windows_cut_inside_a_group_give_the_same_bytes(exports, tmp_path):
    """A cut between a group's calls and its end, or just before the kernel launched at its end:
    the window carries the group (window.Seed.nccl) and is parsed again with it."""
    path = str(exports["coll_blobs"][0])
    parse(path, str(tmp_path / "one.dict"), quiet=True)
    with Export(path) as exp:
        starts = [s for (s,) in exp.rows("SELECT start FROM NVTX_EVENTS WHERE domainId = 2 AND start IS NOT NULL "
                                         "ORDER BY start")]
    edges = sorted({s + d for s in starts for d in (0, 1)})
    parts = [parallel.Part(i, path, 0, "", False, False, None, Window(a, b))
             for i, (a, b) in enumerate(zip([None, *edges], [*edges, None]))]
    result = parallel.run([parts], str(tmp_path / "w.dict"), 2)
    assert (tmp_path / "w.dict").read_bytes() == (tmp_path / "one.dict").read_bytes()
    assert result.reparsed > 0


def blob(schema, data, count=1, offset=32):
    return struct.pack("<QQQQ", count, schema, len(data), offset) + data


def test_odd_payloads_give_no_call_and_are_counted(exports):
    with Export(str(exports["coll_blobs"][0])) as exp:
        groups = Groups(exp)
    allreduce = 0x01000005  # its entries, as this export names them: communicator, size, reduction
    good = struct.pack("<QQI4x", 0x932E7695E706A364, 2099200, 0)
    assert groups.schemas.decode(2, blob(allreduce, good)) == (2099200, COMM)
    odd = [b"", "text", blob(allreduce, good)[:40], blob(allreduce, good, count=1 << 40), blob(allreduce, good[:12]),
           blob(allreduce, good, offset=1 << 62), blob(0x7777, good), blob(allreduce, good)[:31]]
    assert [groups.schemas.decode(2, b) for b in odd] == [None] * len(odd)
    assert groups.schemas.decode(3, blob(allreduce, good)) is None  # another domain's schema ids
    assert [groups.take(1, 2, "ncclAllReduce", b, True) for b in odd] == [None] * len(odd)
    assert groups.unknown == len(odd)


def test_groups_nest_and_an_end_without_its_start_gives_nothing(exports):
    with Export(str(exports["coll_blobs"][0])) as exp:
        groups = Groups(exp)
    send = blob(0x01000009, struct.pack("<QQi4x", 1, 100, 1))
    assert groups.take(7, 2, "ncclGroupEnd", None, True) is None  # the capture began inside a group
    take = [groups.take(7, 2, text, data, True) for text, data in [
        ("ncclGroupStart", None), ("ncclGroupStart", None), ("ncclSend", send), ("ncclGroupEnd", None),
        ("ncclGroupStart", None), ("ncclRecv", blob(0x0100000A, struct.pack("<QQi4x", 1, 50, 1))),
        ("ncclGroupEnd", None), ("ncclGroupEnd", None)]]
    assert [None if t is None else [(c.name, c.bytes) for c in t] for t in take] == [
        None, None, [("ncclSend", 100)], None, None, [("ncclRecv", 50)], None, [("ncclSend", 100), ("ncclRecv", 50)]]
    # An end an earlier window took in (inherited) still gives that group's calls.
    assert [c.bytes for c in groups.take(7, 2, "ncclGroupEnd", None, False)] == [100, 50]


def test_schemas_defined_twice_differently_are_not_read(tmp_path):
    import sqlite3

    db = tmp_path / "s.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId, schemaId, idx, flags, type, name, description, "
                "arrayOrUnionDetail, offset)")
    con.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, NULL, ?, ?, NULL, NULL, ?)", [
        (2, 5, 1, 22, "Message size [bytes]", 8), (2, 5, 1, 22, "Message size [bytes]", 16),
        (2, 6, 1, 22, "Message size [bytes]", 8), (2, 6, 1, 22, "Message size [bytes]", 8),
        (2, 7, 1, 19, "Message size [bytes]", 8), (2, 8, 1, 22, "Message size [bytes]", None)])
    con.commit()
    con.close()
    with Export(str(db)) as exp:
        schemas = Schemas(exp)
    data = struct.pack("<QQ", 1, 64)
    assert [schemas.decode(2, blob(s, data)) for s in (5, 6, 7, 8)] == [None, (64, None), None, None]


def test_communicator_sizes_from_nccls_creation_and_from_markers_around_calls(tmp_path):
    """comm_sizes: NCCL's communicator creation says its size (a split's payload says its
    parent's: not read); a marker with a group size says it for the collective calls it
    encloses (the innermost such marker; not a point-to-point call or marker, whose
    communicator is the two peers'); a communicator given two sizes gets none."""
    import sqlite3

    from pyprof.parse.nccl import comm_sizes

    db = tmp_path / "c.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId, schemaId, idx, flags, type, name, description, "
                "arrayOrUnionDetail, offset)")
    con.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (2, ?, ?, NULL, ?, ?, NULL, NULL, ?)", [
        (1, 0, 18, "NCCL communicator ID", None), (1, 1, 5, "No. of ranks", 8),                  # ncclCommInitRank
        (2, 0, 18, "NCCL communicator ID", None), (2, 1, 18, "Parent NCCL communicator ID", 8),
        (2, 2, 5, "No. of ranks", 16),                                                             # ncclCommSplit
        (3, 0, 18, "NCCL communicator ID", None), (3, 1, 22, "Message size [bytes]", 8)])         # a collective
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE NVTX_EVENTS (start, end, eventType, globalTid, domainId, text, textId, binaryData, "
                "int64Value)")

    def op(name, n):
        return ('{"v":1,"kind":"op","mod":"torch.distributed","op":"%s","args":[],"dist":{"rank":0,"world":8,'
                '"group":"g","groupRank":0,"groupSize":%d}}' % (name, n))

    module = ('{"v":1,"kind":"module","module":"DistributedDataParallel","cls":"DistributedDataParallel","repr":"",'
              '"dist":{"rank":0,"world":8,"group":"0","groupRank":0,"groupSize":8}}')
    con.execute("INSERT INTO StringIds VALUES (1, ?)", (module,))
    init = blob(1, struct.pack("<Qi4x", 0xA, 4))
    split = blob(2, struct.pack("<QQi4x", 0xB, 0xA, 4))

    def call(comm):
        return blob(3, struct.pack("<QQ", comm, 64))

    ranges = [  # start, end, text (or a StringIds id), payload
        (0, 10, "ncclCommInitRankConfig", init), (20, 30, "ncclCommSplit", split),
        (40, 60, op("all_reduce", 2), None), (45, 50, "ncclAllReduce", call(0xB)),     # B: 2
        (70, 90, op("send", 2), None), (75, 80, "ncclSend", call(0xC)),                # p2p marker: nothing
        (100, 120, op("all_reduce", 2), None), (105, 110, "ncclSend", call(0xC)),      # p2p call: nothing
        (130, 150, op("all_reduce", 2), None), (135, 140, "ncclAllReduce", call(0xD)),
        (160, 180, op("all_reduce", 4), None), (165, 170, "ncclAllReduce", call(0xD)),  # D: 2 and 4: none
        (200, 300, 1, None), (210, 220, "ncclBroadcast", call(0xE)),                    # E: the module's 8
        (230, 260, op("all_reduce", 2), None), (240, 250, "ncclAllReduce", call(0xF)),  # F: the innermost's 2
        (400, 410, "ncclAllReduce", call(0x1)),                                          # no marker: nothing
    ]
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 7, 2, ?, ?, ?, NULL)",
                    [(s, e, None if type(t) is int else t, t if type(t) is int else None, b) for s, e, t, b in ranges])
    con.commit()
    con.close()
    with Export(str(db)) as exp:
        assert comm_sizes(exp) == {f"{c:016x}": n for c, n in ((0xA, 4), (0xB, 2), (0xE, 8), (0xF, 2))}
