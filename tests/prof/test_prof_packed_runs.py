"""A packed sequence's batch sizes from its pack's kernels' ranges (pricing/packed_runs.py), on
ranges built as PyTorch's PackedSequence.cpp makes them: per run of steps with one batch size b,
an `aten::contiguous` of the [k, b, F] block (a copy kernel only where the block is not
contiguous), then `aten::cat` of the runs flattened. The real capture's case (batch-first, the
last run of one sequence copy-less) is tests/prof/test_prof_rnn_packed.py's."""
from __future__ import annotations

from itertools import combinations_with_replacement

from pyprof.prof.pricing.ops.packed_sequence import contiguous
from pyprof.prof.pricing.packed_runs import PACK, PackedRuns

PID = 7


def _batch_sizes(lengths: list[int]) -> tuple:
    return tuple(sum(n > t for n in lengths) for t in range(max(lengths)))


def _pack_ranges(shape: tuple, lengths: list[int], batch_first: bool, op: int = 100) -> list:
    """The ranges of the kernels of one pack of a `shape` input by `lengths` (longest first), as
    the records of its copies and its cat give them, in launch order."""
    pack = {"name": PACK, "opId": op, "sizes": [list(shape), [len(lengths)], []],
            "inputOpIds": [[1, 0], [2, 0], [0, -1]]}
    steps, batch = (shape[1], shape[0]) if batch_first else shape[:2]
    feat = shape[2]
    strides = (feat, steps * feat) if batch_first else (batch * feat, feat)
    records, cat, prev, next_op = [], [], 0, op + 1
    for i, length in enumerate(reversed(lengths)):
        if length > prev:
            k, b = length - prev, len(lengths) - i
            if not contiguous((k, b, feat), (*strides, 1)):
                records.append([pack, {"name": "aten::contiguous", "opId": next_op, "sizes": [[k, b, feat], []]}])
            cat.append(([k * b, feat], next_op + 4))  # the view of the run, made after its copy
            next_op += 5
            prev = length
    records.append([pack, {"name": "aten::cat", "opId": next_op, "sizes": [s for s, _ in cat] + [[]],
                           "inputOpIds": [[made, 0] for _, made in cat] + [[0, -1]]}])
    return records


def _seen(*records: list) -> PackedRuns:
    runs = PackedRuns()
    for ranges in records:
        runs.saw(PID, ranges)
    return runs


def test_a_time_first_pack_s_copy_less_runs_are_solved_from_their_rows():
    """Time-first [6, 4, 3] by lengths 6, 4, 4, 1: the first run (one step of all 4) and no other
    is contiguous, so it has no copy; its 4 rows can only be the batch's."""
    lengths = [6, 4, 4, 1]
    ranges = _pack_ranges((6, 4, 3), lengths, False)
    assert len(ranges) == 3  # two copies and the cat: the first run copied nothing
    runs = _seen(*ranges)
    assert runs.batch_sizes(runs.pack_of(PID, (100, 0))) == _batch_sizes(lengths) == (4, 3, 3, 3, 1, 1)


def test_a_batch_first_pack_s_run_of_one_sequence_is_solved():
    """Batch-first [5, 9, 2] by lengths 9, 7, 7, 3, 2: runs (2, 5), (1, 4), (4, 3), (2, 1); the last,
    one sequence for 2 steps, is contiguous (no copy, 3 copies and the cat): of the (k, b) of its
    2 rows only (2, 1) is a contiguous block."""
    lengths = [9, 7, 7, 3, 2]
    ranges = _pack_ranges((5, 9, 2), lengths, True)
    assert len(ranges) == 4
    runs = _seen(*ranges)
    assert runs.batch_sizes(runs.pack_of(PID, (100, 0))) == _batch_sizes(lengths)


def test_every_small_pack_is_solved_to_its_batch_sizes():
    """Every pack of 1-5 sequences of 1-6 steps (lengths with repeats), 1 or 3 features,
    batch-first and time-first (3,668 packs; [n, n, F] inputs fit both layouts): one answer, its
    batch sizes, with or without the steps given; a steps count no answer has gives None."""
    packs = 0
    for batch in range(1, 6):
        for steps in range(1, 7):
            for feat in (1, 3):
                for lengths in combinations_with_replacement(range(steps, 0, -1), batch):
                    want = _batch_sizes(list(lengths))
                    for batch_first in (True, False):
                        shape = (batch, steps, feat) if batch_first else (steps, batch, feat)
                        runs = _seen(*_pack_ranges(shape, list(lengths), batch_first))
                        key = runs.pack_of(PID, (100, 0))
                        assert runs.batch_sizes(key) == want, (shape, lengths)
                        assert runs.batch_sizes(key, len(want)) == want and runs.batch_sizes(key, len(want) + 1) is None
                        packs += 1
    assert packs == 3668


