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


@pytest.fixture(scope="module", params=["coll", "ddp_groups", "ddp_groups_2steps", "ddp_groups_marked"])
def twins(request, tmp_path_factory):
    return _twins(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def coll(tmp_path_factory):
    return _twins("coll", tmp_path_factory)


@pytest.fixture(scope="module")
def ddp_groups(tmp_path_factory):
    return _twins("ddp_groups", tmp_path_factory)


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    return _twins("ddp_groups_2steps", tmp_path_factory)


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


def test_a_real_capture_with_this_version_s_markers_sizes_every_nccl_kernel(tmp_path_factory):
    """ddp_groups_marked: examples/ddp_groups.py --steps 6 captured on 2x H100 with this version's
    markers (DDP's construction check, first layout, rebuild and final layout, the coalesced
    broadcasts): all 148 NCCL kernels of the default export have bytes and bus bandwidth, each as
    NCCL's payloads said (test_what_the_bare_export_sizes_is_what_nccl_s_payloads_said)."""
    _, bare, blobs, truth = _twins("ddp_groups_marked", tmp_path_factory)
    assert len(bare) == 148
    assert all(c.size is not None and c.busbw(r["kDuration"]) is not None for r, c in bare.values())
    late = truth[0]["late_bucket_bytes"]
    for rank in (0, 1):
        reduced = [c.size for (rk, _), (r, c) in sorted(bare.items()) if rk == rank and c.kind == ALLREDUCE
                   and r["op"] is None and c.size in late + [sum(late)]]
        assert reduced == [sum(late)] + late * 5  # the first step's one bucket, then the rebuilt four


def _dist_marker(op, kwargs, rank, group):
    return json.dumps({"v": 1, "kind": "op", "mod": "torch.distributed", "op": op, "args": [], "kwargs": kwargs,
                       "dist": {"rank": rank, "world": 2, "group": group, "groupRank": rank, "groupSize": 2}},
                      separators=(",", ":"))


def _with_todays_markers(src, dst, rank, truth, *, final=True, coalesced=True):
    """`src` (rank `rank` of ddp_groups) with the markers pyprof.init() writes today around what
    DDP `late` launches from C++ (the capture predates them; its kernels' launches, and NCCL's
    payloads in the blobs twin, are real; the marker texts are those tests/nvtx/
    test_nvtx_distributed.py sees pyprof write on CPU):
    - its construction: `_verify_params_across_processes` around the first two NCCL kernels (the
      all-gather of each rank's parameter count, the broadcast of 8 parameters' sizes and strides:
      12 dims, 2 x 12 int64), `_broadcast_coalesced` around the third (its parameters);
    - its module marker: `late` (id 2) gives its first layout (one bucket of all its parameters)
      in its first two calls, only its id in the third (rebuilt in the second: the layout comes
      later), the final layout from the fourth (`final=False`: only its id, as a capture that
      ends before the layout was logged); `early` (id 1) its final layout;
    - the reducer's `_rebuild_buckets` in `late`'s first call (no rebuild yet: no kernels) and
      around the two broadcasts launched in its second;
    - `_broadcast_coalesced` around each forward of `early` (its BatchNorm's buffers).
    `coalesced=False`: a capture whose `_broadcast_coalesced` markers are real, left as they are."""
    shutil.copy(src, dst)
    db = sqlite3.connect(dst)
    late = truth[rank]["late_bucket_bytes"]
    early = truth[rank]["early_bucket_bytes"]
    groups = truth[rank]["groups"]

    def text(value):
        new = db.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
        db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (new, value))
        return new

    calls = {g: db.execute("SELECT n.rowid, n.start, n.end, n.globalTid, n.eventType, n.domainId, s.value "
                           "FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value LIKE ? ORDER BY n.start",
                           (f'%"cls":"DistributedDataParallel"%"group":"{g}"%',)).fetchall()
             for g in groups.values()}
    _, _, _, tid, kind, dom, _ = calls[groups["late"]][0]

    def span(start, end, value):
        db.execute("INSERT INTO NVTX_EVENTS (start, end, globalTid, eventType, domainId, textId) VALUES (?, ?, ?, ?, ?, ?)",
                   (start, end, tid, kind, dom, text(value)))

    def ddp_member(calls_of, members):
        for (rowid, *_, value), member in zip(calls_of, members):
            head = value[:value.index(',"ddp":')]
            db.execute("UPDATE NVTX_EVENTS SET textId = ? WHERE rowid = ?", (text(f'{head},"ddp":{member}}}'), rowid))

    nccl = db.execute("SELECT r.start, r.end, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                      "ON k.correlationId = r.correlationId JOIN StringIds s ON s.id = k.shortName "
                      "WHERE s.value LIKE 'nccl%' ORDER BY r.start").fetchall()
    gather, params, states = nccl[:3]
    assert [gather[2][:23], params[2][:23], states[2][:23]] == ["ncclDevKernel_AllGather"] + ["ncclDevKernel_Broadcast"] * 2
    span(gather[0] - 1, params[1] + 1, _dist_marker("_verify_params_across_processes",
                                                   {"calls": [["ncclAllGather", 8], ["ncclBroadcast", 16 * 12]]},
                                                   rank, groups["late"]))
    if coalesced:
        span(states[0] - 1, states[1] + 1, _dist_marker("_broadcast_coalesced", {"bucketBytes": [sum(late)], "src": 0},
                                                       rank, groups["late"]))
    n = len(calls[groups["late"]])
    layout = json.dumps({"id": 2, "bucketBytes": late}, separators=(",", ":")) if final else '{"id":2}'
    ddp_member(calls[groups["late"]], [f'{{"id":2,"initialBytes":[{sum(late)}]}}'] * 2 + ['{"id":2}'] + [layout] * (n - 3))
    ddp_member(calls[groups["early"]], [json.dumps({"id": 1, "bucketBytes": early}, separators=(",", ":"))] * n)
    rebuild = _dist_marker("_rebuild_buckets", {"ddp": 2, "params": 8}, rank, groups["late"])
    first, second = calls[groups["late"]][:2]
    span(first[1] + 1, first[1] + 2, rebuild)
    inside = [k for k in nccl if second[1] < k[0] < second[2]]
    assert [k[2][:23] for k in inside] == ["ncclDevKernel_Broadcast"] * 2
    span(inside[0][0] - 1, inside[1][1] + 1, rebuild)
    for _, start, end, *_ in calls[groups["early"]] if coalesced else ():
        span(start + 1, end - 1, _dist_marker("_broadcast_coalesced", {"bucketBytes": [8192, 8], "src": 0}, rank,
                                              groups["early"]))
    db.commit()
    db.close()
    return dst


