"""Formulas of the op families flop_counter does not cover. Bytes are checked against the real
torch call: the tensor arguments' sizes plus the sizes of what torch returned."""
from __future__ import annotations

from math import prod

import pytest

torch = pytest.importorskip("torch", reason="bytes checked against the real torch call: needs torch")

import torch.nn.functional as F

from pyprof.prof.pricing.ops import Call, lookup
from pyprof.prof.pricing.registry import Unknowable
from pyprof.prof.pricing.values import ITEMSIZE
from test_prof_helpers import analyse, kernels, marker, record

FN = "torch.nn.functional"


def cost_of(mod, op, *args, **kwargs):
    return lookup(mod, op)(Call(marker(mod, op, *args, **kwargs)))


def nbytes(*values) -> int:
    total = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, (list, tuple)):
            total += nbytes(*v)
    return total


def io_bytes(fn, *args, **kwargs) -> int:
    """Tensor arguments read once plus the results written once, from the real call."""
    return nbytes(*args, *kwargs.values()) + nbytes(fn(*args, **kwargs))


def t(*shape, dtype=torch.float32):
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(*shape).to(dtype)
    return torch.zeros(*shape, dtype=dtype)


ELEMENTWISE = [
    (FN, "relu", F.relu, (t(4, 5),), {}),
    (FN, "gelu", F.gelu, (t(4, 5, dtype=torch.bfloat16),), {"approximate": "tanh"}),
    (FN, "silu", F.silu, (t(3, 7, dtype=torch.float16),), {}),
    ("torch", "sigmoid", torch.sigmoid, (t(6),), {}),
    ("torch", "tanh", torch.tanh, (t(2, 3, dtype=torch.float64),), {}),
    ("torch", "exp", torch.exp, (t(2, 3, dtype=torch.int64),), {}),  # int -> float32 result
    ("Tensor", "__add__", torch.Tensor.__add__, (t(4, 1, 5), t(3, 1)), {}),
    ("Tensor", "__mul__", torch.Tensor.__mul__, (t(4, 5, dtype=torch.bfloat16), 2.0), {}),
    ("Tensor", "__radd__", torch.Tensor.__radd__, (t(4, 5), 1), {}),
    ("torch", "add", torch.add, (t(8, 1, dtype=torch.float16), t(1, 8)), {"alpha": 2}),
    ("torch", "mul", torch.mul, (t(3, 3, dtype=torch.complex64), t(3, 3, dtype=torch.complex64)), {}),
    ("torch", "eq", torch.eq, (t(5, 5), t(5)), {}),
    ("torch", "logical_and", torch.logical_and, (t(5, dtype=torch.bool), t(5, dtype=torch.bool)), {}),
    ("torch", "where", torch.where, (t(4, 4, dtype=torch.bool), t(4, 4), t(4, 1)), {}),
    ("torch", "add", torch.add, (t(0, 5), t(5)), {}),  # zero-size
    ("torch", "add", torch.add, (t(3, dtype=torch.bfloat16), t(3, dtype=torch.float16)), {}),  # -> fp32
    ("torch", "sum", torch.sum, (t(4, 5, 6),), {"dim": 1}),
    ("torch", "mean", torch.mean, (t(4, 5, 6),), {"dim": (0, 2), "keepdim": True}),
    ("torch", "amax", torch.amax, (t(4, 5),), {"dim": -1}),
    ("torch", "sum", torch.sum, (t(4, 5, dtype=torch.float16),), {"dtype": torch.float32}),
    ("Tensor", "sum", torch.Tensor.sum, (t(4, 5),), {}),
    ("torch", "softmax", torch.softmax, (t(4, 10),), {"dim": -1}),
    (FN, "softmax", F.softmax, (t(4, 10, dtype=torch.float16),), {"dim": -1, "dtype": torch.float32}),
    (FN, "log_softmax", F.log_softmax, (t(4, 10),), {"dim": 1}),
    (FN, "layer_norm", F.layer_norm, (t(4, 6, 8), (8,), t(8), t(8)), {}),
    (FN, "rms_norm", F.rms_norm, (t(4, 8, dtype=torch.bfloat16), (8,), t(8, dtype=torch.bfloat16)), {}),
    (FN, "group_norm", F.group_norm, (t(2, 6, 4, 4), 3, t(6), t(6)), {}),
    (FN, "batch_norm", F.batch_norm, (t(4, 3, 5, 5), t(3), t(3).abs(), t(3), t(3)), {"training": False}),
    (FN, "max_pool2d", lambda *a, **k: F.max_pool2d(*a, **k, return_indices=True),
     (t(2, 3, 9, 9),), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    (FN, "avg_pool2d", F.avg_pool2d, (t(2, 3, 9, 10),), {"kernel_size": 2}),
    (FN, "adaptive_avg_pool2d", F.adaptive_avg_pool2d, (t(2, 3, 10, 7),), {"output_size": (3, 4)}),
    (FN, "interpolate", F.interpolate, (t(1, 3, 5, 6),), {"scale_factor": 2, "mode": "bilinear"}),
    (FN, "interpolate", F.interpolate, (t(1, 3, 5, 6),), {"size": (7, 9), "mode": "nearest"}),
    ("Tensor", "to", torch.Tensor.to, (t(4, 5), torch.float16), {}),
    ("Tensor", "float", torch.Tensor.float, (t(4, 5, dtype=torch.bfloat16),), {}),
    ("Tensor", "contiguous", lambda x: x.t().contiguous(), (t(4, 5),), {}),
    ("torch", "cat", torch.cat, ([t(2, 3), t(4, 3)],), {}),
    ("torch", "stack", torch.stack, ([t(2, 3), t(2, 3), t(2, 3)],), {"dim": 1}),
]


@pytest.mark.parametrize("mod,op,fn,args,kwargs", ELEMENTWISE)
def test_bytes_match_the_real_call(mod, op, fn, args, kwargs):
    cost = cost_of(mod, op, *args, **kwargs)
    want = io_bytes(fn, *args, **kwargs)
    if op == "max_pool2d":
        assert cost.bytes == want  # values and the int64 indices CUDA writes
    elif op in ("batch_norm",):
        assert cost.bytes == want  # eval: running statistics read, not written
    else:
        assert cost.bytes == want, cost.params


def test_element_wise_flops_convention():
    x = t(4, 5)
    assert cost_of(FN, "relu", x).flops == 20
    assert cost_of("torch", "add", t(8, 1), t(1, 8), alpha=2).flops == 2 * 64
    assert cost_of("torch", "softmax", t(4, 10), -1).flops == 5 * 40
    assert cost_of(FN, "layer_norm", t(4, 6, 8), (8,), t(8), t(8)).flops == 8 * 192
    assert cost_of(FN, "rms_norm", t(4, 8), (8,)).flops == 3 * 32


def test_inplace_ops_keep_self_dtype_and_shape():
    x = t(4, 5, dtype=torch.float16)
    c = cost_of("Tensor", "add_", x, t(5))
    assert c.bytes == 40 + 20 + 40 and c.dtype == "float16"
    c = cost_of("Tensor", "__iadd__", x, 1.0)
    assert c.bytes == 80


def test_pooling_and_adaptive_windows():
    x = t(2, 3, 10, 7)
    # adaptive 10 -> 3: windows [0,4) [3,7) [6,10): 12 taps; 7 -> 4: [0,2) [1,4) [3,6) [5,7): 10 taps
    assert cost_of(FN, "adaptive_avg_pool2d", x, (3, 4)).flops == 6 * 12 * 10 + 6 * 12
    assert cost_of(FN, "max_pool2d", t(1, 1, 4, 4), 2).flops == 4 * 4


def test_losses():
    logits, target = t(8, 10), torch.zeros(8, dtype=torch.int64)
    ce = cost_of(FN, "cross_entropy", logits, target)
    assert ce.flops == 5 * 80 + 8
    assert ce.bytes == 2 * 320 + 64 + 8 * 4 + 4
    assert cost_of(FN, "cross_entropy", logits, target, reduction="none").bytes == 2 * 320 + 64 + 32 + 32
    nll = cost_of(FN, "nll_loss", logits, target)
    assert nll.flops == 8 and nll.bytes == 32 + 64 + 4
    assert cost_of(FN, "mse_loss", t(4, 5), t(4, 5)).bytes == io_bytes(F.mse_loss, t(4, 5), t(4, 5))


def test_embedding_and_embedding_bag():
    idx, w = torch.zeros(4, 7, dtype=torch.int64), t(100, 16)
    e = cost_of(FN, "embedding", idx, w)
    assert e.flops == 0 and e.bytes == 4 * 7 * 8 + 2 * 4 * 7 * 16 * 4
    bag = cost_of(FN, "embedding_bag", idx, w, mode="sum")
    assert bag.flops == 4 * 7 * 16 and bag.bytes == 4 * 7 * 8 + 4 * 7 * 16 * 4 + 4 * 16 * 4
    flat, offsets = torch.zeros(10, dtype=torch.int64), torch.tensor([0, 3, 6])
    assert cost_of(FN, "embedding_bag", flat, w, offsets).flops == 10 * 16 + 3 * 16


def test_dropout_writes_a_mask_and_has_a_backward():
    x = t(10, 10, dtype=torch.float16)
    c = cost_of(FN, "dropout", x, 0.1)
    assert c.bytes == 200 + 200 + 100 and c.bwd_bytes == 200 + 200 + 100
    assert cost_of(FN, "dropout", x, 0.1, False).bytes == 400  # eval: a copy at most


def test_indexed_reads_count_the_elements_read_not_the_whole_source():
    x = t(6, 5)
    g = cost_of("torch", "gather", x, 1, torch.zeros(4, 2, dtype=torch.int64))
    assert g.bytes == 64 + 8 * 4 + 8 * 4  # index, the 8 gathered elements, the 8 written
    s = cost_of("torch", "index_select", x, 0, torch.zeros(3, dtype=torch.int64))
    assert s.bytes == 24 + 2 * 15 * 4  # index, 3 rows of 5 read and written


def test_scatter_family():
    x, idx, src = t(4, 5), torch.zeros(4, 2, dtype=torch.int64), t(4, 2)
    assert cost_of("Tensor", "scatter_", x, 1, idx, src).bytes == 64 + 8 * 4 * 2
    assert cost_of("torch", "scatter_add", x, 1, idx, src).bytes == 64 + 8 * 4 * 3 + 2 * 80
    assert cost_of("torch", "scatter_add", x, 1, idx, src).flops == 8


def test_copy_between_dtypes():
    dst, src = t(4, 5, dtype=torch.float16), t(4, 5)
    c = cost_of("Tensor", "copy_", dst, src)
    assert c.bytes == 80 + 40 and c.flops == 0


def test_optimizer_steps_need_their_hyperparameters():
    """The marker carries params {count, numel, dtype} and the foreach/fused flags but not the
    hyperparameters that change the work (momentum, amsgrad, weight_decay, maximize): na until it does."""
    p = {"count": 3, "numel": 1000, "dtype": "float32"}
    m = {"v": 1, "kind": "op", "mod": "torch.optim", "op": "AdamW.step", "args": [],
         "kwargs": {"params": p, "foreach": None}}
    with pytest.raises(Unknowable, match="amsgrad"):
        lookup("torch.optim", "AdamW.step")(Call(m))
    facts, summary = analyse(kernels(m, ["void at::native::multi_tensor_apply_kernel<...>(...)"]))
    assert facts[0].flops is None
    assert summary.warnings["optimizer amsgrad/weight_decay/maximize not in the marker"]["torch.optim.AdamW.step"] == 1
    m["kwargs"].update(amsgrad=False, weight_decay=0.01, maximize=False)
    c = lookup("torch.optim", "AdamW.step")(Call(m))
    # The for-loop step folds the step size into addcdiv's value: 12, one division fewer than the
    # multi-tensor step's 13 (test_prof_optim_loop.py prices its kernels).
    assert c.flops == 12 * 1000 and c.bytes == 7 * 4000 and "impl=loop" in c.params
    m["kwargs"].update(foreach=True)
    assert lookup("torch.optim", "AdamW.step")(Call(m)).flops == 13 * 1000
    s = {"v": 1, "kind": "op", "mod": "torch.optim", "op": "SGD.step", "args": [],
         "kwargs": {"params": p, "momentum": 0.9, "dampening": 0, "nesterov": False, "weight_decay": 0,
                    "maximize": False, "fused": True}}
    c = lookup("torch.optim", "SGD.step")(Call(s))
    assert c.flops == 4 * 1000 and c.bytes == 5 * 4000 and "impl=fused" in c.params
    s["kwargs"]["params"] = dict(p, dtype=["float32", "bfloat16"])  # mixed dtypes: bytes unknown
    assert lookup("torch.optim", "SGD.step")(Call(s)) is None


def test_real_optimizer_markers_are_costed():
    """The markers the annotation really writes for optimizer steps, recorded from real calls."""
    import pyprof
    from pyprof.nvtx import recording
    model = torch.nn.Linear(4, 3)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    adamw = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.01)
    split = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "weight_decay": 0.0}],
                            lr=0.1, weight_decay=1e-4)
    model(torch.randn(2, 4)).sum().backward()
    pyprof.init()
    try:
        with recording() as rec:
            sgd.step()
            adamw.step()
            split.step()
    finally:
        pyprof.restore()
    m_sgd, m_adamw, m_split = rec.markers
    c = lookup("torch.optim", "SGD.step")(Call(m_sgd))
    assert (c.flops, c.bytes) == (4 * 15, 5 * 15 * 4)      # p -= lr*(g + momentum*buf): one buffer
    c = lookup("torch.optim", "AdamW.step")(Call(m_adamw))
    # Decoupled decay, two moment buffers; on CPU tensors the default step is the for-loop (12 an element).
    assert (c.flops, c.bytes) == (12 * 15, 7 * 15 * 4)
    with pytest.raises(Unknowable, match="^optimizer weight_decay differs between parameter groups$"):
        lookup("torch.optim", "SGD.step")(Call(m_split))


