"""The exact marker (docs/markers.md) of each call, captured through pyprof.nvtx.recording()."""
import json
import math
import operator

import pytest

torch = pytest.importorskip("torch", reason="the annotation encodes torch calls: needs torch")

import torch.nn.functional as F

from pyprof.nvtx import recording
from pyprof.nvtx.marker import op_marker
from test_prof_helpers import tensor as T  # the description prof's torch-free tests build markers from

FN = "torch.nn.functional"


def r(*shape, **kwargs):
    return torch.randn(*shape, **kwargs)


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def expect(fn, mod, op, args, kwargs=None, module=None):
    """Run `fn` (a one-line lambda) under a recording; its single outermost range must be
    exactly this op marker, with the lambda's line as call site, in compact JSON."""
    with recording() as rec:
        fn()
    top = [x for x in rec.ranges if x.depth == 0]
    assert len(top) == 1, [x.text for x in rec.ranges]
    want = {"v": 1, "kind": "op", "mod": mod, "op": op, "args": args}
    if kwargs:
        want["kwargs"] = kwargs
    want["site"] = f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
    if module is not None:
        want["module"] = module
    assert top[0].marker == want
    assert top[0].text == dumps(want)


@pytest.fixture(autouse=True)
def _on(pyprof_on):
    yield


# --- convolutions -----------------------------------------------------------------------------

def test_conv1d_keywords():
    x, w, b = r(2, 4, 16), r(8, 4, 3), r(8)
    expect(lambda: F.conv1d(x, w, b, stride=2, padding=1, dilation=2), FN, "conv1d",
           [T(2, 4, 16), T(8, 4, 3), T(8)], {"stride": 2, "padding": 1, "dilation": 2})


def test_conv2d_positional_stride_padding_dilation_groups():
    x, w = r(1, 4, 8, 8), r(6, 2, 3, 3)
    expect(lambda: F.conv2d(x, w, None, 2, 1, 2, 2), FN, "conv2d",
           [T(1, 4, 8, 8), T(6, 2, 3, 3), None, 2, 1, 2, 2])


def test_conv2d_string_padding_and_tuple_stride():
    x, w = r(1, 3, 8, 8), r(4, 3, 3, 3)
    expect(lambda: F.conv2d(x, w, padding="same", stride=(1, 1)), FN, "conv2d",
           [T(1, 3, 8, 8), T(4, 3, 3, 3)], {"padding": "same", "stride": [1, 1]})


def test_conv3d():
    x, w = r(1, 2, 4, 8, 8), r(4, 2, 3, 3, 3)
    expect(lambda: F.conv3d(x, w, stride=(1, 2, 2), padding="valid"), FN, "conv3d",
           [T(1, 2, 4, 8, 8), T(4, 2, 3, 3, 3)], {"stride": [1, 2, 2], "padding": "valid"})


def test_conv_transpose2d():
    x, w = r(1, 4, 5, 5), r(4, 2, 3, 3)
    expect(lambda: F.conv_transpose2d(x, w, stride=2, output_padding=1), FN, "conv_transpose2d",
           [T(1, 4, 5, 5), T(4, 2, 3, 3)], {"stride": 2, "output_padding": 1})


def test_conv2d_channels_last_input():
    x = r(2, 3, 8, 8).to(memory_format=torch.channels_last)
    w = r(4, 3, 3, 3)
    expect(lambda: F.conv2d(x, w), FN, "conv2d",
           [T(2, 3, 8, 8, format="channels_last"), T(4, 3, 3, 3)])


def test_channels_last_3d():
    x = r(1, 2, 3, 4, 5).to(memory_format=torch.channels_last_3d)
    expect(lambda: torch.relu(x), "torch", "relu", [T(1, 2, 3, 4, 5, format="channels_last_3d")])


# --- linear algebra -------------------------------------------------------------------------

def test_linear_with_bias():
    x, w, b = r(4, 8), r(16, 8), r(16)
    expect(lambda: F.linear(x, w, b), FN, "linear", [T(4, 8), T(16, 8), T(16)])


def test_linear_without_bias():
    x, w = r(2, 3, 8), r(16, 8)
    expect(lambda: F.linear(x, w), FN, "linear", [T(2, 3, 8), T(16, 8)])


