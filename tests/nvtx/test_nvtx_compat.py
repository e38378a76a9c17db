"""Nothing breaks under pyprof.init(): autograd, autocast, torch.compile, TorchScript, torch.func,
__torch_function__ subclasses, pickling, DataLoader workers, threads, torch.distributed, the
autograd profiler. Each test runs with the wrappers installed and checks real results."""
import copy
import io
import pickle
import threading

import pytest

torch = pytest.importorskip("torch", reason="the annotation wraps torch: needs torch")

import torch.nn.functional as F

import pyprof
from pyprof.nvtx import recording
from pyprof.nvtx.wrappers import is_wrapper


@pytest.fixture(autouse=True)
def _on(pyprof_on):
    yield


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = torch.add(y, 1.0) * 0.5
        return self.fc(y.mean((2, 3)))


def _train_step(model, x, target):
    model.zero_grad()
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_autograd_gives_the_same_gradients_as_without_pyprof():
    torch.manual_seed(0)
    model, x, target = SmallNet(), torch.randn(2, 3, 6, 6), torch.tensor([0, 2])
    with recording() as rec:
        loss, grads = _train_step(model, x, target)
    pyprof.restore()
    loss_ref, grads_ref = _train_step(model, x, target)
    assert torch.equal(loss, loss_ref)
    assert all(torch.equal(g, h) for g, h in zip(grads, grads_ref))
    assert [m["op"] for m in rec.markers if m["kind"] == "op"].count("backward") == 1


def test_custom_autograd_function_backward_runs_wrapped_ops():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.randn(3, requires_grad=True)
    Square.apply(x).sum().backward()
    assert torch.allclose(x.grad, 2 * x.detach())


def test_device_context_manager_places_factories():
    # torch.device as a context manager matches factories by identity in a table filled on
    # first use; init() fills it from the originals.
    with torch.device("meta"):
        made = [torch.empty(3), torch.zeros(2), torch.randn(2), torch.nn.Linear(2, 2).weight]
    assert all(t.device.type == "meta" for t in made)


def test_dynamo_tables_hold_originals():
    from torch._dynamo import trace_rules

    assert torch.Tensor.add.__wrapped__ in trace_rules.get_tensor_method()
    assert not any(is_wrapper(f) for f in trace_rules.get_tensor_method())


def test_autocast_still_casts():
    model = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with recording() as rec, torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    assert y.dtype == torch.bfloat16
    linear = next(m for m in rec.markers if m.get("op") == "linear")
    assert linear["args"][0]["dtype"] == "float32"  # the marker shows what the user passed
    assert linear["autocast"] == "bfloat16"           # and the dtype autocast ran it in
    with recording() as rec:
        model(x)
    assert "autocast" not in next(m for m in rec.markers if m.get("op") == "linear")


def test_torch_compile_no_graph_break_and_same_result():
    model = SmallNet().eval()

    def fn(x):
        y = model(x)
        y = y @ torch.ones(3, 3) + torch.sin(y)
        return F.softmax(y[:, :2], dim=-1)

    x = torch.randn(2, 3, 6, 6)
    explanation = torch._dynamo.explain(fn)(x)
    assert explanation.graph_count == 1
    assert explanation.graph_break_count == 0

    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=counting_backend)
    out = compiled(x)
    out_again = compiled(x)
    assert len(graphs) == 1
    assert torch.allclose(out, fn(x)) and torch.allclose(out_again, out)
    # Dynamo traced through the wrappers: the graph holds torch's own functions.
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.conv2d.__wrapped__ in targets and F.softmax.__wrapped__ in targets
    assert not any(is_wrapper(t) for t in targets)
    torch._dynamo.reset()


