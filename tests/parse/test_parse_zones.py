"""The survey windows read instead of whole tables (pyprof/parse/zones.py): which rowid spans a
window reads, what the survey finds, and windows of an export whose rows are out of time order."""
import math
import random
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nsys_synth import workload
from pyprof.parse import Stats, lines, parallel, queries, zones
from pyprof.parse.export import KERNEL, NVTX, RUNTIME, Export
from pyprof.parse.window import Window

ROOT = Path(__file__).resolve().parents[2]

# Blocks of 10 rowids: (first, last, least start, greatest start, least corr, greatest corr).
ACTIVITY = [(0, 9, 100, 190, 1, 10), (10, 19, 200, 290, 11, 20), (20, 29, 300, 390, 21, 30),
            (30, 39, None, None, None, None), (40, 49, 50, 60, 41, 50)]
# NVTX blocks: (first, last, least start, greatest start, greatest end: OPEN_END for an open range).
RANGES = [(0, 9, 0, 90, zones.OPEN_END), (10, 19, 100, 190, 195), (20, 29, 200, 290, 295), (30, 39, 300, 390, 395)]


def test_spans_by_start_join_neighbouring_blocks_and_skip_blocks_without_starts():
    z = zones.Zones({KERNEL: ACTIVITY})
    assert z.by_start(KERNEL, 150, 250) == [(0, 19)]
    assert z.by_start(KERNEL, 55, 150) == [(0, 9), (40, 49)]  # the late block holds early rows
    assert z.by_start(KERNEL, None, 100) == [(40, 49)]
    assert z.by_start(KERNEL, 391, None) == []
    assert z.by_start(RUNTIME, 0, 1) is None  # an unmapped table is read whole


def test_spans_by_correlation_add_the_blocks_started_in_the_window():
    z = zones.Zones({KERNEL: ACTIVITY})
    assert z.by_correlation(KERNEL, [(12, 14)]) == [(10, 19)]
    assert z.by_correlation(KERNEL, [(5, 12), (45, 45)]) == [(0, 19), (40, 49)]
    assert z.by_correlation(KERNEL, [(31, 40)]) == []
    assert z.by_correlation(KERNEL, [(31, 40)], 300, 400, started=True) == [(20, 29)]


def test_nvtx_spans_hold_ranges_open_at_the_window_start():
    z = zones.Zones({NVTX: RANGES})
    # Block 0 holds a range still open; blocks 1 and 2 end before 300.
    assert z.nvtx(300, 350) == [(0, 9), (30, 39)]
    assert z.nvtx(190, 250) == [(0, 29)]
    assert z.nvtx(None, 100) == [(0, 9)]
    assert z.nvtx(396, None) == [(0, 9)]


def test_a_block_with_a_value_that_is_no_integer_is_always_read():
    always = (50, 59, -math.inf, math.inf, -math.inf, math.inf)
    z = zones.Zones({KERNEL: [*ACTIVITY, always]})
    assert z.by_start(KERNEL, 391, None) == [(50, 59)]
    assert z.by_correlation(KERNEL, [(1000, 2000)]) == [(50, 59)]


def test_spans_past_the_most_are_joined_across_the_smallest_gaps(monkeypatch):
    monkeypatch.setattr(zones, "MAX_SPANS", 2)
    blocks = [(0, 9, 1, 1, 1, 1), (20, 29, 1, 1, 1, 1), (100, 109, 1, 1, 1, 1)]
    assert zones.Zones({KERNEL: blocks}).by_start(KERNEL, 0, 2) == [(0, 29), (100, 109)]


def test_rowid_terms():
    assert zones.rowid_terms("r", None) == ("1", ())
    assert zones.rowid_terms("r", []) == ("0", ())
    assert zones.rowid_terms("r", [(1, 5), (9, 9)]) == ("(r.rowid BETWEEN ? AND ? OR r.rowid BETWEEN ? AND ?)",
                                                        (1, 5, 9, 9))


@pytest.mark.parametrize("name", ["gpt_compiled.sqlite", "gpt_graphs.sqlite"])
def test_the_survey_in_slices_finds_what_one_scan_finds(name, monkeypatch):
    monkeypatch.setattr(zones, "BLOCK", 64)
    path = str(ROOT / "examples" / name)
    with ThreadPoolExecutor(3) as ex:
        z = zones.survey(ex, path, 3)
    with Export(path) as exp:
        names, marks = queries.domain_events(exp)
        threads = {t for (t,) in exp.rows(f"SELECT globalTid FROM {RUNTIME}")}
        for table in (KERNEL, RUNTIME, NVTX):
            rows = exp.scalar(f"SELECT count(*) FROM {table}")
            blocks = z.blocks[table]
            # Every row lies in a block, each block once, in rowid order.
            assert sum(exp.scalar(f"SELECT count(*) FROM {table} WHERE rowid BETWEEN ? AND ?", b[:2])
                       for b in blocks) == rows
            assert [b[0] for b in blocks] == sorted({b[0] for b in blocks})
            assert exp.rows(f"SELECT min(start), max(start) FROM {table} WHERE rowid BETWEEN ? AND ?",
                            blocks[0][:2]).fetchone() == blocks[0][2:4]
    assert z.domains == (names, marks) and len(marks) > 0 and "pyprof" in names.values()
    assert set(z.threads) == threads


