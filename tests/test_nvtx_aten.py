"""pyprof.nvtx._aten: a tensor's dtype, sizes and strides for the marker-cache key read from ATen, equal to
the getters'."""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch", reason="the tensor reader reads torch tensors")
from torch.overrides import TorchFunctionMode  # noqa: E402

from pyprof.nvtx import memo  # noqa: E402

aten = memo._aten if memo.aten_capsule is not None else None
needs_aten = pytest.mark.skipif(aten is None, reason="pyprof.nvtx._aten was not built for this torch "
                                                     "(pip install --no-build-isolation)")


def _getters(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype)


def _strided() -> list:
    base = torch.randn(2, 3, 4, 5)
    return [
        base,
        base.transpose(1, 3),
        base.to(memory_format=torch.channels_last),
        base[:, 1:, ::2],                        # a view with an offset and a step
        torch.randn(3, 1).expand(3, 4),          # stride 0
        torch.tensor(2.5),                       # 0-dim
        torch.empty(0, 7),
        torch.ones(4, dtype=torch.bfloat16),
        torch.ones(2, 2, dtype=torch.int64),
        torch.empty(2, 3, device="meta"),
        torch.nn.Parameter(torch.randn(3, 2)),
        torch.randn(3, 2, requires_grad=True) * 2,
    ]


@needs_aten
@pytest.mark.parametrize("t", _strided(), ids=lambda t: f"{tuple(t.shape)}-{t.stride()}-{t.dtype}-{t.device.type}")
def test_a_strided_tensors_meta_equals_its_getters(t) -> None:
    meta = aten.tensor_meta(t)
    assert meta == _getters(t) and meta[2] is t.dtype


@needs_aten
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
def test_tensors_the_getters_describe_otherwise_are_left_to_them() -> None:
    sparse = torch.eye(3).to_sparse()         # no strides: stride() raises or, by torch version, reads zeros
    nested = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])  # shape raises
    assert aten.tensor_meta(sparse) is None and aten.tensor_meta(nested) is None

    class Mode(TorchFunctionMode):             # the getters go through it: so must the key
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            return func(*args, **(kwargs or {}))

    x = torch.ones(2)
    with Mode():
        assert aten.tensor_meta(x) is None
    assert aten.tensor_meta(x) == _getters(x)
    seen = []

    def traced(t: torch.Tensor) -> torch.Tensor:  # under torch.jit.trace the shape holds 0-dim tensors
        seen.append(aten.tensor_meta(t))
        return t + 1

    torch.jit.trace(traced, (x,), check_trace=False)
    assert seen == [None]


@needs_aten
def test_a_tensor_of_more_dimensions_than_the_key_buffer_holds_is_left_to_the_getters() -> None:
    most = torch.ones([1] * 30)  # PYPROF_ATEN_META_MAX: dtype, dimensions, 30 sizes and 30 strides
    assert aten.tensor_meta(most) == _getters(most)
    assert aten.tensor_meta(torch.ones([1] * 31)) is None


@needs_aten
def test_only_plain_tensors_and_parameters_are_read() -> None:
    class Sub(torch.Tensor):
        pass

    for obj in (torch.ones(2).as_subclass(Sub), 3, None):
        with pytest.raises(TypeError, match=r"^pyprof._aten.tensor_meta: not a torch.Tensor$"):
            aten.tensor_meta(obj)


def test_the_reader_is_used_only_with_the_torch_it_was_built_for() -> None:
    build = f"{torch.__version__} {torch.version.git_version}"
    assert memo.torch_build() == build
    if memo._aten is not None:
        assert memo._aten.built_for == build  # built here, by this checkout's set-up
    built = types.SimpleNamespace(built_for="2.13.0+cpu abc123", api=object())
    assert memo.aten_api(built, "2.13.0+cpu abc123") is built.api
    for other in ("2.13.0+cu130 abc123", "2.13.0+cpu def456", "2.12.1+cpu abc123"):
        assert memo.aten_api(built, other) is None
    assert memo.aten_api(None, "2.13.0+cpu abc123") is None


@pytest.mark.skipif(memo._hot is None, reason="pyprof.nvtx._hot was not built (no C compiler at install)")
@pytest.mark.parametrize("abi, extra", [(2, 0), (3, 8)])
def test_hot_refuses_a_reader_of_another_interface(abi, extra) -> None:
    """An _aten left from an older build (its rebuild failed) is refused, not read past its end."""
    import ctypes

    class Api(ctypes.Structure):
        _fields_ = [("abi", ctypes.c_int), ("size", ctypes.c_size_t), ("tensor_meta", ctypes.c_void_p),
                    ("autocast_on", ctypes.c_void_p)]

    api = Api(abi, ctypes.sizeof(Api) + extra, None, None)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new(ctypes.addressof(api), b"pyprof.nvtx._aten.api", None)
    try:
        with pytest.raises(ImportError, match=rf"^pyprof._hot.setup: pyprof.nvtx._aten has interface {abi} "
                                              rf"\({api.size} bytes\), not 3 \({ctypes.sizeof(Api)} bytes\): an older build$"):
            memo.setup_hot(capsule)
    finally:
        memo.setup_hot(memo.aten_capsule)


@pytest.mark.skipif(memo._hot is None, reason="pyprof.nvtx._hot was not built (no C compiler at install)")
def test_hot_refuses_a_capsule_that_is_not_the_readers() -> None:
    import datetime

    not_ours = datetime.datetime_CAPI       # a capsule of another name
    try:
        with pytest.raises(ValueError, match="PyCapsule_GetPointer called with incorrect name"):
            memo.setup_hot(not_ours)
        with pytest.raises(ValueError):
            memo.setup_hot(object())
    finally:
        memo.setup_hot(memo.aten_capsule)


@needs_aten
def test_autocast_on_follows_the_cpu_autocast_region_as_the_key_needs() -> None:
    assert aten.autocast_on() is False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert aten.autocast_on() is True
        with torch.autocast("cpu", enabled=False):
            assert aten.autocast_on() is False
        assert aten.autocast_on() is True
    assert aten.autocast_on() is False
