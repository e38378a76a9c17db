"""Split-K reductions after cuBLASLt's nvjet GEMMs (issue 27): an nvjet `..._splitK_...` kernel's
grid z is 1, its blocks the output's tiles, padded to whole clusters, times the splits
(gemm_parts.nvjet_splits), and the splitKreduce_kernel after it reads that many fp32 partials and
writes the output in the type its name states. Held against Nsight Compute on 262 fp16 weight
gradients (tests/data/kernel_truth/conv_ncu_workspace.csv.xz, benchmarks/conv_workspace.py: a
spin_kernel opens each case)."""
from __future__ import annotations

import os
import sys

import pytest

from pyprof.prof.pricing.conv_parts import conv_outputs
from pyprof.prof.pricing.gemm_parts import nvjet_splits, split_k, split_partials

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "kernel_truth")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from conv_workspace import CASES  # noqa: E402
from tc_truth import ncu_launches  # noqa: E402

WRITES, STORES = "lts__t_sectors_srcunit_tex_op_write.sum", "smsp__sass_data_bytes_mem_global_op_st.sum"


def _nsys_name(ncu_name: str) -> str:
    """A splitKreduce_kernel's name as nsys spells it: ncu's demangler drops the `(int)` casts."""
    return ncu_name.replace("splitKreduce_kernel<32, 16,", "splitKreduce_kernel<(int)32, (int)16,")


@pytest.fixture(scope="module")
def pairs() -> list:
    """(case, nvjet launch, its counters, reduction launch, its counters) of every nvjet split-K
    GEMM ncu saw followed by a splitKreduce_kernel, with the case (conv_workspace.CASES) it ran in."""
    launches = ncu_launches(os.path.join(DATA, "conv_ncu_workspace.csv.xz"))
    case, out = -1, []
    for (name, grid, counters), after in zip(launches, launches[1:] + [("", [], {})]):
        case += "spin_kernel" in name
        if name.startswith("nvjet_") and "_splitK_" in name and "splitKreduce_kernel" in after[0]:
            out.append((CASES[case], (name, grid), counters, (_nsys_name(after[0]), after[1]), after[2]))
    return out


def test_nvjet_splits_are_its_blocks_over_the_cluster_padded_tiles(pairs) -> None:
    """Each nvjet split-K GEMM wrote splits x the weight gradient's K x C·taps fp32 partials (ncu's
    L2 write sectors, to the byte: the GEMM's bytes carry them in place of the gradient written
    once), the splits its grid's blocks over the gradient's tiles, each
    count a whole number of clusters (64x32 tiles in 1x4 clusters over 96 x 32: 3 tiles in 4,
    grid 4 x 17, 17 splits); the reduction after it stored the fp16 gradient once and priced
    reads the partials."""
    assert len(pairs) == 48 and len({p[1][0] for p in pairs}) == 13
    for (n, c, h, w, k, r, *_), gemm, counters, reduce, reduced in pairs:
        rows, cols = k, c * r * r
        splits = nvjet_splits(gemm, rows, cols)
        assert 32 * counters[WRITES] == splits * rows * cols * 4, (gemm, rows, cols)
        outputs = conv_outputs([n, c, h, w], [k, c, r, r], None, True, 2)  # dX's tiles are more than its blocks
        # the GEMM priced with the gradient written once in fp16: its partials written instead
        assert split_partials(gemm, outputs, 10 ** 9, 2) == 10 ** 9 - rows * cols * 2 + 32 * counters[WRITES]
        work = split_k(reduce[0], reduce[1], 1, outputs, 2, gemm)
        assert work == ((splits - 1) * rows * cols, splits * rows * cols * 4 + rows * cols * 2)
        assert reduced[STORES] == rows * cols * 2
    padded = [(g[1], nvjet_splits(g, k, c * r * r)) for (_, c, _, _, k, r, *_), g, *_ in pairs
              if g[0] == "nvjet_sm90_hsh_64x32_64x16_1x4_h_bz_splitK_NTT" and (k, c * r * r) == (96, 32)]
    assert padded == [([4, 17, 1], 17)]


def test_nvjet_splits_need_a_split_kernel_and_whole_splits() -> None:
    """Any other GEMM (a non-split nvjet, CUTLASS's, whose splits are its grid's z) and a grid
    that is no whole number (2 or more) of splits give None, never a guess."""
    split = "nvjet_sm90_tst_64x32_64x16_2x4_h_bz_splitK_NTT"
    assert nvjet_splits((split, [8, 12, 1]), 96, 384) == 4  # 6 x 3 tiles in 2x4 clusters: 6 x 4
    assert nvjet_splits((split, [8, 13, 1]), 96, 384) is None
    assert nvjet_splits((split, [8, 3, 1]), 96, 384) is None  # 24 blocks: one split
    assert nvjet_splits(("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", [8, 12, 1]), 96, 384) is None
    assert nvjet_splits(("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(T1::Params)",
                         [26, 1, 5]), 800, 128) is None
    assert nvjet_splits(None, 96, 384) is None
