"""The stage contract (pyprof/formats.py) against what the stages really write and read: the
records parse writes on the shipped captures, the markers annotation put into them, the key
names prof reads, and docs/records.md and docs/markers.md, which describe the same keys."""
from __future__ import annotations

import ast
import functools
import json
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from captures import unpacked
from pyprof import formats
from pyprof.parse import Export, Stats, lines
from pyprof.parse.ranks import from_trace

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = sorted((ROOT / "examples").glob("*.sqlite"))
BY_KEY = {f.key: f for f in formats.FIELDS}
ORDER = [f.key for f in formats.FIELDS]


@functools.lru_cache(maxsize=None)
def written(path: Path) -> tuple[str, ...]:
    """The lines `python -m pyprof.parse --memcpy path` writes."""
    with Export(str(path)) as exp, closing(lines(exp, Stats(), True)) as out:
        return tuple(out)


def contract_errors(line: str) -> list[str]:
    """How one record line breaks formats' record fields: keys missing, unknown, out of order, or
    of a type not declared; empty when it keeps the contract."""
    rec = json.loads(line)
    kind = rec.get(formats.KIND)
    want = [f.key for f in formats.FIELDS if kind in f.kinds and (not f.sometimes or f.key in rec)]
    errors = [] if list(rec) == want else [f"{kind} keys {list(rec)}, formats says {want}"]
    for key, value in rec.items():
        field = BY_KEY.get(key)
        if field is not None and formats.json_type(value) not in field.types:
            errors.append(f"{key} is {formats.json_type(value)}, formats says {' or '.join(field.types)}")
    return errors


def test_the_checker_finds_each_kind_of_break():
    good = written(CAPTURES[0])[0]
    rec = json.loads(good)
    assert contract_errors(good) == []
    swapped = dict(rec)
    swapped["kStart"], swapped["kEnd"] = "1", None
    assert contract_errors(json.dumps(swapped)) == ["kStart is str, formats says int", "kEnd is null, formats says int"]
    extra = dict(rec, newKey=1)
    assert len(contract_errors(json.dumps(extra))) == 1
    del rec["regs"]
    assert contract_errors(json.dumps(rec))[0].startswith("kernel keys ")


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_every_record_parse_writes_is_formats_record(capture):
    out = written(capture)
    kinds = {json.loads(line)[formats.KIND] for line in out}
    assert formats.KERNEL in kinds and kinds <= {formats.KERNEL, formats.MEMCPY, formats.MEMSET}
    assert [e for line in out for e in contract_errors(line)] == []
    assert all(line.startswith('{"v":%d,' % formats.VERSION) for line in out)


def test_the_shipped_captures_show_every_field():
    seen = {key for capture in CAPTURES for line in written(capture) for key in json.loads(line)}
    # `consumers`: the aten-mode captures' broadcasting views (an expand launches nothing)
    assert seen == formats.RECORD_KEYS - {formats.RANK, formats.NCCL}  # both: below


