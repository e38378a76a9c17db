"""torch.distributed under pyprof.init(): which calls are wrapped, and the `dist` member of their
markers (docs/markers.md), on a single-process gloo group (no GPU needed)."""
import json

import pytest

torch = pytest.importorskip("torch", reason="the annotation wraps torch: needs torch")

from pyprof.nvtx import distributed, recording
from pyprof.nvtx.wrappers import is_wrapper

dist = torch.distributed
pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")


@pytest.fixture(autouse=True)
def _on(pyprof_on):
    yield


@pytest.fixture
def world():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_every_collective_and_p2p_call_is_wrapped_and_nothing_else():
    wrapped = {name for name in vars(dist) if is_wrapper(vars(dist)[name])}
    for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
                 "reduce", "all_to_all_single", "gather", "scatter", "barrier", "send", "recv", "isend", "irecv",
                 "batch_isend_irecv"):
        assert name in wrapped, name
    for name in ("get_rank", "get_world_size", "new_group", "broadcast_object_list", "all_gather_object",
                 "destroy_process_group", "is_initialized"):
        assert name not in wrapped, name
    # Nothing is wrapped twice.
    assert [n for n, _ in distributed.targets()] == []


def test_marker_carries_rank_world_and_group(world):
    t = torch.ones(6, dtype=torch.bfloat16)
    with recording() as rec:
        dist.all_reduce(t)
    (m,) = rec.markers
    assert m["mod"] == "torch.distributed" and m["op"] == "all_reduce"
    assert m["args"] == [{"shape": [6], "dtype": "bfloat16"}]
    assert m["dist"] == {"rank": 0, "world": 1, "group": dist.group.WORLD.group_name, "groupRank": 0, "groupSize": 1}


def test_group_passed_by_position_or_keyword_is_the_one_described(world):
    sub = dist.new_group([0])
    out, inp = torch.zeros(4), torch.ones(4)
    with recording() as rec:
        dist.all_gather_into_tensor(out, inp, sub)
        dist.reduce_scatter_tensor(inp, out, group=sub)
    assert [m["op"] for m in rec.markers] == ["all_gather_into_tensor", "reduce_scatter_tensor"]
    for m in rec.markers:
        assert m["dist"]["group"] == sub.group_name != dist.group.WORLD.group_name
        assert (m["dist"]["groupSize"], m["dist"]["groupRank"]) == (1, 0)


def test_no_process_group_no_dist_member_and_the_error_is_torch_s():
    t = torch.ones(2)
    with recording() as rec, pytest.raises((ValueError, RuntimeError)):
        dist.all_reduce(t)
    (m,) = rec.markers
    assert m["op"] == "all_reduce" and "dist" not in m


def test_inner_collectives_of_a_wrapped_call_emit_nothing(world):
    out, inp = [torch.zeros(3)], torch.ones(3)
    with recording() as rec:
        dist.all_gather(out, inp)
    assert [m["op"] for m in rec.markers] == ["all_gather"]


def test_p2p_ops_of_a_batch_are_torch_s_own(world):
    # P2POp accepts only c10d's own isend/irecv (by identity: under pyprof.init() it raised
    # ValueError) and batch_isend_irecv tells a send from a receive with `op is isend`: both
    # names must be the one wrapper, so that each op of the batch is marked and keeps its meaning.
    c10d = dist.distributed_c10d
    assert c10d.isend is dist.isend and c10d.irecv is dist.irecv and is_wrapper(c10d.isend)
    ops = [dist.P2POp(dist.isend, torch.arange(4.0), 0), dist.P2POp(dist.irecv, torch.zeros(4), 0)]
    assert ops[0].op is c10d.isend and ops[1].op is c10d.irecv


def test_a_batch_of_p2p_ops_is_described_op_by_op(world):
    """batch_isend_irecv's kernel starts inside it, after its isend/irecv calls returned: its
    marker says each op as [name, tensor, peer] (docs/markers.md) and the first op's group."""
    ops = [dist.P2POp(dist.isend, torch.arange(4.0), 0), dist.P2POp(dist.irecv, torch.zeros(2, 3, dtype=torch.half), 0)]
    with recording() as rec:
        try:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        except RuntimeError:
            pass  # gloo sends to no peer of a one-rank group; the marker was pushed before
    (marker,) = [json.loads(r.text) for r in rec.ranges if '"batch_isend_irecv"' in r.text]
    assert marker["args"] == [[["isend", {"shape": [4], "dtype": "float32"}, 0],
                               ["irecv", {"shape": [2, 3], "dtype": "float16"}, 0]]]
    assert marker["dist"] == {"rank": 0, "world": 1, "group": dist.group.WORLD.group_name, "groupRank": 0,
                              "groupSize": 1}


