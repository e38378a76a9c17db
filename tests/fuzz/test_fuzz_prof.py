"""Fuzz: pyprof.prof over mutated record streams (docs/reliability.md).

Streams are built from the records parse writes for the shipped LeNet and GPT traces, mutated:
lines cut short, every field (and the fields inside markers, fwd, torchOps, gpu) replaced by
values of every JSON type, by NaN/Infinity, by huge numbers and deep nesting, fields removed,
newer format versions, bytes that are not UTF-8, original-PyProf dict lines with code in them.
prof runs with generated options (columns, output forms, --strict, --summary, --diff).

Properties: a documented exit status; a failure is one line on stderr; every input line is either
printed as one row or reported as skipped (none lost, none doubled); nothing read is executed.
"""
from __future__ import annotations

import csv
import functools
import io
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import CANARY, CANARY_DIR, PAYLOADS, check_failure, examples, run_tool
from pyprof.magic import PARQUET, SQLITE, compression
from pyprof.prof.columns import COLUMNS
from pyprof.prof.groups import KEYS, SORTS

ROOT = Path(__file__).resolve().parents[2]
ALL_COLUMNS = [c.name for c in COLUMNS]
_SKIPPED = re.compile(r"^  (\d+) malformed lines? skipped \(the first: line (\d+): .+\)$", re.M)
_NO_RECORDS = re.compile(r"^pyprof\.prof: error: (.+) holds no pyprof records \(line (\d+): .+\); prof reads what "
                         r"`python -m pyprof\.parse` writes, or an nsys export$")


@functools.lru_cache(maxsize=None)
def real_lines() -> tuple[bytes, ...]:
    """The records parse writes for examples/lenet.sqlite and examples/gpt.sqlite."""
    lines: list[bytes] = []
    for name in ("lenet", "gpt"):
        res = run_tool("parse", [str(ROOT / "examples" / f"{name}.sqlite"), "-q"])
        assert res.status == 0
        lines += res.out.splitlines()
    return tuple(lines)


# An original-PyProf line (a Python dict literal), as its parse wrote them.
LEGACY = {"kShortName": "volta_sgemm_128x64_nn", "kDuration": 5000, "layer": [], "trace": ["net.py:3"],
          "seqId": [7], "subSeqId": 0, "altSeqId": [], "dir": "fprop", "mod": ["torch.nn.functional"],
          "op": ["linear"], "tid": 1, "device": 0, "stream": 7, "grid": (1, 1, 1), "block": (256, 1, 1),
          "kLongName": "volta_sgemm_128x64_nn",
          "marker": [str({"mod": "torch.nn.functional", "op": "linear", "args": [
              {"name": "", "type": "tensor", "shape": (32, 64), "dtype": "float32"},
              {"name": "", "type": "tensor", "shape": (16, 64), "dtype": "float32"}]})]}

_SLOT = "\x00slot\x00"
# Values json.dumps cannot write: non-standard constants, numbers past float and int limits.
RAW_TOKENS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5000, "-" + "9" * 400, "1" + "0" * 30,
              '"\\ud800"', '"\\udfff x"', "[" * 3000 + "]" * 3000, '{"a":' * 3000 + "1" + "}" * 3000,
              "[" * 200 + "]" * 200, "0.000001e-400", "-0", "1.0", '"\\u0000"', '"\\n\\t\\r"']
# Python literals for original-PyProf lines, and code ast.literal_eval must refuse.
LEGACY_TOKENS = ["None", "True", "(1, 2)", "{1, 2}", "b'x'", "1j", "1e999", "-1", "9" * 5000, "[" * 500 + "]" * 500,
                 "{'a': " * 300 + "1" + "}" * 300, "'\\ud800'", "float('nan')"] + list(PAYLOADS)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**64, max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
values = st.one_of(json_values.map(lambda v: json.dumps(v)), st.sampled_from(RAW_TOKENS),
                   st.sampled_from(PAYLOADS).map(json.dumps))


def _paths(rec: dict) -> list[tuple]:
    """Every key path of a record down to two levels (marker.args, fwd.marker, gpu.name, ...)."""
    out: list[tuple] = []
    for k, v in rec.items():
        out.append((k,))
        if isinstance(v, dict):
            out += [(k, k2) for k2 in v]
            out += [(k, k2, k3) for k2, v2 in v.items() if isinstance(v2, dict) for k3 in v2]
        elif isinstance(v, list) and v:
            out.append((k, 0))
            if isinstance(v[0], dict):
                out += [(k, 0, k2) for k2 in v[0]]
    return out