def test_autocast_marker_sets_the_matrix_kernel_dtype():
    """Under autocast the arguments are fp32 but the GEMM runs in bf16: bytes count 2 per element,
    and the peak is the BF16 Tensor Core one. The kernel's name here states no dtype."""
    x, w = t(64, 128), t(32, 128)
    m = marker("torch.nn.functional", "linear", x, w)
    kernel = "void cutlass::Kernel2<cutlass_80_tensorop_gemm_64x64_32x6_tn_align8>(Params)"
    (plain,), _ = analyse(kernels(m, [kernel]))
    m["autocast"] = "bfloat16"
    (cast,), _ = analyse(kernels(m, [kernel]))
    assert plain.flops == cast.flops == 2 * 64 * 32 * 128
    assert (plain.dtype, cast.dtype) == ("float32", "bfloat16")
    assert plain.bytes == 2 * cast.bytes == (64 * 128 + 32 * 128 + 64 * 32) * 4
    assert cast.tc is True and cast.path != plain.path


def test_dtypes_edge_cases():
    for dt in ("float8_e4m3fn", "float8_e5m2", "complex64", "bool", "bfloat16"):
        assert dt in ITEMSIZE
    x8 = t(4, 4).to(torch.float8_e4m3fn)
    assert cost_of("Tensor", "to", x8, torch.bfloat16).bytes == 16 + 32
    m = {"v": 1, "kind": "op", "mod": "torch", "op": "add",
         "args": [{"shape": [4], "dtype": "float99"}, {"shape": [4], "dtype": "float32"}]}
    facts, summary = analyse(kernels(m, ["void at::native::vectorized_elementwise_kernel<4>(...)"]))
    assert facts[0].bytes is None and facts[0].flops == 4  # unknown dtype: bytes na, not a crash