@pytest.fixture(scope="module")
def todays(tmp_path_factory):
    """The NCCL kernels of ddp_groups with today's markers written in (both ranks), and of its blobs twin."""
    folder = tmp_path_factory.mktemp("todays")
    truth = json.loads((DATA / "ddp_groups_truth.json").read_text())
    bare = [unpacked(DATA / f"ddp_groups_{r}.sqlite.xz", folder) for r in (0, 1)]
    blobs = [unpacked(DATA / f"ddp_groups_blobs_{r}.sqlite.xz", folder) for r in (0, 1)]
    marked = [_with_todays_markers(p, folder / f"marked_{r}.sqlite", r, truth) for r, p in enumerate(bare)]
    cut = [_with_todays_markers(p, folder / f"cut_{r}.sqlite", r, truth, final=False) for r, p in enumerate(bare)]
    return (_nccl(_parse(marked, folder / "marked.dict")), _nccl(_parse(cut, folder / "cut.dict")),
            _nccl(_parse(blobs, folder / "blobs.dict")), truth)


def test_with_today_s_markers_every_ddp_kernel_has_the_bytes_nccl_s_payload_said(todays):
    """DDP `late` built inside the capture: its construction's all-gather and broadcasts, the two
    broadcasts of its bucket rebuild, its first step's all-reduce (its first layout) and its
    second and third steps' (the rebuilt layout, which a later marker gives), and `early`'s
    buffer broadcasts: all 148 NCCL kernels sized, each as NCCL's payload said."""
    marked, _, blobs, truth = todays
    assert marked.keys() == blobs.keys() and len(marked) == 148
    got = {k: (c.kind, c.size, c.ranks) for k, (_, c) in marked.items()}
    assert got == {k: (c.kind, c.size, c.ranks) for k, (_, c) in blobs.items()}
    assert all(c.busbw(r["kDuration"]) is not None for r, c in marked.values())
    late = truth[0]["late_bucket_bytes"]
    # Rank 0's collectives outside the default group's calls, in launch order, for its first two steps.
    first = [(c.kind, c.size) for (rank, _), (r, c) in sorted(marked.items()) if rank == 0 and r["op"] in
             (None, "_verify_params_across_processes", "_broadcast_coalesced", "_rebuild_buckets")][:16]
    assert first == [("AllGather", 2 * 8), ("Broadcast", 192), ("Broadcast", sum(late)),   # late's construction
                     ("Broadcast", 8192), ("Broadcast", 8), ("AllReduce", 6297600), ("AllReduce", 2109440),  # early
                     ("AllReduce", sum(late)),                                            # late's first step
                     ("Broadcast", 8192), ("Broadcast", 8), ("AllReduce", 6297600), ("AllReduce", 2109440),
                     ("Broadcast", 4 * (8 + 1)), ("Broadcast", 4 * 4),                    # late's rebuild
                     ("AllReduce", late[0]), ("AllReduce", late[1])]


def test_a_capture_that_ends_before_the_rebuilt_layout_was_logged_leaves_what_it_needs_unsized(todays):
    """Without a marker that gives `late`'s rebuilt layout, the all-reduces after its rebuild and
    the rebuild's broadcast of its bucket count have no size; the rest is sized as NCCL said."""
    _, cut, blobs, truth = todays
    late = truth[0]["late_bucket_bytes"]
    unsized = sorted((blobs[k][1].kind, blobs[k][1].size) for k, (_, c) in cut.items() if c.size is None)
    assert unsized == sorted([("Broadcast", 4 * 4)] * 2 + [("AllReduce", b) for b in late] * 5 * 2)
    assert all((c.kind, c.size) == (blobs[k][1].kind, blobs[k][1].size) for k, (_, c) in cut.items() if c.size is not None)


