"""--html: the report's data (exact values on the shipped GPT capture), its safety (nothing from a
trace runs or becomes markup), and the page in a real browser: headless Chromium, offline, no
JavaScript error or failed request, every section rendered, a screenshot saved (under
$PYPROF_SCREENSHOTS when set, else the test's folder)."""
from __future__ import annotations

import html
import json
import os
from pathlib import Path

import pytest

import pyprof
from browser import Browser, executable
from pyprof.prof.report.html import render, script_json
from test_views_common import ROOT, prof, trace_records, write_dict

pytest.importorskip("plotly")
GPT = os.path.join(ROOT, "examples/gpt.sqlite")
HOSTILE = "</script><script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">'&amp;"


def test_report_data_of_gpt():
    rep = pyprof.report(GPT)
    a = rep["answers"]
    assert (a["module"]["module"], a["module"]["self_ns"]) == ("blocks.1.qkv", 32962)
    worst = a["below_roof"][0]
    assert (worst["op"], worst["kernel"], worst["count"], worst["time_ns"]) == \
        ("AdamW.step", "multi_tensor_apply_kernel", 1, 64993)
    assert worst["pct_roof"] == pytest.approx(27.483, abs=0.001)
    assert [g["idle_ns"] for g in a["idle"]["largest"]] == [713897, 704649, 553351]
    assert a["idle"]["largest"][0]["idle_ns"] == rep["summary"]["header"]["largest_gap_ns"]  # intervals.py's
    assert a["idle"]["largest"][0]["after"] == "embedding (tok): embedding_backward_feature_kernel"
    assert rep["summary"] == pyprof.summary(GPT)  # header, advice and op rows (rolled up) are --summary's
    assert [r["group"] for r in rep["tables"]["direction"]] == ["bprop", "fprop", "optim"]
    assert sum(r["count"] for r in rep["tables"]["kernel"]) == 139
    assert rep["modules"] == pyprof.modules(GPT)["rows"]
    tl = rep["timeline"]
    assert (tl["kernels"], len(tl["blocks"]), tl["merged_below_ns"]) == (139, 139, 0)
    points = rep["roofline"]["points"]
    # One point per call signature; together they are --plot's kernels (with the bias gradients'
    # sums, layer_norm's dWeight/dBias kernels and flash attention's D = rowsum(dO * O) kernels,
    # which carry their own work).
    assert len(points) == 73 and sum(p["count"] for p in points) == len(pyprof.roofline(GPT)["points"]) == 75
    # One op-call point per call signature, holding every kernel of its calls: the totals of
    # --summary --by op,shape,module,dir,rank where FLOPs and bytes are known.
    rows = {(r["op"], r["shape"], r["module"], r["dir"]): r
            for r in pyprof.summary(GPT, by="op,shape,module,dir,rank")["rows"]}
    calls = rep["roofline"]["calls"]
    assert len(calls) == 45 and calls[0]["kernel"] is None and calls[0]["tc"] is None
    for p in calls:
        row = rows[(p["op"], p["shapes"], "-" if p["module"] == "(no module)" else p["module"], p["dir"])]
        assert (p["count"], p["time_ns"], p["flops"], p["bytes"]) == (row["count"], row["time_ns"], row["flops"],
                                                                      row["bytes"])
    assert rep["overlap"] is None and rep["diff"] is None


def test_timeline_merges_to_its_limit_and_keeps_the_longest_gaps():
    from pyprof.prof.report.data import Collector, report
    from pyprof.prof.io.reader import numbered
    from pyprof.prof.scan import feed
    from pyprof.prof.warnings_tally import Tally

    c = Collector()
    tally = Tally()
    feed(numbered(GPT, tally), tally, [c])
    rep = report(c, timeline_blocks=10)
    blocks = rep["timeline"]["blocks"]
    assert len(blocks) == 10 and sum(b[3] for b in blocks) == 139
    # The 9 gaps between the 10 blocks are the 9 longest idle gaps of the one stream.
    between = sorted((b[1] - a[2] for a, b in zip(blocks, blocks[1:])), reverse=True)
    assert between[:3] == [g["idle_ns"] for g in rep["gaps"][:3]]


