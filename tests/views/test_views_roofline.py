"""--plot: a PNG of the real GPT capture, the unknown-GPU case, and the error without matplotlib."""
from __future__ import annotations

import pytest

from pyprof.prof.scan import analysed
from pyprof.prof.views.roofline import TRIVIAL, Point, Points, _label, _labelled, plot
from pyprof.prof.warnings_tally import Tally
from test_views_common import numbered, prof, trace_records, write_dict

PNG = b"\x89PNG\r\n\x1a\n"


def points(recs):
    pts = Points()
    for _ in analysed(numbered(recs), Tally(), fn=pts.add):
        pass
    return pts


def test_gpt_points_and_labels():
    pts = points(trace_records("gpt"))
    # 57 (was 56): AdamW.step's marker now carries weight_decay/amsgrad, so its _fused_adamw_ kernel
    # has known FLOPs and bytes and is plotted. 58 (was 57): the backward of the add of a [128,256]
    # operand to a [4,128,256] one (its reduce_kernel: the gradient summed over the batch, 98,304
    # adds, 1,179,648 B) has known work; the other four AddBackward0 kernels carry 0 FLOPs (no
    # broadcast: dY passes through), still not plotted: 82 -> 81 skipped. 62 (was 58): the four
    # gradient accumulations the autograd engine runs after NativeLayerNormBackward0 (aten::add_
    # of two fp32 [4,128,256] gradients: 131,072 FLOPs, 3 x 524,288 B) are priced at the aten level
    # instead of 0: 81 -> 77 skipped (Tensor.backward's 0-dim fill is now priced too, at 0 FLOPs
    # and 4 B: still not plotted). 60 (was 62): cross_entropy's backward is counted once, on its
    # first kernel, not once per autograd node (its ToCopy and LogSoftmax kernels carry 0): 79 skipped.
    # 78: the fused AdamW step's counter launch carries its 29 adds (trivial, not plotted either).
    # 73 (was 60): the eight bias gradients (reduce_kernel: 512 rows summed, 130,816 to 523,264
    # adds) and layer_norm's five dWeight/dBias kernels (GammaBetaBackward, its backward's second
    # stage) carry their work: 63 skipped; cross_entropy's nll_loss kernels carry their 512 FLOPs,
    # forward and backward (trivial: 3). 75: flash attention's two D = rowsum(dO * O) kernels
    # (its backward's helper before the main kernel) carry their work: 61 skipped.
    assert len(pts.points) == 75 and pts.skipped == 61 and pts.trivial == 3
    assert pts.peaks.name == "H100 SXM" and pts.paths == {"fp16_tc", "fp32"}
    labels = [text for _, text in _labelled(pts.points)]
    # linear's longest plotted kernel is a bias gradient's sum (its GEMMs are shorter).
    assert labels[0] == "linear: reduce_kernel (+8 kernels)"
    assert len(labels) == 8  # eight ops have plotted kernels


@pytest.mark.slow
def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "roofline.png"
    rc, stdout, err = prof("--plot", str(out), write_dict(tmp_path, "gpt"))
    assert rc == 0 and stdout == "" and out.read_bytes()[:8] == PNG
    assert "roofline of 75 kernels written" in err and "61 kernels without known" in err


@pytest.mark.slow
def test_plot_with_summary_in_one_pass(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.png"
    rc, stdout, _ = prof("--summary", "--plot", str(out), write_dict(tmp_path, "lenet"))
    assert rc == 0 and stdout.startswith("capture span") and out.exists()


@pytest.mark.slow
def test_unknown_gpu_plots_points_without_roofs(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [dict(r, gpu={"name": "Mystery GPU"}) for r in trace_records("gpt")]
    notes = plot(points(recs), str(tmp_path / "u.png"))
    assert any("not in the peak table" in n for n in notes)
    assert (tmp_path / "u.png").read_bytes()[:8] == PNG


def test_without_matplotlib_one_clear_line(tmp_path, monkeypatch):
    # A sitecustomize-free way to hide matplotlib: a child whose sys.path shadows it.
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "shadow"))
    rc, out, err = prof("--plot", str(tmp_path / "x.png"), write_dict(tmp_path, "gpt"))
    assert rc == 8 and out == ""
    assert err.strip() == ("pyprof.prof: error: --plot needs matplotlib: pip install matplotlib "
                           "(or pip install 'pyprof-nvtx[plot]')")
    assert not (tmp_path / "x.png").exists()


def test_trivial_kernels_are_not_plotted_and_add_no_roof():
    pts = points(trace_records("resnet"))
    # 163: each forward call's backward counted once, on its first kernel (cross_entropy's three
    # nodes, adaptive_avg_pool2d's AsStrided and Mean nodes): 3 kernels carry 0 and are skipped.
    # 164: the SGD step's weight decay runs as two launches, each carrying its own tensors.
    # 165: the fc layer's bias gradient (8 rows summed into 1,000: 7,000 adds); cross_entropy's
    # nll_loss kernels carry their 8 FLOPs (trivial: 25). 166: a convolution's weight gradient
    # split K-wise sums its partials in CUTLASS's ReduceSplitK (245,760 adds). 171: the stem's
    # ReduceSplitK over its weight padded to 8 channels (702,464 adds) and layer1's four segment-K
    # weight gradients' split-K passes (442,368 adds each).
    assert len(pts.points) == 171 and pts.trivial == 25
    assert all(p.tflops * p.dur * 1e3 >= TRIVIAL for p in pts.points)  # FLOPs = TFLOP/s x ns x 1e3
    assert "fp64" not in pts.paths  # GradScaler's fp64 scalar would add an FP64 roof
    assert min(p.tflops for p in pts.points) > 1e-3  # no int64 scalar op down at 1e-6


def test_kernels_above_a_roof_are_marked():
    pts = points(trace_records("resnet"))
    over = sorted(p.op for p in pts.points if p.over)
    # The SGD step's launches each carry their own lists: none above a roof. max_pool2d's backward
    # is carried by max_pool_backward_nhwc, not by the zero fill of dX before it (a part): not above.
    assert over == ["__add__", "conv2d", "relu", "relu", "relu", "relu", "relu", "relu"]


def test_every_labelled_point_gets_its_label():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.set_xscale("log"), ax.set_yscale("log"), ax.set_xlim(0.1, 100), ax.set_ylim(0.1, 100)
    crowd = [(Point(1.0, 1.0, 1, None, f"op{i}", "k"), f"op{i}: a label long enough to collide") for i in range(12)]
    labels = _label(fig, ax, crowd)
    assert sorted(t.get_text() for t in labels) == sorted(text for _, text in crowd)
    assert all(t in ax.texts for t in labels)
    from matplotlib.text import Text
    boxes = [Text.get_window_extent(t, fig.canvas.get_renderer()) for t in labels]  # without leader lines
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)


@pytest.mark.slow
def test_one_kernel_is_said_in_the_singular(tmp_path):
    pytest.importorskip("matplotlib")
    one = [next(r for r in trace_records("gpt") if r["kShortName"].startswith("nvjet"))]
    rc, out, err = prof("--summary", "--plot", str(tmp_path / "one.png"), write_dict(tmp_path, "one", one))
    assert rc == 0
    assert out.splitlines()[0].endswith(", 1 device (NVIDIA H100 80GB HBM3)")
    assert "pyprof.prof: roofline of 1 kernel written to" in err
