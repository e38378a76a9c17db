"""The memoized, column-wise `--summary` on a Parquet record store (prof/memo.py, columnar.py,
fast_summary.py) against the record path, its oracle: every kernel's Facts (every field, the
call number and beyond-peak's guard included) and the warnings, record by record, on every
shipped capture; the summary's report for every grouping and order; the command line's bytes.
A capture the memo is not exact for falls back, and says why."""
from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from captures import unpacked  # noqa: E402
from pyprof.prof import fast_summary  # noqa: E402
from pyprof.prof.pricing import beyond_peak  # noqa: E402
from pyprof.prof.pricing.analysis import Analyzer, Facts  # noqa: E402
from pyprof.prof.io.columnar import Inputs  # noqa: E402
from pyprof.prof.groups import KEYS, SORTS  # noqa: E402
from pyprof.prof.pricing.memo import NotMemoizable  # noqa: E402
from pyprof.prof.io.output import write_json  # noqa: E402
from pyprof.prof.io.reader import newer, numbered  # noqa: E402
from pyprof.prof.views import summary  # noqa: E402
from pyprof.prof.warnings_tally import Tally  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
DATA = ROOT / "tests" / "data"
# Every shipped capture, and why the memo is not exact for it (None: it is).
CAPTURES = {
    "examples/lenet.sqlite": None,
    "examples/resnet.sqlite": None,
    "examples/gpt.sqlite": None,
    "examples/gpt_graphs.sqlite": "compiled",
    "examples/gpt_autotune.sqlite": "compiled",
    "examples/gpt_compiled.sqlite": "compiled",
    "tests/data/tc_zoo.sqlite": None,
    # Its bias gradients' sums over dims read their output's size from a later call (tensor_flow.py).
    "tests/data/fixture_plain.sqlite.xz": "another op call's output",
    "tests/data/fixture_encoder.sqlite.xz": None,
    # Its input-projection GEMMs (cuBLAS's sgemm_largek) state no tile: the kernels after them say
    # their steps (rnn_kernels.py).
    "tests/data/fixture_lstm.sqlite.xz": "the kernels after its own",
    "tests/data/truth_gru.sqlite.xz": None,
    # Its second layer's input-projection GEMMs fit 960 or 1024 rows: the kernels after them would
    # say which (rnn_kernels.py), more than the records read ahead hold.
    "tests/data/truth_lstm.sqlite.xz": "the kernels after its own",
    "tests/data/coll_0.sqlite.xz": None,
    "tests/data/coll_blobs_0.sqlite.xz": None,
    "tests/data/ddp_0.sqlite.xz": "goes on with the call state",
    "tests/data/fsdp_0.sqlite.xz": None,
    # A gradient penalty's double backward: its nodes are priced from the op ranges of the first
    # backward, another op call's (ops/double_backward.py).
    "tests/data/kernel_truth/ktg_h200_default.sqlite.xz": "another op call's output",
}


def _store(src: str, folder: Path) -> Path:
    path = ROOT / src
    if path.suffix == ".xz":
        path = unpacked(path, folder)
    out = folder / (path.stem + ".parquet")
    p = subprocess.run([sys.executable, "-m", "pyprof.parse", "-q", "-j", "1", "--memcpy", str(path), "-o", str(out)],
                       capture_output=True, env=ENV)
    assert p.returncode == 0, p.stderr
    return out


@pytest.fixture(scope="module", params=list(CAPTURES))
def capture(request, tmp_path_factory) -> tuple[Path, str | None]:
    """A shipped capture as a record store, and why the memo falls back on it (None: it does not)."""
    return _store(request.param, tmp_path_factory.mktemp("memo")), CAPTURES[request.param]


def _plain(path: Path) -> tuple[list[Facts], Tally]:
    tally = Tally()
    analyzer = Analyzer(tally)
    return [analyzer.facts(rec) for _, rec in numbered(str(path), tally)], tally


