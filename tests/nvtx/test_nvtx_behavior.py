"""init()/restore()/wrap()/annotate() behaviour: nesting, idempotence, restoring, call sites,
threads, module names, optimizers, the off state, and `import pyprof` without torch."""
import os
import subprocess
import sys
import threading
import types

import pytest

torch = pytest.importorskip("torch", reason="the annotation wraps torch: needs torch")

import torch.nn.functional as F

import pyprof
from pyprof.formats import DOMAIN
from pyprof.nvtx import emit, memo, patch, recording, wrappers
from pyprof.nvtx.wrappers import is_wrapper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ops(rec):
    return [(x.depth, x.marker["mod"], x.marker["op"]) for x in rec.ranges if x.marker["kind"] == "op"]


# --- nesting ----------------------------------------------------------------------------------------

def test_inner_torch_calls_emit_nothing_by_default(pyprof_on):
    x = torch.randn(2, 8)
    with recording() as rec:
        F.layer_norm(x, (8,))  # F.layer_norm calls torch.layer_norm
    assert ops(rec) == [(0, "torch.nn.functional", "layer_norm")]


def test_nested_true_emits_inner_calls():
    pyprof.init(nested=True)
    try:
        x = torch.randn(2, 8)
        with recording() as rec:
            F.layer_norm(x, (8,))
        assert ops(rec) == [(0, "torch.nn.functional", "layer_norm"), (1, "torch", "layer_norm")]
        pyprof.init()  # a second init updates the options
        with recording() as rec:
            F.layer_norm(x, (8,))
        assert ops(rec) == [(0, "torch.nn.functional", "layer_norm")]
    finally:
        pyprof.restore()


def test_calls_inside_an_op_prof_cannot_price_get_their_own_markers(pyprof_on):
    """F.multi_head_attention_forward is not in prof's table: its projections and attention
    carry markers of their own; F.layer_norm is, and still hides torch.layer_norm."""
    mha = torch.nn.MultiheadAttention(16, 2)
    x = torch.randn(5, 2, 16)
    with recording() as rec:
        mha(x, x, x, need_weights=False)
        F.layer_norm(x, (16,))
    got = [(d, op) for d, _, op in ops(rec) if op in ("multi_head_attention_forward", "linear",
                                                     "scaled_dot_product_attention", "layer_norm")]
    # Range depths: the module's range is 0.
    assert got == [(1, "multi_head_attention_forward"), (2, "linear"), (2, "scaled_dot_product_attention"),
                   (2, "linear"), (0, "layer_norm")]


def test_the_fused_fast_paths_of_attention_modules_carry_markers():
    """In inference nn.MultiheadAttention calls torch._native_multi_head_attention and
    nn.TransformerEncoderLayer torch._transformer_encoder_layer_fwd (private, C++: nothing
    inside emits): each call gets its marker. The layer is built before init(): it takes its
    fast path only when its activation is F.relu itself, and after init() F.relu is the wrapper."""
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    pyprof.init()
    try:
        mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
        x = torch.randn(2, 5, 16)
        with torch.no_grad(), recording() as rec:
            mha(x, x, x, need_weights=False)
            layer(x)
        assert ops(rec) == [(1, "torch", "_native_multi_head_attention"), (1, "torch", "_transformer_encoder_layer_fwd")]
        fast = next(x.marker for x in rec.ranges if x.marker.get("op") == "_native_multi_head_attention")
        assert fast["args"][:5] == [{"shape": [2, 5, 16], "dtype": "float32"}] * 3 + [16, 2]
    finally:
        pyprof.restore()


def test_rnn_modules_call_the_wrapped_torch_functions(pyprof_on):
    """nn.LSTM/GRU/RNN call torch.lstm/gru/rnn_* through torch._VF: the same wrappers."""
    x = torch.randn(3, 2, 4)
    rnns = torch.nn.LSTM(4, 5), torch.nn.GRU(4, 5, batch_first=True), torch.nn.RNN(4, 5, nonlinearity="relu")
    with recording() as rec:
        for rnn in rnns:
            rnn(x)
    # The zeros are the initial hidden states the modules create.
    assert [op for _, _, op in ops(rec)] == ["zeros", "zeros", "lstm", "zeros", "gru", "zeros", "rnn_relu"]
    pyprof.restore()
    assert "lstm" not in vars(torch._VF) and torch._VF.lstm is torch.lstm