@pytest.mark.parametrize("a,b", [
    ((5,), (5,)),                 # dot
    ((3, 5), (5,)),               # matrix x vector
    ((5,), (5, 4)),               # vector x matrix
    ((3, 5), (5, 4)),             # mm
    ((2, 3, 5), (5, 4)),          # batched x matrix
    ((3, 5), (7, 5, 4)),          # matrix x batched (broadcast)
    ((2, 1, 3, 5), (1, 6, 5, 4)),  # 4-D broadcast
])
def test_matmul_ranks(a, b):
    x, y = r(*a), r(*b)
    expect(lambda: torch.matmul(x, y), "torch", "matmul", [T(*a), T(*b)])


def test_matmul_operator_with_transposed_operand():
    x, w = r(3, 5), r(4, 5)
    wt = w.t()
    expect(lambda: x @ wt, "Tensor", "__matmul__", [T(3, 5), T(5, 4, strides=[1, 5])])


def test_bmm():
    x, y = r(4, 3, 5), r(4, 5, 2)
    expect(lambda: torch.bmm(x, y), "torch", "bmm", [T(4, 3, 5), T(4, 5, 2)])


def test_addmm_alpha_beta():
    b, x, y = r(3, 2), r(3, 5), r(5, 2)
    expect(lambda: torch.addmm(b, x, y, beta=0.5, alpha=2), "torch", "addmm",
           [T(3, 2), T(3, 5), T(5, 2)], {"beta": 0.5, "alpha": 2})


def test_einsum():
    x, y = r(2, 3, 4), r(2, 4, 5)
    expect(lambda: torch.einsum("bij,bjk->bik", x, y), "torch", "einsum",
           ["bij,bjk->bik", T(2, 3, 4), T(2, 4, 5)])


def test_scaled_dot_product_attention():
    q, k, v = r(2, 8, 16, 64, dtype=torch.bfloat16), r(2, 8, 16, 64, dtype=torch.bfloat16), r(2, 8, 16, 64, dtype=torch.bfloat16)
    expect(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), FN, "scaled_dot_product_attention",
           [T(2, 8, 16, 64, dtype="bfloat16")] * 3, {"is_causal": True})


# --- normalization, activations, losses ------------------------------------------------------

def test_layer_norm():
    x, w, b = r(2, 5, 8), r(8), r(8)
    expect(lambda: F.layer_norm(x, (8,), w, b, eps=1e-6), FN, "layer_norm",
           [T(2, 5, 8), [8], T(8), T(8)], {"eps": 1e-6})


def test_group_norm():
    x = r(2, 4, 3, 3)
    expect(lambda: F.group_norm(x, 2), FN, "group_norm", [T(2, 4, 3, 3), 2])


def test_batch_norm_training():
    x, rm, rv = r(4, 3, 5, 5), torch.zeros(3), torch.ones(3)
    expect(lambda: F.batch_norm(x, rm, rv, training=True, momentum=0.1), FN, "batch_norm",
           [T(4, 3, 5, 5), T(3), T(3)], {"training": True, "momentum": 0.1})


def test_embedding():
    idx, weight = torch.tensor([[1, 2], [3, 4]]), r(10, 6)
    expect(lambda: F.embedding(idx, weight, padding_idx=0), FN, "embedding",
           [T(2, 2, dtype="int64"), T(10, 6)], {"padding_idx": 0})


def test_cross_entropy():
    logits, target = r(4, 10), torch.tensor([1, 0, 3, 9])
    expect(lambda: F.cross_entropy(logits, target, label_smoothing=0.1), FN, "cross_entropy",
           [T(4, 10), T(4, dtype="int64")], {"label_smoothing": 0.1})


def test_softmax_with_dim():
    x = r(2, 7)
    expect(lambda: F.softmax(x, dim=-1), FN, "softmax", [T(2, 7)], {"dim": -1})


def test_tensor_softmax_method():
    x = r(2, 7)
    expect(lambda: x.softmax(1, dtype=torch.float64), "Tensor", "softmax",
           [T(2, 7), 1], {"dtype": {"dtype": "float64"}})


def test_dropout():
    x = r(3, 3)
    expect(lambda: F.dropout(x, p=0.25, training=True), FN, "dropout", [T(3, 3)], {"p": 0.25, "training": True})