def test_ddp_s_coalesced_broadcasts_say_each_bucket_s_bytes(world):
    """DDP broadcasts its parameters and buffers through _broadcast_coalesced, one NCCL broadcast
    per bucket of one dtype: the marker lists their bytes in launch order (docs/markers.md)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.BatchNorm1d(20), torch.nn.Linear(20, 3))
    with recording() as rec:
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp(torch.ones(4, 10))
    calls = [json.loads(r.text) for r in rec.ranges if '"_broadcast_coalesced"' in r.text]
    # Construction: the float32 parameters and running statistics ((200 + 20 + 20 + 20 + 60 + 3) +
    # 2 x 20 elements), then the int64 num_batches_tracked; the forward: the buffers alone.
    assert [(c["kwargs"], c["dist"]["groupSize"]) for c in calls] == [
        ({"bucketBytes": [363 * 4, 8], "src": 0}, 1), ({"bucketBytes": [40 * 4, 8], "src": 0}, 1)]


def _module_markers(rec):
    return [json.loads(r.text) for r in rec.ranges if '"kind":"module"' in r.text]


def test_a_module_that_owns_a_process_group_says_its_group_in_its_marker(world):
    """DDP's reducer all-reduces from C++, under no marker of its own: DDP's module marker says
    the group (docs/markers.md, module `dist`), and its submodules' markers stay as they were."""
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    with recording() as rec:
        ddp(torch.ones(1, 2))
    outer, inner = _module_markers(rec)
    assert outer == {"v": 1, "kind": "module", "module": "DistributedDataParallel", "cls": "DistributedDataParallel",
                     "repr": "", "dist": {"rank": 0, "world": 1, "group": dist.group.WORLD.group_name,
                                          "groupRank": 0, "groupSize": 1}, "ddp": outer["ddp"]}
    assert outer["ddp"] == {"id": outer["ddp"]["id"], "initialBytes": [6 * 4]}
    assert inner == {"v": 1, "kind": "module", "module": "module", "cls": "Linear",
                     "repr": "in_features=2, out_features=2, bias=True"}


def _ddp_members(ddp, calls, *, backward=True, rebuilds=None):
    """The `ddp` member of DDP's module marker at each of `calls` training steps (and, into
    `rebuilds`, the reducer's `_rebuild_buckets` markers of each)."""
    seen = []
    for _ in range(calls):
        with recording() as rec:
            out = ddp(torch.ones(4, 64))
        if backward:
            out.sum().backward()
        seen.append(_module_markers(rec)[0].get("ddp", "absent"))
        if rebuilds is not None:
            rebuilds.append([json.loads(r.text) for r in rec.ranges if '"_rebuild_buckets"' in r.text])
    return seen


def _reducer_buckets(ddp):
    """DDP's buckets in bytes, in launch order, as its reducer holds them (a copy per bucket)."""
    return [b.buffer().numel() * b.buffer().element_size() for b in ddp.reducer._get_zeros_like_grad_buckets()]


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                               torch.nn.Linear(512, 8))


def test_ddp_marker_gives_the_reducer_s_buckets_first_and_once_they_are_final(world):
    """DDP's bucket all-reduces have no marker: its module marker carries their bytes in launch
    order (docs/markers.md, module `ddp`): the first layout (one bucket of all 6 parameters,
    (64 + 1) x 512 + 513 x 512 + 513 x 8 float32) until the reducer rebuilds its buckets (at the
    start of its second forward, under the `_rebuild_buckets` marker), then only the module's id
    until DDP has logged the new layout, then that layout, the one the reducer itself holds."""
    ddp = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1)
    rebuilds = []
    seen = _ddp_members(ddp, 6, rebuilds=rebuilds)
    n = seen[0]["id"]
    first = {"id": n, "initialBytes": [300040 * 4]}
    assert seen == [first, first, {"id": n}] + [{"id": n, "bucketBytes": _reducer_buckets(ddp)}] * 3
    assert seen[3]["bucketBytes"] == [1067040, 133120]
    # Pushed while the reducer may still rebuild: in the first call (nothing to rebuild yet) and the second.
    marker = {"v": 1, "kind": "op", "mod": "torch.distributed", "op": "_rebuild_buckets", "args": [],
              "kwargs": {"ddp": n, "params": 6},
              "dist": {"rank": 0, "world": 1, "group": dist.group.WORLD.group_name, "groupRank": 0, "groupSize": 1}}
    assert rebuilds == [[marker], [marker], [], [], [], []]