def test_packed_rnn_marker_carries_its_batch_sizes(pyprof_on):
    """A packed sequence's batch sizes fix each step's rows: the lstm/gru marker carries their
    values, two calls with equal shapes but other lengths get markers of their own (memo key),
    and the op still receives the tensor itself."""
    x = torch.randn(3, 4, 2)
    lstm, gru = torch.nn.LSTM(2, 3), torch.nn.GRU(2, 3)
    packs = [torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
             for lengths in ([4, 2, 1], [4, 3, 1])]
    with recording() as rec:
        for p in packs:
            out, _ = lstm(p)
        gru(packs[0])
        lstm(x.transpose(0, 1).contiguous())  # unpacked: no host tensor, no values
    args = [(r.marker["op"], r.marker["args"][:2]) for r in rec.ranges if r.marker.get("op") in ("lstm", "gru")]
    assert args == [
        ("lstm", [{"shape": [7, 2], "dtype": "float32"}, {"shape": [4], "dtype": "int64", "values": [3, 2, 1, 1]}]),
        ("lstm", [{"shape": [8, 2], "dtype": "float32"}, {"shape": [4], "dtype": "int64", "values": [3, 2, 2, 1]}]),
        ("gru", [{"shape": [7, 2], "dtype": "float32"}, {"shape": [4], "dtype": "int64", "values": [3, 2, 1, 1]}]),
        ("lstm", [{"shape": [4, 3, 2], "dtype": "float32"}, [{"shape": [1, 3, 3], "dtype": "float32"},
                                                             {"shape": [1, 3, 3], "dtype": "float32"}]]),
    ]
    assert out.data.shape == (8, 3) and is_wrapper(torch._VF.lstm)


def test_packing_and_unpacking_markers_carry_lengths_and_batch_sizes(pyprof_on):
    """nn.utils.rnn's pack_padded_sequence and pad_packed_sequence run in the private
    torch._pack_padded_sequence and torch._pad_packed_sequence (through torch._VF): each gets a
    marker, the sorted lengths and the batch sizes with their values (which fix how many rows each
    of their copy kernels moves), and the results are the unwrapped ops'."""
    x = torch.randn(3, 4, 2)
    with recording() as rec:
        p = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([2, 4, 1]), batch_first=True,
                                                    enforce_sorted=False)
        y, lengths = torch.nn.utils.rnn.pad_packed_sequence(p, batch_first=True, total_length=5)
    got = [(r.marker["op"], r.marker["args"]) for r in rec.ranges if r.marker.get("op", "").startswith("_pa")]
    assert got == [
        ("_pack_padded_sequence", [{"shape": [3, 4, 2], "dtype": "float32"},
                                   {"shape": [3], "dtype": "int64", "values": [4, 2, 1]}, True]),
        ("_pad_packed_sequence", [{"shape": [7, 2], "dtype": "float32"},
                                  {"shape": [4], "dtype": "int64", "values": [3, 2, 1, 1]}, True, 0.0, 5]),
    ]
    assert p.batch_sizes.tolist() == [3, 2, 1, 1] and lengths.tolist() == [2, 4, 1] and y.shape == (3, 5, 2)
    assert is_wrapper(torch._VF._pack_padded_sequence) and is_wrapper(torch._VF._pad_packed_sequence)


def test_a_distributions_argument_check_gets_its_reductions_marker(pyprof_on):
    """torch.distributions checks each argument against its constraint and reduces the bools by
    the private torch._is_all_true (a reduce kernel no other marker covered: a PPO step's
    Normal(mean, std) ran three): it gets a marker, prof prices it as all()."""
    from pyprof.prof.pricing.ops import Call, lookup
    with recording() as rec:
        torch.distributions.Normal(torch.zeros(8, 3), torch.ones(3), validate_args=True)
    checks = [r.marker for r in rec.ranges if r.marker.get("op") == "_is_all_true"]
    assert [m["args"] for m in checks] == [[{"shape": [8, 3], "dtype": "bool"}]] * 2
    cost = lookup("torch", "_is_all_true")(Call(checks[0]))
    assert (cost.flops, cost.bytes) == (23, 24 + 1)