def test_fullgraph_compile_of_operators_in_place_ops_indexing_and_annotate():
    def f(x, w):
        with pyprof.annotate("block"):
            y = x + 1
            y = 2 * y - x
            y = y @ w
            y[0] = 3.0
            y += 1
            z = -y[1:] == y[:-1]
        return y.sum() + z.float().mean() + x.add(1).mul_(2).sum()

    torch._dynamo.reset()
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    compiled = torch.compile(f, fullgraph=True, backend="eager")  # raises on any graph break
    assert torch.allclose(compiled(x, w), f(x, w))
    torch._dynamo.reset()


@pytest.mark.slow
def test_torch_compile_of_a_module_with_inductor_free_backend():
    torch._dynamo.reset()
    model = SmallNet().eval()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(2, 3, 6, 6)
    assert torch.allclose(compiled(x), model(x), atol=1e-6)
    torch._dynamo.reset()


def test_torch_export():
    model = SmallNet().eval()
    x = torch.randn(2, 3, 6, 6)
    exported = torch.export.export(model, (x,))
    assert torch.allclose(exported.module()(x), model(x), atol=1e-6)
    targets = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.conv2d.default in targets


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torchscript_of_module_defined_after_init():
    class Scriptable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = F.relu(self.lin(x))
            y = torch.add(y, x).mul(2.0) + 1
            return F.softmax(y[0:2], dim=-1)

    model = Scriptable()
    scripted = torch.jit.script(model)
    x = torch.randn(3, 4)
    assert torch.allclose(scripted(x), model(x))
    assert is_wrapper(torch.add) and is_wrapper(F.relu)  # wrappers are back after scripting

    @torch.jit.script
    def scripted_fn(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x) * torch.sigmoid(x)

    assert torch.allclose(scripted_fn(x), F.gelu(x) * torch.sigmoid(x))


def test_torch_func_grad_and_vmap():
    def f(x):
        return torch.sin(x).sum() + (x * x).sum()

    x = torch.randn(5)
    with recording() as rec:
        g = torch.func.grad(f)(x)
        batched = torch.func.vmap(lambda v: torch.dot(v, v))(torch.randn(4, 3))
    assert torch.allclose(g, torch.cos(x) + 2 * x)
    assert batched.shape == (4,)
    dots = [m for m in rec.markers if m.get("op") == "dot"]
    assert dots and dots[0]["args"] == [{"shape": [3], "dtype": "float32"}] * 2  # per-sample shapes


class LoggingTensor(torch.Tensor):
    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_torch_function_subclass():
    LoggingTensor.seen = []
    a = torch.randn(3).as_subclass(LoggingTensor)
    b = torch.randn(3)
    with recording() as rec:
        c = torch.add(a, b)
        d = a.mul(2)
    assert type(c) is LoggingTensor and type(d) is LoggingTensor
    assert torch.allclose(c.as_subclass(torch.Tensor), a.as_subclass(torch.Tensor) + b)
    # Reading the marker's metadata did not go through the subclass's __torch_function__.
    assert LoggingTensor.seen == ["add", "mul"]
    assert [m["op"] for m in rec.markers] == ["add", "mul"]
    assert rec.markers[0]["args"][0] == {"shape": [3], "dtype": "float32"}


def test_pickling_modules_and_functions():
    lin = torch.nn.Linear(2, 2)
    clone = pickle.loads(pickle.dumps(lin))
    assert torch.equal(clone.weight, lin.weight)
    assert torch.equal(copy.deepcopy(lin).bias, lin.bias)
    buf = io.BytesIO()
    torch.save(lin.state_dict(), buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf)["weight"], lin.weight)
    for fn in (torch.add, F.relu, F.conv2d, torch.einsum, torch.Tensor.add, torch.Tensor.__add__):
        assert pickle.loads(pickle.dumps(fn)) is fn
    blob = pickle.dumps([torch.add, F.relu, torch.Tensor.add])
    pyprof.restore()
    # Pickled by reference: unpickled without pyprof they are torch's own functions.
    assert pickle.loads(blob) == [torch.add, F.relu, torch.Tensor.add]
    assert not any(is_wrapper(f) for f in pickle.loads(blob))