@st.composite
def mutated_record(draw) -> bytes:
    """One real record with fields replaced, removed or added, or cut short."""
    line = draw(st.sampled_from(real_lines()))
    rec = json.loads(line)
    raw = []
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(rec)
        path = draw(st.sampled_from(paths))
        parent = rec
        for p in path[:-1]:
            parent = parent[p]
        action = draw(st.sampled_from(["set", "set", "set", "delete"]))
        if action == "delete":
            del parent[path[-1]]
        else:
            raw.append(draw(values))
            parent[path[-1]] = _SLOT + str(len(raw) - 1)
    if draw(st.booleans()):
        rec[draw(st.sampled_from(["v", "kind", "dir", "zzz"]))] = draw(st.sampled_from(
            [99, 2, 0, -1, "1", None, "kernel", "memcpy", "memset", "bprop", True, 1.5]))
    text = json.dumps(rec)
    for i, token in enumerate(raw):
        text = text.replace(json.dumps(_SLOT + str(i)), token)
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(0, len(data)))]  # cut short
    return data


@st.composite
def legacy_line(draw) -> bytes:
    """An original-PyProf dict line, with fields replaced by Python literals and code."""
    text = repr(LEGACY)
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(sorted(LEGACY)))
        token = draw(st.sampled_from(LEGACY_TOKENS))
        if draw(st.booleans()) and key == "marker":
            token = repr([token.replace("kShortName", "op")])  # code inside the marker string
        text = re.sub(rf"'{key}': (?:\[.*?\]|\(.*?\)|'.*?'|\d+)(?=, '|\}}$)", lambda m, key=key, token=token: f"'{key}': {token}", text, count=1)
    return text.encode("utf-8", "surrogatepass")


raw_lines = st.one_of(
    st.sampled_from([b"", b"   ", b"{", b"}", b"[]", b"null", b"1", b'"x"', b"{}", b'{"v":99}', b'{"v":1,"kind":"kernel"}',
                     b"\xff\xfe\x00garbage", b"{\"kShortName\":\"\xc3\x28\"}", b"SQLite format 3\x00",
                     b"\x1f\x8b\x08\x00", b"{" * 100000, b"[" * 100000, b"NaN", b"pyprof.prof: error: x"]),
    st.binary(max_size=64),
    st.sampled_from(PAYLOADS).map(str.encode),
)


@st.composite
def streams(draw) -> list[bytes]:
    """A record file: real records, mutated records, legacy lines and junk lines, in any order."""
    lines = draw(st.lists(st.one_of(st.sampled_from(real_lines()), mutated_record(), mutated_record(),
                                    legacy_line(), raw_lines), min_size=0, max_size=10))
    return [line.replace(b"\n", b" ").replace(b"\r", b" ") for line in lines]


def _not_records(data: bytes) -> bool:
    """Whether prof refuses `data` from its first bytes: an nsys export, Parquet (a record store's
    file, which needs its path), a compressed file."""
    return data.startswith((SQLITE, PARQUET)) or compression(data) is not None


def _json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _first_bad(stream: list[bytes], lineno: int, objects_too: bool = False) -> None:
    """Line `lineno` of `stream`, named as the first malformed one, is not blank and no JSON object
    (`objects_too`: or a JSON object, a record whose fields were not understood), and every line
    before it that is neither is an original-PyProf line (`{...}` text), read as a record."""
    assert 1 <= lineno <= len(stream) and stream[lineno - 1].strip()
    assert objects_too or not _json_object(stream[lineno - 1])
    for line in stream[:lineno - 1]:
        assert not line.strip() or _json_object(line) or line.strip().startswith(b"{"), (lineno, line[:80])


def check_refused(res, stream: list[bytes], name: str, alone: bool = True) -> None:
    """Status 4: the input refused as a whole, from its first bytes (an nsys export, a compressed
    file), or because not one of its lines is a record: then it is named, with a first malformed
    line that truly is one, and nothing is printed (`alone`: stderr is that line; --diff says
    first what it found in the side it read before)."""
    assert res.status == 4
    if _not_records(b"\n".join(stream)):
        return
    m = _NO_RECORDS.match(res.err_lines[-1])
    assert m and m.group(1) == name and res.out == b"" and (len(res.err_lines) == 1 or not alone), res.err
    assert not any(_json_object(line) for line in stream), res.err
    _first_bad(stream, int(m.group(2)))


