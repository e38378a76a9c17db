"""Fuzz: pyprof.parse over mutated real exports (docs/reliability.md).

Each case copies a shipped capture (LeNet; ResNet-18 for memcpy/memset) and mutates it through
SQLite: values of every storage class (NULL, integers up to the 64-bit limits, reals and
infinities, text, blobs, text that is not UTF-8) in every column parse reads, times negated,
swapped (end before start) and shifted far, correlation ids duplicated and dangling, launch rows
doubled, rows deleted (StringIds, launches, domains), tables and columns dropped and renamed,
ranges added that are unclosed, deep, long, undecodable or carry code; or flips bytes of the file.

Properties: a documented exit status; a failure is one line on stderr, leaves no -o file and no
output that passes as complete; a success writes strict JSON, one record per kernel row of the
mutated export (none lost, none doubled), which prof reads without skipping a line; nothing read
is executed.
"""
from __future__ import annotations

import functools
import os
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from fuzz_harness import CANARY, CANARY_DIR, PAYLOADS, check_parse_output, examples, run_tool

ROOT = Path(__file__).resolve().parents[2]
KERNEL, RUNTIME, NVTX, STRINGS = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds"
MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
# The columns parse reads, by table (docs/parse.md: How the join works).
READ = {
    KERNEL: ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName",
             "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory",
             "dynamicSharedMemory", "graphNodeId"],
    RUNTIME: ["start", "end", "globalTid", "correlationId", "nameId"],
    NVTX: ["start", "end", "eventType", "globalTid", "domainId", "textId", "text"],
    STRINGS: ["id", "value"],
    MEMCPY: ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"],
    MEMSET: ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"],
    "TARGET_INFO_GPU": ["id", "name", "memoryBandwidth", "smCount", "clockRate"],
    "TARGET_INFO_CUDA_DEVICE": ["gpuId", "cudaId", "pid"],
    "META_DATA_EXPORT": ["name", "value"],
    "ENUM_CUDA_MEMCPY_OPER": ["id", "name"],
}
ACTIVITY = (KERNEL, MEMCPY, MEMSET)


@functools.lru_cache(maxsize=None)
def base(name: str) -> bytes:
    """A shipped capture with only the tables parse reads (smaller, so each case copies less)."""
    path = ROOT / "tests" / ".fuzz-canary" / f"base-{name}.sqlite"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes((ROOT / "examples" / f"{name}.sqlite").read_bytes())
    db = sqlite3.connect(path)
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        if table not in READ:
            db.execute(f'DROP TABLE "{table}"')
    db.commit()
    db.execute("VACUUM")
    db.close()
    data = path.read_bytes()
    path.unlink()
    return data


class Bad(bytes):
    """Bytes stored as TEXT: a string SQLite holds that is not UTF-8."""


sql_values = st.one_of(
    st.none(),
    st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 2**63 - 1, -2**63, 2**62, 2**31, -2**31, 16777216]),
    st.floats(allow_nan=False),
    st.sampled_from([float("inf"), float("-inf"), 0.5, 1e300]),
    st.text(max_size=30),
    st.sampled_from(PAYLOADS + ("layer:x", '{"v":1,"kind":"op","mod":"torch","op":"mm"}', "aten::mm, seq = 3",
                                "MmBackward0, seq = 3", "autograd::engine::evaluate_function: MmBackward0")),
    # pyprof markers (op, bwd, module, layer) holding what no marker holds: numbers past float's
    # range or of 5,000 digits, a mod that is a list or an object (three branches: drawn often)
    *[st.builds(lambda kind, fields: '{"v":1,"kind":"' + kind + '","op":"mm","node":"MmBackward0","module":"m",'
                '"name":"n"' + "".join(f',"{k}":{v}' for k, v in fields) + "}",
                st.sampled_from(["op", "bwd", "module", "layer"]),
                st.lists(st.tuples(st.sampled_from(["mod", "args", "site", "module", "fwd", "op"]),
                                   st.sampled_from(["1e400", "[-1e400]", "[1]", "{}", '"torch"', '"Tensor"', '"backward"',
                                                    "9" * 5000, '{"kind":"op","op":"mm","mod":[1],"args":[1e400]}',
                                                    '{"kind":"op","op":"backward","mod":{}}', "null"])),
                         min_size=1, max_size=3))] * 3,
    st.binary(max_size=20),
    st.binary(min_size=1, max_size=12).map(lambda b: Bad(b"\xff" + b)),
)