def test_ops_reading_a_pack_s_batch_sizes_make_data_packed_alike():
    """aten::lstm reads the pack's output 1 (the batch sizes): its output 0 is packed with them,
    and so are the outputs of the ops inside it (autocast's cast of the data, here its
    _cudnn_rnn) and what a second RNN reading the same batch sizes makes; an op reading only the
    data is not (its output is no packed sequence's data)."""
    ranges = _pack_ranges((6, 4, 3), [6, 4, 4, 1], False)
    lstm = {"name": "aten::lstm", "opId": 200, "sizes": [[14, 3], [6], [1, 4, 5]],
            "inputOpIds": [[100, 0], [100, 1], [0, -1]]}
    relu = {"name": "aten::rnn_relu", "opId": 300, "sizes": [[14, 5], [6], [1, 4, 2]],
            "inputOpIds": [[200, 0], [100, 1], [0, -1]]}
    other = {"name": "aten::add", "opId": 400, "sizes": [[14, 5], [14, 5], []], "inputOpIds": [[200, 0], [300, 0], [0, -1]]}
    runs = _seen(*ranges, [lstm, {"name": "aten::_cudnn_rnn", "opId": 201}], [relu], [other])
    want = (4, 3, 3, 3, 1, 1)
    assert [runs.batch_sizes(runs.pack_of(PID, p)) for p in ((100, 0), (100, 1), (200, 0), (201, 0), (300, 0))] \
        == [want] * 5
    assert runs.pack_of(PID, (400, 0)) is None
    assert runs.pack_of(PID + 1, (200, 0)) is None  # another process's opIds are other ops


def test_a_pack_whose_cat_was_not_seen_or_whose_copies_disagree_tells_nothing():
    """No cat record (a capture cut short): None. A copy whose block is not its run's rows: None."""
    ranges = _pack_ranges((6, 4, 3), [6, 4, 4, 1], False)
    runs = _seen(*ranges[:-1])
    assert runs.batch_sizes(runs.pack_of(PID, (100, 0))) is None
    bad = [ranges[0][0], dict(ranges[0][1], sizes=[[2, 3, 3], []])]
    runs = _seen(bad, *ranges[1:])
    assert runs.batch_sizes(runs.pack_of(PID, (100, 0))) is None


def test_hostile_sizes_are_not_solved_and_cost_no_more_than_their_divisors():
    """Ranges no pack makes: copy-less runs of 1,000,000,007 rows (prime: one step of all of them,
    or all of them one row at a time) in a [4, 4, 2] input, a 4-billion-row run, 10,000 runs of a
    trillion rows: no answer, and none expanded into batch sizes (the steps are capped by the
    input's padded length before any is built)."""
    pack = {"name": PACK, "opId": 1, "sizes": [[4, 4, 2], [4], []]}
    for rows, count in ((10 ** 9 + 7, 3), (4 * 10 ** 9, 1), (10 ** 12, 10_000)):
        cat = {"name": "aten::cat", "opId": 2, "sizes": [[rows, 2]] * count + [[]],
               "inputOpIds": [[3 + i, 0] for i in range(count)] + [[0, -1]]}
        runs = _seen([pack, cat])
        assert runs.batch_sizes(runs.pack_of(PID, (1, 0))) is None, rows


def test_trimming_keeps_the_newest_packs():
    """Memory stays flat: trimmed to one, only the pack seen last still answers."""
    runs = _seen(*_pack_ranges((6, 4, 3), [6, 4, 4, 1], False, op=100), *_pack_ranges((6, 4, 3), [6, 2, 2, 2], False, op=200))
    runs.trim(1)
    assert runs.batch_sizes(runs.pack_of(PID, (100, 0))) is None
    assert runs.batch_sizes(runs.pack_of(PID, (200, 0))) == (4, 4, 1, 1, 1, 1)
