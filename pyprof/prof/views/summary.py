"""`--summary`: where the GPU time goes. One pass over the records builds the capture header
(span, busy %, idle gaps, Tensor Core shares), one row per group and the advice; then one of
three renderers writes it (text, CSV, JSON). Keys of the JSON are documented in docs/prof.md.
"""
from __future__ import annotations

import argparse
import csv
import sys
from types import ModuleType
from typing import Iterable, TextIO

from ...errors import EXIT_USAGE, PyprofError
from ...text import count
from ..pricing.analysis import LEVELS, Facts
from ..groups import KEYS, SORTS, Group, Groups, by_keys
from ..intervals import Timelines
from ..io.output import write_json as write_json_object
from ..io.output import TextColumn, check_width, columnated_writer, csv_cell, flat, terminal_width, text_width, wrapped
from ..scan import feed, time_field
from ..units import duration, group_column, group_label, pct, rate, si
from ..warnings_tally import Tally
from .advice import Evidence, advise, notes

FLAG = "--summary"
ORDER = 1
JSON = True


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--summary and the grouping options it shares with --diff (--by, --top, --sort)."""
    group.add_argument("--summary", action="store_true",
                       help="capture header (span, GPU busy %%, idle gaps, Tensor Core shares), one row per "
                            "group, and advice")
    group.add_argument("--by", type=_by, metavar="KEYS",
                       help=f"group kernels by one of {', '.join(KEYS)}, or several joined by commas (op,shape: "
                            "one group per op and input shapes); call: one row per op call (its kernels; backward "
                            "kernels are their forward call's backward call), with its dir, op, module and shapes: "
                            "the call's rate, where a kernel's own share is na; --summary, --diff; default op")
    group.add_argument("--top", type=int, metavar="N", help="only the first N groups (--summary, --diff) or instances (--stragglers)")
    group.add_argument("--sort", choices=list(SORTS), help="row order (--summary; default time)")


def _by(spec: str) -> str:
    """A --by value, checked (argparse turns the error into a usage error)."""
    try:
        return ",".join(by_keys(spec))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def wanted(args: argparse.Namespace) -> bool:
    """--summary given."""
    return args.summary


# The grouping options and the views they apply to: given to another, they are an error, not
# silently ignored (the per-kernel table has no groups).
_GROUPING = {"--by": ("--summary", "--diff"), "--top": ("--summary", "--diff", "--stragglers"),
             "--sort": ("--summary",)}


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """--by/--top/--sort only with a view that groups; --top counts groups; -w holds the table.
    Fills in the defaults (--by op, --sort time)."""
    flags = {getattr(v, "FLAG", None) for v in chosen}
    for opt, views in _GROUPING.items():
        if getattr(args, opt[2:]) is not None and not flags & set(views):
            named = views[0] if len(views) == 1 else ", ".join(views[:-1]) + " and " + views[-1]
            raise PyprofError(f"{opt} applies to {named} only (the per-kernel table has no groups)",
                              EXIT_USAGE)
    if args.top is not None and args.top < 1:
        raise PyprofError("--top needs a positive number", EXIT_USAGE)
    args.by = args.by or "op"
    args.sort = args.sort or "time"
    if wanted(args) and args.width is not None:
        check_width(text_columns("op"), args.width)


class Profile:
    """Everything the summary shows, accumulated record by record (O(groups) memory): a scan.Sink."""

    needs_facts = True

    def __init__(self, by: str = "op") -> None:
        self.groups = Groups(by)
        self.timelines = Timelines()
        self.evidence = Evidence()
        self.kernels = 0
        self.gpu_time = 0
        self.tc_time = 0        # tc 1
        self.simt_time = 0      # tc 0: matrix kernels that could have used Tensor Cores
        self.copies = 0
        self.copy_time = 0
        self.gpus: dict = {}    # device -> GPU name
        self.priced: dict = {}  # level that priced the kernel (Facts.level; None: neither) -> ns

    def add(self, rec: dict, f: Facts) -> str | tuple | None:
        """Count one analysed record (raises TypeError on a record with non-integer times);
        returns its group's key (None for a memcpy/memset record)."""
        start, end, dur = time_field(rec, "kStart"), time_field(rec, "kEnd"), time_field(rec, "kDuration")
        if rec.get("kind", "kernel") != "kernel":
            self.copies += 1
            self.copy_time += dur
            self.evidence.copy(rec, dur)
            return None
        self.kernels += 1
        self.gpu_time += dur
        if f.tc:
            self.tc_time += dur
        elif f.tc is False:
            self.simt_time += dur
        device = rec.get("device")
        self.timelines.add(device, start, end)
        gpu = rec.get("gpu")
        if device not in self.gpus and isinstance(gpu, dict) and gpu.get("name"):
            self.gpus[device] = gpu["name"]
        self.priced[f.level] = self.priced.get(f.level, 0) + dur
        key = self.groups.add(rec, f, dur)
        self.evidence.kernel(rec, f, dur)
        return key

    def header(self) -> dict:
        """The capture header (docs/prof.md lists the keys); finalises the timelines."""
        tls = self.timelines.finish()
        span = tls.span
        devices = []
        for dev, tl in sorted(tls.devices.items(), key=lambda kv: str(kv[0])):
            devices.append({"device": dev, "gpu": self.gpus.get(dev), "busy_ns": tl.busy,
                            "busy_pct": tl.busy / span * 100 if span else None,
                            "gaps": tl.gaps, "gap_ns": tl.gap_total, "largest_gap_ns": tl.gap_max,
                            "late_kernels": tl.late})
        busy = sum(d["busy_ns"] for d in devices)
        eligible = self.tc_time + self.simt_time
        return {
            "span_ns": span, "first_start_ns": tls.first, "last_end_ns": tls.last,
            "kernels": self.kernels, "gpu_time_ns": self.gpu_time,
            # Over all devices: busy time / (span x devices).
            "busy_pct": busy / (span * len(devices)) * 100 if span and devices else None,
            "gaps": sum(d["gaps"] for d in devices), "gap_ns": sum(d["gap_ns"] for d in devices),
            "largest_gap_ns": max((d["largest_gap_ns"] for d in devices), default=0),
            "tc_pct": self.tc_time / self.gpu_time * 100 if self.gpu_time else None,
            "tc_missed_pct": self.simt_time / eligible * 100 if eligible else None,
            "tc_eligible_ns": eligible,
            "copies": self.copies, "copy_ns": self.copy_time,
            "priced_ns": {level: self.priced.get(level, 0) for level in LEVELS},
            "unpriced_ns": self.priced.get(None, 0),
            "devices": devices,
        }


