"""Each kernel of a for-loop optimizer step (`foreach=False`) its own FLOPs and bytes (issue 27), on
the real records of captures (the whole step call cut from pyprof.init()'s records, unchanged):
tests/data/cov_sgd_loop_default.jsonl.xz (H100, benchmarks/pricing_coverage.py's rnn_packed:
momentum 0.9, weight decay 1e-4, 10 fp32 parameters), cov_adam_loop_default.jsonl.xz and
cov_adamw_loop_default.jsonl.xz (H200, benchmarks/coverage_modes.sh: fixture_lstm with Adam and
fixture_encoder with AdamW, `--optim adam-loop` / `adamw-loop`: weight decay 0.01, 22 and 12 fp32
parameters). Each step's first kernel carried the whole formula and the others were na before."""
from __future__ import annotations

import io
import json
import lzma
import os

import pytest

from pyprof.prof.io.reader import records
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
NUMELS = [32768, 65536, 512, 512, 12288, 9216, 96, 96, 960, 10]
# A contiguous fp32 clone: torch.clone(grad) of the step that creates a momentum buffer.
CLONE = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::direct_copy_kernel_cuda("
         "at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()"
         "() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")


def _step(name: str = "sgd") -> list:
    with lzma.open(os.path.join(DATA, f"cov_{name}_loop_default.jsonl.xz"), "rt") as s:
        return [json.loads(line) for line in s]


def _priced(recs: list) -> list:
    text = "".join(json.dumps(r) + "\n" for r in recs).encode()
    return [(rec["kLongName"], f.flops, f.bytes) for rec, f, _ in analysed(records(io.BytesIO(text), Tally()), Tally())]


def test_loop_sgd_kernels_carry_their_own_pass():
    """Per parameter of n elements, in the marker's `numels` order: grad.add(param, alpha=wd)
    (2n FLOPs, 3n·4 bytes), buf.mul_(momentum) (n, 2n·4), buf.add_(grad) (alpha 1: n, 3n·4),
    param.add_(buf, alpha=-lr) (2n, 3n·4); the kernels sum to the formula's 6 FLOPs an element."""
    got = [(name.split("<")[1].split(",")[1].strip().split("<")[0], f, b) for name, f, b in _priced(_step())]
    want = []
    for n in NUMELS:
        want += [("at::native::CUDAFunctor_add", 2 * n, 12 * n), ("at::native::AUnaryFunctor", n, 8 * n),
                 ("at::native::CUDAFunctor_add", n, 12 * n), ("at::native::CUDAFunctor_add", 2 * n, 12 * n)]
    assert got == want
    assert sum(f for _, f, _ in got) == 6 * sum(NUMELS) == 731964


def test_loop_sgd_first_step_clones_the_buffer_and_the_adds_stay_with_their_parameter():
    """The step that creates the momentum buffers runs torch.clone(grad) (n read and written, 0
    FLOPs) in place of the buffer's mul and add: each parameter's update add still takes its own
    pass (2n), not the skipped momentum add's, and the next parameter's kernels their own sizes.
    The capture's kernels with each parameter's mul and momentum add replaced by one clone."""
    recs, first = _step(), []
    for i in range(0, len(recs), 4):
        clone = dict(recs[i + 1], kLongName=CLONE)
        first += [recs[i], clone, recs[i + 3]]
    got = [(f, b) for _, f, b in _priced(first)]
    want = []
    for n in NUMELS:
        want += [(2 * n, 12 * n), (0, 8 * n), (2 * n, 12 * n)]
    assert got == want


# -grad's kernel (torch.neg in ATen's UnarySignKernels.cu), as the element-wise kernels above are named.
NEG = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::neg_kernel_cuda(at::TensorIteratorBase &)::"
       "[lambda() (instance 2)]::operator ()() const::[lambda() (instance 6)]::operator ()() const::"
       "[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")


def _with_knobs(recs: list, **knobs) -> list:
    return [dict(r, marker=dict(r["marker"], kwargs=dict(r["marker"]["kwargs"], **knobs))) for r in recs]


def test_loop_sgd_nesterov_dampening_maximize_each_kernel_its_pass():
    """maximize, dampening 0.1 and nesterov: per parameter -grad (n FLOPs, 2n·4 bytes), the weight
    decay's add (2n), the buffer's mul (n) and its add with alpha 0.9 (2n: a multiply-add),
    grad.add(buf, alpha=momentum) (2n), the update (2n); 10 FLOPs an element, the formula's. The
    capture's kernels with a neg before and a nesterov add after each parameter's momentum add."""
    recs, varied = _with_knobs(_step(), nesterov=True, dampening=0.1, maximize=True), []
    for i in range(0, len(recs), 4):
        varied += [dict(recs[i], kLongName=NEG), *recs[i:i + 3], recs[i + 2], recs[i + 3]]
    got = [(f, b) for _, f, b in _priced(varied)]
    want = []
    for n in NUMELS:
        want += [(n, 8 * n), (2 * n, 12 * n), (n, 8 * n), (2 * n, 12 * n), (2 * n, 12 * n), (2 * n, 12 * n)]
    assert got == want
    assert sum(f for f, _ in got) == 10 * sum(NUMELS)