def _memoized(path: Path) -> tuple[list[Facts], Tally]:
    """Each record's Facts from its memo node, numbered and guarded as the record path does, and
    the warnings: the format's, the node's, the guard's, record by record."""
    inputs, tally = Inputs(), Tally()
    out = []
    for batch, nodes, numbers in inputs.run(str(path)):
        durations = batch.column("kDuration").to_pylist()
        for node, number, dur in zip(nodes.tolist(), numbers.tolist(), durations):
            n = inputs.memo.nodes[node]
            tally.records += 1
            newer(n.rec, tally)
            for warning in n.warnings:
                tally.warn(*warning)
            f = copy.copy(n.facts)
            if n.rec.get("kind", "kernel") == "kernel":
                f.call = number
                beyond_peak.guard(dict(n.rec, kDuration=dur), f, tally)
            out.append(f)
    return out, tally


def _fields(f: Facts) -> tuple:
    return tuple(getattr(f, s) for s in Facts.__slots__)


@pytest.mark.slow  # every shipped capture, record by record (CI runs it; the quick run the store's bytes below)
def test_memo_gives_the_facts_and_warnings_of_the_plain_analysis(capture):
    path, why = capture
    if why is not None:
        with pytest.raises(NotMemoizable, match=why):
            _memoized(path)
        return
    plain, plain_tally = _plain(path)
    memo, memo_tally = _memoized(path)
    assert len(memo) == len(plain) > 0
    for i, (m, p) in enumerate(zip(memo, plain)):
        assert _fields(m) == _fields(p), f"record {i + 1}"
    assert memo_tally.records == plain_tally.records
    assert [(k, list(c.items())) for k, c in memo_tally.warnings.items()] == \
        [(k, list(c.items())) for k, c in plain_tally.warnings.items()]


def _report(prof: summary.Profile, sort: str, top: int | None) -> str:
    out = io.StringIO()
    write_json(summary.report(prof, sort, top), out)
    return out.getvalue()


@pytest.mark.slow  # every capture by every key: the quick run keeps the per-record oracle above
@pytest.mark.parametrize("by", [k for k in KEYS if k != "call"] + ["op,shape", "dir,kernel,tc"])
def test_fast_summary_reports_what_the_record_path_does(capture, by):
    path, why = capture
    if why is not None:
        with pytest.raises(NotMemoizable):
            fast_summary.fill(str(path), by)
        return
    fast, fast_tally = fast_summary.fill(str(path), by)
    slow, slow_tally = summary.Profile(by), Tally()
    from pyprof.prof.scan import feed
    feed(numbered(str(path), slow_tally), slow_tally, [slow])
    for sort in SORTS:
        assert _report(fast, sort, None) == _report(slow, sort, None), sort
    assert _report(fast, "time", 2) == _report(slow, "time", 2)
    assert fast_tally.lines() == slow_tally.lines()
    assert [(k, list(c.items())) for k, c in fast_tally.warnings.items()] == \
        [(k, list(c.items())) for k, c in slow_tally.warnings.items()]


def _prof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyprof.prof", *args], capture_output=True, env=ENV)


@pytest.fixture(scope="module")
def resnet(tmp_path_factory) -> tuple[Path, Path]:
    """examples/resnet.sqlite (memcpy records too) as JSON Lines and as a record store."""
    tmp = tmp_path_factory.mktemp("resnet")
    lines = tmp / "net.dict"
    p = subprocess.run([sys.executable, "-m", "pyprof.parse", "-q", "--memcpy", str(ROOT / "examples" / "resnet.sqlite"),
                        "-o", str(lines)], capture_output=True, env=ENV)
    assert p.returncode == 0, p.stderr
    return lines, _store("examples/resnet.sqlite", tmp)


@pytest.mark.parametrize("options", [[], ["--json"], ["--csv"], ["-w", "80"], ["--by", "op,shape", "--sort", "name"],
                                     ["--by", "kernel", "--top", "3", "--json"], ["--by", "call"],
                                     ["--op", "conv2d"], ["--sort", "tflops", "--top", "5"]])
def test_prof_summary_prints_the_same_bytes_from_the_store(resnet, options):
    lines, parquet = resnet
    a, b = _prof("--summary", *options, str(lines)), _prof("--summary", *options, str(parquet))
    assert a.returncode == b.returncode == 0, b.stderr
    assert a.stdout == b.stdout
    assert a.stderr == b.stderr