def _bind(value):
    # A Bad value is stored as TEXT holding its bytes as they are.
    return ("CAST(? AS TEXT)", bytes(value)) if isinstance(value, Bad) else ("?", value)


@st.composite
def rows(draw) -> str:
    """Which rows an update touches, as a WHERE clause."""
    return draw(st.sampled_from(["1", "rowid = (SELECT min(rowid) FROM {t})", "rowid % 2 = 0", "rowid % 7 = 3",
                                 "rowid = (SELECT max(rowid) FROM {t})"]))


def _ops(tables: list[str]):
    table = st.sampled_from(tables)

    @st.composite
    def op(draw):
        t = draw(table)
        col = draw(st.sampled_from(READ[t]))
        kind = draw(st.sampled_from(["set", "set", "set", "swap", "negate", "shift", "dup_corr", "dangle",
                                     "dup_rows", "delete", "drop_table", "rename_table", "drop_column",
                                     "rename_column", "ranges", "unclose"]))
        return (kind, t, col, draw(rows()), draw(sql_values), draw(st.integers(0, 10**6)))
    return op()


# The mutations that bind nothing: one statement each, filled in by apply().
STATEMENTS = {
    "swap": 'UPDATE "{t}" SET start = "end", "end" = start WHERE {where}',
    "negate": 'UPDATE "{t}" SET "{col}" = -"{col}" WHERE {where}',
    "dup_rows": 'INSERT INTO "{t}" SELECT * FROM "{t}" WHERE {where}',
    "delete": 'DELETE FROM "{t}" WHERE {where}',
    "drop_table": 'DROP TABLE "{t}"',
    "rename_table": 'ALTER TABLE "{t}" RENAME TO "{t}_{n3}"',
    "drop_column": 'ALTER TABLE "{t}" DROP COLUMN "{col}"',
    "rename_column": 'ALTER TABLE "{t}" RENAME COLUMN "{col}" TO "{col}{n2}X"',
    "unclose": 'UPDATE {nvtx} SET "end" = NULL WHERE {where}',
}


def apply(db: sqlite3.Connection, ops: list, has: set) -> None:
    """Apply mutations; ones the schema refuses (a column already dropped) are skipped."""
    for kind, t, col, where, value, n in ops:
        where = where.format(t=t)
        try:
            if kind == "set":
                ph, v = _bind(value)
                db.execute(f'UPDATE "{t}" SET "{col}" = {ph} WHERE {where}', (v,))
            elif kind in STATEMENTS:
                db.execute(STATEMENTS[kind].format(t=t, col=col, where=where, nvtx=NVTX, n3=n % 3, n2=n % 2 or ""))
            elif kind == "shift":
                db.execute(f'UPDATE "{t}" SET start = start + ?, "end" = "end" + ? WHERE {where}',
                           (2**62 - n, 2**62 - n if n % 3 else -n))
            elif kind == "dup_corr":
                db.execute(f'UPDATE "{t}" SET correlationId = (SELECT correlationId FROM "{t}" '
                           f'LIMIT 1 OFFSET ?) WHERE {where}', (n % 50,))
            elif kind == "dangle":
                db.execute(f'UPDATE "{t}" SET correlationId = correlationId + ? WHERE {where}', (10**9 + n,))
            elif kind == "ranges":
                _ranges(db, value, n)
        except sqlite3.Error:
            pass