def test_exception_inside_a_call_leaves_nesting_intact(pyprof_on):
    a, b = torch.randn(2, 3), torch.randn(4, 5)

    class Boom(torch.nn.Module):
        def forward(self, x):
            return torch.matmul(x, b)

    with recording() as rec:
        with pytest.raises(RuntimeError):
            Boom()(a)
        torch.relu(a)
    tl = wrappers.thread_state()
    assert tl.depth == 0 and tl.mod == "" and tl.names is None
    assert [(x.depth, x.marker.get("module")) for x in rec.ranges] == [(0, "Boom"), (1, "Boom"), (0, None)]


# --- init / restore ----------------------------------------------------------------------------------

def test_init_is_idempotent():
    pyprof.init()
    try:
        first = (torch.add, F.conv2d, torch.Tensor.add, torch.Tensor.__add__, torch.nn.Module.__call__,
                 torch.optim.SGD.step)
        count = len(patch._patches)
        pyprof.init()
        assert (torch.add, F.conv2d, torch.Tensor.add, torch.Tensor.__add__, torch.nn.Module.__call__,
                torch.optim.SGD.step) == first
        assert len(patch._patches) == count
        assert not is_wrapper(torch.add.__wrapped__)
    finally:
        pyprof.restore()


def _snapshot():
    return {
        "torch.add": torch.add, "F.conv2d": F.conv2d, "F.relu": F.relu, "torch.einsum": torch.einsum,
        "Tensor.add": torch.Tensor.add, "Tensor.__add__": torch.Tensor.__add__,
        "Tensor.__rsub__": torch.Tensor.__rsub__, "Tensor.__getitem__": torch.Tensor.__getitem__,
        "Tensor.backward": torch.Tensor.backward, "linalg.norm": torch.linalg.norm,
        "special.erf": torch.special.erf, "fft.fft": torch.fft.fft,
        "autograd.backward": torch.autograd.backward, "Module.__call__": torch.nn.Module.__call__,
        "SGD.step": vars(torch.optim.SGD)["step"], "Adam.step": vars(torch.optim.Adam)["step"],
        "jit.script": torch.jit.script, "all_reduce": torch.distributed.all_reduce,
        "Tensor own dict": set(vars(torch.Tensor)),
        "Optimizer dict": set(vars(torch.optim.Optimizer)),
    }


def test_restore_really_restores():
    pyprof.restore()
    before = _snapshot()
    pyprof.init()
    during = _snapshot()
    assert all(is_wrapper(during[k]) for k in before if "dict" not in k and k != "jit.script")
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # lets Optimizer hook SGD.step
    pyprof.restore()
    after = _snapshot()
    for k in before:
        if k != "SGD.step":
            assert after[k] is before[k] or after[k] == before[k], k
    # Optimizer hooks a class's step when its first instance is made; restore keeps a hooked step.
    assert not is_wrapper(after["SGD.step"]) and not is_wrapper(getattr(after["SGD.step"], "__wrapped__", None))
    assert torch.add(torch.ones(1), 1).item() == 2.0


def test_restore_without_init_is_harmless():
    pyprof.restore()
    pyprof.restore()
    assert not is_wrapper(torch.add)


def test_init_from_many_threads_at_once():
    pyprof.restore()
    barrier = threading.Barrier(8)
    errors = []

    def go():
        try:
            barrier.wait()
            pyprof.init()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        assert is_wrapper(torch.add) and not is_wrapper(torch.add.__wrapped__)
        names = [(id(owner), name) for owner, name, _, _ in patch._patches]
        assert len(names) == len(set(names))
    finally:
        pyprof.restore()


# --- when markers are built ----------------------------------------------------------------------

def test_no_marker_is_built_without_tool_recorder_or_force(pyprof_on, monkeypatch):
    if emit.state.live:
        pytest.skip("an NVTX tool is attached")
    built = []
    monkeypatch.setattr(memo, "marker", lambda *a: built.append(a) or "{}")
    x = torch.ones(2)
    assert not emit.state.on
    torch.add(x, 1)
    assert built == []
    with recording():
        torch.add(x, 1)
    assert len(built) == 1