def test_long_tensor_lists_carry_their_rest_by_runs():
    """cat of 20 tensors: the marker keeps 16 and the 4 others as runs of equal entries (2 + 2),
    so every input is known: 20 read, their sum written."""
    ts = [t(1, 2)] * 18 + [t(3, 2)] * 2
    m = marker("torch", "cat", ts)
    assert m["args"][0][-1] == {"more": 4, "runs": [[2, {"shape": [1, 2], "dtype": "float32"}],
                                                    [2, {"shape": [3, 2], "dtype": "float32"}]]}
    cost = lookup("torch", "cat")(Call(m))
    assert (cost.flops, cost.bytes) == (0, io_bytes(torch.cat, ts)) == (0, 2 * (18 * 2 + 2 * 6) * 4)


def test_truncated_lists_are_na():
    """cat of 20 tensors whose marker kept 16 and only the count of the rest (a pyprof before
    the runs, or more than 16 runs): its bytes na; its FLOPs 0 whatever the 4 others are, so that
    its backward's parts (the 16 known gradients' accumulations) are priced. Runs that do not add
    up to the count are no better."""
    m = marker("torch", "cat", [t(1, 2)] * 20)
    m["args"][0][-1] = {"more": 4}
    cost = lookup("torch", "cat")(Call(m))
    assert (cost.flops, cost.bytes, cost.params) == (0, None, "n=16+,numel=na,type=fp32")
    m["args"][0][-1] = {"more": 4, "runs": [[3, {"shape": [1, 2], "dtype": "float32"}]]}
    assert lookup("torch", "cat")(Call(m)).bytes is None
    m["args"][0][3] = {"type": "object"}  # an element the marker could not encode: not a tensor
    assert lookup("torch", "cat")(Call(m)) is None


