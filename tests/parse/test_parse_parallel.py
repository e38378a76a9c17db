"""Several exports side by side and one export in time windows (pyprof/parse/parallel.py,
window.py, ranks.py, merge.py): same bytes as one process, ranks, merge, errors."""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuzz_harness import signal_parse
from nsys_synth import SynthExport, marker, payload_steps, rank_export, torch_text, workload
from pyprof.errors import PyprofError
from pyprof.parse import Stats, lines, parallel
from pyprof.parse.export import Export
from pyprof.parse.window import Seed, Window, compose, stale

pytestmark = pytest.mark.slow  # worker processes and synthetic exports: seconds each

ROOT = Path(__file__).resolve().parents[2]


def run_parse(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pyprof.parse", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def whole(path, memcpy=False):
    with Export(str(path)) as exp:
        return [line + "\n" for line in lines(exp, Stats(), memcpy)]


def windowed(path, edges, jobs, tmp_path, memcpy=False):
    """Parse `path` cut at `edges` with `jobs` workers; returns (text, Result)."""
    parts = [parallel.Part(i, str(path), 0, "", memcpy, False, None, Window(a, b))
             for i, (a, b) in enumerate(zip([None, *edges], [*edges, None]))]
    out = tmp_path / "w.dict"
    result = parallel.run([parts], str(out), jobs)
    return out.read_text(), result


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    return Path(workload(str(tmp_path_factory.mktemp("w") / "w.sqlite"), 12000))


def test_cuts_between_steps_need_no_second_pass(steps, tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_WINDOW", 2000)
    (group,) = parallel.plan([str(steps)], 5, False, False)
    assert len(group) == 5
    out = tmp_path / "p.dict"
    result = parallel.run([group], str(out), 3)
    assert out.read_text() == "".join(whole(steps))
    assert (result.windows, result.reparsed, result.kernels) == (5, 0, 12000)


def test_cuts_inside_steps_are_parsed_again_seeded_and_match(steps, tmp_path):
    with Export(str(steps)) as exp:
        lo, hi = exp.rows("SELECT min(start), max(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    # Backward kernels right after each cut look up forward ops from before it.
    edges = [lo + (hi - lo) * i // 7 + 12345 for i in range(1, 7)]
    text, result = windowed(steps, edges, 2, tmp_path)
    assert text == "".join(whole(steps))
    assert result.reparsed > 0 and result.kernels == 12000


def tricky(path):
    """Start/end ranges across threads and windows, a range open at capture stop, an engine
    wrapper around a node, a kernel without a launch, memcpy, a kernel-less autograd thread."""
    syn = SynthExport(str(path))
    main, grad = syn.thread(7, 7), syn.thread(7, 8)
    dom = syn.domain(main, "pyprof")
    syn.push(main, 50, None, "layer:everything")
    syn.start_end(main, 60, 90_000, "epoch", end_thread=grad)
    t = 1000
    for i in range(40):
        syn.push(main, t, t + 900, marker("op", mod="torch", op="mm", args=[], site="m.py:1"), domain=dom)
        syn.push(main, t + 10, t + 800, torch_text("aten::mm", seq=i, op_id=i))
        syn.launch_kernel(main, t + 100, "gemm_a")
        syn.launch_kernel(main, t + 200, "gemm_b")
        t += 1000
    syn.push(grad, t, t + 30_000, "autograd::engine::evaluate_function: MmBackward0")
    for i in reversed(range(40)):
        syn.push(grad, t + 100, t + 600, torch_text("MmBackward0", seq=i, op_id=100 + i))
        syn.launch_kernel(grad, t + 200, "gemm_bw")
        syn.launch_kernel(grad, t + 700, "sum_bias")  # outside the node range: the wrapper's seq
        t += 700
    corr = syn.launch(main, t + 100)
    syn.memcpy(7, corr, t + 5000, t + 6000, 4096, 1)
    syn.kernel(7, 99_999, t + 7000, t + 8000, "graph_replay")  # no launch call
    syn.launch_kernel(main, t + 9000, "tail")
    return syn.close()


def test_every_cut_of_a_tricky_trace_gives_the_same_bytes(tmp_path):
    path = tricky(tmp_path / "t.sqlite")
    expect = "".join(whole(path, memcpy=True))
    with Export(str(path)) as exp:
        keys = sorted(r[0] for r in exp.rows("SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    for step in (7, 19, 31):
        edges = sorted(set(keys[step::step]))
        text, result = windowed(path, edges, 2, tmp_path, memcpy=True)
        assert text == expect, step


@pytest.mark.parametrize("jobs", [2, 4])
def test_node_spans_pending_across_every_cut_give_the_same_bytes(jobs, tmp_path):
    path = payload_steps(str(tmp_path / "p.sqlite"))
    expect = "".join(whole(path))
    spanned = [r for r in map(json.loads, expect.splitlines()) if r["fwd"] and r["fwd"]["torchOp"] is None]
    # Every node but the gap ones and the launch after each, less the aten-found ones; and each
    # step's AccumulateGrad, its producer's.
    assert len(spanned) == 6 * 8 * 2 - 2 * 3 * 2 + 6
    with Export(path) as exp:
        keys = sorted(r[0] for r in exp.rows("SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    reparsed = 0
    for step in (1, 2, 3, 5):
        text, result = windowed(path, sorted(set(keys[step::step])), jobs, tmp_path)
        assert text == expect, step
        reparsed += result.reparsed
    assert reparsed > 0


def test_compose_keeps_the_most_recent_forward_ops_and_adds_counts():
    from pyprof.parse.window import Report
    seed = Seed({1: {10: "a", 11: "b"}}, {5}, {("k",): (2, None)})
    rep = Report(fwd={1: {12: "c", 10: "a2"}}, autograd={6},
                 open_end={("k",): (3, 7, True), ("n",): (1, None, False)})
    out = compose(seed, rep, cap=3)
    assert out.fwd == {1: {11: "b", 12: "c", 10: "a2"}} and list(out.fwd[1]) == [11, 12, 10]
    assert out.autograd == {5, 6} and out.open == {("k",): (5, 7), ("n",): (1, None)}
    assert list(compose(seed, rep, cap=2).fwd[1]) == [12, 10]
    assert stale(seed, Report(misses={(1, 11): 0})) and not stale(seed, Report(misses={(1, 99): 0, (2, 11): 0}))
    assert stale(seed, Report(negatives={5})) and not stale(seed, Report(negatives={6}))
    assert stale(seed, Report(owners={("k",)})) and not stale(seed, Report(node_seqs={("k",)}))


def test_compose_and_stale_carry_pending_node_spans():
    """Thread 7's span from seq 50 is pending at the cut; thread 8's (seq 20) too."""
    from pyprof.parse.window import Report
    seed = Seed(pending={1: {7: (50, "lin"), 8: (20, "emb")}})
    # The window met thread 7 (closed its span with nothing: the next op's seqs start at 50),
    # leaving a span of its own, and a backward call on thread 8 (its frontier only).
    rep = Report(closes={1: {7: 50, 8: 20}}, pending={1: {7: (53, "relu"), 8: (20, None)}})
    assert compose(seed, rep, cap=3).pending == {1: {7: (53, "relu"), 8: (20, None)}}
    assert compose(seed, Report(pending={2: {9: (1, "x")}}), cap=3).pending == {1: {7: (50, "lin"), 8: (20, "emb")},
                                                                              2: {9: (1, "x")}}
    assert not stale(seed, rep)
    # Closing thread 7's span after nodes 50..51 were made: those enter the forward-op map there.
    assert stale(seed, Report(closes={1: {7: 52}}))
    assert not stale(Seed(pending={1: {7: (50, None)}}), Report(closes={1: {7: 52}}))
    # A node looked up before the window met thread 7: the seed's span or frontier counts.
    assert stale(seed, Report(closes={1: {7: 50}}, misses={(1, 60): 0}))
    # ... after it met threads 7 and 8: both spans were closed (empty) by then.
    assert not stale(seed, Report(closes={1: {7: 50, 8: 20}}, misses={(1, 60): 2}))
    # ... after it met only thread 7: thread 8's span was still pending.
    assert stale(seed, Report(closes={1: {7: 50, 8: 20}}, misses={(1, 60): 1}))
    assert not stale(seed, Report(misses={(2, 60): 0}))  # another process


def test_compose_and_stale_carry_each_threads_last_range_and_backward_call():
    from pyprof.parse.window import Report
    seed = Seed(tops={7: (12, 100), 8: (None, 90)}, calls={1: 50})
    out = compose(seed, Report(tops={8: (30, 400)}, calls={1: 300, 2: 10}), cap=3)
    assert out.tops == {7: (12, 100), 8: (30, 400)} and out.calls == {1: 300, 2: 10}
    # A window that saw an older backward call (inherited) keeps the later one.
    assert compose(seed, Report(calls={1: 40}), cap=3).calls == {1: 50}
    # A launch between nodes on thread 7 needed the node that ended before the window.
    assert stale(seed, Report(tops_missed={7})) and not stale(seed, Report(tops_missed={8, 9}))


# ---------------------------------------------------------------------------------------------
# Several exports: ranks side by side

@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    for r in range(6):
        rank_export(str(folder / f"trace_{r}.sqlite"), r, 6, steps=1)
    return folder


def test_output_is_in_rank_order_whatever_the_workers(job, tmp_path):
    one, four = run_parse(job, "-j", "1", "-o", tmp_path / "1.dict"), run_parse(job, "-j", "4", "-o", tmp_path / "4.dict")
    assert one.returncode == four.returncode == 0
    assert (tmp_path / "1.dict").read_bytes() == (tmp_path / "4.dict").read_bytes()
    recs = [json.loads(x) for x in (tmp_path / "4.dict").read_text().splitlines()]
    assert [r["rank"] for r in recs] == sorted(r["rank"] for r in recs) and {r["rank"] for r in recs} == set(range(6))
    assert list(recs[0])[:3] == ["v", "rank", "kind"]
    # Each rank's records are exactly its export parsed alone, plus the rank.
    alone = [json.loads(x) for x in whole(job / "trace_4.sqlite")]
    assert [r for r in recs if r["rank"] == 4] == [{**{"v": 1, "rank": 4}, **a} for a in alone]
    assert four.stderr.startswith("pyprof.parse: 102 kernels written from 6 exports, ranks 0-5 (from pyprof markers);")


def test_rank_from_the_trace_beats_the_name_and_names_beat_order(tmp_path):
    rank_export(str(tmp_path / "node_a.sqlite"), 3, 4, steps=1)                  # markers say 3
    rank_export(str(tmp_path / "x_7.sqlite"), 1, 4, steps=1, markers=False)      # name says 7
    rank_export(str(tmp_path / "zz.sqlite"), 2, 4, steps=1, markers=False)       # third by name order
    res = run_parse(tmp_path / "node_a.sqlite", tmp_path / "x_7.sqlite", tmp_path / "zz.sqlite")
    assert res.returncode == 0, res.stderr
    ranks = [json.loads(x)["rank"] for x in res.stdout.splitlines()]
    assert ranks == [2] * 17 + [3] * 17 + [7] * 17
    assert "ranks 2-7 (from file names, file order, pyprof markers)" in res.stderr


def test_two_exports_of_one_rank_are_an_error(tmp_path):
    rank_export(str(tmp_path / "a_1.sqlite"), 1, 2, steps=1, markers=False)
    shutil.copy(tmp_path / "a_1.sqlite", tmp_path / "b_1.sqlite")
    res = run_parse(tmp_path, "-o", tmp_path / "out.dict")
    assert res.returncode == 2 and not (tmp_path / "out.dict").exists()
    assert res.stderr == (f"pyprof.parse: error: {tmp_path / 'b_1.sqlite'} and {tmp_path / 'a_1.sqlite'} are both "
                          "rank 1 (ranks come from pyprof's torch.distributed markers, else the file name's last "
                          "number)\n")


def test_a_broken_export_among_many_fails_the_run_with_its_own_error(job, tmp_path):
    folder = tmp_path / "j"
    shutil.copytree(job, folder)
    (folder / "trace_9.sqlite").write_text("not a database")
    res = run_parse(folder, "-o", tmp_path / "out.dict")
    assert res.returncode == 4 and not (tmp_path / "out.dict").exists()
    assert res.stderr == (f"pyprof.parse: error: {folder / 'trace_9.sqlite'}: not a SQLite database (expected an "
                          "Nsight Systems SQLite export)\n")


def test_a_part_failing_in_its_worker_ends_stdout_after_the_ranks_before_it(job, tmp_path):
    folder = tmp_path / "j"
    shutil.copytree(job, folder)
    broken = folder / "trace_3.sqlite"
    with sqlite3.connect(broken) as db:  # planning reads other pages: only the worker meets this one
        page = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone()[0]
    data = bytearray(broken.read_bytes())
    data[(page - 1) * 4096:page * 4096] = b"\xff" * 4096
    broken.write_bytes(bytes(data))
    whole_job = run_parse(job, "-j", "1").stdout.splitlines(keepends=True)
    res = run_parse(folder, "-j", "4")
    message = f"{broken}: the export is truncated or corrupted (sqlite: database disk image is malformed)"
    assert (res.returncode, res.stderr) == (6, f"pyprof.parse: error: {message}\n")
    assert res.stdout == "".join(whole_job[:51]) + f"pyprof.parse: error: {message} - the 51 records above are incomplete\n"
    assert {json.loads(x)["rank"] for x in whole_job[:51]} == {0, 1, 2}


def test_ranks_found_by_the_workers_give_the_same_output(job, tmp_path):
    # A .nsys-rep's rank is known only once its worker converted it: then writing waits for it.
    paths = parallel.inputs([str(job)])
    planned = parallel.plan(paths, 3, False, True)
    late = [[parallel.Part(p.index, p.path, p.position, "", False, True) for p in g] for g in reversed(planned)]
    a, b = parallel.run(planned, str(tmp_path / "a.dict"), 3), parallel.run(late, str(tmp_path / "b.dict"), 3)
    assert (tmp_path / "a.dict").read_bytes() == (tmp_path / "b.dict").read_bytes()
    assert a.ranks == b.ranks == [parallel.Rank(r, "trace") for r in range(6)]
    assert (b.records, b.exports) == (102, 6)


def test_one_export_with_rank(job):
    res = run_parse(job / "trace_2.sqlite", "--rank", "-q")
    assert res.returncode == 0 and {json.loads(x)["rank"] for x in res.stdout.splitlines()} == {2}


# ---------------------------------------------------------------------------------------------
# Per-node outputs merged

def test_merge_of_per_node_outputs_equals_one_parse_of_all(job, tmp_path):
    files = sorted(job.glob("trace_*.sqlite"))
    assert run_parse(*files[3:], "-o", tmp_path / "node1.dict").returncode == 0
    assert run_parse(*files[:3], "-o", tmp_path / "node0.dict").returncode == 0
    assert run_parse(job, "-o", tmp_path / "all.dict").returncode == 0
    res = run_parse("--merge", tmp_path / "node1.dict", tmp_path / "node0.dict", "-o", tmp_path / "m.dict")
    assert res.returncode == 0 and res.stderr == "pyprof.parse: 102 records merged from 2 files (ranks 0-5)\n"
    assert (tmp_path / "m.dict").read_bytes() == (tmp_path / "all.dict").read_bytes()


def test_merge_refuses_unranked_duplicated_and_incomplete_inputs(job, tmp_path):
    plain = tmp_path / "plain.dict"
    plain.write_text("".join(whole(job / "trace_0.sqlite")[:3]))
    res = run_parse("--merge", plain)
    assert (res.returncode, res.stderr) == (4, f"pyprof.parse: error: {plain}: line 1: records without `rank`: parse "
                                               "several exports (or one with --rank) to get records that can be "
                                               "merged\n")
    assert run_parse(job, "-o", tmp_path / "a.dict").returncode == 0
    shutil.copy(tmp_path / "a.dict", tmp_path / "b.dict")
    res = run_parse("--merge", tmp_path / "a.dict", tmp_path / "b.dict")
    assert (res.returncode, res.stderr) == (2, f"pyprof.parse: error: rank 0 is in both {tmp_path / 'a.dict'} and "
                                               f"{tmp_path / 'b.dict'}\n")
    res = run_parse("--merge", tmp_path / "a.dict", tmp_path / "a.dict")
    assert (res.returncode, res.stderr) == (2, f"pyprof.parse: error: {tmp_path / 'a.dict'} is given twice\n")
    cut = tmp_path / "cut.dict"
    cut.write_text((tmp_path / "a.dict").read_text().splitlines(True)[0] + "pyprof.parse: interrupted - the 1 "
                                                                           "records above are incomplete\n")
    res = run_parse("--merge", cut)
    assert (res.returncode, res.stderr) == (9, f"pyprof.parse: error: {cut}: line 2: the file is incomplete, parse "
                                               "failed while writing it\n")


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_parts_copied_side_by_side_land_in_order_after_what_was_written(kernel_copy, tmp_path, monkeypatch):
    def cross_device(*args):
        raise OSError(18, "Invalid cross-device link")

    if not kernel_copy:  # where the kernel cannot copy between the files: pread/pwrite
        monkeypatch.setattr(parallel.os, "copy_file_range", cross_device, raising=False)
    srcs = []
    for i, size in enumerate([0, 5, (1 << 24) + 3, 1]):
        srcs.append(tmp_path / f"p{i}")
        srcs[-1].write_bytes(bytes([65 + i]) * size)
    with open(tmp_path / "out", "w", encoding="utf-8") as out:
        out.write("head\n")
        parallel._copy([str(s) for s in srcs], out)
        out.write("tail\n")
    assert (tmp_path / "out").read_bytes() == b"head\n" + b"B" * 5 + b"C" * ((1 << 24) + 3) + b"D" + b"tail\n"


def test_parts_copied_into_a_pipe_one_after_the_other(tmp_path):
    srcs = [tmp_path / "a", tmp_path / "b"]
    srcs[0].write_text("x\n")
    srcs[1].write_text("y\n")
    code = ("import sys; from pyprof.parse import parallel; sys.stdout.write('h\\n'); "
            f"parallel._copy({[str(s) for s in srcs]!r}, sys.stdout); sys.stdout.write('t\\n')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (res.returncode, res.stdout) == (0, "h\nx\ny\nt\n")


def test_parts_copied_into_a_file_opened_for_appending_land_in_order(tmp_path, monkeypatch):
    """`parse ... >> job.dict`: every write to a file opened for appending lands at its end,
    whatever the offset, so parts copied side by side would land in the order their copies
    finish. The first part is held back here: it must still come first."""
    copy_at = parallel._copy_at

    def first_late(src, offset, fd):
        if src.endswith("p0"):
            time.sleep(0.5)
        copy_at(src, offset, fd)

    monkeypatch.setattr(parallel, "_copy_at", first_late)
    srcs = []
    for i, size in enumerate([3, 5, 1 << 20]):
        srcs.append(tmp_path / f"p{i}")
        srcs[-1].write_bytes(bytes([65 + i]) * size)
    (tmp_path / "out").write_text("old\n")
    with open(tmp_path / "out", "a", encoding="utf-8") as out:
        out.write("head\n")
        parallel._copy([str(s) for s in srcs], out)
        out.write("tail\n")
    assert (tmp_path / "out").read_bytes() == b"old\nhead\nAAABBBBB" + b"C" * (1 << 20) + b"tail\n"


def _parts(tmp_path, sizes):
    srcs = []
    for i, size in enumerate(sizes):
        srcs.append(tmp_path / f"p{i}")
        srcs[-1].write_bytes(bytes(65 + (i + j) % 26 for j in range(size)))
    return [str(s) for s in srcs], b"".join(s.read_bytes() for s in [Path(x) for x in srcs])


def _no_write_copy(src, offset, fd):
    raise AssertionError("copied by write, not through the mapping")


def test_parts_mapped_side_by_side_land_in_order_after_what_was_written(tmp_path, monkeypatch):
    """With spare cores the parts are copied through a shared mapping of the output, in slices
    (here 1000 bytes: slices start inside pages and parts end inside slices), by threads: the
    bytes are the parts' in order, after what was written before and before what comes after."""
    monkeypatch.setattr(parallel, "SLICE", 1000)
    monkeypatch.setattr(parallel, "_copy_at", _no_write_copy)
    srcs, body = _parts(tmp_path, [0, 5, 3 * 4096 + 7, 1, 20_000])
    with open(tmp_path / "out", "w+", encoding="utf-8") as out:  # -o's file is open for reading too
        out.write("head\n")
        parallel._copy(srcs, out, spare=4)
        out.write("tail\n")
    assert (tmp_path / "out").read_bytes() == b"head\n" + body + b"tail\n"


@pytest.mark.parametrize("why", ["write-only", "no shared mapping", "busy cores"])
def test_parts_that_cannot_or_need_not_be_mapped_are_copied_by_write(why, tmp_path, monkeypatch):
    """A file open for writing only (`> job.dict`), a filesystem that refuses a shared mapping
    (ENODEV: its slices already mapped are written again), and cores all parsing (spare 1): the
    copy by write, the same bytes."""
    copied = []
    copy_at = parallel._copy_at

    def counted(src, offset, fd):
        copied.append(src)
        copy_at(src, offset, fd)

    monkeypatch.setattr(parallel, "_copy_at", counted)
    monkeypatch.setattr(parallel, "SLICE", 4096)
    if why == "no shared mapping":
        place = parallel._place

        def refused(piece, fd):
            if piece[0].endswith("p2") and piece[1]:
                raise OSError(19, "No such device")
            place(piece, fd)

        monkeypatch.setattr(parallel, "_place", refused)
    srcs, body = _parts(tmp_path, [10, 3 * 4096 + 7, 5 * 4096])
    with open(tmp_path / "out", "w" if why == "write-only" else "w+", encoding="utf-8") as out:
        out.write("head\n")
        parallel._copy(srcs, out, spare=1 if why == "busy cores" else 4)
        out.write("tail\n")
    assert (tmp_path / "out").read_bytes() == b"head\n" + body + b"tail\n"
    assert sorted(copied) == srcs


def test_a_full_disk_while_placing_parts_is_the_outputs_error(tmp_path, monkeypatch):
    """The space for the mapped parts is reserved first: a full disk is the output's one line
    (status 10), not a SIGBUS on a mapped page, and no output file is left."""
    def full(fd, offset, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parallel.os, "posix_fallocate", full, raising=False)
    monkeypatch.setattr(parallel, "default_jobs", lambda: 8)
    exports = [rank_export(str(tmp_path / f"trace_{r}.sqlite"), r, 2) for r in range(2)]
    out = tmp_path / "o.dict"
    groups = parallel.plan(exports, 2, False, True)
    with pytest.raises(PyprofError) as err:
        parallel.run(groups, str(out), 2)
    assert (str(err.value), err.value.status) == (f"{out}: cannot write (No space left on device)", 10)
    assert sorted(os.listdir(tmp_path)) == ["trace_0.sqlite", "trace_1.sqlite"]


@pytest.mark.slow
@pytest.mark.parametrize("stdout", ["appended", "pipe"])
@pytest.mark.parametrize("what", ["ranks", "windows"])
def test_stdout_appended_or_piped_gets_the_bytes_of_o(stdout, what, job, steps, tmp_path):
    """Ranks (several exports) and windows (one export cut for 3 workers) written to stdout
    opened with `>>` or to a pipe: the same bytes as -o writes."""
    code = ("import sys; from pyprof.errors import run_cli; from pyprof.parse import parallel; "
            "from pyprof.parse.__main__ import main; parallel.MIN_WINDOW = 2000; run_cli('pyprof.parse', main)")
    inputs = [job] if what == "ranks" else [steps]
    argv = [sys.executable, "-c", code, *map(str, inputs), "-j", "3", "-q"]
    assert subprocess.run([*argv, "-o", tmp_path / "o.dict"], timeout=600).returncode == 0
    expected = (tmp_path / "o.dict").read_bytes()
    if stdout == "appended":
        (tmp_path / "out.dict").write_bytes(b"before\n")
        with open(tmp_path / "out.dict", "ab") as out:
            res = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=600)
        got = (tmp_path / "out.dict").read_bytes()
        assert got[:7] == b"before\n"
        got = got[7:]
    else:
        res = subprocess.run(argv, capture_output=True, timeout=600)
        got = res.stdout
    assert (res.returncode, res.stderr) == (0, b"")
    assert got == expected and expected.count(b"\n") == {"ranks": 102, "windows": 12000}[what]


# ---------------------------------------------------------------------------------------------
# Signals to a parse with workers

@pytest.fixture(scope="module")
def two_big(tmp_path_factory):
    """Two exports large enough that a parse of both with two workers runs for seconds."""
    folder = tmp_path_factory.mktemp("big")
    workload(str(folder / "big_0.sqlite"), 60000)
    shutil.copy(folder / "big_0.sqlite", folder / "big_1.sqlite")
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("output", ["-o", "stdout"])
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "Ctrl-C"])
def test_a_parse_with_workers_stopped_by_a_signal(how, output, two_big, tmp_path):
    """Killed (SIGKILL), terminated (SIGTERM) or interrupted (Ctrl-C: SIGINT to the process
    group): no worker parses on, the reader of stdout sees its end, no part or .partial file
    stays; SIGTERM and Ctrl-C say so in one line, status 130, and stdout ends in the line that
    says its records are incomplete."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "out" / "job.dict"
    out.parent.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)}
    argv = [str(two_big / "big_0.sqlite"), str(two_big / "big_1.sqlite"), "-j", "2", "-q"]
    res = signal_parse(argv + (["-o", str(out)] if output == "-o" else []),
                       {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "Ctrl-C": signal.SIGINT}[how],
                       1.0, str(ROOT), env, group=how == "Ctrl-C")
    assert res.running == []
    assert os.listdir(scratch) == [] and os.listdir(out.parent) == []
    if how == "SIGKILL":
        assert res.status == -signal.SIGKILL
        return
    word = {"SIGTERM": "terminated", "Ctrl-C": "interrupted"}[how]
    assert (res.status, res.err) == (130, f"pyprof.parse: {word}\n")
    lines = res.out.decode().splitlines()
    if lines:
        assert lines[-1] == f"pyprof.parse: {word} - the {len(lines) - 1} records above are incomplete"
        assert all(json.loads(x)["kind"] == "kernel" for x in lines[:-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_killed_on_its_own_is_one_line(two_big, tmp_path):
    """The OOM killer picks a worker, not the parent: one line, status 130, no file left."""
    out = tmp_path / "job.dict"
    proc = subprocess.Popen([sys.executable, "-m", "pyprof.parse", two_big / "big_0.sqlite", two_big / "big_1.sqlite",
                             "-j", "2", "-q", "-o", out], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    children = f"/proc/{proc.pid}/task/{proc.pid}/children"
    workers: list[int] = []
    until = time.time() + 120
    while len(workers) < 2 and time.time() < until:
        time.sleep(0.02)
        with open(children) as f:
            workers = [int(p) for p in f.read().split()]
    time.sleep(0.5)
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err == "pyprof.parse: error: a worker process was killed (out of memory?); fewer workers (-j) need less memory\n"
    assert os.listdir(tmp_path) == []


def test_sigterm_as_the_scratch_folder_is_made_leaves_no_folder(tmp_path, monkeypatch):
    """SIGTERM the instant the run's scratch folder is made (the signal fuzz's delay 0, a parse with
    workers: '.pyprof-parse-...' was left in TMPDIR when it came between mkdtemp's mkdir and its
    return): the run ends as terminated and the folder is gone. The folder is named before it is
    made, inside the try whose finally removes it."""
    from pyprof.errors import Terminated, _terminate

    make = parallel._make_scratch

    def make_then_sigterm(path, output):
        make(path, output)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(parallel, "_make_scratch", make_then_sigterm)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with pytest.raises(Terminated):
            parallel.run([], str(tmp_path / "out.dict"), 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert os.listdir(tmp_path) == []
