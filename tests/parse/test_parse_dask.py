"""`--dask`: the parts of a parse run as tasks of a Dask cluster (pyprof/parse/dask.py) and give
the bytes -j 1 writes: rank exports side by side, and one export cut into windows that are
parsed again seeded. Skipped where dask and distributed are not installed (an optional extra)."""
import pickle
import subprocess
import sys
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed", reason="--dask needs dask and distributed (pyprof-nvtx[dask])")

from nsys_synth import rank_export  # noqa: E402
from pyprof.parse import parallel  # noqa: E402
from pyprof.parse.export import Export  # noqa: E402
from pyprof.parse.window import Window  # noqa: E402
from test_parse_parallel import tricky, whole  # noqa: E402

pytestmark = pytest.mark.slow  # a LocalCluster's worker processes: seconds to start

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        yield c, client


def _parse(*args):
    return subprocess.run([sys.executable, "-m", "pyprof.parse", *map(str, args)], capture_output=True, cwd=ROOT,
                          timeout=600)


def test_windows_on_a_cluster_are_the_bytes_of_one_process(cluster, tmp_path):
    _, client = cluster
    path = tricky(tmp_path / "t.sqlite")
    with Export(str(path)) as exp:
        keys = sorted(r[0] for r in exp.rows("SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    edges = sorted(set(keys[7::7]))
    parts = [parallel.Part(i, str(path), 0, "", True, False, None, Window(a, b))
             for i, (a, b) in enumerate(zip([None, *edges], [*edges, None]))]
    out = tmp_path / "w.dict"
    result = parallel.run([parts], str(out), 2, executor=client.get_executor(pure=False))
    assert out.read_text() == "".join(whole(path, memcpy=True))
    assert result.windows == len(edges) + 1 > 10 and result.reparsed > 0  # seeded runs went to the cluster too


def test_ranks_through_the_command_line_are_the_bytes_of_j1(cluster, tmp_path):
    c, _ = cluster
    exports = [rank_export(str(tmp_path / f"trace_{r}.sqlite"), r, 3) for r in range(3)]
    one = _parse("-j", "1", *exports, "-o", tmp_path / "j1.dict")
    assert one.returncode == 0, one.stderr
    on_cluster = _parse("--dask", c.scheduler_address, *exports, "-o", tmp_path / "dask.dict")
    assert on_cluster.returncode == 0, on_cluster.stderr
    assert (tmp_path / "dask.dict").read_bytes() == (tmp_path / "j1.dict").read_bytes()
    assert on_cluster.stderr == one.stderr
    # No address: the first export after --dask is an input, and a LocalCluster of -j processes runs it.
    local = _parse("--dask", *exports, "-j", "2")
    assert local.returncode == 0, local.stderr
    assert local.stdout == (tmp_path / "j1.dict").read_bytes()


def test_workers_write_the_parts_and_send_back_only_counts(cluster, tmp_path):
    """Each worker writes its part beside the output and returns counts, never records (the
    pickled results are a few hundred bytes each, the parts megabytes); the output is -j 1's
    bytes."""
    _, client = cluster
    exports = [rank_export(str(tmp_path / f"trace_{r}.sqlite"), r, 3, steps=20) for r in range(3)]
    assert _parse("-j", "1", *exports, "-o", tmp_path / "j1.dict").returncode == 0
    returned = []

    class Measured(Executor):
        def submit(self, fn, /, *args, **kwargs):
            fut = client.get_executor(pure=False).submit(fn, *args, **kwargs)
            fut.add_done_callback(lambda f: returned.append(len(pickle.dumps(f.result()))))
            return fut

    out = tmp_path / "dask.dict"
    parallel.run(parallel.plan(exports, 2, False, True), str(out), 2, executor=Measured())
    assert out.read_bytes() == (tmp_path / "j1.dict").read_bytes()
    assert len(returned) == 3 and max(returned) < 2_000 and out.stat().st_size > 3 * 100_000


def test_parts_are_handed_out_as_worker_threads_free_up():
    """--dask keeps as many parts on the cluster as it has worker threads, the next one, in the
    order submitted, as soon as one ends (a pool of 8 threads stands for a cluster that would
    take all 8 at once)."""
    from pyprof.parse.dask import Settled

    lock, running, most, handed = threading.Lock(), [0], [0], []

    def part(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02 * (i % 3))
        with lock:
            running[0] -= 1
        return i

    class Recorded(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            handed.append(args[0])
            return super().submit(fn, *args, **kwargs)

    ex = Settled(Recorded(8), "tcp://node0:8786", 3)
    futures = [ex.submit(part, i) for i in range(12)]
    assert [f.result(timeout=30) for f in futures] == list(range(12))
    assert (most[0], handed) == (3, list(range(12)))
    ex.shutdown()


def test_a_cluster_that_cannot_be_reached_is_one_line_and_status_8(tmp_path):
    exports = [rank_export(str(tmp_path / "trace_0.sqlite"), 0, 1)]
    p = _parse("--dask", "tcp://127.0.0.1:9", *exports)
    assert p.returncode == 8
    err = p.stderr.decode()
    assert err.startswith("pyprof.parse: error: --dask tcp://127.0.0.1:9: cannot reach the cluster (")
    assert err.count("\n") == 1 and p.stdout == b""


def _die() -> None:
    import os
    os._exit(1)


def test_a_worker_that_dies_running_a_part_is_one_line_and_status_130():
    """A part whose worker dies (out of memory, most often) fails its future with one line, as a
    local worker killed does (parallel.run), not with distributed's KilledWorker traceback."""
    import dask

    from pyprof.errors import EXIT_INTERRUPTED, PyprofError
    from pyprof.parse.dask import cluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), cluster("", 1) as (ex, threads):
        assert threads == 1
        assert ex.submit(sum, [1, 2]).result() == 3
        with pytest.raises(PyprofError) as lost:
            ex.submit(_die).result(timeout=120)
    assert lost.value.status == EXIT_INTERRUPTED
    assert str(lost.value).startswith("--dask (a LocalCluster): the cluster lost a part (KilledWorker: ")
    assert str(lost.value).endswith("; a worker that died running it was most often out of memory: give workers more")
    assert "\n" not in str(lost.value)