def test_force_builds_markers_without_a_recorder(monkeypatch):
    built = []
    x = torch.ones(2)
    monkeypatch.setattr(memo, "marker", lambda *a: built.append(a) or "{}")
    pyprof.init(force=True)
    try:
        assert emit.state.on
        torch.add(x, 1)
        n = len(built)
    finally:
        pyprof.init(force=False)
        pyprof.restore()
    assert n == 1


@pytest.mark.slow
def test_pyprof_force_environment_variable():
    code = ("import pyprof, torch; from pyprof.nvtx import emit; pyprof.init(); "
            "print(emit.state.force, emit.state.on)")
    env = dict(os.environ, PYPROF_FORCE="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


# --- call site ----------------------------------------------------------------------------------------

def test_call_site_skips_torch_frames(pyprof_on):
    relu = torch.nn.ReLU()
    x = torch.randn(3)
    line = sys._getframe().f_lineno + 2
    with recording() as rec:
        relu(x)  # F.relu is called from torch/nn/modules/activation.py
    assert rec.markers[1]["site"] == f"{__file__}:{line}"


# --- module names ----------------------------------------------------------------------------------

def test_module_names_for_roots_shared_and_unregistered_modules(pyprof_on):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(4, 4)
            self.dec = self.enc  # shared: named_modules names it once
            self.loose = [torch.nn.Tanh()]  # not registered

        def forward(self, x):
            return self.loose[0](self.dec(torch.nn.ReLU()(self.enc(x))))

    net = Net()
    x = torch.randn(2, 4)
    with recording() as rec:
        net(x)
        net.enc(x)
    # net.enc called on its own keeps its name in net's tree.
    mods = [(x.depth, x.marker["module"]) for x in rec.ranges if x.marker["kind"] == "module"]
    assert mods == [(0, "Net"), (1, "enc"), (1, "ReLU"), (1, "enc"), (1, "Tanh"), (0, "enc")]


def test_children_added_after_the_first_call_get_qualified_names(pyprof_on):
    net = torch.nn.Sequential(torch.nn.Linear(4, 4))
    x = torch.randn(1, 4)
    net(x)
    net.append(torch.nn.Sigmoid())
    with recording() as rec:
        net(x)
    assert [m["module"] for m in rec.markers if m["kind"] == "module"] == ["Sequential", "0", "1"]


def test_module_marker_is_cached_per_module(pyprof_on):
    lin = torch.nn.Linear(2, 2)
    x = torch.randn(1, 2)
    with recording() as rec:
        lin(x)
        lin(x)
    assert rec.ranges[0].text is rec.ranges[2].text


# --- optimizers -------------------------------------------------------------------------------------

def test_optimizer_inner_ops_are_suppressed(pyprof_on):
    p = torch.nn.Parameter(torch.randn(3))
    opt = torch.optim.Adam([p], lr=0.1, foreach=False)
    p.grad = torch.ones(3)
    with recording() as rec:
        opt.step()
    assert ops(rec) == [(0, "torch.optim", "Adam.step")]
    assert rec.markers[0]["kwargs"] == {"params": {"count": 1, "numel": 3, "dtype": "float32", "numels": [3]},
                                        "foreach": False, "fused": None, "weight_decay": 0, "amsgrad": False,
                                        "maximize": False}


def test_optimizer_classes_defined_after_init(pyprof_on):
    class Plain(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.5})

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    p.sub_(p.grad * group["lr"])

    class Derived(torch.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    with recording() as rec:
        Plain([p]).step()
        Derived([p], lr=0.25).step()
    assert ops(rec) == [(0, "torch.optim", "Plain.step"), (0, "torch.optim", "Derived.step")]
    assert torch.equal(p.detach(), torch.full((2,), 0.25))
    pyprof.restore()
    assert not is_wrapper(vars(Plain)["step"]) and not is_wrapper(getattr(vars(Plain)["step"], "__wrapped__", None))


def test_lr_scheduler_and_grad_scaler_created_after_init(pyprof_on):
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    with recording() as rec:
        for _ in range(2):
            p.grad = torch.ones(2)
            scaler.step(opt)
            sched.step()
    assert ops(rec).count((0, "torch.optim", "SGD.step")) == 2
    assert torch.equal(p.detach(), torch.full((2,), -0.5))  # lr 1.0 then 0.5


# --- wrap and annotate --------------------------------------------------------------------------------

def test_wrap_extension_module_function_and_restore(pyprof_on):
    ext = types.ModuleType("fused_ext")
    ext.scale = lambda t, s: t * s
    original = ext.scale
    x = torch.ones(2)
    pyprof.wrap(ext, "scale")
    with recording() as rec:
        y = ext.scale(x, 3.0)
    assert torch.equal(y, torch.full((2,), 3.0))
    assert ops(rec) == [(0, "fused_ext", "scale")]  # torch's __mul__ inside is suppressed
    assert rec.markers[0]["args"] == [{"shape": [2], "dtype": "float32"}, 3.0]
    pyprof.restore()
    assert ext.scale is original


def test_wrap_static_method_of_a_class(pyprof_on):
    class Kernels:
        @staticmethod
        def double(t):
            return t * 2

        @classmethod
        def triple(cls, t):
            return t * 3

    class Derived(Kernels):
        pass

    pyprof.wrap(Kernels, "double")
    pyprof.wrap(Derived, "triple")  # inherited classmethod
    one = torch.ones(1)
    with recording() as rec:
        out = Kernels.double(one)
        out2 = Kernels().double(one)
        out3 = Derived().triple(one)
    assert (out.item(), out2.item(), out3.item()) == (2.0, 2.0, 3.0)
    assert ops(rec) == [(0, "Kernels", "double")] * 2 + [(0, "Derived", "triple")]
    pyprof.restore()
    assert "triple" not in vars(Derived) and Derived().triple(one).item() == 3.0


def test_wrap_function_returns_a_wrapper(pyprof_on):
    def attention(q, k):
        return (q @ k.t()).softmax(-1)

    wrapped = pyprof.wrap(attention, "mylib")
    q = torch.randn(3, 4)
    with recording() as rec:
        wrapped(q, q)
    assert ops(rec) == [(0, "mylib", "attention")]
    assert wrapped.__wrapped__ is attention


def test_annotate_context_manager_and_decorator(pyprof_on):
    @pyprof.annotate("block")
    def block(x):
        return torch.relu(x)

    x = torch.randn(2)
    with recording() as rec:
        with pyprof.annotate("encoder"):
            block(x)
    got = [(x.depth, x.marker) for x in rec.ranges]
    assert got[0] == (0, {"v": 1, "kind": "layer", "name": "encoder"})
    assert got[1] == (1, {"v": 1, "kind": "layer", "name": "block"})
    assert got[2][0] == 2 and got[2][1]["op"] == "relu"


def test_annotate_needs_no_init():
    pyprof.restore()
    with recording() as rec:
        with pyprof.annotate("x"):
            pass
    assert rec.markers == [{"v": 1, "kind": "layer", "name": "x"}]


# --- without torch ------------------------------------------------------------------------------------

def test_import_without_torch_and_clear_init_error():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import pyprof, pyprof.nvtx\n"
        "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
        "with pyprof.nvtx.recording() as rec, pyprof.annotate('a'): pass\n"
        "assert rec.markers == [{'v': 1, 'kind': 'layer', 'name': 'a'}]\n"
        "try:\n"
        "    pyprof.init()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "pyprof.init() annotates PyTorch programs and needs torch: pip install torch (or pyprof-nvtx[torch])"
    )