def test_compare_two_runs(tmp_path):
    rep = pyprof.report(os.path.join(ROOT, "examples/gpt_compiled.sqlite"), compare=GPT)
    assert rep["diff"]["op"] == pyprof.diff(GPT, os.path.join(ROOT, "examples/gpt_compiled.sqlite"))
    assert [r["group"] for r in rep["diff"]["module"]["rows"][:1]] == \
        [pyprof.diff(GPT, os.path.join(ROOT, "examples/gpt_compiled.sqlite"), by="module")["rows"][0]["group"]]


def test_json_in_script_cannot_close_it():
    text = script_json({"name": HOSTILE, "nan": float("nan")})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": HOSTILE, "nan": None}


def hostile_records() -> list[dict]:
    recs = trace_records("gpt")
    return [dict(r, op=HOSTILE if i % 2 else r["op"], module=f"{HOSTILE}.{r['module']}" if i % 3 == 0 else r["module"],
                 kShortName=HOSTILE if i % 5 == 0 else r["kShortName"]) for i, r in enumerate(recs)]


def test_page_holds_no_markup_from_the_trace(tmp_path):
    rep = pyprof.report(write_dict(tmp_path, "hostile", hostile_records()))
    page = render(rep, HOSTILE)
    assert page.count("<script") == 3 and page.count("</script>") == 3  # plotly.js, the data, ours
    block = page.split('<script type="application/json" id="pyprof-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block and ">" not in block
    data = json.loads(block)
    assert data["title"] == HOSTILE and data["tables"][0]["rows"][0][0] == HOSTILE
    # What plotly shows is escaped: it renders a subset of HTML in labels and hover text.
    texts = list(strings(data["figures"]))
    assert not [t for t in texts if "<script" in t or "<img" in t]
    assert any(html.escape(HOSTILE, quote=False) in t for t in texts)


def strings(value):
    """Every string in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def test_cli_errors(tmp_path):
    status, _, err = prof("--compare", GPT, GPT)
    assert status == 2 and err == "pyprof.prof: error: --compare applies to --html only (--diff BASE NEW compares " \
                                  "in text)\n"
    base = write_dict(tmp_path, "gpt")
    status, _, err = prof("--html", base, "--compare", base, GPT)
    assert status == 2 and err == f"pyprof.prof: error: {base}: --html names the input {base}; give another file name\n"
    status, _, err = prof("--html", str(tmp_path / "no" / "r.html"), GPT)
    assert status == 10 and err.endswith(f"{tmp_path / 'no' / 'r.html'}: cannot write (No such file or directory)\n")


# -- in the browser ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    path = executable()
    if path is None:
        pytest.skip("no chromium on PATH: apt-get install chromium (Debian/Ubuntu) to run the browser tests")
    b = Browser(path)
    yield b
    b.close()


def shot(page, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("PYPROF_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(str(folder / f"{name}.png"))
    assert (folder / f"{name}.png").stat().st_size > 10000


RENDERED = """(() => {
  const plots = {};
  document.querySelectorAll('.plot').forEach(d => {
    plots[d.id] = (d._fullData || []).map(t => (t.type === 'icicle' ? t.ids : (t.x || [])).filter(v => v !== null).length);
  });
  return {rendered: document.body.getAttribute('data-rendered'), pwned: window.pwned === undefined ? null : window.pwned,
          sections: [...document.querySelectorAll('section')].map(s => s.id),
          rows: document.querySelectorAll('#tables tbody tr').length,
          first: [...document.querySelectorAll('#tables tbody tr:first-child td')].map(td => td.textContent),
          answers: [...document.querySelectorAll('.card .answer')].map(e => e.textContent),
          svgPoints: document.querySelectorAll('#plot-roofline .point').length,
          plots};
})()"""


def open_report(browser, path: str):
    page = browser.page(Path(path).as_uri())
    for _ in range(100):
        if page.evaluate("document.body.getAttribute('data-rendered')") == "1":
            break
        import time
        time.sleep(0.1)
    return page


def test_gpt_report_in_the_browser(browser, tmp_path):
    html = tmp_path / "gpt.html"
    status, out, err = prof("--html", str(html), GPT)
    assert status == 0 and out == "" and err.startswith(f"pyprof.prof: report written to {html} (")
    page = open_report(browser, str(html))
    got = page.evaluate(RENDERED)
    shot(page, tmp_path, "gpt")
    assert page.errors() == []
    assert got["rendered"] == "1" and got["pwned"] is None
    assert got["sections"] == ["answers", "header", "tables", "modules", "roofline", "timeline"]
    assert got["rows"] == 11 and got["first"][:4] == ["linear", "262.5 us", "51.5", "79"]
    assert got["answers"][0] == "blocks.1.qkv: 33.0 us of its own kernels (6.5% of GPU time)"
    assert got["svgPoints"] == 73 + 45  # kernel points and op-call diamonds
    plots = got["plots"]
    assert plots["plot-modules"] == [22]                    # 21 modules and the root
    assert sum(plots["plot-roofline"][:2]) == 73             # kernel points, then op calls, then roof lines
    assert plots["plot-roofline"][2] == 45
    assert sum(plots["plot-timeline"][:-1]) // 2 == 139      # two ends per kernel; then the gaps
    # Sorting and filtering work in the page.
    page.evaluate("document.querySelectorAll('#tables th')[3].click()")  # Count, largest first
    assert page.evaluate("document.querySelector('#tables tbody td').textContent") == "linear"
    page.evaluate("(() => { const f = document.querySelector('#tables input'); f.value = 'norm';"
                  " f.dispatchEvent(new Event('input')); })()")
    assert page.evaluate("[...document.querySelectorAll('#tables tbody tr td:first-child')].map(t => t.textContent)") \
        == ["layer_norm"]


@pytest.mark.parametrize("case", ["hostile", "empty", "one kernel", "no markers", "two ranks and compare"])
def test_odd_inputs_render_safely(case, browser, tmp_path):
    recs = trace_records("gpt")
    extra = []
    if case == "hostile":
        recs = hostile_records()
    elif case == "empty":
        recs = []
    elif case == "one kernel":
        recs = recs[:1]
    elif case == "no markers":
        recs = [dict(r, marker=None, op=None, module=None, trace=None, fwd=None, torchOps=[]) for r in recs]
    else:
        recs = [dict(r, rank=0) for r in recs] + [dict(r, rank=1, kStart=r["kStart"] + 500, kEnd=r["kEnd"] + 500)
                                                   for r in recs]
        extra = ["--compare", GPT]
    html = tmp_path / "r.html"
    status, _, err = prof("--html", str(html), *extra, write_dict(tmp_path, "in", recs))
    assert status == 0, err
    page = open_report(browser, str(html))
    got = page.evaluate(RENDERED)
    shot(page, tmp_path, case.replace(" ", "_"))
    assert page.errors() == []
    assert got["rendered"] == "1" and got["pwned"] is None
    assert got["rows"] == (0 if case == "empty" else 1 if case in ("one kernel", "no markers") else
                           len({r["op"] for r in recs}))
    if case == "hostile":  # shown as text, literally
        assert page.evaluate(f"document.body.textContent.includes({json.dumps(HOSTILE)})") is True
    if case == "two ranks and compare":
        assert got["sections"] == ["answers", "header", "tables", "modules", "roofline", "timeline", "diff"]
        assert page.evaluate("document.getElementById('plot-timeline')._fullLayout.yaxis.ticktext") == \
            ["rank 0 GPU 0 stream 7", "rank 1 GPU 0 stream 7", "rank 0 GPU 0 idle", "rank 1 GPU 0 idle"]
        assert page.evaluate("document.querySelectorAll('#diff tbody tr').length") == 11


def test_report_page_from_python_without_torch(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "gpt.html"
    code = (f"import sys, pyprof; rep = pyprof.report({GPT!r}, html={str(out)!r}); "
            "print(rep['answers']['module']['module'], 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and res.stdout == "blocks.1.qkv False\n", res.stderr
    assert out.read_text().startswith("<!DOCTYPE html>") and out.stat().st_size < 6_000_000  # plotly.js is 4.8 MB


def test_large_timeline_in_webgl(browser, tmp_path):
    """6,950 kernels: the timeline and roofline switch to WebGL, which headless Chromium has."""
    recs = trace_records("gpt")
    span = recs[-1]["kEnd"] - recs[0]["kStart"]
    many = [dict(r, kStart=r["kStart"] + i * span, kEnd=r["kEnd"] + i * span) for i in range(50) for r in recs]
    html = tmp_path / "large.html"
    status, _, err = prof("--html", str(html), write_dict(tmp_path, "large", many))
    assert status == 0, err
    page = open_report(browser, str(html))
    assert page.errors() == []
    assert page.evaluate("document.getElementById('plot-timeline')._fullData.map(t => t.type)")[0] == "scattergl"
    kernels = page.evaluate("document.getElementById('plot-timeline').data.filter(t => t.visible === true)"
                            ".reduce((n, t) => n + t.x.filter(v => v !== null).length, 0)")  # coloured by module
    assert kernels == 2 * 6950
    shot(page, tmp_path, "large")


def test_ddp_report_in_the_browser(browser, tmp_path):
    """The shipped two-rank DDP capture: per-rank tables, NCCL kernels, the overlap per rank and step."""
    import subprocess
    import sys
    import warnings

    from captures import unpacked

    for rank in (0, 1):
        unpacked(Path(ROOT) / "tests" / "data" / f"ddp_{rank}.sqlite.xz", tmp_path)
    records = tmp_path / "ddp.dict"
    subprocess.run([sys.executable, "-m", "pyprof.parse", str(tmp_path), "-o", str(records)], check=True,
                   capture_output=True, cwd=ROOT)
    with warnings.catch_warnings():
        # DDP's 28 bucket all-reduce kernels have no op marker, but their record_param_comms
        # ranges size them: collectives understood, nothing to warn about.
        warnings.simplefilter("error", pyprof.ProfWarning)
        rep = pyprof.report(records)
    assert [(s["rank"], s["step"]) for s in rep["overlap"]["steps"]] == \
        [(s["rank"], s["step"]) for s in pyprof.overlap(records)["steps"]]
    html = tmp_path / "ddp.html"
    status, _, err = prof("--html", str(html), str(records))
    assert status == 0, err
    page = open_report(browser, str(html))
    assert page.errors() == []
    assert page.evaluate("[...document.querySelectorAll('section')].map(s => s.id)") == \
        ["answers", "header", "tables", "modules", "roofline", "timeline", "overlap"]
    assert page.evaluate("[...document.querySelectorAll('#tables option')].map(o => o.textContent)") == \
        ["by op", "by kernel", "by module", "by op+shape", "by layer", "by direction", "by rank", "by collective",
         "by module tree"]
    bars = page.evaluate("document.getElementById('plot-overlap').data.map(t => t.x.length)")
    assert bars == [len(rep["overlap"]["steps"])] * 3
    nccl = page.evaluate("document.getElementById('plot-timeline').data.filter(t => t.name === 'NCCL' && t.visible)"
                         ".reduce((n, t) => n + t.x.filter(v => v !== null).length, 0)")
    assert nccl == 2 * 32  # both ends of each of the 32 NCCL kernels (pyprof.overlap's nccl_kernels)
    shot(page, tmp_path, "ddp")
