"""Every real export shipped in the repository, parsed in tiny time windows (parallel.py,
window.py), gives byte for byte what one process writes (`-j 1`): eager, compiled, CUDA-graph,
default-mode and two-GPU captures, cut inside steps at every few launches."""
import lzma
from pathlib import Path

import pytest

from pyprof.parse import parallel, parse, zones
from pyprof.parse.export import Export
from pyprof.parse.window import Window

pytestmark = pytest.mark.slow  # every shipped capture parsed in many windows: seconds each

ROOT = Path(__file__).resolve().parents[2]
EXPORTS = sorted([*ROOT.glob("examples/*.sqlite"), *ROOT.glob("examples/*.sqlite.xz"),
                  *ROOT.glob("tests/data/**/*.sqlite"), *ROOT.glob("tests/data/**/*.sqlite.xz")])


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of a few rows (zones.py), so that windows of these small exports read only their
    rowid spans of each table, as windows of a large one do."""
    monkeypatch.setattr(zones, "BLOCK", 4)


def sqlite(path: Path, tmp_path: Path) -> str:
    if path.suffix != ".xz":
        return str(path)
    out = tmp_path / path.stem
    out.write_bytes(lzma.decompress(path.read_bytes()))
    return str(out)


def launch_keys(path: str) -> list[int]:
    """The sort keys of the kernels (window.py: the launch call's start, else the kernel's)."""
    with Export(path) as exp:
        rows = exp.rows("SELECT coalesce(r.start, x.start) FROM CUPTI_ACTIVITY_KIND_KERNEL x "
                        "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = x.correlationId "
                        "AND (r.globalTid >> 24) = (x.globalPid >> 24)")
        return sorted({k for (k,) in rows})


def windowed(path: str, edges: list[int], out: Path, memcpy: bool) -> tuple[bytes, parallel.Result]:
    parts = [parallel.Part(i, path, 0, "", memcpy, False, None, Window(a, b))
             for i, (a, b) in enumerate(zip([None, *edges], [*edges, None]))]
    result = parallel.run([parts], str(out), 2)
    return out.read_bytes(), result


def test_every_real_export_is_here():
    names = {p.name for p in EXPORTS}
    assert len(EXPORTS) >= 25 and {"gpt_compiled.sqlite", "gpt_graphs.sqlite", "gpt_callables.sqlite.xz",
                                    "gpt_default.sqlite.xz", "ddp_0.sqlite.xz", "fsdp_1.sqlite.xz"} <= names


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.name)
def test_windows_cut_every_few_launches_give_the_same_bytes(export, tmp_path):
    path = sqlite(export, tmp_path)
    memcpy = "ddp" in export.name or "fixture" in export.name  # memcpy records cut too
    parse(path, str(tmp_path / "one.dict"), memcpy=memcpy, quiet=True)
    expect = (tmp_path / "one.dict").read_bytes()
    keys = launch_keys(path)
    every = 5 if len(keys) >= 50 else 1  # a CUDA graph's kernels share their launch's key
    edges = keys[every::every]
    got, result = windowed(path, edges, tmp_path / "w.dict", memcpy)
    assert got == expect
    assert result.windows == len(edges) + 1 >= min(10, len(keys))


@pytest.mark.parametrize("name, reparsed", [("gpt.sqlite", 86), ("gpt_compiled.sqlite", 118)])
def test_a_window_per_launch_gives_the_same_bytes(name, reparsed, tmp_path):
    """One kernel per window: backward kernels whose node range ended in the window before
    (the engine wrapper's node seq), forward ops whose range opened before the window, and
    compiled-graph runs spread over many windows; a window that starts after an expand's range
    and before its thread's next launch (parse/consumers.py) is parsed again, seeded (gpt: one)."""
    path = str(ROOT / "examples" / name)
    parse(path, str(tmp_path / "one.dict"), quiet=True)
    keys = launch_keys(path)
    got, result = windowed(path, keys[1:], tmp_path / "w.dict", False)
    assert got == (tmp_path / "one.dict").read_bytes()
    assert (result.windows, result.reparsed) == (len(keys), reparsed)
