"""The report as one self-contained HTML page: plotly.js embedded once, the data as one JSON
block, a small script that builds the tables and hands the figures to plotly. It opens offline
in any browser.

Safety: nothing from a trace becomes markup. The page's script puts every string into the DOM as
text (textContent), plotly gets strings escaped by figures.esc, and the JSON block escapes `<`,
`>` and `&` (`</script>` in a kernel name cannot close the block)."""
from __future__ import annotations

import json
from typing import Any

from ... import __version__
from ...errors import EXIT_TOOL, PyprofError
from ..units import duration, group_label, pct, rate, si
from ..views.summary import advice_lines, header_lines
from ..io.output import finite
from . import figures

NEEDS = "--html needs plotly: pip install plotly (or pip install 'pyprof-nvtx[report]')"
SHOWN_ROWS = 300  # table rows in the DOM at a time; the filter reaches the others


def require_plotly() -> None:
    """Raise PyprofError with the install hint when plotly cannot be imported."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise PyprofError(NEEDS, EXIT_TOOL) from None


def script_json(value: Any) -> str:
    """`value` as JSON that can sit inside a <script> element: `<`, `>`, `&` and every non-ASCII
    character escaped (JSON.parse reads them back unchanged)."""
    text = json.dumps(finite(value), ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# Group tables: (header, row key, formatter, numeric).
_GROUP_COLUMNS = [("Time", "time_ns", duration), ("%Time", "pct_time", pct), ("Count", "count", str),
                  ("Avg", "avg_ns", duration), ("Med", "med_ns", duration), ("Max", "max_ns", duration),
                  ("FLOPs", "flops", si), ("TFLOP/s", "tflops", lambda v: rate(v, 3)), ("%Peak", "pct_peak", pct),
                  ("Bytes", "bytes", lambda v: si(v, "B")), ("GB/s", "gbps", lambda v: rate(v, 1)),
                  ("%TC", "tc_pct", lambda v: pct(v, 0))]
_DIFF_COLUMNS = [("Base", "base_ns", lambda v: "-" if v is None else duration(v)),
                 ("New", "new_ns", lambda v: "-" if v is None else duration(v)),
                 ("Delta", "delta_ns", lambda v: ("+" if v > 0 else "") + duration(v)),
                 ("Ratio", "ratio", lambda v: "na" if v is None else f"{v:.2f}x"),
                 ("Base count", "base_count", str), ("New count", "new_count", str)]


def _table(name: str, rows: list[dict], keys: list[str], columns: list) -> dict:
    """A table for the page's script: text cells and the numbers to sort by."""
    return {"name": name, "columns": [name] + [c[0] for c in columns],
            "rows": [[group_label(r, keys)] + [fmt(r[key]) for _, key, fmt in columns] for r in rows],
            "keys": [[None] + [r[key] for _, key, _ in columns] for r in rows]}


def _module_table(rows: list[dict]) -> dict:
    return {"name": "module tree", "columns": ["Module", "Self", "Total", "%Total", "Self kernels", "Kernels"],
            "rows": [[r["module"], duration(r["self_ns"]), duration(r["total_ns"]), pct(r["pct_total"]),
                      str(r["self_count"]), str(r["count"])] for r in rows],
            "keys": [[None, r["self_ns"], r["total_ns"], r["pct_total"], r["self_count"], r["count"]] for r in rows]}


