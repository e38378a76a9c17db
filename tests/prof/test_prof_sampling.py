"""A spatial transformer's affine_grid and grid_sample (ops/sampling.py), on the stn case's shapes
(benchmarks/pricing_coverage.py: 64 single-channel 64 x 64 images, fp32)."""
from __future__ import annotations

from pyprof.prof.pricing.analysis import Analyzer
from pyprof.prof.pricing.ops import Call, lookup
from pyprof.prof.warnings_tally import Tally

THETA = {"shape": [64, 2, 3], "dtype": "float32", "grad": True}
AFFINE = {"v": 1, "kind": "op", "mod": "torch", "op": "affine_grid_generator", "args": [THETA, [64, 1, 64, 64], False]}
POINTS = 64 * 64 * 64


def test_affine_grid_runs_the_base_grid_then_the_batched_product():
    """Without align_corners: linspace over W (64 written), its rescale (a multiply, a divide),
    its copy into the x plane (64 read; every third float of the base grid: each 32-byte sector of
    its 786,432 floats written), the same for H, the ones plane, then [64, 4096, 3] x [64, 3, 2]:
    12 FLOPs a grid point. The backward builds the same base grid."""
    cost = lookup("torch", "affine_grid_generator")(Call(AFFINE))
    grid = POINTS * 3 * 4
    line = ((0, 256), (64, 512), (64, 512), (0, 256 + grid))
    product = (12 * POINTS, (POINTS * 3 + 64 * 6 + POINTS * 2) * 4)
    assert cost.stages == line + line + ((0, grid), product)
    assert cost.bwd_stages == cost.stages
    assert cost.flops == cost.bwd_flops == 12 * POINTS + 4 * 64
    aligned = lookup("torch", "affine_grid_generator")(Call({**AFFINE, "args": [THETA, [64, 1, 64, 64], True]}))
    assert aligned.stages == ((0, 256), (0, 256 + grid)) * 2 + ((0, grid), product)


def test_affine_grids_kernels_take_its_stages_in_turn():
    """The ten kernels of the forward, as an H200 ran them (stn): each its own stage."""
    names = ["elementwise_kernel_with_index", "vectorized_elementwise_kernel", "vectorized_elementwise_kernel",
             "elementwise_kernel"] * 2 + ["elementwise_kernel", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x32x8"]
    an = Analyzer(Tally())
    got = [an.facts({"kind": "kernel", "kLongName": n, "kShortName": n, "grid": [1, 1, 1], "block": [128, 1, 1],
                     "dir": "fprop", "mod": "torch", "op": "affine_grid_generator", "marker": AFFINE, "torchOps": [],
                     "pid": 1, "tid": 1}) for n in names]
    assert [(f.flops, f.bytes) for f in got] == [s[:2] for s in lookup("torch", "affine_grid_generator")(
        Call(AFFINE)).stages]


def test_grid_sample_bilinear_and_nearest():
    """Bilinear over 64 x 1 x 64 x 64 through a 64 x 64 x 64 grid: 14 FLOPs a grid point (its
    coordinates and weights), 7 an output element (four taps summed); the input, the grid read,
    the output written. Backward: dGrid and, the input not requiring grad, no dInput."""
    x, grid = {"shape": [64, 1, 64, 64], "dtype": "float32"}, {"shape": [64, 64, 64, 2], "dtype": "float32",
                                                                "grad": True}
    marker = {"v": 1, "kind": "op", "mod": "torch", "op": "grid_sampler", "args": [x, grid, 0, 0, False]}
    cost = lookup("torch", "grid_sampler")(Call(marker))
    assert (cost.flops, cost.bytes) == (14 * POINTS + 7 * POINTS, (POINTS + 2 * POINTS + POINTS) * 4)
    assert (cost.bwd_flops, cost.bwd_bytes) == (14 * POINTS + 14 * POINTS, (POINTS + POINTS + 4 * POINTS) * 4)
    marker["args"][2] = 1
    assert lookup("torch", "grid_sampler")(Call(marker)).flops == 8 * POINTS
    marker["args"][2] = 2  # bicubic: not modelled
    assert lookup("torch", "grid_sampler")(Call(marker)) is None


def test_grid_sampler_nodes_of_a_compiled_graph_as_the_marker():
    """A compiled graph's aten.grid_sampler_2d and its backward (stn under torch.compile: the
    backward's output_mask [False, True], the input needing no gradient) priced by grid_sample's
    formula, as the marker is (the backward's kernel was na: 0.8% of the compiled step)."""
    from pyprof.prof.pricing.fx_nodes import node_cost

    x, grid = {"shape": [64, 1, 64, 64], "dtype": "float32"}, {"shape": [64, 64, 64, 2], "dtype": "float32"}
    forward, _ = node_cost({"op": "aten.grid_sampler_2d.default", "args": [x, grid, 0, 0, False]})
    assert (forward.flops, forward.bytes) == (14 * POINTS + 7 * POINTS, (POINTS + 2 * POINTS + POINTS) * 4)
    node = {"op": "aten.grid_sampler_2d_backward.default", "args": [x, x, grid, 0, 0, False, [False, True]]}
    backward, _ = node_cost(node)
    assert (backward.flops, backward.bytes) == (14 * POINTS + 14 * POINTS, (POINTS + POINTS + 4 * POINTS) * 4)
    node["args"][-1] = [True, True]  # dInput too: its taps scattered, 8 an element, written
    backward, _ = node_cost(node)
    assert (backward.flops, backward.bytes) == (14 * POINTS + 22 * POINTS, (POINTS + 2 * POINTS + 4 * POINTS) * 4)