def test_runs_past_what_the_encoder_reads_are_not_expanded():
    """A marker's runs stand for at most the 1,024 elements annotation reads for them: a forged
    one claiming a billion is the count alone (na), not a list of a billion tensors."""
    m = marker("torch", "cat", [t(1, 2)] * 20)
    m["args"][0][-1] = {"more": 10**9, "runs": [[10**9, {"shape": [1, 2], "dtype": "float32"}]]}
    cost = lookup("torch", "cat")(Call(m))
    assert (cost.flops, cost.bytes, cost.params) == (0, None, "n=16+,numel=na,type=fp32")


def test_bad_arguments_are_na_and_counted():
    m = {"v": 1, "kind": "op", "mod": "torch", "op": "mm", "args": [{"shape": [4], "dtype": "float32"}]}
    facts, summary = analyse(kernels(m, ["ampere_sgemm_128x64_nn"]))
    assert facts[0].flops is None
    assert summary.warnings["op arguments not understood"]["torch.mm"] == 1


def test_einsum_more_than_two_operands_is_na():
    assert cost_of("torch", "einsum", "ij,jk,kl->il", t(2, 3), t(3, 4), t(4, 5)) is None
    assert cost_of("torch", "einsum", "ii->i", t(3, 3)).flops == 0
    assert cost_of("torch", "einsum", "ij->", t(3, 4)).flops == 12
    assert cost_of("torch", "einsum", "i,j->ij", t(3), t(4)).flops == 12