def answers_text(rep: dict) -> list[dict]:
    """The three answers at the top of the page: {"question", "answer", "more": [lines]}."""
    a = rep["answers"]
    gpu_time = rep["summary"]["header"]["gpu_time_ns"]
    m = a["module"]
    module = {"question": "Which module costs most?",
              "answer": "no kernels" if m is None else
              f"{m['module']}: {duration(m['self_ns'])} of its own kernels "
              f"({pct(m['self_ns'] / gpu_time * 100 if gpu_time else None)}% of GPU time)",
              "more": [f"{r['module']}: total {duration(r['total_ns'])} ({pct(r['pct_total'])}%)"
                       for r in rep["modules"] if r["depth"] <= 1][:4]}  # the root model and its children
    below = {"question": "Which kernels are furthest below their roof?",
             "answer": "none can be placed (no known FLOPs and bytes, or no peaks for this GPU)" if not a["below_roof"]
             else f"{a['below_roof'][0]['op']} ({a['below_roof'][0]['kernel']}): {pct(a['below_roof'][0]['pct_roof'])}% "
                  f"of its roof over {duration(a['below_roof'][0]['time_ns'])}",
             "more": [f"{p['op']} in {p['module']} ({p['kernel']}, {p['shapes']}): {pct(p['pct_roof'])}% of its roof, "
                      f"{duration(p['lost_ns'])} lost of {duration(p['time_ns'])}" for p in a["below_roof"]]}
    idle = a["idle"]
    largest = idle["largest"]
    gaps = {"question": "Where does the GPU idle?",
            "answer": f"busy {pct(idle['busy_pct'])}% of the span {duration(idle['span_ns'])}; {idle['gaps']} idle gaps, "
                      f"{duration(idle['gap_ns'])} in all",
            "more": [f"{duration(g['idle_ns'])} at {duration(g['at_ns'])} (GPU {g['device']}"
                     f"{'' if g['rank'] is None else ', rank ' + str(g['rank'])}): after {g['after']}, "
                     f"before {g['before']}" for g in largest]}
    return [module, below, gaps]


def page_data(rep: dict, title: str) -> dict:
    """What the page's script reads: texts, tables, figures."""
    s = rep["summary"]
    tables = [_table(name, rows, ["group"], _GROUP_COLUMNS) for name, rows in rep["tables"].items()
              if rows and not (name in ("rank", "collective", "stream") and len(rows) < 2)]
    tables.append(_module_table(rep["modules"]))
    figs = {"modules": figures.modules(rep["modules"], s["header"]["gpu_time_ns"]),
            "roofline": figures.roofline(rep["roofline"]),
            "timeline": figures.timeline(rep["timeline"], rep["gaps"])}
    if rep["overlap"]:
        figs["overlap"] = figures.overlap(rep["overlap"])
    diff_tables = []
    if rep["diff"]:
        figs["diff"] = figures.diff(rep["diff"]["op"])
        diff_tables = [_table(by, d["rows"], d["by"].split(","), _DIFF_COLUMNS) for by, d in rep["diff"].items()]
        total = rep["diff"]["op"]["total"]
        diff_tables[0]["total"] = f"total GPU time {duration(total['base_ns'])} -> {duration(total['new_ns'])} " \
                                  f"({'na' if total['ratio'] is None else format(total['ratio'], '.2f')}x)"
    return {"title": title, "version": __version__, "answers": answers_text(rep),
            "header": header_lines(s), "advice": advice_lines(s), "tables": tables, "diff_tables": diff_tables,
            "figures": figs, "shown_rows": SHOWN_ROWS}


def render(rep: dict, title: str) -> str:
    """The whole page for report data `rep` (data.report), titled after the input `title`."""
    import plotly.offline

    return (_HEAD + "<script>" + plotly.offline.get_plotlyjs() + "</script>\n"
            + '<script type="application/json" id="pyprof-data">' + script_json(page_data(rep, title)) + "</script>\n"
            + "<script>" + _SCRIPT + "</script>\n</body></html>\n")