@pytest.mark.parametrize("knobs, per_element", [
    ({}, 6),
    ({"dampening": 0.1}, 7),
    ({"nesterov": True}, 8),
    ({"maximize": True}, 7),
    ({"momentum": 0, "nesterov": True, "dampening": 0.5}, 4),  # no buffer: nesterov and dampening do nothing
    ({"weight_decay": 0, "maximize": True, "nesterov": True}, 7),
])
def test_sgd_step_flops_follow_every_knob(knobs, per_element):
    """The step's FLOPs per parameter element from the marker's knobs (ops/optim.py's table; the
    capture's marker: momentum 0.9, weight decay 1e-4), the same for the fused kernel."""
    from pyprof.prof.pricing.marker_costs import MarkerCosts
    marker = _step()[0]["marker"]
    for fused in (None, True):
        kwargs = dict(marker["kwargs"], **knobs, fused=fused)
        cost, warning = MarkerCosts().of(dict(marker, kwargs=kwargs))
        assert warning is None and cost.flops == per_element * sum(NUMELS)


def test_sgd_step_without_a_knob_is_na_with_the_reason():
    from pyprof.prof.pricing.marker_costs import MarkerCosts
    marker = _step()[0]["marker"]
    kwargs = {k: v for k, v in marker["kwargs"].items() if k != "nesterov"}
    cost, warning = MarkerCosts().of(dict(marker, kwargs=kwargs))
    assert cost is None and warning == ("optimizer nesterov not in the marker", "torch.optim.SGD.step")


ADAM_NUMELS = [8192, 4096, 256, 256, 1024] * 4 + [320, 10]
ADAMW_NUMELS = [12288, 192, 4096, 64, 16384, 256, 16384, 64, 64, 64, 64, 64]


def _functor(name: str) -> str:
    """The element-wise functor or kernel function an ATen kernel's name runs."""
    return name.split("<", 1)[1].split(",", 1)[1].strip().split("<")[0].split("(")[0].removeprefix("at::native::")


def test_loop_adam_kernels_carry_their_own_pass():
    """torch/optim/adam.py's _single_tensor_adam per parameter of n fp32 elements (the capture's
    8 kernels each): grad.add(param, alpha=wd) (2n FLOPs, 3n·4 bytes), exp_avg.lerp_ (3n, 3n·4),
    exp_avg_sq.mul_ (n, 2n·4), .addcmul_(grad, grad) (2n, 3n·4), sqrt (n, 2n·4), / sqrt(bias
    correction) (n, 2n·4), + eps (n, 2n·4), param.addcdiv_ (2n, 4n·4): 13 an element, the
    formula's, and the call's first kernel no longer carries it all."""
    got = [(_functor(name), f, b) for name, f, b in _priced(_step("adam"))]
    want = []
    for n in ADAM_NUMELS:
        want += [("CUDAFunctor_add", 2 * n, 12 * n), ("", 3 * n, 12 * n), ("AUnaryFunctor", n, 8 * n),
                 ("addcmul_cuda_kernel", 2 * n, 12 * n), ("sqrt_kernel_cuda", n, 8 * n), ("BUnaryFunctor", n, 8 * n),
                 ("CUDAFunctorOnSelf_add", n, 8 * n), ("addcdiv_cuda_kernel", 2 * n, 16 * n)]
    assert got == want
    assert sum(f for _, f, _ in got) == 13 * sum(ADAM_NUMELS) == 723138


def test_loop_adamw_decays_the_parameter_first():
    """AdamW's decoupled decay, param.mul_(1 - lr·wd) (n, 2n·4), runs first, then Adam's 7
    kernels without the L2 add: 12 FLOPs an element."""
    got = [(_functor(name), f, b) for name, f, b in _priced(_step("adamw"))]
    want = []
    for n in ADAMW_NUMELS:
        want += [("AUnaryFunctor", n, 8 * n), ("", 3 * n, 12 * n), ("AUnaryFunctor", n, 8 * n),
                 ("addcmul_cuda_kernel", 2 * n, 12 * n), ("sqrt_kernel_cuda", n, 8 * n), ("BUnaryFunctor", n, 8 * n),
                 ("CUDAFunctorOnSelf_add", n, 8 * n), ("addcdiv_cuda_kernel", 2 * n, 16 * n)]
    assert got == want
    assert sum(f for _, f, _ in got) == 12 * sum(ADAMW_NUMELS)


# torch.maximum's kernel (ATen's MaxMinElementwiseKernel.cu), as the capture's kernels are named.
MAXIMUM = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::maximum_kernel_cuda("
           "at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 6)]::operator ()"
           "() const::[lambda(float, float) (instance 1)], std::array<char *, (unsigned long)3>>(int, T2, T3)")


def test_loop_adam_amsgrad_maximize_each_kernel_its_pass():
    """maximize and amsgrad: -grad (n, 2n·4) first, torch.maximum into the running maximum (n,
    3n·4) after addcmul_; 15 FLOPs an element. The capture's kernels with a neg before each
    parameter's and a maximum after its addcmul_."""
    recs, varied = _with_knobs(_step("adam"), amsgrad=True, maximize=True), []
    for i in range(0, len(recs), 8):
        varied += [dict(recs[i], kLongName=NEG), *recs[i:i + 4], dict(recs[i + 3], kLongName=MAXIMUM), *recs[i + 4:i + 8]]
    got = [(f, b) for _, f, b in _priced(varied)]
    want = []
    for n in ADAM_NUMELS:
        want += [(n, 8 * n), (2 * n, 12 * n), (3 * n, 12 * n), (n, 8 * n), (2 * n, 12 * n), (n, 12 * n),
                 (n, 8 * n), (n, 8 * n), (n, 8 * n), (2 * n, 16 * n)]
    assert got == want
    assert sum(f for f, _ in got) == 15 * sum(ADAM_NUMELS)
