"""pyprof.profiled(): the CUDA profiler range around the body on a synchronized device; emit_nvtx with aten=True."""
import contextlib

import pytest

torch = pytest.importorskip("torch", reason="pyprof.profiled() drives torch's profiler: needs torch")

import pyprof


def test_without_cuda_the_body_just_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    with pyprof.profiled() as opened:
        calls.append("body")
    assert opened is False and calls == ["body"]


def test_with_cuda_the_range_holds_the_body_and_nothing_before_it(monkeypatch):
    calls = []

    @contextlib.contextmanager
    def emit_nvtx(record_shapes=False):
        calls.append(f"emit_nvtx(record_shapes={record_shapes})")
        try:
            yield
        finally:
            calls.append("emit_nvtx end")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    monkeypatch.setattr(torch.autograd.profiler, "emit_nvtx", emit_nvtx)
    with pyprof.profiled() as opened:
        calls.append("body")
    assert opened is True
    # The default mode: pyprof's markers alone attribute every kernel; no PyTorch op ranges.
    assert calls == ["synchronize", "start", "body", "synchronize", "stop"]

    calls.clear()
    with pyprof.profiled(aten=True):
        calls.append("body")
    assert calls == ["emit_nvtx(record_shapes=True)", "synchronize", "start", "body", "synchronize", "stop",
                     "emit_nvtx end"]

    calls.clear()
    try:
        with pyprof.profiled(aten=True, record_shapes=False):
            raise KeyError("step failed")
    except KeyError:
        pass
    # A failing step still closes the range, so nsys does not capture the rest of the run.
    assert calls == ["emit_nvtx(record_shapes=False)", "synchronize", "start", "synchronize", "stop",
                     "emit_nvtx end"]