def _ranges(db: sqlite3.Connection, text, n: int) -> None:
    """Ranges around a launch: nested `depth` deep, unclosed, in the pyprof or default domain, with
    `text` (any value) or a long one."""
    launch = db.execute(f"SELECT start, globalTid FROM {RUNTIME} LIMIT 1 OFFSET ?", (n % 40,)).fetchone()
    if launch is None:
        return
    t, tid = launch
    depth = 1 + n % 40
    domain = db.execute(f"SELECT domainId FROM {NVTX} WHERE eventType = 75 LIMIT 1").fetchone()
    dom = domain[0] if domain and n % 2 else 0
    ph, v = _bind(text)
    rows = [(t - depth + i if isinstance(t, int) else t, None if (n + i) % 11 == 0 else
             (t + depth - i if isinstance(t, int) else t), tid, dom, v) for i in range(depth)]
    insert = f'INSERT INTO {NVTX} (start, "end", eventType, globalTid, domainId, text) VALUES (?, ?, 59, ?, ?, {{}})'
    db.executemany(insert.format(ph), rows)
    if n % 5 == 0:  # and a long one inside them
        db.execute(insert.format("?"), rows[-1][:4] + ("layer:" + "x" * (n % 4096),))


def _expected(path: Path, memcpy: bool) -> Counter | None:
    """(start, end) of every activity row parse must write once; None when the mutated export
    lost the kernel table's required columns (then parse must refuse it)."""
    db = sqlite3.connect(path)
    try:
        want: Counter = Counter()
        for t in ACTIVITY if memcpy else (KERNEL,):
            cols = {c[1] for c in db.execute(f'PRAGMA table_info("{t}")')}
            if not cols:
                continue
            if not {"start", "end", "correlationId"} <= cols:
                if t == KERNEL:
                    return None
                continue
            db.text_factory = bytes  # times stored as text that is not UTF-8 compare as bytes
            want.update(db.execute(f'SELECT start, "end" FROM "{t}"').fetchall())
            db.text_factory = str
        return want
    finally:
        db.close()


def _as_key(v):
    return v.encode() if isinstance(v, str) else v


@pytest.fixture(autouse=True, scope="module")
def canary_dir():
    os.makedirs(CANARY_DIR, exist_ok=True)
    yield
    assert not os.path.exists(CANARY)


_SCRATCH = [None]


def scratch(factory) -> Path:
    if _SCRATCH[0] is None:
        _SCRATCH[0] = factory.mktemp("fuzz-parse")
    return _SCRATCH[0]


@examples(1500)
@given(name=st.sampled_from(["lenet", "lenet", "resnet"]), ops=st.data(), memcpy=st.booleans(),
       to_file=st.booleans(), then_prof=st.integers(0, 3))
def test_mutated_export(tmp_path_factory, name, ops, memcpy, to_file, then_prof):
    d = scratch(tmp_path_factory)
    path = d / "net.sqlite"
    path.write_bytes(base(name))
    db = sqlite3.connect(path)
    # Closed also when Hypothesis stops the case inside a draw: a connection left to the garbage
    # collector (later on Python 3.13) keeps the scratch file locked for the next case.
    try:
        # A scratch copy: no fsync per mutation (a fifth of each case's time on a busy disk).
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA journal_mode = MEMORY")
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        mutations = ops.draw(st.lists(_ops(tables), min_size=1, max_size=4), label="mutations")
        apply(db, mutations, set(tables))
        db.commit()
    finally:
        db.close()
    want = _expected(path, memcpy)
    out = d / "out" / "net.dict"
    out.parent.mkdir(exist_ok=True)
    argv = [str(path), "-q"] + (["--memcpy"] if memcpy else []) + (["-o", str(out)] if to_file else [])
    res = run_tool("parse", argv)
    event(f"status {res.status}")
    recs = check_parse_output(res, str(out) if to_file else None)
    if to_file and out.exists():
        out.unlink()
    if res.status != 0:
        return
    assert want is not None, "parse accepted an export whose kernel table lacks start/end/correlationId"
    got = Counter((_as_key(r["kStart"]), _as_key(r["kEnd"])) for r in recs)
    assert got == want, f"records {sum(got.values())}, activity rows {sum(want.values())}"
    if then_prof == 0:
        data = b"".join(line + b"\n" for line in res.out.splitlines()) if not to_file else None
        if data is not None:
            prof = run_tool("prof", ["-c", "idx,dir,op,kernel,params,sil,tc,flops,bytes,tflops,peak,bound,layer"],
                            stdin=data)
            assert prof.status == 0 and "malformed lines skipped" not in prof.err, prof.err
            assert len(prof.out.splitlines()) == len(recs) + 1