def test_split_is_a_view_with_a_concatenating_backward():
    x = t(4, 6, dtype=torch.bfloat16)
    c = cost_of("Tensor", "split", x, 2, -1)
    assert (c.flops, c.bytes, c.bwd_bytes) == (0, 0, 2 * 48)


def test_creation_ops_write_their_result():
    assert cost_of("torch", "arange", 10).bytes == 80
    assert cost_of("torch", "arange", 0, 1, 0.25).bytes == 16
    assert cost_of("torch", "arange", 2, 11, 3, dtype=torch.int32).bytes == 12
    assert cost_of("Tensor", "zero_", t(3, 4, dtype=torch.float16)).bytes == 24


def test_views_cost_a_copy_when_a_kernel_runs_under_them():
    x = t(4, 6).t()
    assert cost_of("Tensor", "reshape", x, -1).bytes == 2 * 96
    assert cost_of("torch", "flatten", x).bytes == 2 * 96


@pytest.mark.parametrize("mod, op, args, out", [
    ("Tensor", "expand", (2, -1, -1), (2, 1, 768)),               # ViT's class token (a real H200 capture)
    ("Tensor", "expand", ([3, 4, -1, 768],), (3, 4, 1, 768)),      # one list, a new leading dim
    ("Tensor", "expand_as", (t(5, 1, 768),), (5, 1, 768)),
    ("torch", "broadcast_to", ((2, 6, 768),), (2, 6, 768)),
])
def test_expand_backward_sums_the_gradient_back(mod, op, args, out):
    """A view forward; its backward (ExpandBackward0's reduce kernel) sums the gradient, the
    expanded shape, to x's [1,1,768] fp32: one add per gradient element beyond x's 768, the
    gradient read, x's elements written; the real expanded shapes are torch's own."""
    x = t(1, 1, 768)
    assert tuple(getattr(x, op)(*args).shape if mod == "Tensor" else torch.broadcast_to(x, *args).shape) == out
    c = cost_of(mod, op, x, *args)
    n = prod(out)
    assert (c.flops, c.bytes) == (0, 768 * 4 + n * 4)
    assert (c.bwd_flops, c.bwd_bytes) == (n - 768, n * 4 + 768 * 4)
    assert c.params == f"shape=[1,1,768],to=[{','.join(map(str, out))}],type=fp32"