def test_import_pyprof_does_not_import_torch():
    code = "import sys, pyprof, pyprof.nvtx; print('torch' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the wrapping rule --------------------------------------------------------------------------------

def test_what_is_wrapped_and_what_is_not(pyprof_on):
    wrapped = [torch.add, torch.conv2d, torch.einsum, torch.matmul, torch.cat, torch.tensor, F.relu,
               F.conv2d, F.scaled_dot_product_attention, torch.linalg.norm, torch.special.erf,
               torch.fft.rfft, torch.autograd.backward, torch.autograd.grad, torch.Tensor.add,
               torch.Tensor.add_, torch.Tensor.to, torch.Tensor.view, torch.Tensor.backward,
               torch.Tensor.item, torch.Tensor.__add__, torch.Tensor.__radd__, torch.Tensor.__iadd__,
               torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.Tensor.__getitem__,
               torch.Tensor.__setitem__, torch.Tensor.__eq__, torch.Tensor.__lt__, torch.Tensor.__neg__,
               torch.Tensor.__rsub__, torch.Tensor.__pow__, torch.Tensor.__rpow__, torch.Tensor.__truediv__,
               torch.nn.Module.__call__, torch.distributed.all_reduce]
    assert [f for f in wrapped if not is_wrapper(f)] == []
    not_wrapped = [torch.is_tensor, torch.is_grad_enabled, torch.get_default_dtype, torch.set_grad_enabled,
                   torch.compile, torch.load, torch.save, torch.manual_seed, torch.vmap, torch.from_numpy,
                   torch.typename, torch.result_type, torch.promote_types, torch.broadcast_shapes,
                   torch.jit.trace, torch.compiler.is_compiling, torch.cuda.synchronize,
                   torch.cuda.is_available, torch.autograd.profiler.emit_nvtx, torch.autograd.profiler.record_function,
                   F.handle_torch_function, torch.Tensor.size, torch.Tensor.dim, torch.Tensor.stride,
                   torch.Tensor.numel, torch.Tensor.is_contiguous, torch.Tensor.data_ptr,
                   torch.Tensor.element_size, torch.Tensor.get_device, torch.Tensor.register_hook,
                   torch.Tensor.__torch_function__, torch.Tensor.__repr__, torch.Tensor.__format__,
                   torch.Tensor.__len__, torch.Tensor.__iter__, torch.Tensor.__hash__, torch.Tensor.__bool__,
                   torch.Tensor.__index__, torch.Tensor.__reduce_ex__, torch.Tensor.__setstate__,
                   torch.Tensor.__deepcopy__, torch.Tensor.__init__, torch.Tensor.__new__,
                   torch.Tensor.__getattribute__]
    assert [f for f in not_wrapped if is_wrapper(f)] == []
    for prop in ("shape", "dtype", "device", "grad", "data", "is_cuda", "T", "mT", "ndim"):
        assert not is_wrapper(vars(torch._C.TensorBase).get(prop) or vars(torch.Tensor).get(prop)), prop