def _data_lines(stream: list[bytes]) -> int:
    # What prof counts as lines: blank ones are skipped silently, everything else is a row or reported.
    return sum(1 for line in stream if line.strip())


def _rows(out: bytes, as_csv: bool) -> list:
    text = out.decode("utf-8")
    if as_csv:
        return list(csv.reader(io.StringIO(text)))[1:]
    return text.splitlines()[1:]


@pytest.fixture(autouse=True, scope="module")
def canary_dir():
    os.makedirs(CANARY_DIR, exist_ok=True)
    yield
    assert not os.path.exists(CANARY)


@examples(2500)
@given(stream=streams(), cols=st.one_of(st.none(), st.just(ALL_COLUMNS), st.lists(st.sampled_from(ALL_COLUMNS), min_size=1)),
       form=st.sampled_from(["space", "csv", "width"]), width=st.integers(1, 400), strict=st.booleans(),
       from_file=st.booleans())
def test_rows(tmp_path_factory, stream, cols, form, width, strict, from_file):
    """Per-kernel rows: every line of the input is one row or one report of a skipped line."""
    argv = []
    if cols is not None:
        argv += ["-c", ",".join(cols)]
    if form == "csv":
        argv.append("--csv")
    elif form == "width":
        argv += ["-w", str(width)]
    if strict:
        argv.append("--strict")
    data = b"\n".join(stream) + (b"\n" if stream else b"")
    if from_file:
        path = _scratch(tmp_path_factory) / "in.dict"
        path.write_bytes(data)
        res = run_tool("prof", argv + [str(path)])
    else:
        res = run_tool("prof", argv, stdin=data)
    if res.status != 0:
        check_failure(res, "prof")
        if res.status == 4:
            check_refused(res, stream, str(path) if from_file else "stdin")
        elif res.status == 2:  # before anything is read
            assert form == "width" and re.fullmatch(rf"pyprof\.prof: error: -w {width} is narrower than these "
                                                    r"columns need: at least \d+", res.err.strip()), res.err
            assert res.out == b""
        else:
            assert res.status in (7, 9) and (strict or res.status == 9), res.err
        return
    rows = _rows(res.out, form == "csv")
    skipped = _SKIPPED.search(res.err)
    n_skipped = int(skipped.group(1)) if skipped else 0
    if skipped:
        _first_bad(stream, int(skipped.group(2)), objects_too=True)
    assert len(rows) + n_skipped == _data_lines(stream), (len(rows), n_skipped, res.err)
    for line in res.err_lines:
        assert line.startswith(("pyprof.prof: ", "  ")), line
    if form == "space":
        n_fields = len(cols or "idx,dir,sub,mod,op,kernel,params,sil".split(","))
        assert all(len(r.split(" ")) == n_fields for r in rows)


@examples(1200)
@given(stream=streams(), by=st.sampled_from(list(KEYS)), sort=st.sampled_from(list(SORTS)),
       top=st.one_of(st.none(), st.integers(1, 5)), form=st.sampled_from(["text", "csv", "json"]),
       strict=st.booleans())
def test_summary(stream, by, sort, top, form, strict):
    """--summary over any stream: a report or one error line; --json is strict JSON."""
    argv = ["--summary", "--by", by, "--sort", sort] + (["--top", str(top)] if top else [])
    argv += {"text": [], "csv": ["--csv"], "json": ["--json"]}[form] + (["--strict"] if strict else [])
    data = b"\n".join(stream) + b"\n"
    res = run_tool("prof", argv, stdin=data)
    if res.status != 0:
        check_failure(res, "prof")
        if res.status == 4:
            check_refused(res, stream, "stdin")
        else:
            assert res.status in (7, 9), res.err
        return
    if form == "json":
        json.loads(res.out, parse_constant=_no_constant)


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} in --json output")