def test_ddp_marker_never_says_a_layout_older_than_the_reducer_s(world):
    """The reducer rebuilds while nothing records (pyprof off): the next recorded call's marker
    says the module rebuilt, not its first layout."""
    ddp = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1)
    seen = _ddp_members(ddp, 1)
    for _ in range(2):
        ddp(torch.ones(4, 64)).sum().backward()
    seen += _ddp_members(ddp, 2)
    n = seen[0]["id"]
    assert seen == [{"id": n, "initialBytes": [300040 * 4]}, {"id": n, "bucketBytes": [1067040, 133120]},
                    {"id": n, "bucketBytes": [1067040, 133120]}]


def test_two_ddp_modules_have_their_own_ids(world):
    a = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1)
    b = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1)
    (x,), (y,) = _ddp_members(a, 1), _ddp_members(b, 1)
    assert y["id"] == x["id"] + 1


def test_ddp_without_rebuilt_buckets_gives_its_first_layout(world):
    # find_unused_parameters without a static graph: the reducer never rebuilds its buckets.
    ddp = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1, find_unused_parameters=True)
    rebuilds = []
    seen = _ddp_members(ddp, 3, rebuilds=rebuilds)
    assert seen == [{"id": seen[0]["id"], "bucketBytes": _reducer_buckets(ddp)}] * 3
    assert seen[1]["bucketBytes"] == [18464, 1181696]  # the first bucket capped small (1 MiB), as DDP does
    assert rebuilds == [[], [], []]


def test_ddp_s_construction_check_says_its_all_gather_and_broadcast(world):
    """DDP checks at construction that every rank has the same parameters: an all-gather of the
    parameter count (one int64 a rank), then a broadcast of each parameter's sizes and strides
    (2 x dim() int64: 3 weights and 3 biases, 9 dims)."""
    with recording() as rec:
        torch.nn.parallel.DistributedDataParallel(_mlp())
    (marker,) = [json.loads(r.text) for r in rec.ranges if '"_verify_params_across_processes"' in r.text]
    assert (marker["args"], marker["kwargs"]) == ([], {"calls": [["ncclAllGather", 8], ["ncclBroadcast", 9 * 16]]})
    assert marker["dist"]["groupSize"] == 1


def test_ddp_with_a_comm_hook_gives_no_layout(world):
    # A hook decides what is sent: the buckets' bytes no longer size the all-reduces.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    rebuilds = []
    assert _ddp_members(ddp, 6, rebuilds=rebuilds) == [None] * 6
    assert rebuilds == [[]] * 6


def test_a_comm_hook_registered_during_training_ends_the_layout(world):
    ddp = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1)
    seen = _ddp_members(ddp, 4)
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    seen += _ddp_members(ddp, 2)
    assert seen[3:] == [{"id": seen[0]["id"], "bucketBytes": [1067040, 133120]}, None, None]


def test_a_process_group_attribute_that_is_no_process_group_says_nothing(world):
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.process_group = "not a group"

        def forward(self, x):
            return x

    with recording() as rec:
        Holder()(torch.ones(1))
    assert _module_markers(rec) == [{"v": 1, "kind": "module", "module": "Holder", "cls": "Holder", "repr": ""}]


@pytest.mark.parametrize("when", [0, 4])
def test_a_comm_hook_registered_on_the_reducer_itself_ends_the_layout(world, when):
    """torch.distributed._register_comm_hook called on DDP's reducer directly (DDP's own
    register_comm_hook is a thin call of it, which DDP's logging data does not hear of): before the
    first call, and after 4 calls, when the layout is final. The hook (fp16 compression) sends half
    the buckets' bytes: a layout said after it would size its all-reduces twice over."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = torch.nn.parallel.DistributedDataParallel(_mlp(), bucket_cap_mb=1)
    seen = _ddp_members(ddp, when)
    dist._register_comm_hook(ddp.reducer, None, default_hooks.fp16_compress_hook)
    assert "comm_hook" not in ddp._get_ddp_logging_data()
    seen += _ddp_members(ddp, 2)
    assert seen[when:] == [None, None]
    if when:
        assert seen[when - 1] == {"id": seen[0]["id"], "bucketBytes": [1067040, 133120]}
