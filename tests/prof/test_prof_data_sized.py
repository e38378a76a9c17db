"""Data-sized ops priced per kernel from PyTorch's op ranges alone (H200 captures of
benchmarks/data_sized.py: emit_nvtx's ranges, and Nsight Systems' --pytorch=autograd-shapes-nvtx
ranges), their outputs' sizes from the ranges that first read them (parse/consumers.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from captures import unpacked
from prof.test_prof_helpers import analyse
from pyprof.parse import Export, Stats, records

DATA = Path(__file__).resolve().parent.parent / "data"
TRUTH = json.loads((DATA / "data_sized_truth.json").read_text())["outputs"]
MODES = ["plain", "nsyspt"]


@pytest.fixture(scope="module", params=MODES)
def priced(request, tmp_path_factory) -> list:
    path = unpacked(DATA / f"data_sized_{request.param}.sqlite.xz", tmp_path_factory.mktemp(request.param))
    with Export(str(path)) as exp:
        recs = list(records(exp, Stats()))
    facts, _ = analyse(recs)
    return [(r["layer"][0], r["kShortName"], f.flops, f.bytes) for r, f in zip(recs, facts)]


def test_nonzero_in_every_form_is_priced_kernel_by_kernel_from_its_indices_reader(priced) -> None:
    """nonzero of a 64x32 bool mask (x > 0.5, its kernel writes bool) that held 613 trues, in each
    form the program called it (nonzero, where, argwhere, and inside x[mask] and masked_select):
    cub's count (mask read at 1 B an element, the count written), its tile states, its flagged
    select (the mask read, 613 int64 positions and the count written) and write_indices (the
    positions read, [613, 2] coordinates written)."""
    n = TRUTH["nonzero"][0][0]
    assert n == 613
    nonzero = [(k, flops, nbytes) for layer, k, flops, nbytes in priced
               if layer in ("nonzero", "where", "argwhere", "bool_index", "masked_select") and
               k in ("DeviceReduceSingleTileKernel", "DeviceSelectSweepKernel", "write_indices")]
    assert nonzero == [("DeviceReduceSingleTileKernel", 2048, 2048 + 4), ("DeviceSelectSweepKernel", 2048, 2048 + 8 * n + 4),
                       ("write_indices", 2 * n, 8 * n * 3)] * 5


def test_gathers_through_found_positions_read_each_dims_indices(priced) -> None:
    """x[idx[:, 0], idx[:, 1]] (two int64 index tensors of 613), x[x > 0.5] and
    masked_select(x, x > 0.5) (a 2-D mask: nonzero's 613 positions, one int64 index a dim) each
    gather 613 of x's fp32 elements in PyTorch's index_elementwise_kernel: the two indices read,
    each element read and written; no FLOPs. (The row gather's opaque element size is in its
    kernel's name: x, made before the capture, has no producer here.)"""
    n = TRUTH["bool_index"][0][0]
    gathers = [(layer, flops, nbytes) for layer, k, flops, nbytes in priced if k == "index_elementwise_kernel"]
    assert gathers == [(layer, 0, 2 * 8 * n + 2 * 4 * n) for layer in ("nonzero", "bool_index", "masked_select")]