def test_prof_needs_no_numpy(resnet):
    """numpy is the fast path's, not prof's: without it (numpy blocked in the child) --summary on
    JSON Lines prints what it prints with it."""
    lines, _ = resnet
    blocked = ("import runpy, sys; sys.modules['numpy'] = None; sys.argv[0] = 'pyprof.prof'; "
               "runpy.run_module('pyprof.prof', run_name='__main__')")
    without = subprocess.run([sys.executable, "-c", blocked, "--summary", str(lines)], capture_output=True, env=ENV)
    assert without.returncode == 0, without.stderr
    assert without.stdout == _prof("--summary", str(lines)).stdout


def test_the_fast_path_runs_where_it_applies(resnet, monkeypatch):
    """--summary alone on a store takes the columns' path (no record is fed); with a filter, --by
    call or another view it does not."""
    from pyprof.prof import views
    from pyprof.prof.__main__ import parser

    fed = []
    monkeypatch.setattr(views, "feed", lambda *a, **k: fed.append(1))
    _, parquet = resnet
    for argv, path in ((["--summary"], "fast"), (["--summary", "--by", "call"], "records"),
                       (["--summary", "--op", "conv2d"], "records")):
        args = parser().parse_args(argv + [str(parquet)])
        chosen = views.chosen(args)
        assert (fast_summary.profile(args, chosen) is not None) == (path == "fast"), argv


@pytest.mark.skipif(not os.environ.get("PYPROF_MEMO_RECORDS"), reason="set PYPROF_MEMO_RECORDS to a record file "
                    "(the synthetic workload of benchmarks/record_store.py)")
@pytest.mark.slow
def test_memo_on_the_synthetic_workload(tmp_path):
    from pyprof.store.write import convert

    src = os.environ["PYPROF_MEMO_RECORDS"]
    out = tmp_path / "w.parquet"
    with open(src, "rb") as stream:
        convert(stream, src, str(out), str(out))
    plain, plain_tally = _plain(out)
    memo, memo_tally = _memoized(out)
    assert [_fields(f) for f in memo] == [_fields(f) for f in plain]
    assert memo_tally.lines() == plain_tally.lines()
    a, b = _prof("--summary", "--json", src), _prof("--summary", "--json", str(out))
    assert a.stdout == b.stdout and a.stderr == b.stderr


def test_fresh_refuses_a_range_in_two_episodes_of_one_thread():
    """A range state of an earlier episode could meet a later one's range: the memo is not exact
    there (memo.Fresh). The same range on two threads, or twice in one episode (in one batch or in
    two while the episode is open), is fine; in two episodes it is not, in one batch or in two,
    and a range below a closed episode's highest opId of its name on its thread is not sure."""
    import numpy as np

    from pyprof.prof.pricing.memo import Fresh

    a = np.array
    fresh = Fresh()
    fresh.add(a([0, 1]), a([1, 2]), a([5, 5]), a([7, 7]), a([1, 2]))   # two threads
    fresh.add(a([0, 0]), a([1, 1]), a([5, 5]), a([7, 7]), a([1, 2]))   # episode 1 open: still one episode
    fresh.add(a([0, 0]), a([1, 3]), a([5, 6]), a([7, 7]), a([3]))      # another range name; 1 and 2 closed
    fresh.add(a([0]), a([3]), a([5]), a([8]), a([3]))                  # above the closed episode's 7
    with pytest.raises(NotMemoizable, match="earlier episode"):
        Fresh().add(a([0, 3, 0]), a([1, 1, 2]), a([5, 5, 5]), a([7, 7, 7]), a([2]))
    open_then_another = Fresh()
    open_then_another.add(a([0]), a([1]), a([5]), a([7]), a([1]))
    with pytest.raises(NotMemoizable, match="earlier episode"):
        open_then_another.add(a([0]), a([2]), a([5]), a([7]), a([2]))
    for opid in (7, 6):  # the closed episode's range itself, or one below it
        closed = Fresh()
        closed.add(a([0]), a([1]), a([5]), a([7]), a([]))
        with pytest.raises(NotMemoizable, match="not above"):
            closed.add(a([0]), a([2]), a([5]), a([opid]), a([2]))


