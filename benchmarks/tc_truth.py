"""Join the Tensor Core zoo's nsys records with its Nsight Compute counters into a ground-truth table.

    python -m pyprof.parse tc_zoo.sqlite > tc_zoo.dict
    python benchmarks/tc_truth.py tc_zoo.dict tc_zoo_ncu.csv > tests/data/tc_ground_truth.csv

Both runs of benchmarks/tc_zoo.py launch the same kernels in the same order inside the profiler
range, so the n-th kernel record matches the n-th kernel Nsight Compute profiled; every pair's
names are checked before a row is written. Columns: case (the zoo case, from the layer column),
dir, op, kernel (short name), tc (1 when any MMA counter is above zero), mma_ops (the Tensor Core
ops-path sum: FLOPs done on Tensor Cores; FP64 has no ops-path counter), dmma_inst (FP64 Tensor
Core instructions), core_flops (CUDA-core FP16/32/64 FLOPs, FMA = 2),
dram_bytes (read + written), name (the demangled kernel name). Backward kernels, launched on
the autograd thread outside the case's range, take the case of the kernels before them.
"""
from __future__ import annotations

import csv
import json
import lzma
import sys
from collections import defaultdict
from typing import Iterator


def kernel_records(path: str) -> Iterator[dict]:
    """Kernel records of a parse output, in launch order."""
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind", "kernel") == "kernel":
                yield rec


def ncu_kernels(path: str) -> list[tuple[str, dict[str, float]]]:
    """(kernel name, {metric: value}) per profiled kernel from `ncu --csv` output (.xz too), in ID order."""
    with (lzma.open(path, "rt", newline="") if path.endswith(".xz") else open(path, newline="")) as f:
        lines = [ln for ln in f if not ln.startswith("==")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    metrics: dict[int, dict[str, float]] = defaultdict(dict)
    names: dict[int, str] = {}
    for row in csv.DictReader(lines[start:]):
        kid = int(row["ID"])
        names[kid] = row["Kernel Name"]
        value = row["Metric Value"].replace(",", "")
        try:
            metrics[kid][row["Metric Name"]] = float(value)
        except ValueError:
            metrics[kid][row["Metric Name"]] = float("nan")
    return [(names[k], metrics[k]) for k in sorted(names)]


def ncu_launches(path: str) -> list[tuple[str, list[int], dict[str, float]]]:
    """(kernel name, grid [x, y, z], {metric: value}) per profiled kernel of `ncu --csv` output
    (.xz too), in ID order."""
    with (lzma.open(path, "rt", newline="") if path.endswith(".xz") else open(path, newline="")) as f:
        lines = [ln for ln in f if not ln.startswith("==")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    grids = {int(row["ID"]): [int(d) for d in row["Grid Size"].strip("()").split(",")]
             for row in csv.DictReader(lines[start:])}
    return [(name, grids[i], counters) for i, (name, counters) in zip(sorted(grids), ncu_kernels(path))]


def summarize(counters: dict[str, float]) -> tuple[int, float, float, float, float]:
    """(tc, mma_ops, dmma_inst, core_flops, dram_bytes) from one kernel's counters."""
    # Counters nest: hmma_src_fp16 already holds hmma_src_fp16_dst_fp16 and _dst_fp32, and each
    # of those its _sparsity_on/_off split. Summing only the outermost ones counts each op once.
    paths = {k[: -len(".sum")] for k in counters if k.startswith("sm__ops_path_tensor_op_")}
    outer = [p for p in paths if not any(p != q and p.startswith(q + "_") for q in paths)]
    mma = sum(counters[p + ".sum"] for p in outer)
    dmma = counters.get("sm__inst_executed_pipe_tensor_op_dmma.sum", 0.0)
    def op(name: str) -> float:
        return counters.get(f"smsp__sass_thread_inst_executed_op_{name}_pred_on.sum", 0.0)
    core = 2 * (op("ffma") + op("hfma") + op("dfma")) + sum(op(n) for n in ("fadd", "fmul", "hadd", "hmul", "dadd", "dmul"))
    dram = counters.get("dram__bytes_read.sum", 0.0) + counters.get("dram__bytes_write.sum", 0.0)
    return int(mma > 0 or dmma > 0), mma, dmma, core, dram


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    records = list(kernel_records(argv[0]))
    profiled = ncu_kernels(argv[1])
    if len(records) != len(profiled):
        print(f"tc_truth: {len(records)} kernel records but {len(profiled)} profiled kernels", file=sys.stderr)
        return 1
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["case", "dir", "op", "kernel", "tc", "mma_ops", "dmma_inst", "core_flops", "dram_bytes", "name"])
    case = ""
    for rec, (ncu_name, counters) in zip(records, profiled):
        if not (ncu_name.startswith(rec["kShortName"]) or rec["kShortName"] in ncu_name):
            print(f"tc_truth: kernel order differs: {rec['kShortName']!r} vs {ncu_name!r}", file=sys.stderr)
            return 1
        tc, mma, dmma, core, dram = summarize(counters)
        # Backward kernels run on the autograd thread, outside the case's range on the main
        # thread: they belong to the case whose forward kernels came just before them.
        case = rec["layer"][-1] if rec.get("layer") else case
        out.writerow([case, rec.get("dir"), rec.get("op") or "", rec["kShortName"], tc,
                      int(mma), int(dmma), int(core), int(dram), rec["kLongName"]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