def test_expand_with_minus_one_on_a_new_dim_is_na():
    assert cost_of("Tensor", "expand", t(3), -1, 3) is None


@pytest.mark.parametrize("index,shape", [
    (lambda: (slice(1, 3), 0), (2, 5)),
    (lambda: (Ellipsis, slice(None, None, 2)), (4, 3, 3)),
    (lambda: (None, 1), (1, 3, 5)),
    (lambda: 2, (3, 5)),
])
def test_basic_getitem_is_a_view_and_setitem_writes_the_region(index, shape):
    from pyprof.prof.pricing.ops.memory import basic_index_steps
    x = t(4, 3, 5)
    idx = index()
    m = marker("Tensor", "__getitem__", x, idx)
    assert basic_index_steps((4, 3, 5), Call(m).args[1])[0] == tuple(x[idx].shape) == shape
    assert lookup("Tensor", "__getitem__")(Call(m)).bytes == 0
    s = lookup("Tensor", "__setitem__")(Call(marker("Tensor", "__setitem__", x, idx, 0.0)))
    assert s.bytes == x[idx].numel() * 4


def test_advanced_getitem():
    x, idx = t(10, 4), torch.zeros(3, dtype=torch.int64)
    assert cost_of("Tensor", "__getitem__", x, idx).bytes == 24 + 2 * 3 * 4 * 4  # index, rows read and written
    assert cost_of("Tensor", "__getitem__", x, x > 0) is None  # data-dependent size


def test_getitem_by_several_index_tensors_gathers_elements():
    """A top-2 router's weights[rows, slot] (an MoE's routing): the indices read, each element
    taken read and written (not the whole source: as test_indexed_reads_...), the result's size
    the real call's, index shapes broadcast together."""
    w, rows, slot = t(128, 2), torch.tensor([3, 5, 9]), torch.tensor([0, 1, 1])
    c = cost_of("Tensor", "__getitem__", w, [rows, slot])
    assert (c.flops, c.bytes) == (0, nbytes(rows, slot) + 2 * nbytes(w[rows, slot]))
    x, i, j = t(6, 4, 5), torch.tensor([[1], [2]]), torch.tensor([0, 3, 1])
    assert cost_of("Tensor", "__getitem__", x, [i, j]).bytes == nbytes(i, j) + 2 * nbytes(x[i, j])  # 2x3 rows of 5


def test_index_add_backward_gathers_the_source_gradient():
    """out.index_add_(0, rows, y), an MoE's combine: forward the index, y and the rows it adds into
    read, those rows written, an add each; backward dOut passes to out's gradient as it is and y's
    is dOut's rows gathered (index_select's bytes, the real call's result for its size); a source
    needing no gradient, no backward work."""
    out, rows = t(128, 64), torch.tensor([3, 9, 9, 40])
    y = t(4, 64).requires_grad_()
    c = cost_of("Tensor", "index_add_", out, 0, rows, y)
    assert (c.flops, c.bytes) == (4 * 64, nbytes(rows) + 3 * nbytes(y))
    assert (c.bwd_flops, c.bwd_bytes) == (0, nbytes(rows) + 2 * nbytes(out.index_select(0, rows)))
    c = cost_of("Tensor", "index_add_", out.requires_grad_(), 0, rows, y.detach())
    assert (c.bwd_flops, c.bwd_bytes) == (0, 0)