_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:; font-src data:">
<title>pyprof report</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 0 18px 40px; color: #222; }
h1 { font-size: 21px; margin: 16px 0 6px; } h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid #ddd; }
.answers { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 12px; }
.card { border: 1px solid #cfd8e3; border-radius: 6px; padding: 10px 12px; background: #f6f9fc; }
.card h3 { margin: 0 0 4px; font-size: 14px; color: #345; } .card .answer { font-size: 15px; font-weight: 600; word-break: break-word; }
.card ul { margin: 6px 0 0; padding-left: 18px; font-size: 12.5px; color: #444; word-break: break-word; }
pre { background: #f7f7f7; padding: 8px 10px; overflow-x: auto; font-size: 12.5px; white-space: pre-wrap; }
.controls { margin: 6px 0; display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
table { border-collapse: collapse; font-size: 12.5px; width: 100%; }
th, td { padding: 3px 7px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; white-space: normal; word-break: break-all; max-width: 560px; }
th { background: #eef2f6; cursor: pointer; position: sticky; top: 0; user-select: none; }
tr:hover td { background: #fafbe6; } .note { color: #666; font-size: 12px; }
.tablebox { max-height: 520px; overflow: auto; border: 1px solid #e4e4e4; }
</style></head><body>
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("pyprof-data").textContent);
  var body = document.body;
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function section(title, id) {
    var s = el("section"); s.id = id; s.appendChild(el("h2", title)); body.appendChild(s); return s;
  }
  document.title = "pyprof report: " + D.title;
  body.appendChild(el("h1", "pyprof report: " + D.title));
  body.appendChild(el("div", "pyprof " + D.version + ". Hover for details; tables sort by a click on a heading.", "note"));

  var top = section("At a glance", "answers");
  var grid = el("div", null, "answers"); top.appendChild(grid);
  D.answers.forEach(function (a) {
    var c = el("div", null, "card");
    c.appendChild(el("h3", a.question)); c.appendChild(el("div", a.answer, "answer"));
    var ul = el("ul"); a.more.forEach(function (m) { ul.appendChild(el("li", m)); }); c.appendChild(ul);
    grid.appendChild(c);
  });

  var cap = section("Capture and advice", "header");
  cap.appendChild(el("pre", D.header.join("\n")));
  cap.appendChild(el("pre", D.advice.join("\n")));

  function tableWidget(parent, tables, label) {
    var controls = el("div", null, "controls");
    var select = el("select"); select.setAttribute("aria-label", label);
    tables.forEach(function (t, i) { var o = el("option", "by " + t.name); o.value = i; select.appendChild(o); });
    var filter = el("input"); filter.type = "search"; filter.placeholder = "filter by name";
    var count = el("span", "", "note"), total = el("div", "", "note");
    controls.appendChild(el("span", label)); controls.appendChild(select); controls.appendChild(filter);
    controls.appendChild(count);
    parent.appendChild(controls); parent.appendChild(total);
    var box = el("div", null, "tablebox"); parent.appendChild(box);
    var state = {t: 0, col: null, desc: true};
    function draw() {
      var t = tables[state.t], q = filter.value.toLowerCase();
      var idx = [];
      for (var i = 0; i < t.rows.length; i++) if (!q || t.rows[i][0].toLowerCase().indexOf(q) >= 0) idx.push(i);
      if (state.col !== null) {
        var c = state.col, sign = state.desc ? -1 : 1;
        idx.sort(function (a, b) {
          var x = t.keys[a][c], y = t.keys[b][c];
          if (c === 0 || x === undefined) { x = t.rows[a][c]; y = t.rows[b][c]; return sign * (x < y ? -1 : x > y ? 1 : 0); }
          if (x === null) return y === null ? 0 : 1;
          if (y === null) return -1;
          return sign * (x - y);
        });
      }
      var table = el("table"), head = el("tr");
      t.columns.forEach(function (name, c) {
        var th = el("th", name + (state.col === c ? (state.desc ? " \u25bc" : " \u25b2") : ""));
        th.addEventListener("click", function () {
          state.desc = state.col === c ? !state.desc : c !== 0; state.col = c; draw();
        });
        head.appendChild(th);
      });
      var thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
      var tbody = el("tbody");
      idx.slice(0, D.shown_rows).forEach(function (i) {
        var tr = el("tr");
        t.rows[i].forEach(function (cell) { tr.appendChild(el("td", cell)); });
        tbody.appendChild(tr);
      });
      table.appendChild(tbody);
      box.replaceChildren(table);
      count.textContent = idx.length + " of " + t.rows.length + " rows" +
        (idx.length > D.shown_rows ? " (first " + D.shown_rows + " shown: filter to see others)" : "");
      total.textContent = t.total || "";
    }
    select.addEventListener("change", function () { state = {t: +select.value, col: null, desc: true}; draw(); });
    filter.addEventListener("input", draw);
    draw();
  }
  tableWidget(section("Where the time goes", "tables"), D.tables, "group kernels");

  var FIGS = [["modules", "Module tree"], ["roofline", "Roofline"], ["timeline", "Timeline"],
              ["overlap", "Communication overlap"], ["diff", "Comparison with the base run"]];
  FIGS.forEach(function (f) {
    var fig = D.figures[f[0]];
    if (!fig) return;
    var s = section(f[1], f[0]);
    var div = el("div", null, "plot"); div.id = "plot-" + f[0]; s.appendChild(div);
    Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
    if (f[0] === "diff") tableWidget(s, D.diff_tables, "compare");
  });
  document.body.setAttribute("data-rendered", "1");
})();
"""
