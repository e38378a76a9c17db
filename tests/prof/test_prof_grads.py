"""Backward costs count only the gradients the backward computed: a tensor that required grad
says `"grad":true` in its marker (pyprof/nvtx/marker.py), and Call settles the others of that
marker to False; a marker in which none says so (pyprof before it wrote them) prices every
gradient, as before."""
from __future__ import annotations

from pyprof.prof.pricing.registry import Call, lookup
from pyprof.prof.pricing.values import Tensor
from test_prof_captures import captured
from test_prof_helpers import described, tensor

FN = "torch.nn.functional"
N = 4 * 6 * 8  # the layer norm's input elements
SIZE = 4  # float32


def cost(m: dict):
    return lookup(m["mod"], m["op"])(Call(m))


def test_call_settles_the_tensors_of_a_marker_that_says_which_required_grad():
    said = Call(described(FN, "layer_norm", tensor(4, 6, 8), [8], tensor(8, grad=True), tensor(8)))
    assert [a.grad if isinstance(a, Tensor) else a for a in said.args] == [False, [8], True, False]
    old = Call(described(FN, "layer_norm", tensor(4, 6, 8), [8], tensor(8), tensor(8)))
    assert [a.grad for a in old.args if isinstance(a, Tensor)] == [None, None, None]


def test_layer_norm_backward_of_an_input_that_needs_no_gradient():
    """The first layer norm of a model fed data: only dWeight and dBias are computed (2 FLOPs an
    element each; dY and X read, the two gradients written)."""
    frozen_input = cost(described(FN, "layer_norm", tensor(4, 6, 8), [8], tensor(8, grad=True),
                                  tensor(8, grad=True)))
    assert (frozen_input.flops, frozen_input.bwd_flops, frozen_input.bwd_bytes) == \
        (8 * N, 2 * N * 2, 2 * N * SIZE + 2 * 8 * SIZE)


def test_layer_norm_backward_with_frozen_affine_parameters():
    """Fine-tuning with the norm's weight and bias frozen: dX alone (2 FLOPs per normalizing
    FLOP; dY and X read, the weight read, dX written)."""
    frozen = cost(described(FN, "layer_norm", tensor(4, 6, 8, grad=True), [8], tensor(8), tensor(8)))
    assert (frozen.bwd_flops, frozen.bwd_bytes) == (2 * N * 6, 3 * N * SIZE + 8 * SIZE)


def test_layer_norm_backward_of_every_gradient_is_unchanged_by_saying_so():
    said = cost(described(FN, "layer_norm", tensor(4, 6, 8, grad=True), [8], tensor(8, grad=True),
                          tensor(8, grad=True)))
    old = cost(described(FN, "layer_norm", tensor(4, 6, 8), [8], tensor(8), tensor(8)))
    assert (said.bwd_flops, said.bwd_bytes) == (old.bwd_flops, old.bwd_bytes) == \
        (2 * 8 * N, 3 * N * SIZE + 3 * 8 * SIZE)


def test_mul_by_a_tensor_that_needs_no_gradient():
    """x * mask: only x's gradient (dY times the mask, 1 FLOP an element; dY and the mask read,
    dX written), where an old marker prices the mask's too."""
    said = cost(described("torch", "mul", tensor(16, 32, grad=True), tensor(16, 32)))
    old = cost(described("torch", "mul", tensor(16, 32), tensor(16, 32)))
    n = 16 * 32
    assert (said.bwd_flops, said.bwd_bytes) == (n, 3 * n * SIZE)
    assert (old.bwd_flops, old.bwd_bytes) == (2 * n, 5 * n * SIZE)


def test_a_real_capture_says_which_tensors_required_grad(tmp_path):
    """lenet_grads: examples/lenet.py on an H100 under pyprof.init() with these markers. The
    image fed to conv1 and the loss's target needed no gradient, the weights and every
    activation after conv1 did; prof reads them so."""
    recs = captured("lenet_grads", tmp_path)
    first = {}
    for rec in recs:
        if rec["dir"] == "fprop" and isinstance(rec.get("marker"), dict):
            first.setdefault(rec["op"], Call(rec["marker"]))
    grads = {op: [a.grad for a in c.args if isinstance(a, Tensor)] for op, c in first.items()}
    assert grads == {"conv2d": [False, True, True], "relu": [True], "max_pool2d": [True],
                     "linear": [True, True, True], "mse_loss": [True, False]}
