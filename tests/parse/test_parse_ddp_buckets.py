"""DDP's bucket all-reduces sized from DDP's module marker in exports without NCCL's payloads
(parse/ddp_buckets.py, docs/parse.md "DDP's buckets").

The real two-rank capture of tests/parse/test_parse_ddp_groups.py, made to be what a plain
`nsys profile --export sqlite` of a current pyprof writes: its NCCL payloads dropped, and each
DDP module marker given the `ddp` member the annotation writes (nvtx/ddp_buckets.py): null at the
module's first captured call, then its reducer's buckets as DDP reported them at the capture
(ddp_groups_truth.json). Every bucket all-reduce then gets the bytes and group size NCCL's own
payloads gave it in the original export, and those of a null call get none."""
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from captures import unpacked

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TRUTH = {t["rank"]: t for t in json.loads((DATA / "ddp_groups_truth.json").read_text())}
GROUP_BUCKETS = {"1": "early_bucket_bytes", "2": "late_bucket_bytes"}  # DDP's process group -> its model


def _parse(paths, out):
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", *map(str, paths), "-o", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _without_payloads(src, dst, rank):
    """`src` as an export of a pyprof with DDP layouts and without NCCL's payloads."""
    shutil.copy(src, dst)
    db = sqlite3.connect(dst)
    db.execute("UPDATE NVTX_EVENTS SET binaryData = NULL")
    for sid, text in db.execute("SELECT id, value FROM StringIds WHERE value LIKE ?",
                                ('%"cls":"DistributedDataParallel"%',)).fetchall():
        marker = json.loads(text)
        first = dict(marker, ddp=None)
        later = dict(marker, ddp={"bucketBytes": TRUTH[rank][GROUP_BUCKETS[marker["dist"]["group"]]]})
        db.execute("UPDATE StringIds SET value = ? WHERE id = ?", (json.dumps(first, separators=(",", ":")), sid))
        new = db.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
        db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (new, json.dumps(later, separators=(",", ":"))))
        calls = [r[0] for r in db.execute("SELECT rowid FROM NVTX_EVENTS WHERE textId = ? ORDER BY start", (sid,))]
        db.executemany("UPDATE NVTX_EVENTS SET textId = ? WHERE rowid = ?", [(new, c) for c in calls[1:]])
    db.commit()
    db.close()
    return dst


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp_buckets")
    blobs = [unpacked(DATA / f"ddp_groups_blobs_{r}.sqlite.xz", folder) for r in (0, 1)]
    bare = [_without_payloads(p, folder / f"bare_{r}.sqlite", r) for r, p in enumerate(blobs)]
    return _parse(blobs, folder / "blobs.dict"), _parse(bare, folder / "bare.dict")


def _allreduces(recs):
    return [r for r in recs if r["kShortName"].startswith("ncclDevKernel_AllReduce")]


def test_bucket_allreduces_get_what_nccl_s_payloads_said(both):
    with_payloads, without = both
    a, b = _allreduces(with_payloads), _allreduces(without)
    assert [r["correlationId"] for r in a] == [r["correlationId"] for r in b] and len(a) == 18
    sized = [(x["nccl"], y.get("nccl")) for x, y in zip(a, b) if "nccl" in y]
    # Per rank: early's 2 buckets and late's 4 of the second step; the first step's calls say null.
    assert len(sized) == 12
    for x, y in sized:
        assert [(c["call"], c["bytes"], c["ranks"]) for c in x] == [(c["call"], c["bytes"], c["ranks"]) for c in y]
        assert y[0]["comm"] is None
    unsized = [x["nccl"][0]["bytes"] for x, y in zip(a, b) if "nccl" not in y]
    # The first step: early's buckets as rebuilt, late's first backward on its one first bucket.
    assert sorted(unsized) == sorted([6297600, 2109440, 3152896] * 2)


def test_every_bucket_of_the_layout_is_given_in_launch_order(both):
    _, without = both
    for rank in (0, 1):
        got = [r["nccl"][0]["bytes"] for r in _allreduces(without) if r["rank"] == rank and "nccl" in r]
        assert got == TRUTH[rank]["early_bucket_bytes"] + TRUTH[rank]["late_bucket_bytes"]