def test_interpolate():
    x = r(1, 3, 4, 4)
    expect(lambda: F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False), FN, "interpolate",
           [T(1, 3, 4, 4)], {"scale_factor": 2.0, "mode": "bilinear", "align_corners": False})


def test_max_pool2d():
    x = r(1, 3, 8, 8)
    expect(lambda: F.max_pool2d(x, 2), FN, "max_pool2d", [T(1, 3, 8, 8), 2])


def test_avg_pool2d():
    x = r(1, 3, 8, 8)
    expect(lambda: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), FN, "avg_pool2d",
           [T(1, 3, 8, 8), 3], {"stride": 2, "padding": 1, "count_include_pad": False})


# --- element-wise, in-place, scalars ------------------------------------------------------------

def test_add_broadcast():
    x, y = r(4, 1, 3), r(5, 1)
    expect(lambda: x + y, "Tensor", "__add__", [T(4, 1, 3), T(5, 1)])


def test_mul_python_float():
    x = r(3)
    expect(lambda: x * 2.5, "Tensor", "__mul__", [T(3), 2.5])


def test_reflected_sub_int():
    x = r(3)
    expect(lambda: 3 - x, "Tensor", "__rsub__", [T(3), 3])


def test_zero_dim_tensor_operand_is_not_read():
    x, s = r(3), torch.tensor(2.0)
    expect(lambda: torch.mul(x, s), "torch", "mul", [T(3), T()])


def test_inplace_method_with_alpha():
    x, y = r(2, 3), r(2, 3)
    expect(lambda: x.add_(y, alpha=2), "Tensor", "add_", [T(2, 3), T(2, 3)], {"alpha": 2})


def test_inplace_operator():
    x = r(2, 3)
    expect(lambda: operator.iadd(x, 1), "Tensor", "__iadd__", [T(2, 3), 1])


def test_comparison_operator():
    x = r(4)
    expect(lambda: x > 0, "Tensor", "__gt__", [T(4), 0])


def test_inf_and_nan_scalars():
    x = r(4)
    expect(lambda: torch.clamp(x, min=-math.inf, max=math.inf), "torch", "clamp",
           [T(4)], {"min": {"float": "-inf"}, "max": {"float": "inf"}})
    expect(lambda: torch.full((2,), math.nan), "torch", "full", [[2], {"float": "nan"}])


def test_complex_scalar():
    x = r(2, dtype=torch.complex64)
    expect(lambda: torch.mul(x, 1 + 2j), "torch", "mul", [T(2, dtype="complex64"), {"complex": [1.0, 2.0]}])


def test_where_and_bool_kwargs():
    c, x = r(3) > 0, r(3)
    expect(lambda: torch.where(c, x, 0.0), "torch", "where", [T(3, dtype="bool"), T(3), 0.0])
    expect(lambda: x.sum(dim=0, keepdim=True), "Tensor", "sum", [T(3)], {"dim": 0, "keepdim": True})


# --- indexing, joining, conversion --------------------------------------------------------------

def test_getitem_int_and_slice():
    x = r(4, 5)
    expect(lambda: x[0, 1:3], "Tensor", "__getitem__", [T(4, 5), [0, {"slice": [1, 3, None]}]])


def test_getitem_mask():
    x = r(4, 5)
    mask = x > 0
    expect(lambda: x[mask], "Tensor", "__getitem__", [T(4, 5), T(4, 5, dtype="bool")])


def test_getitem_ellipsis_none():
    x = r(4, 5)
    expect(lambda: x[..., None], "Tensor", "__getitem__", [T(4, 5), [{"ellipsis": True}, None]])


def test_setitem():
    x, idx = r(4, 5), torch.tensor([0, 2])
    expect(lambda: operator.setitem(x, idx, 0.0), "Tensor", "__setitem__", [T(4, 5), T(2, dtype="int64"), 0.0])


def test_cat_list():
    a, b = r(2, 3), r(2, 4)
    expect(lambda: torch.cat([a, b], dim=1), "torch", "cat", [[T(2, 3), T(2, 4)]], {"dim": 1})


def test_stack_tuple():
    a, b = r(2, 3), r(2, 3)
    expect(lambda: torch.stack((a, b)), "torch", "stack", [[T(2, 3), T(2, 3)]])