def test_where_of_a_condition_alone_is_nonzero():
    """torch.where(condition) returns the nonzero indices, not a select's three operands: what
    it writes, and for a condition of two dims the coordinates it computes, depend on the data
    (FLOPs and bytes na without the call's out mark); a 1-dim condition's two tests an element
    (the count, then the select) are known."""
    cond = t(128, 2) > 0
    for mod, op, args in (("torch", "where", (cond,)), ("torch", "nonzero", (cond,)), ("Tensor", "nonzero", (cond,)),
                          ("torch", "argwhere", (cond,))):
        c = cost_of(mod, op, *args)
        assert (c.flops, c.bytes) == (None, None), (mod, op)
    c = cost_of("torch", "nonzero", t(128) > 0)
    assert (c.flops, c.bytes) == (256, None)
    x, y = t(128, 2), t(128, 2)
    c = cost_of("torch", "where", cond, x, y)
    assert (c.flops, c.bytes) == (256, io_bytes(torch.where, cond, x, y))


def test_nonzero_with_its_out_mark_prices_each_kernel():
    """With the call's output (parse adds its out mark to the marker: 127 of a [512, 2] bool
    condition's elements true, an MoE router's torch.where(idx == e)), each of PyTorch's kernels
    its own work: cub's count (the condition read, the int count written, a test an element), its
    flagged select (read again, 127 int64 positions and the count written), and write_indices
    (each position into 2 coordinates in place: the positions read, 2 x 127 int64 written); cub's
    tile-state init is its own part. The kernels add up to the call; a [512] condition has no
    write_indices. Without the mark only the count is known: the select's bytes and
    write_indices' work are na."""
    cond = t(512, 2) > 0
    m = marker("torch", "where", cond)
    m["out"] = [{"shape": [127], "dtype": "int64"}] * 2
    names = ["void at_cuda_detail::cub::detail::reduce::DeviceReduceSingleTileKernel<Policy1000, transform_iterator<"
             "at::native::<unnamed>::NonZeroOp<bool>, const bool *>, int *, unsigned long long>(T2, T3, T4, T5, T6, T8)",
             "void at_cuda_detail::cub::detail::scan::DeviceCompactInitKernel<at_cuda_detail::cub::ScanTileState<int, "
             "(bool)1>, int *>(T1, int, T2)",
             "void at_cuda_detail::cub::detail::select::DeviceSelectSweepKernel<Policy1000, counting_iterator<long>, "
             "transform_iterator<at::native::<unnamed>::NonZeroOp<bool>, const bool *>, long *, int *>(T2, T3)",
             "void at::native::<unnamed>::write_indices<long>(long *, at::native::<unnamed>::TensorDims<T1>, int, T1)"]
    facts, _ = analyse(kernels(m, names, grid=[1, 1, 1], block=[128, 1, 1]))
    n = 1024
    assert [(f.flops, f.bytes) for f in facts] == [(n, n + 4), (0, 268), (n, n + 8 * 127 + 4), (2 * 127, 8 * 127 * 3)]
    del m["out"]
    facts, _ = analyse(kernels(m, names, grid=[1, 1, 1], block=[128, 1, 1]))
    assert [(f.flops, f.bytes) for f in facts] == [(n, n + 4), (0, 268), (n, None), (None, None)]
    m = marker("torch", "nonzero", t(512) > 0)
    m["out"] = {"shape": [40, 1], "dtype": "int64"}
    facts, _ = analyse(kernels(m, names[:3], grid=[1, 1, 1], block=[128, 1, 1]))
    assert [(f.flops, f.bytes) for f in facts] == [(512, 516), (0, 268), (512, 512 + 8 * 40 + 4)]


