"""Each kernel of nn.utils.rnn's packing and unpacking its own bytes (issue 27): the private
torch._pack_padded_sequence and torch._pad_packed_sequence that pyprof.init() wraps, their markers
carrying the lengths' and batch sizes' values (docs/markers.md). The kernels are real records of an
H100 capture (tests/data/cov_packed_sequence_default.jsonl.xz: benchmarks/pricing_coverage.py's
rnn_packed, cut from pyprof.init()'s records, unchanged; taken before these ops were wrapped, so
their kernels had no op and were na): 16 batch-first sequences of lengths 40, 38, ..., 10, packed
from fp32 [16, 40, 64] and unpacked from the packed [400, 96] output of an RNN. The test writes the
markers pyprof writes now (their text: tests/nvtx/test_nvtx_behavior.py's
test_packing_and_unpacking_markers_carry_lengths_and_batch_sizes) into those records, as parse
attributes a call's kernels and its backward nodes' to it."""
from __future__ import annotations

import io
import json
import lzma
import os

from pyprof.prof.io.reader import records
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
LENGTHS = [40 - 2 * j for j in range(16)]
BATCH_SIZES = [16] * 10 + [b for b in range(15, 0, -1) for _ in range(2)]
PACK = {"v": 1, "kind": "op", "mod": "torch", "op": "_pack_padded_sequence",
        "args": [{"shape": [16, 40, 64], "dtype": "float32"}, {"shape": [16], "dtype": "int64", "values": LENGTHS},
                 True]}
PAD = {"v": 1, "kind": "op", "mod": "torch", "op": "_pad_packed_sequence",
       "args": [{"shape": [400, 96], "dtype": "float32", "grad": True},
                {"shape": [40], "dtype": "int64", "values": BATCH_SIZES}, True, 0.0, 40]}


def _marked() -> list:
    """The capture's records with the two ops' markers: 16 packing kernels, 16 unpacking kernels,
    then the unpacking's 77 backward kernels."""
    with lzma.open(os.path.join(DATA, "cov_packed_sequence_default.jsonl.xz"), "rt") as s:
        recs = [json.loads(line) for line in s]
    assert len(recs) == 109
    for i, rec in enumerate(recs):
        marker = PACK if i < 16 else PAD
        if i < 32:  # a call's kernels, numbered from 0 under its marker
            rec.update(dir="fprop", mod="torch", op=marker["op"], marker=marker, fwd=None, subSeqId=i % 16)
        else:
            rec.update(dir="bprop", mod="torch", op=marker["op"], marker=None,
                       fwd={"seq": rec.get("seqId"), "marker": marker, "torchOp": None, "call": 1})
    return recs


def _priced(recs: list) -> list:
    text = "".join(json.dumps(r) + "\n" for r in recs).encode()
    return [(rec["kShortName"], f.flops, f.bytes) for rec, f, _ in analysed(records(io.BytesIO(text), Tally()), Tally())]


def test_packing_copies_each_block_of_steps_then_cats_them():
    """Scanning from the shortest sequence, each new length l cuts the 2 (10 for the first) steps
    since the last one of the sequences at least that long, made contiguous by a copy (the last,
    one sequence wide, already is: no kernel); the cat then writes the 400 packed rows of 64."""
    got = _priced(_marked())[:16]
    blocks = [(10, 16)] + [(2, b) for b in range(15, 1, -1)]
    want = [("elementwise_kernel", 0, 2 * k * b * 64 * 4) for k, b in blocks] + [
        ("CatArrayBatchedCopy_vectorized", 0, 2 * 400 * 64 * 4)]
    assert got == want


def test_unpacking_fills_the_output_and_copies_each_run_of_one_batch_size():
    """The padded [40, 16, 96] output filled, then each run of steps with one batch size b < 16 (2
    steps each) copied into output[steps, :b]; the first run (10 steps of all 16) is a contiguous
    region: cudaMemcpy, no kernel."""
    got = _priced(_marked())[16:32]
    want = [("vectorized_elementwise_kernel", 0, 40 * 16 * 96 * 4)] + [
        ("elementwise_kernel", 0, 2 * 2 * b * 96 * 4) for b in range(15, 0, -1)]
    assert got == want


def test_unpacking_backward_kernels_carry_their_nodes_work():
    """Backward, last run first: CopySlices copies the strided [40, 16, 96] output gradient once,
    then per run of b sequences (2 steps, e = 2·b·96 elements) clones its region, zero-fills it
    (CopyBackwards) and writes the zeros back; SliceBackward0 zero-fills a [400, 96] data gradient
    and the engine adds it to the sum of the runs before
    (38,400 FLOPs; the first sum parts._gradients' add). The first run (all 16 sequences) only
    has its slice's fill and sum. Every kernel known; the FLOPs are the 15 sums."""
    got = _priced(_marked())[32:]
    data = 400 * 96
    fill, add = ("vectorized_elementwise_kernel", 0, data * 4), ("vectorized_elementwise_kernel", data, 3 * data * 4)
    want = [("elementwise_kernel", 0, 2 * 40 * 16 * 96 * 4)]
    for b in range(1, 16):
        e = 2 * b * 96
        want += [("elementwise_kernel", 0, 2 * e * 4), ("vectorized_elementwise_kernel", 0, e * 4),
                 ("elementwise_kernel", 0, 2 * e * 4), fill] + ([add] if b > 1 else [])
    want += [fill, add]
    assert got == want
    assert sum(f for _, f, _ in got) == 15 * data


def test_packing_backward_zero_fills_the_input_gradient():
    """PackPaddedSequenceBackward0 (_pack_padded_sequence_backward): the [40, 16, 64] input
    gradient zero-filled (the gradient fill part every op has), each step's rows then copied in by
    cudaMemcpy (both sides contiguous): one kernel. The capture's input needed no gradient: the unpacking's fill kernel stands in,
    launched for the 40,960 elements."""
    fill = _marked()[16]
    fill.update(dir="bprop", op=PACK["op"], marker=None, grid=[40, 1, 1], seqId=1, subSeqId=0,
                fwd={"seq": 1, "marker": dict(PACK, args=[dict(PACK["args"][0], grad=True)] + PACK["args"][1:]),
                     "torchOp": None, "call": 2}, torchOps=[{"name": "PackPaddedSequenceBackward0", "seq": 1, "opId": 9}])
    assert _priced([fill]) == [("vectorized_elementwise_kernel", 0, 40 * 16 * 64 * 4)]