def test_busy_time_batch_by_batch_is_the_timelines():
    """fast_summary._Busy, fed intervals in batches of any size, ends as intervals.Timeline fed them
    one by one (busy time, gaps, first, last), with merged intervals finalised between batches and
    carried over; a kernel that could be late for the window sends the run to the record path."""
    import random

    import numpy as np

    from pyprof.prof.intervals import Timeline

    rng = random.Random(3)
    for case in range(200):
        window = rng.choice([1, 2, 4, 16])
        n = rng.randrange(0, 300)
        at, intervals = 0, []
        for _ in range(n):
            at += rng.choice([0, 1, 5, 40])  # overlapping, touching and apart
            intervals.append((at, at + rng.choice([0, 1, 3, 30, 200])))
        # Starts out of order, but never before one `window` kernels earlier.
        for i in range(len(intervals) - 1):
            if rng.random() < 0.3 and window > 1:
                intervals[i], intervals[i + 1] = intervals[i + 1], intervals[i]
        s, e = (np.array([x[k] for x in intervals], np.int64) for k in (0, 1))
        late = any(s[k] < s[:k - window + 1].max() for k in range(window, len(s)))
        want = Timeline(window)
        for x in intervals:
            want.add(*x)
        want.finish()
        got = Timeline(window)
        busy = fast_summary._Busy(got)
        cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randrange(0, 6)))) if n > 1 else []
        try:
            for lo, hi in zip([0, *cuts], [*cuts, n]):
                busy.add(s[lo:hi], e[lo:hi])
        except NotMemoizable:
            assert late, case
            continue
        busy.finish()
        assert not late or want.late == 0, case
        fields = ("busy", "gaps", "gap_total", "gap_max", "late", "first", "last", "frontier")
        assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields], case


def test_fast_summary_in_small_batches_is_the_json_lines_summary(resnet, monkeypatch):
    """--summary's lookup reads a store in batches; in batches of 64 records (resnet's kernels and
    memcpys: nodes and groups met in later batches; with Timeline's window at 16, busy intervals
    finalised and carried over between batches) the Profile and warnings equal the record path's
    on the JSON Lines: every group's totals, its durations in input order, the float sum of its
    capacity, the timelines, the evidence."""
    from pyprof.prof.intervals import Timelines
    from pyprof.prof.scan import feed

    monkeypatch.setattr(summary, "Timelines", lambda: Timelines(16))

    lines, parquet = resnet

    def state(prof: summary.Profile) -> tuple:
        def group(g) -> list:
            return [getattr(g, s) for s in g.__slots__ if s != "both"] + \
                [None if g.both is None else [group(x) for x in g.both]]
        timelines = {d: vars(t) for d, t in prof.timelines.finish().devices.items()}
        return ([(k, group(g)) for k, g in prof.groups.groups.items()], timelines, vars(prof.evidence),
                prof.kernels, prof.gpu_time, prof.tc_time, prof.simt_time, prof.copies, prof.copy_time, prof.gpus,
                list(prof.priced.items()))

    for by in ("op", "kernel,shape"):
        slow, slow_tally = summary.Profile(by), Tally()
        feed(numbered(str(lines), slow_tally), slow_tally, [slow])
        fast, fast_tally = fast_summary.fill(str(parquet), by, batch=64)
        assert slow.kernels > 4 * 64 and slow.copies > 0 and fast.timelines.window == 16
        assert state(fast) == state(slow), by
        assert fast_tally.records == slow_tally.records
        assert [(k, list(c.items())) for k, c in fast_tally.warnings.items()] == \
            [(k, list(c.items())) for k, c in slow_tally.warnings.items()]
        for sort in SORTS:
            assert _report(fast, sort, None) == _report(slow, sort, None), sort


