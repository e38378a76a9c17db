"""Real two-rank captures: examples/data_parallel.py on two H200s (benchmarks/multigpu_run.sh: GPT,
4 blocks of 256, batch 4 x 128, two steps after three warm-up steps, torch 2.11, NCCL 2.28.9,
NVLink multicast off), one nsys export per rank, shipped xz-compressed as
tests/data/{ddp,fsdp}_{0,1}.sqlite.xz. Parsed side by side, then the collectives, the ranks'
common clock, overlap and stragglers, against values read off these traces."""
import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from pyprof.prof.comms.collectives import ALLGATHER, ALLREDUCE, REDUCESCATTER, of_record
from pyprof.prof.comms.passes import Comms

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
# TARGET_INFO_SESSION_START_TIME.utcEpochNs of rank 0 and rank 1: the sessions started 53 959 641 ns
# (DDP) and -15 742 072 ns (FSDP) apart. And the first kernel's start in each export's own time
# (CUPTI_ACTIVITY_KIND_KERNEL).
SESSION_STARTS = {"ddp": (1795415590138329069, 1795415590192288710),
                  "fsdp": (1795415615847684583, 1795415615831942511)}
FIRST_KERNEL = {"ddp": (18894311, 15483603), "fsdp": (39214931, 40839039)}


def run(module, *args):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def job(request, tmp_path_factory):
    """(mode, records, parse's stderr, the .dict path) of one capture's two ranks."""
    mode = request.param
    folder = tmp_path_factory.mktemp(mode)
    for rank in (0, 1):
        (folder / f"{mode}_{rank}.sqlite").write_bytes(lzma.decompress((DATA / f"{mode}_{rank}.sqlite.xz").read_bytes()))
    out = folder / f"{mode}.dict"
    res = run("pyprof.parse", folder, "-o", out)
    assert res.returncode == 0, res.stderr
    return mode, [json.loads(line) for line in out.read_text().splitlines()], res.stderr, out


def comms(recs):
    c = Comms()
    for r in recs:
        c.add(r)
    return c.report()


