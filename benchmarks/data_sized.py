"""Ops whose output size their input's values decide (PyTorch tags them dynamic_output_shape:
nonzero, masked_select, unique, bincount, repeat_interleave, one_hot, boolean indexing), run on a
GPU, for the pricing modes, the aten-only ones first: what PyTorch's op ranges alone tell
of their outputs (docs/parse.md, "Consumers of data-sized outputs").

usage (repo root, on the GPU machine, under nsys; one capture per mode):
    python benchmarks/data_sized.py --mode default --truth T.json # pyprof.init()'s markers
    python benchmarks/data_sized.py --mode plain --truth T.json   # emit_nvtx(record_shapes=True)
    python benchmarks/data_sized.py --mode bare --truth T.json    # nsys --pytorch=autograd-shapes-nvtx
    ncu --profile-from-start off --metrics ... --csv python benchmarks/data_sized.py --mode bare --scale 512
    python benchmarks/kernel_truth.py --records default=D.sqlite.xz --ncu N.csv.xz=CASES --models CASES
Each case runs once in the capture range, inside a range named after it (`layer:CASE`); --truth
writes each case's output shapes, as the program saw them, for the tests to hold prof against.
"""
from __future__ import annotations

import argparse
import json
from typing import Callable

from pricing_coverage import profiled_range  # benchmarks/: the capture range of each mode


def cases(device, scale: int = 1) -> dict[str, Callable[[], list]]:
    """Each case: a call of a data-sized op and how code goes on with its output (a view first,
    which launches nothing, then work that launches kernels); returns the op's outputs. `scale`
    multiplies the rows of x, the integers and the repeats (the test fixtures: 1)."""
    import torch
    import torch.nn.functional as F
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(64 * scale, 32, device=device, generator=g)
    ints = torch.randint(0, 50, (1000 * scale,), device=device, generator=g)
    repeats = torch.randint(0, 4, (96 * scale,), device=device, generator=g)
    w = torch.randn(32, 16, device=device, generator=g)

    def nonzero():
        idx = torch.nonzero(x > 0.5)  # each mask made in the case: its kernel tells its dtype
        x[idx[:, 0], idx[:, 1]].sum()  # select (a view), then gathers
        return [idx]

    def where():
        rows, cols = torch.where(x > 0.5)  # nonzero, then unbind: views
        (x[rows] @ w).relu_()
        return [rows, cols]

    def argwhere():
        idx = torch.argwhere(x > 0.5)
        idx.t().float().mean()
        return [idx]

    def bool_index():
        picked = x[x > 0.5]  # nonzero inside aten::index
        picked.view(-1, 1).mul(2.0)
        return [picked]

    def masked_select():
        picked = torch.masked_select(x, x > 0.5)
        picked.unsqueeze(0).exp()
        return [picked]

    def unique():
        values, inverse, counts = torch.unique(ints, return_inverse=True, return_counts=True)
        values.unsqueeze(1).float().sum()
        counts.float().mean()
        return [values, inverse, counts]

    def unique_consecutive():
        values = torch.unique_consecutive(ints.sort().values)
        values.view(1, -1).float().sum()
        return [values]

    def repeat_interleave():
        out = torch.repeat_interleave(torch.arange(96 * scale, device=device), repeats)
        out.view(-1, 1).float().sum()
        return [out]

    def bincount():
        counts = torch.bincount(ints)
        counts.unsqueeze(0).float().sum()
        return [counts]

    def one_hot():
        hot = F.one_hot(ints)  # num_classes from the data: max + 1
        hot.t().float().sum()
        return [hot]

    def repeat_heads():
        kv = torch.randn(2, 4, 64 * scale, 32, device=device, generator=g)
        out = kv.repeat_interleave(3, dim=1)  # an int: not data-sized, but the same op (GQA's heads)
        out.view(2, 12, -1).sum()
        return [out]

    return {f.__name__: f for f in (nonzero, where, argwhere, bool_index, masked_select, unique,
                                    unique_consecutive, repeat_interleave, bincount, one_hot, repeat_heads)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("default", "plain", "bare"), required=True,
                   help="default: pyprof.init()'s markers; plain: PyTorch's emit_nvtx(record_shapes=True) ranges; "
                        "bare: none (nsys --pytorch=autograd-shapes-nvtx adds its own)")
    p.add_argument("--truth", help="write each case's output shapes here (JSON)")
    p.add_argument("--scale", type=int, default=1, help="rows of each input times this (for Nsight Compute: "
                   "kernels of a megabyte and more; default 1, the fixtures' size)")
    args = p.parse_args()
    import torch

    import pyprof
    if args.mode == "default":
        pyprof.init()
    device = torch.device("cuda")
    run = cases(device, args.scale)
    for f in run.values():  # warm up: first calls load kernels and sort out cub's workspace
        f()
    torch.cuda.synchronize()
    truth = {}
    with profiled_range(args.mode):
        for name, f in run.items():
            with torch.cuda.nvtx.range(f"layer:{name}"):
                truth[name] = [list(t.shape) for t in f()]
        torch.cuda.synchronize()
    if args.truth:
        with open(args.truth, "w") as out:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "mode": args.mode,
                       "outputs": truth}, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
