"""NCCL kernels as collectives (pyprof/prof/comms/collectives.py): identity from markers, kernel names and
record_param_comms ranges; sizes and bus bandwidths by nccl-tests' conventions, exactly."""
import pytest

from pyprof.prof.comms.collectives import (ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, GATHER, RECV, REDUCE,
                                     REDUCESCATTER, SCATTER, SEND, SENDRECV, Collective, from_kernel_name,
                                     from_marker, is_nccl, of_record)

T = lambda shape, dtype="float32": {"shape": list(shape), "dtype": dtype}  # noqa: E731


def dist_marker(op, args, kwargs=None, size=4, group="0"):
    m = {"v": 1, "kind": "op", "mod": "torch.distributed", "op": op, "args": args,
         "dist": {"rank": 1, "world": 8, "group": group, "groupRank": 1, "groupSize": size}}
    if kwargs:
        m["kwargs"] = kwargs
    return m


@pytest.mark.parametrize("kind,n,factor", [
    (ALLREDUCE, 2, 1.0), (ALLREDUCE, 8, 1.75), (ALLREDUCE, 64, 126 / 64),
    (ALLGATHER, 2, 0.5), (ALLGATHER, 8, 0.875), (REDUCESCATTER, 8, 0.875), (REDUCESCATTER, 64, 63 / 64),
    (ALLTOALL, 4, 0.75), (GATHER, 4, 0.75), (SCATTER, 4, 0.75),
    (BROADCAST, 8, 1.0), (REDUCE, 8, 1.0), (SEND, 2, 1.0), (RECV, 2, 1.0), (SENDRECV, 8, 1.0),
])
def test_bus_bandwidth_is_nccl_tests_factor_times_algbw(kind, n, factor):
    c = Collective(kind, "float32", 1_000_000_000, n, "marker")
    assert c.algbw(1_000_000) == 1000.0          # 1 GB in 1 ms: 1000 GB/s
    assert c.busbw(1_000_000) == pytest.approx(1000.0 * factor, rel=1e-15)


def test_unknown_size_group_or_duration_gives_none():
    assert Collective(ALLREDUCE, "float32", None, 8, "kernel").algbw(10) is None
    assert Collective(ALLREDUCE, "float32", 100, None, "kernel").busbw(10) is None
    assert Collective(ALLREDUCE, "float32", 100, 8, "kernel").algbw(0) is None
    assert Collective(None, None, 100, 8, "kernel").busbw(10) is None


@pytest.mark.parametrize("op,args,kwargs,kind,dtype,size", [
    ("all_reduce", [T([6], "bfloat16")], None, ALLREDUCE, "bfloat16", 12),
    ("all_reduce", [], {"tensor": T([10, 10])}, ALLREDUCE, "float32", 400),
    # all-gather: S is the gathered buffer, n x the shard
    ("all_gather_into_tensor", [T([512], "bfloat16"), T([128], "bfloat16")], None, ALLGATHER, "bfloat16", 1024),
    ("all_gather_single", [T([512], "bfloat16"), T([128], "bfloat16")], None, ALLGATHER, "bfloat16", 1024),
    ("all_gather", [[T([3]), T([3]), T([3]), T([3])], T([3])], None, ALLGATHER, "float32", 48),
    # reduce-scatter: S is the input, n x the result
    ("reduce_scatter_tensor", [T([32]), T([128])], None, REDUCESCATTER, "float32", 512),
    ("reduce_scatter", [T([3], "float16"), [T([3], "float16")] * 4], None, REDUCESCATTER, "float16", 24),
    ("broadcast", [T([5], "int64"), 0], None, BROADCAST, "int64", 40),
    ("reduce", [T([7]), 0], None, REDUCE, "float32", 28),
    ("all_to_all_single", [T([16]), T([16])], None, ALLTOALL, "float32", 64),
    ("all_to_all", [[T([2])] * 4, [T([2])] * 4], None, ALLTOALL, "float32", 32),
    ("gather", [T([2]), [T([2])] * 4, 0], None, GATHER, "float32", 32),
    ("scatter", [T([2]), [T([2])] * 4, 0], None, SCATTER, "float32", 32),
    ("send", [T([9]), 1], None, SEND, "float32", 36),
    ("irecv", [T([9], "uint8"), 0], None, RECV, "uint8", 9),
    # a batch of P2POps: one kernel moving every send and receive
    ("batch_isend_irecv", [[["isend", T([5000]), 1], ["irecv", T([5000]), 3]]], None, SENDRECV, "float32", 40000),
    ("batch_isend_irecv", [[["isend", T([8], "float16"), 1], ["isend", T([4], "float16"), 2]]], None, SEND,
     "float16", 24),
])
def test_marker_formulas(op, args, kwargs, kind, dtype, size):
    c = from_marker(dist_marker(op, args, kwargs))
    assert c == Collective(kind, dtype, size, 4, "marker", "0")


def test_a_batch_of_several_dtypes_has_no_size():
    c = from_marker(dist_marker("batch_isend_irecv", [[["isend", T([8], "float16"), 1], ["irecv", T([8]), 1]]], None))
    assert c == Collective(SENDRECV, "float16", None, 4, "marker", "0")


def test_marker_without_dist_or_of_another_module():
    m = dist_marker("all_reduce", [T([4])])
    del m["dist"]
    assert from_marker(m) == Collective(ALLREDUCE, "float32", 16, None, "marker", None)
    assert from_marker({"kind": "op", "mod": "torch", "op": "add", "args": []}) is None
    assert from_marker(dist_marker("get_rank", [])) is None
    # A truncated list (more than 16 tensors) leaves the size unknown, not wrong.
    trunc = dist_marker("all_to_all", [[T([2])] * 16 + [{"more": 4}], [T([2])] * 16 + [{"more": 4}]])
    assert from_marker(trunc).size is None