def collect(numbered: Iterable[tuple[int, dict]], tally: Tally, by: str = "op", strict: bool = False) -> Profile:
    """One pass over `numbered` ((line number, record) pairs) into a Profile."""
    prof = Profile(by)
    feed(numbered, tally, [prof], strict)
    return prof


def row_values(g: Group, gpu_time: int, keys: list[str]) -> dict:
    """One group as the JSON/CSV row (raw numbers; None where unknown): its name, the value of
    each --by key under the key's name, then the numbers."""
    return {"group": g.name, **dict(zip(keys, g.keys)), "time_ns": g.time,
            "pct_time": g.time / gpu_time * 100 if gpu_time else None, "count": g.count, **g.stats(),
            "flops": g.known_flops(), "flops_na": g.flops_na, "tflops": g.tflops,
            "pct_peak": g.pct_peak, "bytes": g.known_bytes(), "bytes_na": g.bytes_na, "gbps": g.gbps,
            "tc_pct": g.tc_share}


def report(prof: Profile, sort: str = "time", top: int | None = None) -> dict:
    """The whole summary as one JSON-able object: header, rows, advice, notes."""
    header = prof.header()
    groups = prof.groups.sorted(sort)
    shown = groups if not top else groups[:top]
    rest = groups[len(shown):]
    advice = advise(prof.evidence, prof.kernels, prof.gpu_time, header["busy_pct"])
    return {"by": prof.groups.by, "sort": sort, "header": header,
            "rows": [row_values(g, prof.gpu_time, prof.groups.keys) for g in shown],
            "more": {"groups": len(rest), "time_ns": sum(g.time for g in rest)},
            "advice": [{"kind": a.kind, "text": a.text, "evidence": a.evidence} for a in advice],
            "notes": notes(prof.evidence)}


def write_json(rep: dict, out: TextIO) -> None:
    """The report as one JSON object."""
    write_json_object(rep, out)


CSV_KEYS = ["time_ns", "pct_time", "count", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "flops",
            "flops_na", "tflops", "pct_peak", "bytes", "bytes_na", "gbps", "tc_pct"]


def write_csv(rep: dict, out: TextIO) -> None:
    """The rows as CSV: one column per --by key (under its name), then CSV_KEYS; empty for unknown."""
    keys = rep["by"].split(",") + CSV_KEYS
    w = csv.writer(out, lineterminator="\n")
    w.writerow(keys)
    for r in rep["rows"]:
        w.writerow([csv_cell(r[k]) for k in keys])


def _share(part: int, whole: int) -> float | None:
    return part / whole * 100 if whole else None


