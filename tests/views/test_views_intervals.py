"""The busy-time interval union: overlapping, out-of-order and touching intervals, several
devices, the bounded window and what happens behind it."""
from __future__ import annotations

import random

from pyprof.prof.intervals import Timeline, Timelines


def union(intervals):
    """Reference: sort, merge, return (busy, gaps list)."""
    merged = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    busy = sum(e - s for s, e in merged)
    gaps = [merged[i + 1][0] - merged[i][1] for i in range(len(merged) - 1)]
    return busy, gaps


def run(intervals, window=1024):
    tl = Timeline(window)
    for s, e in intervals:
        tl.add(s, e)
    return tl.finish()


def test_disjoint_in_order():
    tl = run([(0, 10), (20, 30), (35, 40)])
    assert (tl.busy, tl.gaps, tl.gap_total, tl.gap_max, tl.late) == (25, 2, 15, 10, 0)


def test_overlapping_and_nested():
    tl = run([(0, 10), (5, 15), (6, 7), (14, 20)])
    assert (tl.busy, tl.gaps, tl.gap_total) == (20, 0, 0)


def test_out_of_order_fills_a_gap_and_bridges():
    # Launch order is not start order: a later record starts earlier on another stream.
    tl = run([(0, 10), (50, 60), (20, 30), (9, 21), (100, 110), (55, 101)])
    assert (tl.busy, tl.gaps, tl.gap_total) == (90, 1, 20)  # [0,30) and [50,110)


def test_touching_intervals_leave_no_zero_gap():
    tl = run([(0, 10), (10, 20), (30, 40), (20, 25)])
    assert (tl.busy, tl.gaps, tl.gap_total, tl.gap_max) == (35, 1, 5, 5)


def test_empty_and_inverted_intervals_add_nothing():
    tl = run([(5, 5), (9, 3), (0, 4)])
    assert (tl.busy, tl.gaps, tl.first, tl.last) == (4, 0, 0, 4)


def test_random_against_reference_with_small_window():
    rng = random.Random(7)
    for _ in range(200):
        base = sorted(rng.randrange(0, 10_000) for _ in range(60))
        ivs = [(s, s + rng.randrange(1, 300)) for s in base]
        # Launch order vs start order: every interval moves at most 3 places.
        ivs = [iv for _, iv in sorted((i + rng.uniform(0, 3), iv) for i, iv in enumerate(ivs))]
        busy, gaps = union(ivs)
        tl = run(ivs, window=8)
        assert tl.late == 0
        assert (tl.busy, tl.gaps, tl.gap_total, tl.gap_max) == (busy, len(gaps), sum(gaps), max(gaps, default=0))


def test_memory_is_bounded_by_the_window():
    tl = Timeline(window=4)
    for i in range(1000):
        tl.add(i * 10, i * 10 + 5)
        assert len(tl._starts) <= 4
    tl.finish()
    assert (tl.busy, tl.gaps, tl.gap_total) == (5000, 999, 999 * 5)


def test_behind_the_window_is_counted_and_only_the_new_part_added():
    tl = Timeline(window=3)
    for s in (0, 100, 200, 300):  # (0,10) is finalised once the 4th interval arrives
        tl.add(s, s + 10)
    tl.add(5, 8)        # entirely behind the frontier: counted, adds nothing
    tl.add(105, 130)    # still open: merged exactly
    tl.finish()
    assert tl.late == 1
    assert tl.busy == 10 + 30 + 10 + 10


def test_devices_are_separate_and_span_is_global():
    tls = Timelines()
    tls.add(0, 100, 200)
    tls.add(1, 150, 400)
    tls.add(0, 300, 350)
    tls.add(1, 100, 160)
    tls.finish()
    d0, d1 = tls.devices[0], tls.devices[1]
    assert (d0.busy, d0.gaps, d0.gap_total) == (150, 1, 100)
    assert (d1.busy, d1.gaps) == (300, 0)
    assert (tls.first, tls.last, tls.span) == (100, 400, 300)


def test_no_kernels_no_span():
    assert Timelines().finish().span is None