class SquaresDataset(torch.utils.data.Dataset):
    def __init__(self, transform=None):
        self.transform = transform

    def __len__(self):
        return 8

    def __getitem__(self, i):
        x = torch.full((3,), float(i))
        return self.transform(x) if self.transform else x * x


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_dataloader_workers(context):
    # spawn pickles the dataset, with a wrapped torch function in it, into fresh workers.
    transform = torch.square if context == "spawn" else None
    loader = torch.utils.data.DataLoader(SquaresDataset(transform), batch_size=4, num_workers=2,
                                         multiprocessing_context=context)
    batches = list(loader)
    assert torch.equal(torch.cat(batches)[:, 0], torch.arange(8.0) ** 2)


def test_threads_keep_their_own_nesting():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    barrier = threading.Barrier(4)
    errors = []

    def work():
        try:
            barrier.wait()
            for _ in range(20):
                model(torch.randn(2, 4))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with recording() as rec:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    by_thread = {}
    for x in rec.ranges:
        by_thread.setdefault(x.thread, []).append(x)
    assert len(by_thread) == 4
    for ranges in by_thread.values():
        texts = [(x.depth, x.marker.get("module"), x.marker.get("op")) for x in ranges if x.marker["kind"] != "op" or x.marker["op"] in ("linear", "relu")]
        assert texts == [(0, "Sequential", None), (1, "0", None), (2, "0", "linear"),
                         (1, "1", None), (2, "1", "relu")] * 20


def test_distributed_collective_single_process():
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed not built")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.ones(4)
        with recording() as rec:
            dist.all_reduce(t)
        assert torch.equal(t, torch.ones(4))
        assert rec.markers[0]["mod"] == "torch.distributed" and rec.markers[0]["op"] == "all_reduce"
        assert rec.markers[0]["args"] == [{"shape": [4], "dtype": "float32"}]
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 2)))
        with recording() as rec:
            ddp(torch.randn(3, 4)).sum().backward()
        assert all(p.grad is not None for p in ddp.parameters())
        assert [m["module"] for m in rec.markers if m["kind"] == "module"] == [
            "DistributedDataParallel", "module", "module.0"]
    finally:
        dist.destroy_process_group()


def test_activation_checkpointing_recomputes_under_backward():
    from torch.utils.checkpoint import checkpoint

    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    x = torch.randn(2, 4, requires_grad=True)
    with recording() as rec:
        checkpoint(block, x, use_reentrant=False).sum().backward()
    assert x.grad is not None and x.grad.shape == (2, 4)
    ranges = [(r.depth, r.marker["kind"], r.marker.get("module") or r.marker.get("node"), r.marker.get("op"))
              for r in rec.ranges]
    backward = ranges.index((0, "op", None, "backward"))
    # The recomputed forward runs inside the backward node that unpacks it (the bwd range of
    # gelu's node, CPU autograd running on this thread): module ranges, no op ranges.
    assert ranges[backward:] == [
        (0, "op", None, "backward"),
        (1, "bwd", "SumBackward0", None),
        (1, "bwd", "GeluBackward0", None),
        (2, "module", "Sequential", None),
        (3, "module", "0", None),
        (3, "module", "1", None),
        (1, "bwd", "AddmmBackward0", None),
    ]


def test_autograd_profiler_sees_the_same_aten_ops():
    # emit_nvtx needs a CUDA build; the CPU profiler runs on the same RecordFunction hooks.
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    with recording() as rec, torch.autograd.profiler.profile(record_shapes=True) as prof:
        F.linear(x, w).relu()
    names = [e.name for e in prof.function_events]
    assert "aten::linear" in names and "aten::relu" in names
    shapes = next(e.input_shapes for e in prof.function_events if e.name == "aten::linear")
    assert shapes[:2] == [[4, 8], [3, 8]]
    assert [m["op"] for m in rec.markers] == ["linear", "relu"]