def header_lines(rep: dict) -> list[str]:
    """The capture header as text lines."""
    h = rep["header"]
    devs = h["devices"]
    gpus = sorted({flat(str(d["gpu"])) if d["gpu"] else "unknown GPU" for d in devs})
    lines = [f"capture span   {duration(h['span_ns'])} (first kernel start to last kernel end), "
             f"{count(len(devs), 'device')} ({', '.join(gpus) or 'none'})"]
    busy = f"GPU busy       {pct(h['busy_pct'])}% ({duration(sum(d['busy_ns'] for d in devs))} with a kernel running"
    if len(devs) > 1:
        busy += "; " + ", ".join(f"device {d['device']} {pct(d['busy_pct'])}%" for d in devs)
    lines.append(busy + ")")
    lines.append(f"idle gaps      {h['gaps']}, {duration(h['gap_ns'])} in all, largest {duration(h['largest_gap_ns'])}")
    lines.append(f"kernels        {h['kernels']}, {duration(h['gpu_time_ns'])} of GPU time (sum of kernel durations)")
    lines.append(f"Tensor Cores   {pct(h['tc_pct'])}% of GPU time on Tensor Cores; {pct(h['tc_missed_pct'])}% of "
                 f"Tensor-Core-eligible time ({duration(h['tc_eligible_ns'])}, tc 0 or 1) did not use them")
    shares = ", ".join(f"{level} {pct(_share(ns, h['gpu_time_ns']))}%" for level, ns in h["priced_ns"].items())
    lines.append(f"priced by      {shares}, neither {pct(_share(h['unpriced_ns'], h['gpu_time_ns']))}% of GPU time "
                 f"(op marker, PyTorch's aten ranges or compiled FX nodes; --by level, column level)")
    if h["copies"]:
        lines.append(f"copies         {h['copies']} memcpy/memset records, {duration(h['copy_ns'])} (not in the rows)")
    late = sum(d["late_kernels"] for d in devs)
    if late:
        lines.append(f"note           {count(late, 'kernel')} started behind the busy-time window; busy % may be low")
    return lines


def advice_lines(rep: dict) -> list[str]:
    """Advice and notes as text lines."""
    lines = []
    if rep["advice"]:
        lines.append("advice:")
        lines += [f"- {flat(a['text'])}" for a in rep["advice"]]  # advice names ops of the trace
    else:
        lines.append("advice: none (no rule's threshold reached)")
    lines += [f"note: {n}" for n in rep["notes"]]
    return lines


# The table's columns after the group's: header, width, and priority (a narrow line leaves out the
# lowest first; Time never goes). At 80 characters: group, Time, %Time, Count, Avg, TFLOP/s, %Peak, %TC.
TEXT_COLUMNS = [TextColumn("Time", 9), TextColumn("%Time", 6, priority=9), TextColumn("Count", 6, priority=8),
                TextColumn("Avg", 8, priority=7), TextColumn("Med", 8, priority=2), TextColumn("Min", 8, priority=1),
                TextColumn("Max", 8, priority=2), TextColumn("StdDev", 8, priority=1),
                TextColumn("FLOPs", 9, priority=3), TextColumn("TFLOP/s", 8, priority=5),
                TextColumn("%Peak", 6, priority=5), TextColumn("Bytes", 9, priority=3),
                TextColumn("GB/s", 9, priority=4), TextColumn("%TC", 4, priority=6)]


def text_columns(by: str) -> list[TextColumn]:
    """The text table's columns: the group's name (kernel names cut in the middle), then TEXT_COLUMNS."""
    return [group_column(by)] + TEXT_COLUMNS


def _lower_bound(v: str, na: int) -> str:
    return v + "+" if na and v != "na" else v  # "+": some kernels of the group are na


def write_text(rep: dict, out: TextIO, width: int | None = None) -> None:
    """Header, a columnated table of groups, advice, fitted to `width` (-w; None: the terminal's
    width; into a pipe or a file nothing is cut: output.text_width). The prose lines are broken
    to the width, the table leaves out what does not fit (output.fitted)."""
    prose = width if width is not None else terminal_width()
    for line in wrapped(header_lines(rep), prose, 15):
        out.write(line + "\n")
    out.write("\n")
    keys = rep["by"].split(",")
    labels = [group_label(r, keys) for r in rep["rows"]]
    cols = text_columns(rep["by"])
    write = columnated_writer(out, cols, text_width(width, cols, labels), labels)
    for label, r in zip(labels, rep["rows"]):
        write([label, duration(r["time_ns"]), pct(r["pct_time"]), str(r["count"]),
               duration(r["avg_ns"]), duration(r["med_ns"]), duration(r["min_ns"]), duration(r["max_ns"]),
               duration(r["stddev_ns"]),
               _lower_bound(si(r["flops"]), r["flops_na"]), rate(r["tflops"], 3), pct(r["pct_peak"]),
               _lower_bound(si(r["bytes"], "B"), r["bytes_na"]), rate(r["gbps"], 1), pct(r["tc_pct"], 0)])
    more = rep["more"]
    if more["groups"]:
        out.write(f"... {more['groups']} more groups, {duration(more['time_ns'])}\n")
    out.write("\n")
    for line in wrapped(advice_lines(rep), prose):
        out.write(line + "\n")


def sink(args: argparse.Namespace) -> Profile:
    """An empty Profile grouped as the command line asks."""
    return Profile(args.by)


def write(prof: Profile, args: argparse.Namespace) -> None:
    """The summary in the form the command line asks for: text, --csv (the header and advice go
    to stderr then) or --json."""
    rep = report(prof, args.sort, args.top)
    if args.json:
        write_json(rep, sys.stdout)
    elif args.csv:
        write_csv(rep, sys.stdout)
        for line in header_lines(rep) + advice_lines(rep):  # CSV holds the rows only
            print(line, file=sys.stderr)
    else:
        write_text(rep, sys.stdout, args.width)