def test_to_dtype():
    x = r(2, 2)
    expect(lambda: x.to(torch.float16), "Tensor", "to", [T(2, 2), {"dtype": "float16"}])


def test_to_device_and_memory_format():
    x = r(1, 3, 2, 2)
    expect(lambda: x.to(torch.device("cpu"), memory_format=torch.channels_last), "Tensor", "to",
           [T(1, 3, 2, 2), {"device": "cpu"}], {"memory_format": {"format": "channels_last"}})


def test_dtype_kwarg_of_factory():
    expect(lambda: torch.zeros(2, 3, dtype=torch.bfloat16), "torch", "zeros", [2, 3], {"dtype": {"dtype": "bfloat16"}})


def test_permuted_view_strides():
    x = r(2, 3, 4).permute(0, 2, 1)
    expect(lambda: x.contiguous(), "Tensor", "contiguous", [T(2, 4, 3, strides=[12, 1, 4])])


def test_long_list_truncated():
    expect(lambda: torch.tensor(list(range(20))), "torch", "tensor", [list(range(16)) + [{"more": 4}]])


def test_long_tensor_list_keeps_its_rest_by_runs():
    """Past 16 tensors, the rest's entries run-length coded in order; more than 16 runs of one
    dtype, each one's elements; of several dtypes, an element that is not a plain tensor (a
    Parameter), or more than 1,024 of them, only their count."""
    a, b = r(4, 32), r(4, 32, dtype=torch.float16)
    many = [a] * 17 + [b] * 2 + [a]
    expect(lambda: torch.cat(many), "torch", "cat",
           [[T(4, 32)] * 16 + [{"more": 4, "runs": [[1, T(4, 32)], [2, T(4, 32, dtype="float16")], [1, T(4, 32)]]}]])
    distinct = [r(i + 1) for i in range(40)]
    expect(lambda: torch.cat(distinct), "torch", "cat", [[T(i + 1) for i in range(16)] + [
        {"more": 24, "numels": list(range(17, 41)), "dtype": "float32"}]])
    mixed = distinct[:39] + [r(40, dtype=torch.float16)]
    expect(lambda: torch.cat(mixed), "torch", "cat", [[T(i + 1) for i in range(16)] + [{"more": 24}]])
    params = [a] * 16 + [torch.nn.Parameter(r(4, 32))]
    expect(lambda: torch.cat(params), "torch", "cat", [[T(4, 32)] * 16 + [{"more": 1}]])
    long = [r(1)] * (16 + 1025)  # past the 1,024 elements read for their runs: the count alone
    expect(lambda: torch.cat(long), "torch", "cat", [[T(1)] * 16 + [{"more": 1025}]])


def test_deep_nesting():
    expect(lambda: torch.tensor([[[[1.0]]]]), "torch", "tensor", [[[[{"type": "list"}]]]])


def test_unknown_object_by_type_name():
    x = r(3)
    gen = torch.Generator()
    expect(lambda: torch.rand(3, generator=gen), "torch", "rand", [3], {"generator": {"type": "Generator"}})
    expect(lambda: torch.add(x, 1), "torch", "add", [T(3), 1])


# --- autograd, optimizer, modules -----------------------------------------------------------------

def test_backward():
    x = r(3, requires_grad=True)
    loss = (x * 2).sum()
    expect(lambda: loss.backward(), "Tensor", "backward", [T(grad=True)])


def test_tensors_that_require_grad_say_so():
    """Only they: prof prices the gradients a backward computes from it (a frozen bias, data
    that needs no gradient)."""
    x, w, b = r(2, 8), torch.nn.Parameter(r(8)), torch.nn.Parameter(r(8), requires_grad=False)
    expect(lambda: F.layer_norm(x, (8,), w, b), FN, "layer_norm", [T(2, 8), [8], T(8, grad=True), T(8)])


def test_autograd_backward_function():
    x = r(3, requires_grad=True)
    y = x.exp()
    g = torch.ones(3)
    expect(lambda: torch.autograd.backward([y], [g]), "torch.autograd", "backward", [[T(3, grad=True)], [T(3)]])