@examples(1000)
@given(base=streams(), new=streams(), by=st.sampled_from(list(KEYS)), form=st.sampled_from(["text", "csv", "json"]))
def test_diff(tmp_path_factory, base, new, by, form):
    """--diff of any two streams: the table, or one error line (an empty side names the file)."""
    d = _scratch(tmp_path_factory)
    a, b = d / "base.dict", d / "new.dict"
    a.write_bytes(b"\n".join(base) + b"\n")
    b.write_bytes(b"\n".join(new) + b"\n")
    argv = ["--diff", str(a), str(b), "--by", by] + {"text": [], "csv": ["--csv"], "json": ["--json"]}[form]
    res = run_tool("prof", argv)
    if res.status != 0:
        check_failure(res, "prof")
        if res.status == 4:
            named = _NO_RECORDS.match(res.err_lines[-1])
            if named:
                side, path = (base, a) if named.group(1) == str(a) else (new, b)
            else:
                side, path = (base, a) if _not_records(b"\n".join(base)) else (new, b)
            check_refused(res, side, str(path), alone=False)
        elif res.status == 5:
            empty = a if f"{a} holds no kernel records" in res.err else b
            assert res.err_lines[-1] == f"pyprof.prof: error: --diff: {empty} holds no kernel records"
        elif res.status == 6:  # a file that starts as Parquet is read as a record store: this one is none
            side, path = (base, a) if res.err_lines[-1].startswith(f"pyprof.prof: error: {a}: ") else (new, b)
            assert b"\n".join(side).startswith(PARQUET), res.err
            assert res.err_lines[-1].startswith(f"pyprof.prof: error: {path}: the Parquet record store is truncated "
                                                "or corrupted ("), res.err
        else:
            assert res.status == 9, res.err
        return
    if form == "json":
        d = json.loads(res.out, parse_constant=_no_constant)
        assert d["total"]["base_count"] > 0 and d["total"]["new_count"] > 0


def _scratch(factory) -> Path:
    # One directory per module: hypothesis runs many cases per test function, which a
    # function-scoped tmp_path would not separate anyway.
    d = getattr(_scratch, "dir", None)
    if d is None:
        d = _scratch.dir = factory.mktemp("fuzz-prof")
    return d


@examples(300)
@given(stream=streams(), form=st.sampled_from(["--csv", "--json"]))
def test_the_table_and_parquet_skip_the_same_records(tmp_path_factory, stream, form):
    """Issue 31, item 9, as a class: a value the table printed could end --parquet in a traceback
    (a kDuration of 2^63), and a NaN time reached the plot. Over any stream, the table in a text
    form and the Parquet file hold the same rows and skip the same records, with the same count."""
    pq = pytest.importorskip("pyarrow.parquet")
    path = _scratch(tmp_path_factory) / "in.dict"
    path.write_bytes(b"\n".join(stream) + (b"\n" if stream else b""))
    out = path.parent / "out.parquet"
    cols = ["-c", "idx,kernel,op,sil,start"]
    text = run_tool("prof", cols + [form, str(path)])
    parquet = run_tool("prof", cols + ["--parquet", str(out), str(path)])
    assert parquet.status == text.status, (text.err, parquet.err)
    if text.status != 0:
        check_failure(parquet, "prof")
        assert parquet.err_lines[-1] == text.err_lines[-1] and not out.exists()
        return
    assert parquet.err == text.err and parquet.out == b""
    # Rows as the form defines them: a quoted CSV field may hold a line break of a kernel's name.
    text_rows = text.out.decode()
    rows = list(csv.reader(io.StringIO(text_rows)))[1:] if form == "--csv" else text_rows.splitlines()
    assert pq.read_table(out).num_rows == len(rows)
    out.unlink()


@examples(300)
@given(stream=streams(), strict=st.booleans())
def test_trace(tmp_path_factory, stream, strict):
    """--trace over any stream: a trace that passes the format's conformance check, or one error line."""
    from trace_format import load, problems

    path = _scratch(tmp_path_factory) / "t.json"
    res = run_tool("prof", ["--trace", str(path)] + (["--strict"] if strict else []), stdin=b"\n".join(stream) + b"\n")
    if res.status != 0:
        check_failure(res, "prof")
        assert res.status in (4, 7, 9), res.err
        return
    assert problems(load(str(path))) == []


@examples(60)  # a page is 5 MB of plotly.js: a few dozen suffice, the data comes from the same sinks
@given(stream=streams())
def test_html(tmp_path_factory, stream):
    """--html over any stream: a page whose data block is strict JSON holding no raw `<`, or one error line."""
    path = _scratch(tmp_path_factory) / "r.html"
    res = run_tool("prof", ["--html", str(path)], stdin=b"\n".join(stream) + b"\n")
    if res.status != 0:
        check_failure(res, "prof")
        assert res.status in (4, 9), res.err
        return
    block = path.read_text().split('id="pyprof-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block
    json.loads(block, parse_constant=_no_constant)
