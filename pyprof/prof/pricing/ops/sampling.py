"""Spatial sampling: F.affine_grid (torch.affine_grid_generator) and F.grid_sample
(torch.grid_sampler), a spatial transformer's two ops, 2-D.

affine_grid builds a base grid of the output's (x, y, 1) coordinates and multiplies it by each
sample's 2 x 3 transform, as PyTorch's affine_grid_generator runs it, kernel by kernel (named
nothing: Cost.stages in order): linspace over W (written), and without align_corners its rescale
(a multiply and a divide: 1 an element each, read and written), its copy into every row of the
base grid's x plane (the W values read), the same for H into the y plane, the ones plane filled:
a plane is every third element of the [N, H, W, 3] base grid, whose stores, 3 elements apart,
write every 32-byte sector of it (Nsight Compute on an H200, stn: 3,145,728 bytes of sectors
written for each 1 MB fp32 plane), so each writes the base grid's bytes; then the batched
product [N, H·W, 3] x [N, 3, 2] (2 FLOPs a
multiply-add; the base grid and the transforms read, the [N, H, W, 2] grid written). Backward:
the same base grid, then its transpose times dGrid ([N, 3, H·W] x [N, H·W, 2]; dGrid read,
dTheta written). linspace counts no FLOPs, as arange.

grid_sample (bilinear or nearest): per grid point the source coordinates unnormalized and
clipped (8 FLOPs for x and y) and, bilinear, the four corner weights (6); per output element
and channel the four taps weighted and summed (7), nearest one tap read (0). The input and the
grid read once, the output written. Backward (bilinear): dGrid (written, the grid read) from
dOut, the input's four taps and the weights (per output element and channel 14: two partial
derivatives of the bilinear form), dInput where the input requires grad (its zero fill a part;
the same taps scattered with atomics, 8 an element and channel: 4 products, 4 adds).
"""
from __future__ import annotations

from ..registry import SIMT, Call, Cost, dims, fmt_params, register
from ..values import ITEMSIZE, Tensor

_COORD_FLOPS = 8       # x and y: unnormalize (a multiply and an add each), clip (two compares each)
_WEIGHT_FLOPS = 6      # the bilinear corner weights from the fractions
_TAPS_FLOPS = {0: 7, 1: 0}   # bilinear: 4 weighted taps summed; nearest: one tap copied
_GRID_GRAD_FLOPS = 14  # bilinear: d/dx and d/dy of the weighted taps, per output element and channel
_INPUT_GRAD_FLOPS = 8  # bilinear: each tap's weight times dOut, added into dInput


def _base_grid_stages(n: int, h: int, w: int, size: int, align_corners: bool) -> tuple:
    """The base grid's kernels (affine_grid's docstring above)."""
    plane = n * h * w * 3 * size  # a plane's stores write every sector of the base grid
    stages: tuple = ()
    for steps in (w, h):
        stages += ((0, steps * size),)
        if not align_corners:
            stages += ((steps, 2 * steps * size), (steps, 2 * steps * size))
        stages += ((0, steps * size + plane),)
    return stages + ((0, plane),)


@register("torch.affine_grid_generator", "torch.nn.functional.affine_grid")
def affine_grid(c: Call) -> Cost | None:
    """(theta [N, 2, 3], size [N, C, H, W], align_corners): module docstring."""
    theta, shape, align = c.get(0, "theta"), c.get(1, "size"), c.get(2, "align_corners")
    size = ITEMSIZE.get(theta.dtype) if isinstance(theta, Tensor) else None
    if size is None or not isinstance(shape, list) or len(shape) != 4 or not all(type(d) is int for d in shape) \
            or theta.shape != (shape[0], 2, 3):
        return None
    n, _, h, w = shape
    points = n * h * w
    base = _base_grid_stages(n, h, w, size, bool(align))
    flops = 2 * points * 3 * 2
    fwd = base + ((flops, (points * 3 + n * 6 + points * 2) * size),)
    bwd = base + ((flops, (points * 3 + points * 2 + n * 6) * size),)
    return Cost(flops + sum(s[0] for s in base), fwd[-1][1], fmt_params(theta.dtype, size=tuple(shape)), theta.dtype,
                SIMT, bwd_flops=flops + sum(s[0] for s in base), bwd_bytes=bwd[-1][1], stages=fwd, bwd_stages=bwd)


@register("torch.grid_sampler", "torch.nn.functional.grid_sample")
def grid_sample(c: Call) -> Cost | None:
    """(input [N, C, H, W], grid [N, Ho, Wo, 2], mode, padding_mode, align_corners): module
    docstring. F.grid_sample spells the mode as a name, torch.grid_sampler as 0 (bilinear) or
    1 (nearest); bicubic and 3-D: na."""
    x, grid, mode = c.get(0, "input"), c.get(1, "grid"), c.get(2, "mode", 0)
    mode = {"bilinear": 0, "nearest": 1}.get(mode, mode) if isinstance(mode, str) else mode
    size = ITEMSIZE.get(x.dtype) if isinstance(x, Tensor) else None
    if size is None or not isinstance(grid, Tensor) or len(x.shape) != 4 or len(grid.shape) != 4 \
            or grid.shape[-1] != 2 or mode not in _TAPS_FLOPS:
        return None
    points = grid.numel // 2
    outputs = points * x.shape[1]
    flops = points * (_COORD_FLOPS + (_WEIGHT_FLOPS if mode == 0 else 0)) + outputs * _TAPS_FLOPS[mode]
    nbytes = (x.numel + grid.numel + outputs) * size
    # Backward: dOut, the input and the grid read, dGrid written; dInput (written) where needed.
    dx = x.grad is not False
    bwd_flops = points * (_COORD_FLOPS + _WEIGHT_FLOPS) + outputs * (_GRID_GRAD_FLOPS + _INPUT_GRAD_FLOPS * dx)
    bwd_bytes = (outputs + x.numel + 2 * grid.numel + x.numel * dx) * size
    return Cost(flops, nbytes, fmt_params(x.dtype, shape=dims(x.shape), grid=dims(grid.shape), mode=mode), x.dtype,
                SIMT, bwd_flops=bwd_flops if mode == 0 else None, bwd_bytes=bwd_bytes if mode == 0 else None)