@pytest.mark.slow
def test_windows_of_an_export_written_out_of_time_order_give_the_same_bytes(tmp_path, monkeypatch):
    """Rows stored in a shuffled order: the spans widen, the rows read stay the same."""
    src = workload(str(tmp_path / "w.sqlite"), 3000)
    path = tmp_path / "shuffled.sqlite"
    db = sqlite3.connect(path)
    db.execute("ATTACH DATABASE ? AS s", (src,))
    rng = random.Random(5)
    for (table, sql) in db.execute("SELECT name, sql FROM s.sqlite_master WHERE type = 'table'").fetchall():
        db.execute(sql)
        rows = db.execute(f"SELECT * FROM s.{table}").fetchall()
        if table in (KERNEL, RUNTIME, NVTX):
            # A tenth of the rows moved anywhere: most blocks stay narrow, some span the run.
            for i in rng.sample(range(len(rows)), len(rows) // 10):
                j = rng.randrange(len(rows))
                rows[i], rows[j] = rows[j], rows[i]
        if rows:
            db.executemany(f"INSERT INTO main.{table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    db.commit()
    db.close()
    with Export(str(path)) as exp:
        expect = "".join(line + "\n" for line in lines(exp, Stats()))
        keys = sorted(k for (k,) in exp.rows(f"SELECT start FROM {RUNTIME}"))
    monkeypatch.setattr(zones, "BLOCK", 16)
    edges = keys[len(keys) // 6::len(keys) // 6][:5]
    parts = [parallel.Part(i, str(path), 0, "", False, False, None, Window(a, b))
             for i, (a, b) in enumerate(zip([None, *edges], [*edges, None]))]
    out = tmp_path / "w.dict"
    result = parallel.run([parts], str(out), 2)
    assert out.read_text() == expect
    assert result.windows == 6 and parts[3].window.zones is not None
    # The windows' spans are narrower than the tables (the survey was used) but not one block each.
    spans = parts[3].window.zones.by_start(RUNTIME, edges[2], edges[3])
    assert 1 < len(spans) and sum(hi - lo + 1 for lo, hi in spans) < exp_rows(path, RUNTIME)


def exp_rows(path, table):
    with Export(str(path)) as exp:
        return exp.scalar(f"SELECT max(rowid) FROM {table}")


def test_nvtx_query_with_the_threads_bound_reads_the_same_rows():
    path = str(ROOT / "examples" / "gpt.sqlite")
    with Export(path) as exp:
        threads = tuple({t for (t,) in exp.rows(f"SELECT globalTid FROM {RUNTIME}")})
        read = exp.rows(*queries.nvtx_sql(exp)).fetchall()
        bound = exp.rows(*queries.nvtx_sql(exp, threads=threads)).fetchall()
        none = exp.rows(*queries.nvtx_sql(exp, threads=())).fetchall()
    assert bound == read and len(read) > 1000
    # No thread made runtime calls: start/end ranges only (they span threads).
    assert none == [r for r in read if r[2] in (queries.START_END, queries.START_END_T)] != read


def test_verbose_timings_name_the_survey_and_every_part_in_order_of_time(tmp_path):
    path = str(ROOT / "examples" / "gpt.sqlite")
    with Export(path) as exp:
        lo, hi = exp.rows(f"SELECT min(start), max(start) FROM {RUNTIME}").fetchone()
    edges = [lo + (hi - lo) * i // 3 for i in (1, 2)]
    parts = [parallel.Part(i, path, 0, "", False, False, None, Window(a, b))
             for i, (a, b) in enumerate(zip([None, *edges], [*edges, None]))]
    result = parallel.run([parts], str(tmp_path / "w.dict"), 2)
    note = parallel.note_times(result).splitlines()
    # One line per run: each window once, and again for each window parsed again, seeded.
    assert len(note) == 2 + 3 + result.reparsed == 2 + len(result.runs)
    assert note[0].startswith("pyprof.parse: survey of the windowed exports ")
    assert sorted(line.split(":")[1] for line in note[1:-1] if "again" not in line) == [" part 0", " part 1", " part 2"]
    assert note[-1].startswith("pyprof.parse: all parts written at ")
    for _, _again, (began, first, ended, cpu) in result.runs:
        assert result.began <= began <= first <= ended <= result.written and cpu > 0