def test_fx_symbolic_trace(pyprof_on):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return F.relu(self.lin(x)) + torch.sigmoid(x)

    m = M()
    gm = torch.fx.symbolic_trace(m)
    x = torch.randn(2, 3)
    assert torch.allclose(gm(x), m(x))
    assert is_wrapper(torch.nn.Module.__call__)  # fx put our __call__ back after tracing


def test_live_domain_path(monkeypatch):
    # What runs under Nsight Systems: a real nvtx.Domain (built by hand, since without a tool
    # nvtx.get_domain hands out the dummy), event attributes cached per message, pushes through
    # nvtx's C entry points (no-ops without a tool).
    import json

    import nvtx
    from nvtx._lib.lib import DomainHandle

    domain = object.__new__(nvtx.Domain)
    domain.handle = DomainHandle(DOMAIN)
    domain.__init__(DOMAIN)
    monkeypatch.setattr(emit, "_domain", domain)
    monkeypatch.setattr(emit, "_handle", domain.handle)
    monkeypatch.setattr(emit, "_attrs", {})
    monkeypatch.setattr(emit.state, "live", True)
    x = torch.ones(2)
    try:
        pyprof.init()
        assert emit.state.on and emit.state.push is emit._push_live
        for _ in range(3):
            torch.add(x, 1)
        assert len(emit._attrs) == 1  # one message, pushed three times
        text, attrs = next(iter(emit._attrs.items()))
        assert json.loads(text)["op"] == "add" and attrs.message.string == text
        with recording() as rec:
            torch.add(x, 2)
            assert emit.state.push is emit._push_recording
        assert rec.ranges[0].text in emit._attrs  # recorded and pushed
    finally:
        pyprof.restore()
        monkeypatch.undo()
        emit._refresh()
    assert not emit.state.on or emit.state.force