def test_optimizer_step():
    w = torch.nn.Parameter(r(4, 3))
    b = torch.nn.Parameter(r(4, dtype=torch.float32))
    unused = torch.nn.Parameter(r(7))
    opt = torch.optim.SGD([{"params": [w]}, {"params": [b, unused], "weight_decay": 0.0}], lr=0.1, momentum=0.9,
                          weight_decay=1e-4)
    (w.sum() + b.sum()).backward()
    # Groups that disagree on a hyperparameter give the list of the groups' values. Two groups
    # update tensors: no `numels` (a launch's group is not known without PyTorch's op ranges).
    expect(lambda: opt.step(), "torch.optim", "SGD.step", [],
           {"params": {"count": 2, "numel": 16, "dtype": "float32"}, "foreach": None, "fused": None,
            "momentum": 0.9, "dampening": 0, "nesterov": False, "weight_decay": [0.0001, 0.0], "maximize": False})


def test_grad_scaler_unscale_and_update():
    """Their kernels run in private ops, which get no marker: the public methods do. unscale_
    describes the optimizer's gradients as a step describes its parameters; a disabled scaler
    launches nothing and gets no marker."""
    w, b = torch.nn.Parameter(r(4, 3)), torch.nn.Parameter(r(5))
    opt = torch.optim.SGD([w, b], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(w.sum() + b.sum()).backward()
    expect(lambda: scaler.unscale_(opt), "torch.amp", "GradScaler.unscale_", [],
           {"params": {"count": 2, "numel": 17, "dtype": "float32", "numels": [12, 5]}})
    expect(lambda: scaler.update(), "torch.amp", "GradScaler.update", [])
    # GradScaler.step's check for an optimizer that unscales in its own kernels (fused Adam).
    scaler.scale(w.sum() + b.sum()).backward()
    expect(lambda: scaler._check_inf_per_device(opt), "torch.amp", "GradScaler._check_inf_per_device", [],
           {"params": {"count": 2, "numel": 17, "dtype": "float32", "numels": [12, 5]}})
    off = torch.amp.GradScaler("cpu", enabled=False)
    with recording() as rec:
        off.unscale_(opt)
        off.update()
    assert rec.ranges == []


def test_module_calls_carry_qualified_name_and_extra_repr():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)

        def forward(self, x):
            return torch.relu(self.conv1(x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer1 = torch.nn.Sequential(Block())
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(self.layer1(x).mean((2, 3)))

    net = Net()
    x = r(1, 3, 5, 5)
    with recording() as rec:
        net(x)
    got = [(x.depth, x.marker) for x in rec.ranges]
    relu_site = f"{__file__}:{Block.forward.__code__.co_firstlineno + 1}"
    net_site = f"{__file__}:{Net.forward.__code__.co_firstlineno + 1}"
    assert got == [
        (0, {"v": 1, "kind": "module", "module": "Net", "cls": "Net", "repr": ""}),
        (1, {"v": 1, "kind": "module", "module": "layer1", "cls": "Sequential", "repr": ""}),
        (2, {"v": 1, "kind": "module", "module": "layer1.0", "cls": "Block", "repr": ""}),
        (3, {"v": 1, "kind": "module", "module": "layer1.0.conv1", "cls": "Conv2d",
             "repr": "3, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False"}),
        (4, {"v": 1, "kind": "op", "mod": FN, "op": "conv2d",
             "args": [T(1, 3, 5, 5), T(4, 3, 3, 3, grad=True), None, [1, 1], [1, 1], [1, 1], 1],
             "site": relu_site, "module": "layer1.0.conv1"}),
        (3, {"v": 1, "kind": "op", "mod": "torch", "op": "relu", "args": [T(1, 4, 5, 5, grad=True)],
             "site": relu_site, "module": "layer1.0"}),
        (1, {"v": 1, "kind": "op", "mod": "Tensor", "op": "mean", "args": [T(1, 4, 5, 5, grad=True), [2, 3]],
             "site": net_site, "module": "Net"}),
        (1, {"v": 1, "kind": "module", "module": "fc", "cls": "Linear",
             "repr": "in_features=4, out_features=2, bias=True"}),
        (2, {"v": 1, "kind": "op", "mod": FN, "op": "linear",
             "args": [T(1, 4, grad=True), T(2, 4, grad=True), T(2, grad=True)],
             "site": net_site, "module": "fc"}),
    ]


def test_pure_encoder_matches_what_is_pushed():
    x, w = r(2, 8), r(4, 8)
    with recording() as rec:
        F.linear(x, w)
    line = test_pure_encoder_matches_what_is_pushed.__code__.co_firstlineno + 3
    assert rec.ranges[0].text == op_marker(FN, "linear", (x, w), site=f"{__file__}:{line}")
    assert op_marker("torch", "add", (x, 1.5), {"alpha": math.nan}, module="enc.0") == dumps(
        {"v": 1, "kind": "op", "mod": "torch", "op": "add", "args": [T(2, 8), 1.5],
         "kwargs": {"alpha": {"float": "nan"}}, "module": "enc.0"})


def test_optimizer_step_mixed_dtypes_and_closure():
    a = torch.nn.Parameter(r(2))
    b = torch.nn.Parameter(r(3, dtype=torch.float64))
    c = torch.nn.Parameter(r(4))
    opt = torch.optim.Adagrad([a, b, c], lr=0.1)
    a.grad, b.grad, c.grad = torch.ones(2), torch.ones(3, dtype=torch.float64), torch.ones(4)

    def closure():
        return None

    expect(lambda: opt.step(closure), "torch.optim", "Adagrad.step", [{"type": "function"}],
           {"params": {"count": 3, "numel": 9, "dtype": ["float32", "float64"]}, "foreach": None, "fused": None,
            "weight_decay": 0, "maximize": False})


def test_sparse_tensor_is_described_without_layout():
    s = torch.eye(3).to_sparse()
    expect(lambda: s.coalesce(), "Tensor", "coalesce", [T(3, 3)])


def test_meta_tensor():
    m = torch.empty(2, 3, device="meta")
    expect(lambda: torch.relu(m), "torch", "relu", [T(2, 3)])


def test_unencodable_arguments_do_not_break_the_call():
    x = r(2)
    with recording() as rec:
        with pytest.raises(OverflowError):
            torch.mul(x, 10**5000)  # an int Python will not print: torch rejects it, the marker says unencodable
    line = test_unencodable_arguments_do_not_break_the_call.__code__.co_firstlineno + 4
    assert rec.markers == [{"v": 1, "kind": "op", "mod": "torch", "op": "mul",
                            "args": [{"type": "unencodable"}], "site": f"{__file__}:{line}"}]


def test_list_subclass_is_described_without_its_own_methods():
    class Odd(list):
        def __len__(self):
            raise RuntimeError("no length")

    x = r(2)
    with recording() as rec:
        with pytest.raises(TypeError):
            torch.mul(x, Odd())  # torch rejects the argument; the marker still describes it
    assert rec.markers[0]["args"] == [T(2), []]


def test_marker_building_reads_metadata_only():
    from torch.overrides import TorchFunctionMode

    seen = []

    class Log(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    x, nc, s = r(2, 3), r(3, 2).t(), torch.tensor(1.5)
    with Log():
        op_marker("torch", "where", (x > 0, nc, s), {"out": None, "scalar": 2.0})
    reads = set(seen) - {"gt"}
    assert reads <= {"__get__", "is_contiguous", "stride"}, reads


def test_optimizer_tensor_hyperparameters_are_described_not_read(monkeypatch):
    """Per-group tensor weight decays are encoded by shape and dtype and never compared: == on
    them would read the tensors' data (torch's own step reads them later; the marker must not)."""
    import json
    from pyprof.nvtx.marker import optimizer_knobs
    w, b = torch.nn.Parameter(r(2)), torch.nn.Parameter(r(3))
    opt = torch.optim.SGD([{"params": [w], "weight_decay": torch.tensor(0.1)},
                           {"params": [b], "weight_decay": torch.tensor(0.0)}], lr=0.1)

    def no_bool(self):
        raise AssertionError("a hyperparameter tensor was read")
    monkeypatch.setattr(torch.Tensor, "__bool__", no_bool)
    knobs = json.loads("{" + optimizer_knobs(opt) + "}")
    assert knobs == {"momentum": 0, "dampening": 0, "nesterov": False, "maximize": False,
                     "weight_decay": [{"shape": [], "dtype": "float32"}, {"shape": [], "dtype": "float32"}]}


# --- ops whose output size depends on the data --------------------------------------------------

def test_data_sized_calls_mark_their_output_inside_their_range():
    """nonzero, where(condition) alone, unique, masked_select, one_hot and x[mask] (a boolean
    mask) return as many elements as the data decide: an `out` mark, inside the op's range, gives
    what they returned. where with three operands, an element-wise select, indexing by ints,
    slices or an integer tensor, and an op of fixed size (add) mark nothing."""
    x = torch.tensor([[0.0, 1.5], [2.0, 0.0], [0.0, 3.0]])
    mask = x > 1
    with recording() as rec:
        torch.where(x > 0)
        x.nonzero()
        torch.unique(torch.tensor([3, 1, 3]))
        torch.masked_select(x, x > 1)
        F.one_hot(torch.tensor([0, 2]))
        x[mask]
        x[(mask,)]
        x[0], x[:, 1], x[torch.tensor([2, 0])]
        torch.where(x > 0, x, 0.0)
        torch.add(x, 1)
    ops = {i: m["op"] for i, m in enumerate(rec.markers)}
    got = [(ops[parent], json.loads(text)) for text, parent in rec.marks]
    i64 = {"dtype": "int64"}
    assert got == [("where", {"v": 1, "kind": "out", "out": [{"shape": [3], **i64}, {"shape": [3], **i64}]}),
                   ("nonzero", {"v": 1, "kind": "out", "out": {"shape": [3, 2], **i64, "strides": [1, 3]}}),
                   ("unique", {"v": 1, "kind": "out", "out": {"shape": [2], **i64}}),
                   ("masked_select", {"v": 1, "kind": "out", "out": {"shape": [3], "dtype": "float32"}}),
                   ("one_hot", {"v": 1, "kind": "out", "out": {"shape": [2, 3], **i64}}),
                   ("__getitem__", {"v": 1, "kind": "out", "out": {"shape": [3], "dtype": "float32"}}),
                   ("__getitem__", {"v": 1, "kind": "out", "out": {"shape": [3], "dtype": "float32"}})]


def test_clip_grad_norm_calls_its_foreach_ops_with_markers():
    """clip_grad_norm_ runs torch._foreach_norm and torch._foreach_mul_ (private entry points
    pyprof wraps): each a marker whose list past its 16th tensor keeps every tensor's elements
    (the gradients make more than 16 runs of shapes), so prof prices each launch."""
    import pyprof
    params = [torch.nn.Parameter(torch.randn(i + 1, 3)) for i in range(40)]
    for p in params:
        p.grad = torch.ones_like(p)
    pyprof.init()
    try:
        with recording() as rec:
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
    finally:
        pyprof.restore()
    ops = {x.marker["op"]: x.marker for x in rec.ranges if x.marker and x.marker.get("kind") == "op"}
    assert {"_foreach_norm", "_foreach_mul_"} <= set(ops)
    grads = ops["_foreach_norm"]["args"][0]
    assert grads[:16] == [T(i + 1, 3) for i in range(16)]
    assert grads[16] == {"more": 24, "numels": [3 * (i + 1) for i in range(16, 40)], "dtype": "float32"}


def test_a_checkpointed_blocks_recompute_keeps_its_module_paths():
    """torch.utils.checkpoint runs a block's forward again in the backward, outside its parent's
    call: the recomputed modules are named by their path in the model (blocks.1, blocks.1.fc), as
    in the first forward, not as roots of their own (Block, fc), so the op markers inside them
    (on CUDA, from the autograd thread; here under Tensor.backward's, which hides them) carry
    those paths."""
    import pyprof
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.fc(x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=False)
            return x.sum()

    net, x = Net(), r(2, 4, requires_grad=True)
    pyprof.init()
    try:
        with recording() as rec:
            net(x).backward()
    finally:
        pyprof.restore()
    backward = next(i for i, m in enumerate(rec.ranges) if m.marker and m.marker.get("op") == "backward")
    recomputed = [m.marker["module"] for m in rec.ranges[backward:] if m.marker and m.marker.get("kind") == "module"]
    assert recomputed == ["blocks.1", "blocks.1.fc", "blocks.0", "blocks.0.fc"]
