"""What a clean run does not warn about: the seed gradient a backward call fills itself (priced
by the call's own marker) and kernels of PyTorch's private ops called outside any user call
(GradScaler's); and what it still warns about: a public op without a marker."""
from __future__ import annotations

import pytest

from test_prof_helpers import analyse, record
from test_views_common import prof, write_dict


def t(shape: list, dtype: str = "float32") -> dict:
    """A tensor argument as markers encode it (docs/markers.md)."""
    return {"shape": shape, "dtype": dtype}


def marker(mod: str, op: str, *args) -> dict:
    """An op marker with these (already encoded) arguments; no torch needed."""
    return {"v": 1, "kind": "op", "mod": mod, "op": op, "args": list(args), "site": "net.py:7"}


def seed_record(m: dict) -> dict:
    """A kernel under a backward call that no autograd node launched (parse: bprop, fwd null)."""
    return record(m, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()",
                  "bprop", marker=m, fwd=None,
                  torchOps=[{"name": "aten::ones_like", "opId": 51}, {"name": "aten::fill_", "opId": 54}])


def test_loss_backward_seed_is_one_scalar_written():
    (f,), warnings = analyse([seed_record(marker("Tensor", "backward", t([])))])
    assert (f.flops, f.bytes, f.dtype, f.cost.params) == (0, 4, "float32", "shape=[],type=fp32")
    assert warnings.warnings == {}


def test_non_scalar_backward_seed_and_given_gradients():
    out = t([8, 16], "float16")
    (f,), _ = analyse([seed_record(marker("Tensor", "backward", out))])
    assert (f.flops, f.bytes) == (0, 8 * 16 * 2)
    # A given gradient is used as is: the call fills no seed.
    (f,), _ = analyse([seed_record(marker("Tensor", "backward", out, out))])
    assert (f.flops, f.bytes, f.cost.params) == (0, 0, "shape=-,type=na")


def test_autograd_backward_and_grad_seed_only_outputs_without_a_gradient():
    a, b = t([4], "float64"), t([2, 3])
    (f,), _ = analyse([seed_record(marker("torch.autograd", "backward", [a, b], [None, t([2, 3])]))])
    assert (f.bytes, f.cost.params) == (4 * 8, "shape=[4],type=fp64")
    # grad(outputs, inputs) without grad_outputs: every output seeded
    (f,), _ = analyse([seed_record(marker("torch.autograd", "grad", [a, b], [t([1])]))])
    assert (f.bytes, f.cost.params) == (4 * 8 + 6 * 4, "shape=[4],[2,3],type=na")


def test_backward_kernel_of_a_forward_op_is_still_priced_by_that_op():
    fwd = marker("torch", "relu", t([10, 10]))
    rec = record(fwd, "void at::native::vectorized_elementwise_kernel<4, threshold_backward>()", "bprop",
                 marker=marker("Tensor", "backward", t([])))
    (f,), _ = analyse([rec])
    assert (f.flops, f.bytes) == (100, 3 * 100 * 4)  # relu's backward, not the seed


def test_private_op_without_marker_is_expected_public_one_is_warned():
    amp = record(None, "amp_update_scale_cuda_kernel", mod="aten", op="_amp_update_scale_",
                 torchOps=[{"name": "aten::_amp_update_scale_", "opId": 1361}])
    relu = record(None, "vectorized_elementwise_kernel", mod="aten", op="relu",
                  torchOps=[{"name": "aten::relu", "opId": 7}, {"name": "aten::_relu", "opId": 8}])
    (fa, fr), warnings = analyse([amp, relu])
    assert fa.flops is None and fr.flops is None  # both unknown (na) ...
    assert dict(warnings.warnings["no op marker"]) == {"aten.relu": 1}  # ... only the public one warned


@pytest.mark.parametrize("example", ["lenet", "gpt", "resnet"])
def test_shipped_examples_run_clean(tmp_path, example):
    """prof over each shipped capture prints rows and no warning: everything in them is expected."""
    for args in ([], ["--summary"]):
        rc, out, err = prof(*args, write_dict(tmp_path, example))
        assert rc == 0 and out and err == ""