@examples(400)
@given(name=st.sampled_from(["lenet", "resnet"]), flips=st.lists(st.tuples(st.integers(0, 10**7), st.integers(1, 255)),
                                                                   min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.integers(0, 10**7)))
def test_damaged_file(tmp_path_factory, name, flips, cut):
    """Bytes of the file flipped or cut off: whatever SQLite makes of it, one line or records."""
    data = bytearray(base(name))
    for pos, x in flips:
        data[pos % len(data)] ^= x
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    path = scratch(tmp_path_factory) / "damaged.sqlite"
    path.write_bytes(bytes(data))
    res = run_tool("parse", [str(path), "-q", "--memcpy"])
    event(f"status {res.status}")
    check_parse_output(res)


# --- valid but odd exports, against a naive oracle ---------------------------------------------

PIDS = (100, 200)


@st.composite
def odd_export(draw) -> dict:
    """A capture nsys could write, at its edges: ranges unclosed, zero-length, ending before they
    start, overlapping without nesting, at times near the 64-bit limits and below zero; start/end
    ranges spanning threads; kernels sharing a correlation id, kernels whose id matches no launch
    and launches recorded twice; GPU times ending before they start."""
    times = st.one_of(st.integers(-10**6, 10**6), st.integers(-2**62, 2**62))
    threads = [(pid, pid + k) for pid in PIDS[: draw(st.integers(1, 2))] for k in range(draw(st.integers(1, 2)))]
    starts = draw(st.lists(times, min_size=0, max_size=25, unique=True))
    ranges = []
    for i, start in enumerate(starts):
        end = draw(st.one_of(st.none(), st.integers(-1000, 10**6).map(lambda d, s=start: s + d)))
        kind = draw(st.sampled_from(["layer", "layer", "other", "op", "malformed", "start_end"]))
        name = draw(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12))
        ranges.append((draw(st.sampled_from(threads)), start, end, kind, f"{name}#{i}"))
    # Launches at, just before and just after the range boundaries, where off-by-ones would show.
    edges = [x + d for _, s, e, _, _ in ranges for x in (s, e) if x is not None for d in (-1, 0, 1)]
    launch_times = st.one_of(times, st.sampled_from(edges)) if edges else times
    kernels = []
    for _ in range(draw(st.integers(1, 12))):
        thread = draw(st.sampled_from(threads))
        mode = draw(st.sampled_from(["launch", "launch", "launch", "shared", "dangling", "twice"]))
        kernels.append((thread, draw(launch_times), mode, draw(st.integers(-500, 5000))))
    return {"threads": threads, "ranges": ranges, "kernels": kernels}