def test_extra_repr_calling_torch_is_not_a_user_op(pyprof_on):
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((2,), 0.5))

        def extra_repr(self):
            return f"scale_sum={float(self.scale.sum())}"

        def forward(self, x):
            return x * self.scale

    m, x = Scaled(), torch.ones(2)
    with recording() as rec:
        m(x)
    assert [(r.depth, r.marker.get("op"), r.marker.get("repr")) for r in rec.ranges] == [
        (0, None, "scale_sum=1.0"), (1, "__mul__", None)]


@pytest.mark.slow
def test_overhead_benchmark_smoke():
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "overhead.py"), "--smoke", "--models", "lenet",
           "--steps", "1", "--blocks", "1", "--repeats", "1", "--warmup", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    assert "pyprof modes: markers forced; NVTX pushes were no-ops" in out or "reached a live domain" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("lenet")]
    assert len(rows) == 2  # ms per step, ratio to plain: one column per mode
    assert all(len(row) == 6 and float(v) > 0 for row in rows for v in row[1:])
    assert rows[1][1] == "1.00"
    assert "lenet " in out.split("pyprof default vs plain: ")[1]
    assert "nn.Linear(8, 8)(x)" in out


@pytest.mark.slow
def test_overhead_benchmark_runs_each_process_under_the_given_nsys(tmp_path):
    # A stand-in for nsys: logs its options, runs the command after them, then prints a line of
    # its own after the child's result, as nsys does.
    fake, log = tmp_path / "nsys", tmp_path / "log"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\nshift; while [ "$1" != "{sys.executable}" ]; do shift; done\n'
                    '"$@"; rc=$?\necho "Generated: report.nsys-rep"\nexit $rc\n')
    fake.chmod(0o755)
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "overhead.py"), "--smoke", "--models", "lenet",
           "--modes", "plain,pyprof", "--steps", "1", "--blocks", "1", "--repeats", "1", "--warmup", "1",
           "--no-calls", "--nsys", str(fake)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("profile -t cuda,nvtx ") and c.endswith(" --nsys-range") for c in calls)
    assert f"every process under nsys: {fake} profile -t cuda,nvtx" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("lenet")]
    assert len(rows) == 2 and all(float(v) > 0 for row in rows for v in row[1:]) and rows[1][1] == "1.00"


def test_restore_keeps_a_later_patch_by_someone_else():
    pyprof.init()
    ours = torch.sigmoid
    theirs = lambda x: ours(x)  # noqa: E731  (another tool wrapping after pyprof)
    torch.sigmoid = theirs
    try:
        pyprof.restore()
        assert torch.sigmoid is theirs
        assert not is_wrapper(torch.add)
    finally:
        torch.sigmoid = ours.__wrapped__


def test_module_tables_of_dead_roots_are_dropped(pyprof_on):
    import gc

    x = torch.randn(1, 2)
    before = len(wrappers._roots), len(wrappers._member_of)
    with recording():
        for _ in range(50):
            torch.nn.Sequential(torch.nn.Linear(2, 2))(x)
    gc.collect()
    # (each Sequential's Linear is a member of its table: dropped with it)
    assert len(wrappers._roots) <= before[0] + 1 and len(wrappers._member_of) <= before[1] + 1


def test_torch_nn_defaults_that_are_wrapped_functions_keep_their_layers_paths():
    """nn.TransformerEncoderLayer allows its fused fast path only for `activation is F.relu` (or
    gelu), its default being F.relu as torch was imported: under pyprof.init() that default is
    the wrapper F.relu now is, so a layer built then takes the path it takes without pyprof;
    restore() puts the original back."""
    import torch.nn.functional as F

    import pyprof

    original = F.relu
    pyprof.init()
    try:
        layer = torch.nn.TransformerEncoderLayer(8, 2)
        assert F.relu is not original and layer.activation is F.relu
        assert layer.activation_relu_or_gelu == 1
    finally:
        pyprof.restore()
    assert F.relu is original and torch.nn.TransformerEncoderLayer.__init__.__defaults__[2] is original
    assert torch.nn.TransformerEncoderLayer(8, 2).activation_relu_or_gelu == 1