@pytest.mark.parametrize("name,kind,dtype", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ALLREDUCE, "bfloat16"),
    ("ncclDevKernel_AllGather_RING_LL", ALLGATHER, None),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_SIMPLE", REDUCESCATTER, "float32"),
    ("ncclDevKernel_Broadcast_RING_LL", BROADCAST, None),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", SENDRECV, None),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", None, None),
    ("ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)", ALLREDUCE, "float16"),
    ("ncclKernel_Reduce_RING_LL_Sum_int64_t", REDUCE, "int64"),
])
def test_kernel_names(name, kind, dtype):
    assert is_nccl(name)
    assert from_kernel_name(name) == (kind, dtype)


def rec(short, **kw):
    r = {"kind": "kernel", "kShortName": short, "kLongName": short, "kDuration": 1000, "marker": None,
         "torchOps": []}
    r.update(kw)
    return r


def test_of_record_prefers_the_marker_and_fills_the_group_size_from_the_job():
    m = dist_marker("all_gather_into_tensor", [T([256], "bfloat16"), T([64], "bfloat16")], size=4)
    r = rec("ncclDevKernel_AllGather_RING_LL", marker=m)
    assert of_record(r, ranks=8) == Collective(ALLGATHER, "bfloat16", 512, 4, "marker", "0")
    del m["dist"]
    assert of_record(r, ranks=8).ranks == 8


def test_of_record_from_record_param_comms_sizes_and_kernel_dtype():
    ops = [{"name": "record_param_comms", "opId": 5, "sizes": [[1024], [], []]}]
    r = rec("ncclDevKernel_AllReduce_Sum_f32_RING_LL", torchOps=ops)
    assert of_record(r, ranks=2) == Collective(ALLREDUCE, "float32", 4096, 2, "kernel")
    # An all-gather's input is one rank's part: S = n x it, so it needs n.
    g = rec("ncclDevKernel_AllGather_RING_LL_bf16", torchOps=ops)
    assert of_record(g, ranks=2).size == 4096 and of_record(g).size is None
    # Without sizes (emit_nvtx without record_shapes): kind and dtype only.
    assert of_record(rec("ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                         torchOps=[{"name": "record_param_comms", "opId": 5}])) == \
        Collective(ALLREDUCE, "float32", None, None, "kernel")


def test_non_nccl_kernels_and_copies_are_no_collectives():
    assert of_record(rec("ampere_sgemm_128x64_tn")) is None
    assert of_record({"kind": "memcpy", "kShortName": "memcpy DtoD"}) is None
    assert not is_nccl(None)


def call(name, size, comm="c1"):
    return {"call": name, "bytes": size, "comm": comm}


def test_of_record_from_nccls_calls_where_no_marker_sizes_it():
    """A record's `nccl` (parse/nccl.py): S from NCCL's message sizes, n x them where NCCL counts
    one rank's part; a batch of sends and receives is one SendRecv of their sum."""
    r = rec("ncclDevKernel_AllReduce_Sum_f32_RING_LL", nccl=[call("ncclAllReduce", 2099200)])
    assert of_record(r) == Collective(ALLREDUCE, "float32", 2099200, None, "nccl")
    g = rec("ncclDevKernel_AllGather_RING_LL", nccl=[call("ncclAllGather", 1000)])
    assert of_record(g) == Collective(ALLGATHER, None, None, None, "nccl", None, 1000)
    assert of_record(g).with_ranks(4).size == 4000 and of_record(g, ranks=2).size == 2000
    b = rec("ncclDevKernel_SendRecv", nccl=[call("ncclSend", 12000), call("ncclRecv", 12000)])
    assert (of_record(b).kind, of_record(b).size, of_record(b).busbw(1000)) == (SENDRECV, 24000, 24.0)
    # A marker that sizes the call wins; one that cannot (a truncated list) takes NCCL's size.
    m = dist_marker("all_to_all_single", [T([8]), T([8])], size=2)
    assert of_record(rec("ncclDevKernel_SendRecv", marker=m, nccl=[call("ncclAlltoAll", 999)])).size == 32
    m = dist_marker("all_to_all", [[T([8])], ["..."]], size=2)
    assert of_record(rec("ncclDevKernel_SendRecv", marker=m, nccl=[call("ncclAlltoAll", 16)])) == \
        Collective(ALLTOALL, None, 32, 2, "nccl", "0", 16)


@pytest.mark.parametrize("calls", [
    [], "x", [1], [call("ncclAllReduce", -1)], [call("ncclAllReduce", 1.5)], [call("ncclCommSplit", 8)],
    [{"call": ["ncclAllReduce"], "bytes": 8}], [call("ncclAllReduce", 8, "c1"), call("ncclAllReduce", 8, "c2")],
    [call("ncclAllReduce", 8), call("ncclAllGather", 8)], [call("ncclBroadcast", 8), call("ncclReduce", 8)],
])
def test_nccl_calls_that_do_not_say_give_no_size(calls):
    """Not calls of one known kind (or one send/receive batch) on one communicator: the kernel's
    name still gives the kind, the size stays unknown."""
    assert of_record(rec("ncclDevKernel_AllReduce_Sum_f32_RING_LL", nccl=calls)) == \
        Collective(ALLREDUCE, "float32", None, None, "kernel")