def test_a_real_capture_s_coalesced_broadcasts_are_sized_from_their_marker(two_steps):
    """ddp_groups_2steps was captured with `_broadcast_coalesced` marked: `late`'s parameter
    broadcast at construction and `early`'s buffer broadcasts (float32 running statistics, then
    int64 num_batches_tracked) at each of its 2 forwards are sized as NCCL said. Unsized are
    those of DDP's C++ collectives that pyprof of that capture (main b5e887f) did not mark: the
    construction's shape check (an all-gather, a broadcast), `late`'s first all-reduce (its first
    layout), its rebuild's two broadcasts and its second step's all-reduces (rebuilt layout)."""
    _, bare, blobs, truth = two_steps
    late = truth[0]["late_bucket_bytes"]
    coalesced = sorted(c.size for r, c in bare.values() if r["op"] == "_broadcast_coalesced")
    assert coalesced == sorted(([sum(late)] + [8192, 8] * 2) * 2)
    unsized = sorted((blobs[k][1].kind, blobs[k][1].size) for k, (_, c) in bare.items() if c.size is None)
    assert unsized == sorted(([("AllGather", 16), ("Broadcast", 192), ("AllReduce", sum(late)), ("Broadcast", 36),
                               ("Broadcast", 16)] + [("AllReduce", b) for b in late]) * 2)
    assert len(bare) == 52


def test_a_real_capture_with_today_s_markers_leaves_unsized_only_what_it_ends_before(tmp_path, two_steps):
    """Today's markers written into ddp_groups_2steps (2 steps: the capture ends before DDP logged
    `late`'s rebuilt layout): every kernel sized as NCCL said, except the rebuild's broadcast of
    the bucket count and the second step's all-reduces, which need that layout."""
    _, _, blobs, truth = two_steps
    bare = [unpacked(DATA / f"ddp_groups_2steps_{r}.sqlite.xz", tmp_path) for r in (0, 1)]
    marked = [_with_todays_markers(p, tmp_path / f"marked_{r}.sqlite", r, truth, coalesced=False) for r, p in enumerate(bare)]
    got = _nccl(_parse(marked, tmp_path / "marked.dict"))
    late = truth[0]["late_bucket_bytes"]
    unsized = sorted((blobs[k][1].kind, blobs[k][1].size) for k, (_, c) in got.items() if c.size is None)
    assert unsized == sorted(([("Broadcast", 4 * 4)] + [("AllReduce", b) for b in late]) * 2)
    sized = [k for k, (_, c) in got.items() if c.size is not None]
    assert len(sized) == 52 - 10
    assert all((got[k][1].kind, got[k][1].size, got[k][1].ranks) == (blobs[k][1].kind, blobs[k][1].size, blobs[k][1].ranks)
               for k in sized)


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


@pytest.mark.parametrize("op, kwargs, sized", [
    ("_verify_params_across_processes", {"calls": "x"}, None),
    ("_verify_params_across_processes", {"calls": [["ncclAllGather"], [3, 8], ["ncclAllGather", -1], ["notNccl", 8],
                                                   ["ncclAllGather", 8]]}, [None, None, None, None, 8]),
    ("_broadcast_coalesced", {"bucketBytes": [1.5]}, None),
    ("_rebuild_buckets", {"ddp": 1}, None),
    ("_rebuild_buckets", {"ddp": 1, "params": -1}, None),
    ("_rebuild_buckets", {"ddp": True, "params": 8}, [36, None]),   # no module: its bucket count unknown
    ("_rebuild_buckets", {"ddp": 3, "params": 8}, [36, None]),      # a module with no final layout
    ("_rebuild_buckets", {"ddp": 1, "params": 8}, [36, 8]),
])
def test_a_marker_sizes_only_the_calls_it_says_rightly(op, kwargs, sized):
    """Markers are input: an entry that is no [NCCL call, bytes >= 0] pair sizes no kernel."""
    from pyprof.parse.ddp_buckets import _said

    said = _said({"kind": "op", "mod": "torch.distributed", "op": op, "kwargs": kwargs}, 0, {(0, 1): [4, 4]})
    assert (None if said is None else [None if c is None else c.bytes for c in said]) == sized


@pytest.mark.parametrize("ddp", [None, "x", {"bucketBytes": []}, {"initialBytes": [8]}, {"id": "2", "initialBytes": [8]},
                                 {"id": 2, "initialBytes": [0]}, {"id": 2, "bucketBytes": [8, -8]}])
def test_a_ddp_member_that_says_no_layout_sizes_nothing(ddp):
    """A layout without a module id cannot be told from a final one, so none is taken."""
    from pyprof.parse.ddp_buckets import _module

    said = _module(json.dumps({"kind": "module", "ddp": ddp}))
    assert said.bucket_bytes is None and not said.initial