def test_parse_both_ranks(job):
    mode, recs, stderr, _ = job
    n = {"ddp": 1244, "fsdp": 848}[mode]
    assert stderr.endswith(f"pyprof.parse: {n} kernels written from 2 exports, ranks 0-1 (from pyprof markers); "
                           "100.0% with an op attributed; 0 without a launch call; 0 ranges not understood; "
                           "0 malformed pyprof markers\n")
    ranks = [r["rank"] for r in recs]
    assert ranks == [0] * (n // 2) + [1] * (n // 2)


def test_times_count_from_each_session_start(job):
    """Every time is the session's own plus its start (UTC ns), so the ranks' kernels of one
    collective end together: within 2.2 us here, where the raw times are 54 ms (DDP) and 16 ms
    (FSDP) apart."""
    mode, recs, _, _ = job
    first = {rank: min(r["kStart"] for r in recs if r["rank"] == rank) for rank in (0, 1)}
    assert first == {rank: SESSION_STARTS[mode][rank] + FIRST_KERNEL[mode][rank] for rank in (0, 1)}
    ends: dict = {}
    seen: dict = {}
    for r in recs:
        c = of_record(r)
        if c is not None:
            k = seen[(r["rank"], c.group, c.kind)] = seen.get((r["rank"], c.group, c.kind), -1) + 1
            ends.setdefault((c.group, c.kind, k), {})[r["rank"]] = r["kEnd"]
    gaps = [abs(e[0] - e[1]) for e in ends.values()]
    assert len(gaps) == {"ddp": 16, "fsdp": 30}[mode]
    assert max(gaps) == {"ddp": 2218, "fsdp": 2160}[mode]


def test_collectives_identified(job):
    """Every NCCL kernel gets its collective: DDP's bucket all-reduces by kernel name and
    PyTorch's record_param_comms sizes, the loss all-reduce and FSDP2's all-gathers and
    reduce-scatters by pyprof's torch.distributed markers (group size 2 from `dist`)."""
    mode, recs, _, _ = job
    found: dict = {}
    for r in recs:
        c = of_record(r)
        if c is not None:
            key = (r["rank"], r["op"], c.kind, c.dtype, c.size, c.ranks, c.via)
            found[key] = found.get(key, 0) + 1
    if mode == "ddp":
        # 2 steps x 7 buckets of ~2 MB (--bucket-mb 2) of fp32 gradients, S = the bucket
        per_rank = {("nccl:all_reduce", ALLREDUCE, "float32", 2099200, None, "kernel"): 2,
                    ("nccl:all_reduce", ALLREDUCE, "float32", 2103296, None, "kernel"): 4,
                    ("nccl:all_reduce", ALLREDUCE, "float32", 2105344, None, "kernel"): 4,
                    ("nccl:all_reduce", ALLREDUCE, "float32", 2109440, None, "kernel"): 2,
                    ("nccl:all_reduce", ALLREDUCE, "float32", 2240512, None, "kernel"): 2,
                    ("all_reduce", ALLREDUCE, "float32", 4, 2, "marker"): 2}
    else:
        # S of an all-gather is the gathered bf16 buffer, of a reduce-scatter the fp32 input
        per_rank = {("all_gather_into_tensor", ALLGATHER, "bfloat16", 1115136, 2, "marker"): 2,
                    ("all_gather_into_tensor", ALLGATHER, "bfloat16", 1579520, 2, "marker"): 16,
                    ("reduce_scatter_tensor", REDUCESCATTER, "float32", 2230272, 2, "marker"): 2,
                    ("reduce_scatter_tensor", REDUCESCATTER, "float32", 3159040, 2, "marker"): 8,
                    ("all_reduce", ALLREDUCE, "float32", 4, 2, "marker"): 2}
    assert found == {(rank, *k): v for rank in (0, 1) for k, v in per_rank.items()}
    rep = comms(recs)
    assert rep["identified_pct"] == 100.0
    assert (rep["nccl_kernels"], rep["nccl_ns"]) == {"ddp": (32, 79901570), "fsdp": (60, 141143402)}[mode]


def test_bus_bandwidth_by_nccl_tests_formulas(job):
    """Per instance: transfer = first end - last arrival; busbw = S / transfer x 2(n-1)/n for an
    all-reduce, x (n-1)/n for all-gather and reduce-scatter."""
    mode, recs, _, _ = job
    rows = comms(recs)["instances"]
    assert len(rows) == {"ddp": 16, "fsdp": 30}[mode]
    for row in rows:
        factor = 2 * (2 - 1) / 2 if row["kind"] == ALLREDUCE else (2 - 1) / 2
        assert row["ranks"] == 2
        assert row["busbw"] == pytest.approx(row["size"] / row["transfer_ns"] * factor, rel=1e-12)
    head = [(r["group"], r["kind"], r["index"], r["size"], r["transfer_ns"], round(r["busbw"], 2)) for r in rows[:3]]
    assert head == {"ddp": [("-", ALLREDUCE, 0, 2099200, 204096, 10.29), ("-", ALLREDUCE, 1, 2105344, 26273, 80.13),
                            ("-", ALLREDUCE, 2, 2103296, 25989, 80.93)],
                    "fsdp": [("0", ALLGATHER, 0, 1115136, 9505, 58.66), ("0", ALLGATHER, 1, 1579520, 14080, 56.09),
                             ("0", ALLGATHER, 2, 1579520, 11936, 66.17)]}[mode]


def test_overlap_per_rank_and_step(job):
    """Steps end with the fused/foreach AdamW step; the loss all-reduce after it opens step 2.
    The model is small and launch-bound: communication is almost all exposed, waiting for the
    other rank."""
    mode, recs, _, _ = job
    rep = comms(recs)
    got = [(s["rank"], s["step"], s["compute_ns"], s["comm_ns"], s["both_ns"], s["exposed_ns"]) for s in rep["steps"]]
    assert got == {"ddp": [(0, 0, 1022085, 63724452, 647683, 63076769), (0, 1, 960101, 13295669, 518309, 12777360),
                           (0, 2, 0, 2313193, 0, 2313193), (1, 0, 965568, 361280, 50016, 311264),
                           (1, 1, 918176, 197440, 0, 197440), (1, 2, 0, 9536, 0, 9536)],
                   "fsdp": [(0, 0, 944610, 214050, 0, 214050), (0, 1, 987268, 61825394, 643460, 61181934),
                            (0, 2, 0, 12645906, 0, 12645906), (1, 0, 1124897, 66229764, 840577, 65389187),
                            (1, 1, 952512, 218336, 0, 218336), (1, 2, 0, 9952, 0, 9952)]}[mode]
    per_kind = [(c["rank"], c["kind"], c["count"], c["time_ns"], c["exposed_ns"]) for c in rep["collectives"]]
    assert per_kind == {"ddp": [(0, ALLREDUCE, 16, 79333314, 78167322), (1, ALLREDUCE, 16, 568256, 518240)],
                        "fsdp": [(0, ALLGATHER, 18, 40559839, 40301118), (0, ALLREDUCE, 2, 13264117, 13264117),
                                 (0, REDUCESCATTER, 10, 20861394, 20476655), (1, ALLGATHER, 18, 49694626, 49121057),
                                 (1, ALLREDUCE, 2, 19168, 19168), (1, REDUCESCATTER, 10, 16744258, 16477250)]}[mode]


def test_stragglers(job):
    """DDP: rank 1 arrives last at every one of the 16 all-reduces (rank 0 waits 78.8 ms in all,
    53.1 ms at the first bucket); FSDP: the ranks take turns."""
    mode, recs, _, _ = job
    rep = comms(recs)
    assert rep["by_rank"] == {
        "ddp": [{"rank": "0", "instances": 16, "slowest": 0, "wait_ns": 78764010, "max_wait_ns": 53141632},
                {"rank": "1", "instances": 16, "slowest": 16, "wait_ns": 0, "max_wait_ns": 0}],
        "fsdp": [{"rank": "0", "instances": 30, "slowest": 14, "wait_ns": 74233396, "max_wait_ns": 12637603},
                 {"rank": "1", "instances": 30, "slowest": 16, "wait_ns": 66006999, "max_wait_ns": 13893839}]}[mode]
    first = rep["instances"][0]
    assert (first["arrival_ns"], first["wait_ns"], first["slowest"], first["skew_ns"]) == {
        "ddp": ({"0": 0, "1": 53141632}, {"0": 53141632, "1": 0}, 1, 53141632),
        "fsdp": ({"0": 13893839, "1": 0}, {"0": 0, "1": 13893839}, 0, 13893839)}[mode]


def test_prof_views_on_the_capture(job):
    mode, _, _, path = job
    res = run("pyprof.prof", "--stragglers", "--csv", path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "group,kind,index,dtype,size,ranks,first_ns,last_ns,skew_ns,slowest,transfer_ns,busbw"
    assert lines[1] == {"ddp": "-,AllReduce,0,float32,2099200,2,1795415590166804987,1795415590219946619,53141632,1,"
                               "204096,10.29",
                        "fsdp": "0,AllGather,0,bfloat16,1115136,2,1795415615873936910,1795415615887830749,13893839,0,"
                                "9505,58.66"}[mode]
    res = run("pyprof.prof", "--overlap", "--json", path)
    rep = json.loads(res.stdout)
    assert rep["ranks"] == [0, 1] and rep["identified_pct"] == 100.0 and len(rep["steps"]) == 6
    res = run("pyprof.prof", "--overlap", path)
    assert res.stdout.splitlines()[0] == {"ddp": "NCCL kernels   32, 79.90 ms; 100.0% of that time attributed to "
                                                 "a collective",
                                          "fsdp": "NCCL kernels   60, 141.14 ms; 100.0% of that time attributed to "
                                                  "a collective"}[mode]
