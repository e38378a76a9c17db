"""Overlap of compute and communication, exposed collective time and stragglers
(pyprof/prof/comms/shares.py, stragglers.py, comms.py), on hand-made records with hand-derived answers,
and on the synthetic 64-rank job of tests/nsys_synth.py parsed end to end."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_synth import rank_set, step_delay
from pyprof.prof.comms.collectives import ALLREDUCE, Collective
from pyprof.prof.comms.passes import Comms
from pyprof.prof.comms.shares import Overlap
from pyprof.prof.comms.arrivals import Instances

ROOT = Path(__file__).resolve().parents[2]
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def k(start, end, launch, name="gemm", rank=0, device=0, op=None, mod=None, marker=None):
    return {"kind": "kernel", "kShortName": name, "kLongName": name, "kStart": start, "kEnd": end,
            "kDuration": end - start, "launch": {"start": launch, "duration": 1}, "rank": rank, "device": device,
            "op": op, "mod": mod, "marker": marker, "torchOps": []}


def test_compute_comm_both_and_exposed_by_hand():
    ov = Overlap()
    recs = [k(0, 100, 0), k(50, 200, 40, AR), k(150, 250, 60),
            # the optimizer's kernel ends step 0; the next kernel starts step 1
            k(300, 320, 290, mod="torch.optim", op="SGD.step"), k(400, 450, 390), k(420, 440, 395, AR)]
    for r in recs:
        ov.add(r, Collective(ALLREDUCE, "float32", 100, 2, "kernel") if r["kShortName"] == AR else None, "x")
    rows = ov.finish().rows()
    # step 0: compute [0,100)+[150,250)+[300,320) = 220; comm [50,200) = 150; union [0,250)+[300,320) = 270
    assert rows[0] == {"rank": 0, "step": 0, "span_ns": 320, "compute_ns": 220, "comm_ns": 150, "both_ns": 100,
                       "exposed_ns": 50, "hidden_pct": 100 / 150 * 100}
    assert rows[1] == {"rank": 0, "step": 1, "span_ns": 50, "compute_ns": 50, "comm_ns": 20, "both_ns": 20,
                       "exposed_ns": 0, "hidden_pct": 100.0}
    # per collective: [50,200) under [0,100) and [150,250): 50 exposed; [420,440) fully hidden
    assert sorted(ov.exposed) == [(0, "x", 20, 0), (0, "x", 150, 50)]
    assert ov.collectives == {(0, 0, ALLREDUCE): [1, 150, 50], (0, 1, ALLREDUCE): [1, 20, 0]}


def test_exposure_waits_for_compute_launched_before_the_collective_ended():
    ov = Overlap()
    ov.add(k(0, 1000, 0, AR), Collective(ALLREDUCE, None, None, None, "kernel"), "c")
    ov.add(k(200, 300, 100), None)      # launched while the collective runs: hides 100 ns of it
    ov.add(k(1200, 1300, 1100), None)   # launched after it ended: settles it
    assert ov.exposed == [(0, "c", 1000, 900)]


def test_devices_and_ranks_are_separate_timelines():
    ov = Overlap()
    ov.add(k(0, 100, 0, AR, device=0), Collective(ALLREDUCE, None, None, None, "kernel"))
    ov.add(k(0, 100, 0, device=1), None)     # another GPU's compute hides nothing of device 0's
    ov.add(k(0, 100, 0, rank=1), None)
    assert ov.finish().exposed == [(0, None, 100, 100)]
    assert [(r["rank"], r["compute_ns"], r["comm_ns"], r["both_ns"]) for r in ov.rows()] == [(0, 100, 100, 0),
                                                                                              (1, 100, 0, 0)]


def test_stragglers_by_hand():
    ins = Instances()
    c = Collective(ALLREDUCE, "float32", 700, None, "kernel")
    for rank, start, end in ((0, 10, 100), (1, 30, 101), (2, 20, 100)):
        assert ins.add(k(start, end, start, AR, rank=rank), c) == ("-", ALLREDUCE, 0)
    (row,) = ins.rows()
    assert row == {"group": "-", "kind": ALLREDUCE, "index": 0, "dtype": "float32", "size": 700, "ranks": 3,
                   "first_ns": 10, "last_ns": 30, "skew_ns": 20, "slowest": 1,
                   "arrival_ns": {"0": 0, "1": 20, "2": 10}, "wait_ns": {"0": 20, "1": 0, "2": 10},
                   "transfer_ns": 70, "busbw": pytest.approx(10.0 * 4 / 3)}  # 700 B / 70 ns, x 2(n-1)/n
    assert ins.by_rank() == [{"rank": "0", "instances": 1, "slowest": 0, "wait_ns": 20, "max_wait_ns": 20},
                             {"rank": "1", "instances": 1, "slowest": 1, "wait_ns": 0, "max_wait_ns": 0},
                             {"rank": "2", "instances": 1, "slowest": 0, "wait_ns": 10, "max_wait_ns": 10}]


def test_instances_match_by_group_kind_and_order():
    ins = Instances()
    ar, ag = Collective(ALLREDUCE, None, None, 2, "marker", "0"), Collective("AllGather", None, None, 2, "marker", "0")
    for rank in (0, 1):
        ins.add(k(0, 10, 0, AR, rank=rank), ar)
        ins.add(k(20, 30, 20, rank=rank), ag)
        ins.add(k(40 + rank, 50, 40 + rank, AR, rank=rank), ar)
    rows = ins.rows()
    assert [(r["kind"], r["index"], r["ranks"], r["skew_ns"], r["slowest"]) for r in rows] == [
        (ALLREDUCE, 0, 2, 0, None), ("AllGather", 0, 2, 0, None), (ALLREDUCE, 1, 2, 1, 1)]


def test_a_send_and_its_receive_are_one_instance_per_direction():
    """Ranks 0 and 1 send to each other at once: each send pairs with the receive of its own
    direction (the markers' dst and src), and the transfer starts when the later of the two arrives."""
    from pyprof.prof.comms.collectives import RECV, SEND

    def marker(op, rank, peer, by_keyword):
        return {"v": 1, "kind": "op", "mod": "torch.distributed", "op": op,
                "args": [{"shape": [8], "dtype": "float32"}] + ([] if by_keyword else [peer]),
                "kwargs": {("dst" if op == "send" else "src"): peer} if by_keyword else {},
                "dist": {"rank": rank, "world": 2, "group": "0", "groupRank": rank, "groupSize": 2}}

    ins = Instances()
    send, recv = Collective(SEND, "float32", 32, 2, "marker", "0"), Collective(RECV, "float32", 32, 2, "marker", "0")
    for rank, peer, start in ((0, 1, 10), (1, 0, 12)):
        ins.add(k(start, 100, start, rank=rank, marker=marker("send", rank, peer, rank == 0)), send)
        ins.add(k(start + 100, 200, start, rank=rank, marker=marker("recv", rank, peer, rank == 1)), recv)
    assert [(r["kind"], r["index"], r["ranks"], r["first_ns"], r["last_ns"], r["transfer_ns"]) for r in ins.rows()] == [
        ("Send 0->1", 0, 2, 10, 112, 88), ("Send 1->0", 0, 2, 12, 110, 90)]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    rank_set(str(folder), 64, steps=2, seed=3)
    out = folder / "job.dict"
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", str(folder), "-o", str(out), "-j", "4"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr
    return out, res.stderr


@pytest.mark.slow
def test_64_ranks_parse_into_one_output_in_rank_order(job):
    out, stderr = job
    ranks = [json.loads(line)["rank"] for line in out.read_text().splitlines()]
    assert len(ranks) == 64 * 34
    assert ranks == sorted(ranks) and set(ranks) == set(range(64))
    assert "2176 kernels written from 64 exports, ranks 0-63 (from pyprof markers)" in stderr


def test_64_ranks_stragglers_and_overlap(job):
    out, _ = job
    comms = Comms()
    for line in out.read_text().splitlines():
        comms.add(json.loads(line))
    rep = comms.report()
    assert rep["nccl_kernels"] == 64 * 2 * 4 and rep["identified_pct"] == 100.0
    # The loss all-reduce of step s: rank r launches it step_delay(r, s) late; the slowest rank
    # is the one with the largest delay, the skew the spread of the delays.
    loss = [r for r in rep["instances"] if r["group"] == "0" and r["kind"] == ALLREDUCE]
    for step, row in enumerate(loss):
        delays = {r: step_delay(3, r, step) for r in range(64)}
        late = max(delays.values())
        assert row["ranks"] == 64 and row["size"] == 4
        assert row["skew_ns"] == late - min(delays.values())
        assert row["slowest"] == max(r for r in delays if delays[r] == late)
        assert row["wait_ns"] == {str(r): late - d for r, d in delays.items()}
        assert row["transfer_ns"] == 50_000
        assert row["busbw"] == pytest.approx(4 / 50_000 * 2 * 63 / 64)
    gather = [r for r in rep["instances"] if r["kind"] == "AllGather"]
    assert [r["size"] for r in gather] == [128 * 64 * 2] * 2 and gather[0]["busbw"] == pytest.approx(
        128 * 64 * 2 / 50_000 * 63 / 64)
    # Every rank, every step: 4 layers x 20 us forward + 8 x 25 us backward + 30 us optimizer.
    assert {(s["rank"], s["step"]) for s in rep["steps"]} == {(r, s) for r in range(64) for s in range(2)}
    assert {s["compute_ns"] for s in rep["steps"]} == {310_000}
    for s in rep["steps"]:
        assert s["exposed_ns"] + s["both_ns"] == s["comm_ns"] and 0 < s["both_ns"] < s["comm_ns"]
    # The loss all-reduce and the all-gather run alone: fully exposed.
    for c in rep["collectives"]:
        if c["kind"] == "AllGather":
            assert c["exposed_ns"] == c["time_ns"]


def test_prof_columns_and_summary_by_rank_on_the_job(job):
    out, _ = job
    res = subprocess.run([sys.executable, "-m", "pyprof.prof", "-c", "rank,op,coll,collbytes,ranks,algbw,busbw,sil",
                          str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    rows = [r.split() for r in res.stdout.splitlines()]
    assert rows[0] == ["Rank", "Op", "Coll", "CollBytes", "Ranks", "AlgBW", "BusBW", "Sil(ns)"]
    gathers = [r for r in rows if r[2] == "AllGather"]
    assert len(gathers) == 128
    for r in gathers:   # S = 64 ranks x 128 bf16 = 16384 B over the kernel's own duration
        sil = int(r[7])
        assert r[3:5] == ["16384", "64"]
        assert r[5] == f"{16384 / sil:.2f}" and r[6] == f"{16384 / sil * 63 / 64:.2f}"
    ddp = [r for r in rows if r[1] == "record_param_comms"]
    assert ddp and all(r[2:7] == ["AllReduce", "na", "na", "na", "na"] for r in ddp)
    assert {r[2] for r in rows[1:] if r[1] == "linear"} == {"-"}
    res = subprocess.run([sys.executable, "-m", "pyprof.prof", "--summary", "--by", "rank", "--csv", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    body = res.stdout.splitlines()
    assert body[0].startswith("rank,time_ns,") and sorted(int(x.split(",")[0]) for x in body[1:]) == list(range(64))
    assert all(int(x.split(",")[3]) == 34 for x in body[1:])


@pytest.mark.parametrize("args,msg", [
    (["--overlap", "-c", "op"], "-c selects per-kernel columns; it does not apply to --overlap"),
    (["--stragglers", "--top", "0"], "--top needs a positive number"),
])
def test_view_usage_errors(args, msg):
    res = subprocess.run([sys.executable, "-m", "pyprof.prof", *args, "/dev/null"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.strip().endswith(msg)