def test_fast_summary_keeps_first_appearances_across_batches(resnet, tmp_path):
    """Warnings of equal counts are listed in the order the records first give them: an unknown
    op at record 11 (batch 1, row 10) comes before one at record 24 (batch 2, row 7), in batches
    of 16 as in the record path (a node's first record counted from the store's start, not its
    batch's)."""
    import json

    from pyprof.prof.scan import feed
    from pyprof.store.write import convert

    lines, _ = resnet
    kernel = json.loads(lines.read_text().splitlines()[0])
    kernel["torchOps"] = None  # each copy its own call
    records = tmp_path / "two.dict"
    with open(records, "w") as out:
        for i in range(40):
            rec = dict(kernel, kStart=1000 * i, kEnd=1000 * i + 500, correlationId=i)
            if i in (10, 23):
                rec["op"] = "mystery_" + "ba"[i == 23]
                rec["marker"] = dict(kernel["marker"], op=rec["op"])
            out.write(json.dumps(rec) + "\n")
    store = tmp_path / "two.parquet"
    with open(records, "rb") as stream:
        convert(stream, str(records), str(store), str(store))
    slow, slow_tally = summary.Profile(), Tally()
    feed(numbered(str(records), slow_tally), slow_tally, [slow])
    fast, fast_tally = fast_summary.fill(str(store), "op", batch=16)
    assert fast_tally.lines() == slow_tally.lines() == [
        "40 records; warnings:",
        "  unknown op: 2 kernels: torch.nn.functional.mystery_b (1), torch.nn.functional.mystery_a (1)"]
    assert _report(fast, "time", None) == _report(slow, "time", None)


def _classes(codes) -> list:
    """Row numbers grouped by equal code, in order: equal codes exactly where the values are equal."""
    seen: dict = {}
    return [seen.setdefault(int(c), len(seen)) for c in codes]


def test_list_codes_are_equal_exactly_where_the_lists_are():
    """A list column's codes (grid, layer, ranges): null, empty, and items that once would have
    needed a separator (a text item holding \\x1f, which sent the run to the record path)."""
    import pyarrow as pa

    texts = pa.array([["a", "b"], None, [], ["a\x1fb"], ["a", "b"], [""], ["a\x1fb"], None, ["ab"], []],
                     pa.list_(pa.string()))
    assert _classes(Inputs()._codes(texts)) == [0, 1, 2, 3, 0, 4, 3, 1, 5, 2]
    ints = pa.array([[8, 4, 1], [8, 4], [8, 4, 1], None, [4, 8, 1], [], [8, 4]], pa.list_(pa.int64()))
    assert _classes(Inputs()._codes(ints)) == [0, 1, 0, 2, 3, 4, 1]
    assert _classes(Inputs()._codes(ints.slice(1))) == [0, 1, 2, 3, 4, 0]


def test_dictionary_codes_keep_null_apart():
    """A text column read as the file's dictionary (store.batches(dictionary=...)): a null row has
    a code of its own, and values the rows do not use change nothing."""
    import pyarrow as pa

    column = pa.DictionaryArray.from_arrays(pa.array([1, None, 1, 0, None], pa.int32()), pa.array(["b", "a", "unused"]))
    assert _classes(Inputs()._codes(column)) == [0, 1, 0, 2, 1]


def test_markers_are_cached_by_their_exact_contents():
    """The marker cost cache (marker_costs.py) keys a marker by its JSON bytes (orjson) or, for an
    integer beyond 64 bits that json's reader keeps and orjson cannot write, by its repr: equal
    contents one key, any difference (key order included, as in the record) another."""
    import json

    from pyprof.prof.pricing import marker_costs

    a = {"kind": "op", "mod": "torch", "op": "add", "args": [{"shape": [2, 3], "dtype": "float32"}]}
    same = json.loads(json.dumps(a))
    reordered = dict(reversed(list(a.items())))
    assert marker_costs._marker_key(a) == marker_costs._marker_key(same) != marker_costs._marker_key(reordered)
    huge = dict(a, scalar=2 ** 70)
    assert marker_costs._marker_key(huge) == repr(huge)
    if marker_costs._json_bytes is not None:
        assert marker_costs._marker_key(a) == marker_costs._json_bytes(a)
