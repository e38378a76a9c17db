"""The markers pyprof.init() writes around DDP's C++ collectives, on two gloo ranks (CPU), for
the model examples/ddp_groups.py builds inside its capture (`late`): the numbers the parse tests
write into that real capture (tests/parse/test_parse_ddp_buckets.py, `_with_todays_markers`) and
hold against NCCL's payloads in its blobs twin."""
import json

import pytest

torch = pytest.importorskip("torch", reason="the annotation wraps torch: needs torch")
dist = torch.distributed
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")]


def _rank(rank, folder):
    import pyprof
    from pyprof.nvtx import recording

    pyprof.init()
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=2)
    group = dist.new_group([0, 1])
    torch.manual_seed(0)
    sizes = [256, 512, 512, 512, 256]  # ddp_groups' `late`
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.GELU()]
    with recording() as rec:
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers[:-1]), process_group=group,
                                                        bucket_cap_mb=0.25)
        for _ in range(5):
            ddp(torch.randn(64, 256)).pow(2).mean().backward()
    texts = [r.text for r in rec.ranges if '"ddp":' in r.text or '"op":"_' in r.text]
    (folder / f"{rank}.json").write_text(json.dumps(texts))
    dist.destroy_process_group()


def test_ddp_s_c_plus_plus_collectives_are_said_alike_on_both_ranks(tmp_path):
    torch.multiprocessing.spawn(_rank, args=(tmp_path,), nprocs=2)
    for rank in (0, 1):
        said = [json.loads(t) for t in json.loads((tmp_path / f"{rank}.json").read_text())]
        got = [(m.get("op") or m["kind"], m.get("kwargs", m.get("ddp")), m["dist"]["groupSize"]) for m in said]
        n = said[2]["ddp"]["id"]
        rebuild = ("_rebuild_buckets", {"ddp": n, "params": 8}, 2)
        first = ("module", {"id": n, "initialBytes": [3152896]}, 2)
        final = ("module", {"id": n, "bucketBytes": [525312, 1050624, 1050624, 526336]}, 2)
        assert got == [("_verify_params_across_processes", {"calls": [["ncclAllGather", 8], ["ncclBroadcast", 192]]}, 2),
                       ("_broadcast_coalesced", {"bucketBytes": [3152896], "src": 0}, 2),
                       first, rebuild, first, rebuild, ("module", {"id": n}, 2), final, final]