def test_backward_costs_of_norms_and_losses():
    x, w, b = t(4, 6, 8, dtype=torch.bfloat16), t(8, dtype=torch.bfloat16), t(8, dtype=torch.bfloat16)
    ln = cost_of(FN, "layer_norm", x, (8,), w, b)
    assert ln.bwd_flops == 2 * ln.flops
    assert ln.bwd_bytes == 3 * 192 * 2 + 2 * 16 + 16  # dY, X, dX; W read and dW written; dB written
    rms = cost_of(FN, "rms_norm", x, (8,))
    assert rms.bwd_bytes == 3 * 192 * 2
    logits, target = t(8, 10), torch.zeros(8, dtype=torch.int64)
    ce = cost_of(FN, "cross_entropy", logits, target)
    assert (ce.bwd_flops, ce.bwd_bytes) == (4 * 80 + 8, 2 * 320 + 64 + 4)
    mse = cost_of(FN, "mse_loss", t(4, 5), t(4, 5))
    assert (mse.bwd_flops, mse.bwd_bytes) == (40, 80 + 80 + 4 + 80)
    e = cost_of(FN, "embedding", torch.zeros(4, 7, dtype=torch.int64), t(100, 16))
    # dOut read, the rows added into read and written; dWeight's zero fill is a part of its own.
    assert (e.bwd_flops, e.bwd_bytes, e.grad_fill) == (4 * 7 * 16, 4 * 7 * 8 + 3 * 4 * 7 * 16 * 4, 100 * 16)


ODD_ARGS = [[], [None], [3], ["x"], [{"shape": [0], "dtype": "float32"}] * 4,
            [{"shape": [2, 3], "dtype": "weird"}, {"shape": [3], "dtype": None}, 0, 0, 0, 0, 0, 0],
            [{"shape": [2, 3, 4, 5], "dtype": "float16"}, [1, 2], {"more": 3}, {"type": "list"}]]


@pytest.mark.parametrize("args", ODD_ARGS)
def test_no_formula_raises_on_odd_arguments(args):
    """Every formula in the table, fed arguments it does not expect: a cost, or na with a
    warning, never an exception out of the analysis."""
    from pyprof.prof.pricing.marker_costs import MarkerCosts
    from pyprof.prof.pricing.ops import registered
    costs = MarkerCosts()
    for name in registered():
        optim = name.startswith("torch.optim.")  # op names like SGD.step contain a dot
        mod, op = ("torch.optim", name[len("torch.optim."):]) if optim else name.rsplit(".", 1)
        costs.of({"v": 1, "kind": "op", "mod": mod, "op": op, "args": args})


def test_fused_optimizer_work_goes_to_the_fused_kernel_not_the_step_counter():
    """A fused AdamW step launches a _foreach_add_ (step counters) before _fused_adamw_ (the math):
    as in examples/gpt.sqlite. The math kernel carries the step (7 lists: parameter, gradient and
    moments read, all but the gradient written); the counter launch its 29 1-element tensors."""
    p = {"count": 29, "numel": 2137088, "dtype": "float32"}
    m = {"v": 1, "kind": "op", "mod": "torch.optim", "op": "AdamW.step", "args": [],
         "kwargs": {"params": p, "foreach": None, "fused": True, "weight_decay": 0.01, "amsgrad": False,
                    "maximize": False}}
    step = {"name": "Optimizer.step#AdamW.step", "opId": 900}
    launch = "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::{}>(T1, T2, T3...)"
    recs = [record(m, launch.format("TensorListMetadata<(int)1>, at::native::<unnamed>::BinaryOpScalarFunctor<float, "
                                    "(int)1, (int)1, (int)0>, std::plus<float>, float"), subSeqId=0, grid=[29, 1, 1],
                   torchOps=[step, {"name": "aten::_foreach_add_", "opId": 901}]),
            record(m, launch.format("FusedOptimizerTensorListMetadata<(int)4>, at::native::<unnamed>::FusedAdamMath"
                                    "Functor<float, (int)4, (at::native::ADAM_MODE)1, (bool)0>, const float *"),
                   subSeqId=1, grid=[60, 1, 1], torchOps=[step, {"name": "aten::_fused_adamw_", "opId": 902}])]
    counter, math = analyse(recs)[0]
    assert (counter.flops, counter.bytes) == (29, 29 * 2 * 4)
    assert (math.flops, math.bytes) == (13 * 2137088, 7 * 2137088 * 4)