def build_odd(path: Path, spec: dict) -> list[dict]:
    """Write `spec` as an export; return what parse must write per kernel, in kernel order."""
    from nsys_synth import SynthExport, marker

    syn = SynthExport(str(path))
    g = {t: syn.thread(*t) for t in spec["threads"]}
    doms = {pid: syn.domain(g[(pid, pid)], "pyprof", t=-2**63 + 1) for pid in {t[0] for t in spec["threads"]}}
    for thread, start, end, kind, name in spec["ranges"]:
        if kind == "layer":
            syn.push(g[thread], start, end, f"layer:{name}")
        elif kind == "other":
            syn.push(g[thread], start, end, f"user {name}")
        elif kind == "op":
            syn.push(g[thread], start, end, marker("op", mod="m", op=name, args=[]), domain=doms[thread[0]])
        elif kind == "malformed":
            syn.push(g[thread], start, end, '{"kind": ' + name, domain=doms[thread[0]])
        else:
            syn.start_end(g[thread], start, end, f"layer:{name}")
    expected, last = [], {}
    for i, (thread, t, mode, dur) in enumerate(spec["kernels"]):
        pid = thread[0]
        if mode == "dangling":
            corr, launch = 10**9 + i, None
        elif mode == "shared" and pid in last:
            corr, launch = last[pid]  # launched by whoever made that call, when it did
        else:
            corr = syn.launch(g[thread], t)
            if mode == "twice":
                syn.launch(g[thread], t + 7, corr=corr)  # the first launch row is the one used
            launch = (thread, t)
            last[pid] = (corr, launch)
        gpu_start = 10**7 + 100 * i
        syn.kernel(pid, corr, gpu_start, gpu_start + dur, name=f"k{i}")
        expected.append(_oracle(spec, launch, gpu_start, dur))
    syn.close()
    return expected


def _oracle(spec: dict, launch, gpu_start: int, dur: int) -> dict:
    """What attribution must give, computed the slow and obvious way."""
    out = {"kStart": gpu_start, "kEnd": gpu_start + dur, "layer": [], "ranges": [], "op": None,
           "launched": launch is not None}
    if launch is None:
        return out
    launcher, t = launch
    enclosing = []
    for r_thread, start, end, kind, name in spec["ranges"]:
        same_scope = r_thread[0] == launcher[0] if kind == "start_end" else r_thread == launcher
        if same_scope and start <= t and (end is None or end >= t):
            enclosing.append((start, kind, name))
    enclosing.sort()
    out["layer"] = sorted(name for _, kind, name in enclosing if kind in ("layer", "start_end"))
    out["ranges"] = sorted(f"user {name}" for _, kind, name in enclosing if kind == "other")
    ops = [name for _, kind, name in enclosing if kind == "op"]
    out["op"] = ops[-1] if ops else None
    return out


@examples(700)
@given(spec=odd_export())
# A range open at capture stop encloses a launch at any later time an export can hold.
@example(spec={"threads": [(100, 100)], "ranges": [((100, 100), 2**62, None, "layer", "#0")],
               "kernels": [((100, 100), 2**62 + 1, "launch", 0)]})
@example(spec={"threads": [(100, 100)], "ranges": [((100, 100), 0, None, "layer", "#0")],
               "kernels": [((100, 100), 2**63 - 2**12, "launch", 0)]})
def test_odd_export_oracle(tmp_path_factory, spec):
    """Every kernel exactly once, each with exactly the ranges open around its launch."""
    path = scratch(tmp_path_factory) / "odd.sqlite"
    expected = build_odd(path, spec)
    res = run_tool("parse", [str(path), "-q"])
    recs = check_parse_output(res)
    assert res.status == 0, res.err
    assert len(recs) == len(expected)
    by_start = {r["kStart"]: r for r in recs}
    assert len(by_start) == len(recs)
    for want in expected:
        got = by_start[want["kStart"]]
        assert got["kEnd"] == want["kEnd"] and got["kDuration"] == want["kEnd"] - want["kStart"]
        assert (got["launch"] is not None) == want["launched"]
        assert sorted(got["layer"]) == want["layer"], (got["layer"], want)
        assert sorted(got["ranges"]) == want["ranges"], (got["ranges"], want)
        assert got["op"] == want["op"], (got["op"], want)