def test_ranked_records_carry_rank_right_after_v():
    out = subprocess.run([sys.executable, "-m", "pyprof.parse", "-q", "--rank", str(ROOT / "examples" / "lenet.sqlite")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 44
    assert [e for line in out for e in contract_errors(line)] == []
    assert all(line.startswith('{"v":%d,"rank":0,' % formats.VERSION) for line in out)


def pyprof_texts(path: Path) -> list[str]:
    """Every range and mark text in the pyprof domain of an export."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return [t for (t,) in db.execute(
            "SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType != 75 AND e.domainId IN "
            "(SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?)", (formats.DOMAIN,))]


def marker_errors(marker: dict) -> list[str]:
    """How one decoded marker breaks formats' marker kinds; a bwd marker's `fwd` is checked too."""
    kind = formats.MARKERS.get(marker.get("kind"))
    if kind is None:
        return [f"unknown kind {marker.get('kind')!r}"]
    errors = [] if marker.get("v") == kind.version else [f"{marker['kind']} v{marker.get('v')}"]
    keys = set(marker)
    if not set(kind.required) <= keys <= set(kind.required + kind.optional):
        errors.append(f"{marker['kind']} keys {sorted(keys)}")
    if marker["kind"] == "bwd" and isinstance(marker.get("fwd"), dict):
        errors += marker_errors(marker["fwd"])
    return errors


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_every_marker_in_the_shipped_captures_is_formats_marker(capture):
    markers = [json.loads(t) for t in pyprof_texts(capture)]
    assert {"op", "module"} <= {m["kind"] for m in markers}
    assert [e for m in markers for e in marker_errors(m)] == []


def test_the_compiled_captures_hold_the_compile_time_marks():
    kinds = {json.loads(t)["kind"] for t in pyprof_texts(ROOT / "examples" / "gpt_compiled.sqlite")}
    assert {"graph", "kernel"} <= kinds


def test_a_distributed_capture_keeps_the_contract_and_tells_its_rank(tmp_path):
    # Rank 1 of a two-rank job under pyprof.init(): op markers with `dist`, NCCL kernels, and
    # NCCL's payloads (exported with --include-blobs): records with `nccl`.
    capture = unpacked(ROOT / "tests" / "data" / "coll_blobs_1.sqlite.xz", tmp_path)
    markers = [json.loads(t) for t in pyprof_texts(capture)]
    assert any("dist" in m for m in markers)
    assert [e for m in markers for e in marker_errors(m)] == []
    assert [e for line in written(capture) for e in contract_errors(line)] == []
    assert sum(formats.NCCL in json.loads(line) for line in written(capture)) == 12
    with Export(str(capture)) as exp:
        assert from_trace(exp) == 1  # found by formats.op_marker_head("torch.distributed")


def test_an_aten_only_capture_of_data_sized_ops_keeps_the_contract(tmp_path):
    # benchmarks/data_sized.py under emit_nvtx's ranges alone (H200): records with `consumers`
    # (23 of readers of data-sized outputs, one of an expand).
    capture = unpacked(ROOT / "tests" / "data" / "data_sized_plain.sqlite.xz", tmp_path)
    assert [e for line in written(capture) for e in contract_errors(line)] == []
    assert sum(formats.CONSUMERS in json.loads(line) for line in written(capture)) == 24


def test_the_marker_checker_finds_each_kind_of_break():
    op = {"v": 1, "kind": "op", "mod": "torch", "op": "add", "args": []}
    assert marker_errors(op) == []
    assert marker_errors(dict(op, v=2)) == ["op v2"]
    assert marker_errors(dict(op, extra=1)) == ["op keys ['args', 'extra', 'kind', 'mod', 'op', 'v']"]
    assert marker_errors({"v": 2, "kind": "bwd", "node": "X", "fwd": dict(op, v=0)}) == ["op v0"]
    assert marker_errors({"v": 1, "kind": "later"}) == ["unknown kind 'later'"]


def _doc_type(text: str) -> tuple[str, ...]:
    # docs/records.md's type column: `int or null`, `list of str`, `[x,y,z]`.
    return tuple("list" if t.startswith("[") else t.split()[0] for t in text.split(" or "))


def test_records_md_lists_formats_fields_with_their_types():
    table = {}
    for line in (ROOT / "docs" / "records.md").read_text().splitlines():
        m = re.match(r"\| ((?:`\w+`(?:, )?)+) \| ([^|]+) \|", line)
        if m:
            for key in re.findall(r"`(\w+)`", m[1]):
                table[key] = _doc_type(m[2].strip())
    assert list(table) == ORDER
    assert table == {f.key: f.types for f in formats.FIELDS}


def test_markers_md_lists_formats_marker_keys():
    text = (ROOT / "docs" / "markers.md").read_text()
    op_table = text.split('## `kind: "op"`')[1].split("###")[0]
    assert set(re.findall(r"^\| `(\w+)` \|", op_table, re.M)) == set(formats.MARKERS["op"].required
                                                                    + formats.MARKERS["op"].optional)
    for kind in ("graph", "kernel"):
        table = text.split(f"`{{\"v\":1,\"kind\":\"{kind}\"")[1].split("\n\n")[1]
        keys = {k for row in re.findall(r"^\| ((?:`\w+`(?:, )?)+) \|", table, re.M) for k in re.findall(r"`(\w+)`", row)}
        spec = formats.MARKERS[kind]
        assert keys | {"v", "kind"} == set(spec.required + spec.optional), kind
    examples = {}
    for snippet in re.findall(r"`(\{\"v\":[^`]*\})`", text):
        try:
            marker = json.loads(snippet)
        except ValueError:
            continue  # an example with `...` in it
        examples.setdefault(marker["kind"], []).append(marker)
    assert {"module", "layer", "graph"} <= set(examples)
    assert [e for ms in examples.values() for m in ms for e in marker_errors(m)] == []


def _record_keys_read(path: Path) -> set[tuple[str, int, str]]:
    """(file, line, key) of each literal key read from a record (`rec.get("k")`, `rec["k"]`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target, key = node.func.value, node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("rec", "record") and isinstance(key, ast.Constant) \
                and isinstance(key.value, str):
            found.add((path.name, node.lineno, key.value))
    return found


def test_prof_reads_only_formats_record_keys():
    sources = [*sorted((ROOT / "pyprof" / "prof").rglob("*.py")), ROOT / "pyprof" / "api.py"]
    read = set().union(*map(_record_keys_read, sources))
    assert len({key for _, _, key in read}) >= 20  # the reader sees prof's reads
    assert sorted(r for r in read if r[2] not in formats.RECORD_KEYS) == []


def test_formats_imports_no_other_part_of_pyprof():
    code = "import sys, pyprof.formats; print(sorted(m for m in sys.modules if m.startswith('pyprof')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['pyprof', 'pyprof.formats']"
