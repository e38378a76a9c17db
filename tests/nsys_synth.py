"""Synthetic Nsight Systems SQLite exports, shared by the parse tests and benchmarks/parse_speed.py.

They follow NVIDIA's SQLite Export Schema Reference
(https://docs.nvidia.com/nsight-systems/2021.5/nsys-exporter/exported_data.html), the real exports
shipped in examples/ and docs/parse.md ("How the join works"): the real table and column names, StringIds,
eventType codes (59 push/pop, 60 start/end, 75 domain create), globalTid/globalPid bit encoding,
per-process domain ids, inline `text` vs registered `textId`, META_DATA_EXPORT, TARGET_INFO_GPU
and TARGET_INFO_CUDA_DEVICE. Schema variants are switched with constructor flags; tables with no
rows are not created, as nsys does.

`SynthExport` builds precise scenarios for tests; `workload()` writes a realistic training step
(forward on the main thread, backward on the autograd thread) of any size for the benchmark.
"""
from __future__ import annotations

import json
import os
import random
import sqlite3
from typing import Any, Sequence

PUSH_POP, START_END, MARK, DOMAIN_CREATE = 59, 60, 34, 75
MEMCPY_KINDS = {1: "HTOD", 2: "DTOH", 8: "DTOD", 9: "HTOH", 10: "PTOP"}
H100 = {"name": "NVIDIA H100 80GB HBM3", "memoryBandwidth": 3352320000000, "smCount": 132, "clockRate": 1980000000}


def gtid(pid: int, tid: int, host: int = 0) -> int:
    """globalTid: bits 0-23 tid, 24-47 pid, 48+ host/VM id."""
    return (host << 48) | (pid << 24) | tid


def gpid(pid: int, host: int = 0) -> int:
    """globalPid: a globalTid with the tid bits zero."""
    return (host << 48) | (pid << 24)


def torch_text(name: str, seq: int | None = None, op_id: int | None = None,
               sizes: Sequence[Sequence[int]] | None = None, input_op_ids: Sequence[tuple[int, int]] | None = None) -> str:
    """A PyTorch emit_nvtx range text, formatted as PyTorch's getNvtxStr does."""
    s = name
    if seq is not None:
        s += f", seq = {seq}"
    if op_id is not None:
        s += f", op_id = {op_id}"
    if sizes is not None:
        s += ", sizes = [" + ", ".join("[" + ", ".join(str(d) for d in shape) + "]" for shape in sizes) + "]"
    if input_op_ids is not None:
        s += ", input_op_ids = [" + ", ".join(f"({a},{b})" for a, b in input_op_ids) + "]"
    return s


def marker(kind: str, **fields: Any) -> str:
    """A pyprof marker message as docs/markers.md defines it."""
    return json.dumps({"v": 1, "kind": kind, **fields}, separators=(",", ":"), allow_nan=False)


_KERNEL_COLS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
                "shortName", "mangledName", "launchType", "cacheConfig", "registersPerThread", "gridX", "gridY", "gridZ",
                "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread",
                "localMemoryTotal", "gridId", "sharedMemoryExecuted", "graphNodeId", "sharedMemoryLimitConfig"]
_NVTX_COLS = ["start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid",
              "textId", "domainId", "uint64Value", "int64Value", "doubleValue", "uint32Value", "int32Value",
              "floatValue", "jsonTextId", "jsonText", "binaryData"]
_RUNTIME_COLS = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue", "callchainId"]
_MEMCPY_COLS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
                "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId", "srcContextId", "dstDeviceId", "dstContextId",
                "migrationCause", "graphNodeId", "virtualAddress"]
_MEMSET_COLS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "value", "bytes",
                "graphNodeId", "memKind"]
_FLUSH = 50000


class SynthExport:
    """Writes one synthetic export. Rows are flushed in batches, so huge exports fit in memory.

    Flags select schema variants: `text_id` (NVTX_EVENTS has textId; without it registered
    strings are written inline), `mangled_name`, `end_global_tid`, `graph_node_id` (optional
    columns), `target_info` (TARGET_INFO_GPU and TARGET_INFO_CUDA_DEVICE), `cuda_device_map`,
    `version` (META_DATA_EXPORT; None: no such table).
    """

    def __init__(self, path: str, *, text_id: bool = True, mangled_name: bool = True, end_global_tid: bool = True,
                 graph_node_id: bool = True, target_info: bool = True, cuda_device_map: bool = True,
                 version: str | None = "2025.3.1.90", gpus: Sequence[dict[str, Any]] = (H100,)) -> None:
        if os.path.exists(path):
            os.unlink(path)
        self.path = path
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode = OFF")
        self.db.execute("PRAGMA synchronous = OFF")
        self.text_id = text_id
        self.kernel_cols = [c for c in _KERNEL_COLS if (mangled_name or c != "mangledName")
                            and (graph_node_id or c != "graphNodeId")]
        self.nvtx_cols = [c for c in _NVTX_COLS if (text_id or c != "textId")
                          and (end_global_tid or c != "endGlobalTid")]
        self.strings: dict[str, int] = {}
        self.rows: dict[str, list[tuple]] = {}
        self.created: set[str] = set()
        self.corr: dict[int, int] = {}       # next correlation id per pid: ids repeat across processes
        self.domain_ids: dict[tuple[int, str], int] = {}
        self.device_map: list[tuple[int, int, int]] = []
        self.gpus = list(gpus) if target_info else []
        self.cuda_device_map = cuda_device_map and target_info
        self.version = version

    # -- strings and ids ------------------------------------------------------------------
    def string(self, value: str) -> int:
        """Id of `value` in StringIds, adding it when new."""
        sid = self.strings.get(value)
        if sid is None:
            sid = self.strings[value] = len(self.strings) + 1
            self._add("StringIds", ["id", "value"], (sid, value))
        return sid

    def thread(self, pid: int, tid: int, name: str | None = None) -> int:
        """Declare a thread (ThreadNames, PROCESSES) and return its globalTid."""
        g = gtid(pid, tid)
        self._add("ThreadNames", ["nameId", "priority", "globalTid"], (self.string(name or f"thread {tid}"), 0, g))
        if tid == pid:
            self._add("PROCESSES", ["globalPid", "pid", "name"], (gpid(pid), pid, "python3"))
        return g

    def map_device(self, pid: int, cuda_id: int, gpu_id: int) -> None:
        """A TARGET_INFO_CUDA_DEVICE row: CUDA ordinal `cuda_id` of process `pid` is GPU `gpu_id`."""
        self.device_map.append((gpu_id, cuda_id, pid))

    # -- NVTX -----------------------------------------------------------------------------
    def domain(self, thread: int, name: str, t: int = 0, registered: bool = False) -> int:
        """nvtxDomainCreate on `thread` at `t`; returns the domain id (per process, from 1)."""
        pid = (thread >> 24) & 0xFFFFFF
        dom = sum(1 for p, _ in self.domain_ids if p == pid) + 1
        self.domain_ids[(pid, name)] = dom
        self.event(DOMAIN_CREATE, thread, t, None, name, domain=dom, registered=registered)
        return dom

    def event(self, etype: int, thread: int, start: int, end: int | None, text: str | None, *, domain: int = 0,
              registered: bool = False, end_thread: int | None = None) -> None:
        """One NVTX_EVENTS row; `registered` puts the text in StringIds (textId) instead of `text`."""
        text_id = None
        if registered and self.text_id and text is not None:
            text_id, text = self.string(text), None
        values = {"start": start, "end": end, "eventType": etype, "text": text, "globalTid": thread,
                  "endGlobalTid": end_thread if end_thread is not None else (thread if end is not None else None),
                  "textId": text_id, "domainId": domain}
        self._add("NVTX_EVENTS", self.nvtx_cols, tuple(values.get(c) for c in self.nvtx_cols))

    def push(self, thread: int, start: int, end: int | None, text: str | None, *, domain: int = 0,
             registered: bool = False) -> None:
        """A push/pop range (eventType 59)."""
        self.event(PUSH_POP, thread, start, end, text, domain=domain, registered=registered)

    def start_end(self, thread: int, start: int, end: int | None, text: str, *, end_thread: int | None = None,
                  domain: int = 0, registered: bool = False) -> None:
        """A start/end range (eventType 60), possibly ended on `end_thread`."""
        self.event(START_END, thread, start, end, text, domain=domain, registered=registered, end_thread=end_thread)

    # -- CUDA activity ----------------------------------------------------------------------
    def next_corr(self, pid: int) -> int:
        """The next correlation id of process `pid`."""
        c = self.corr.get(pid, 1)
        self.corr[pid] = c + 1
        return c

    def launch(self, thread: int, start: int, end: int | None = None, api: str = "cudaLaunchKernel_v7000",
               corr: int | None = None) -> int:
        """A runtime API call (CUPTI_ACTIVITY_KIND_RUNTIME); returns its correlation id."""
        pid = (thread >> 24) & 0xFFFFFF
        corr = self.next_corr(pid) if corr is None else corr
        values = (start, end if end is not None else start + 2000, 1, thread, corr, self.string(api), 0, None)
        self._add("CUPTI_ACTIVITY_KIND_RUNTIME", _RUNTIME_COLS, values)
        return corr

    def kernel(self, pid: int, corr: int, start: int, end: int, name: str = "void gemm_kernel<float>(float*)",
               short: str | None = None, device: int = 0, stream: int = 7, grid: Sequence[int] = (1, 1, 1),
               block: Sequence[int] = (128, 1, 1), regs: int = 32, static_shared: int = 0, dynamic_shared: int = 0,
               graph_node: int | None = None) -> None:
        """A CUPTI_ACTIVITY_KIND_KERNEL row of process `pid`."""
        short = short if short is not None else name.split("(")[0].split("<")[0].split()[-1]
        values = {"start": start, "end": end, "deviceId": device, "contextId": 1, "streamId": stream,
                  "correlationId": corr, "globalPid": gpid(pid), "demangledName": self.string(name),
                  "shortName": self.string(short), "mangledName": self.string("_Z" + short),
                  "registersPerThread": regs, "gridX": grid[0], "gridY": grid[1], "gridZ": grid[2],
                  "blockX": block[0], "blockY": block[1], "blockZ": block[2], "staticSharedMemory": static_shared,
                  "dynamicSharedMemory": dynamic_shared, "gridId": corr, "graphNodeId": graph_node,
                  "launchType": 0, "cacheConfig": 0, "localMemoryPerThread": 0, "localMemoryTotal": 0,
                  "sharedMemoryExecuted": 0, "sharedMemoryLimitConfig": 0}
        self._add("CUPTI_ACTIVITY_KIND_KERNEL", self.kernel_cols, tuple(values[c] for c in self.kernel_cols))

    def launch_kernel(self, thread: int, t: int, name: str = "void gemm_kernel<float>(float*)", gpu_start: int | None = None,
                      duration: int = 5000, **kw: Any) -> int:
        """A cudaLaunchKernel call at CPU time `t` and its kernel; returns the correlation id."""
        corr = self.launch(thread, t)
        start = gpu_start if gpu_start is not None else t + 10000
        self.kernel((thread >> 24) & 0xFFFFFF, corr, start, start + duration, name, **kw)
        return corr

    def memcpy(self, pid: int, corr: int, start: int, end: int, nbytes: int, copy_kind: int, device: int = 0,
               stream: int = 7) -> None:
        """A CUPTI_ACTIVITY_KIND_MEMCPY row."""
        self._add("CUPTI_ACTIVITY_KIND_MEMCPY", _MEMCPY_COLS,
                  (start, end, device, 1, stream, corr, gpid(pid), nbytes, copy_kind) + (None,) * 10)

    def memset(self, pid: int, corr: int, start: int, end: int, nbytes: int, device: int = 0, stream: int = 7) -> None:
        """A CUPTI_ACTIVITY_KIND_MEMSET row."""
        self._add("CUPTI_ACTIVITY_KIND_MEMSET", _MEMSET_COLS, (start, end, device, 1, stream, corr, gpid(pid), 0,
                                                              nbytes, None, 0))

    # -- writing ------------------------------------------------------------------------------
    def empty_table(self, table: str) -> None:
        """Create `table` with its real columns and no rows (nsys usually omits such tables)."""
        cols = {"CUPTI_ACTIVITY_KIND_KERNEL": self.kernel_cols, "NVTX_EVENTS": self.nvtx_cols,
                "CUPTI_ACTIVITY_KIND_RUNTIME": _RUNTIME_COLS}[table]
        self._create(table, cols)

    def _create(self, table: str, cols: Sequence[str]) -> None:
        if table not in self.created:
            types = {"text": "TEXT", "value": "TEXT", "name": "TEXT", "jsonText": "TEXT", "binaryData": "BLOB",
                     "doubleValue": "REAL", "floatValue": "REAL"}
            defs = ", ".join(f"{c} {types.get(c, 'INTEGER')}" + (" NOT NULL PRIMARY KEY" if table == "StringIds" and c == "id" else "")
                             for c in cols)
            self.db.execute(f"CREATE TABLE {table} ({defs})")
            self.created.add(table)

    def _add(self, table: str, cols: Sequence[str], values: tuple) -> None:
        rows = self.rows.get(table)
        if rows is None:
            self._create(table, cols)
            rows = self.rows[table] = []
        rows.append(values)
        if len(rows) >= _FLUSH:
            self._flush(table)

    def _flush(self, table: str) -> None:
        rows = self.rows[table]
        if rows:
            self.db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
            rows.clear()

    def close(self) -> str:
        """Write the remaining rows and the metadata tables; return the path."""
        for table in list(self.rows):
            self._flush(table)
        if self.version is not None:
            self.db.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
            self.db.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                                [("EXPORT_PRODUCT_VERSION", self.version), ("EXPORT_SCHEMA_VERSION", "3.20.3")])
        self.db.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL)")
        self.db.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
                            [(PUSH_POP, "NvtxPushPopRange", "NVTX PushPop Range"),
                             (START_END, "NvtxStartEndRange", "NVTX StartEnd Range"),
                             (MARK, "NvtxMark", "NVTX Mark"), (DOMAIN_CREATE, "NvtxDomainCreate", "NVTX Domain Create")])
        self.db.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL)")
        self.db.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
                            [(0, "CUDA_MEMCPY_OPER_UNKNOWN", "Unknown")] +
                            [(k, f"CUDA_MEMCPY_OPER_{v}", v) for k, v in MEMCPY_KINDS.items()])
        if self.gpus:
            self.db.execute("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, "
                            "busLocation TEXT, isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, "
                            "memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, pwGpuId INTEGER, uuid TEXT, "
                            "luid INTEGER, chipName TEXT, computeMajor INTEGER, computeMinor INTEGER)")
            for i, g in enumerate(self.gpus):
                self.db.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, ?, ?, ?, 1, 52428800, 85520809984, ?, ?, ?, ?, ?, 0, 'GH100', 9, 0)",
                                (i, g["name"], f"0000:{i + 0x18:02x}:00.0", g["memoryBandwidth"], g["clockRate"],
                                 g["smCount"], i, f"GPU-{i:08x}"))
        if self.cuda_device_map and self.device_map:
            self.db.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER NOT NULL, cudaId INTEGER NOT NULL, "
                            "pid INTEGER, uuid TEXT NOT NULL, numMultiprocessors INTEGER)")
            self.db.executemany("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?, 'GPU-x', 132)", self.device_map)
        self.db.commit()
        self.db.close()
        return self.path


# ---------------------------------------------------------------------------------------------
# A realistic training step, for the benchmark (and a smoke test of scale behaviour).

def workload(path: str, kernels: int, processes: int = 2, seed: int = 0) -> str:
    """Write an export with about `kernels` kernels from `processes` processes (same clock, so
    their launches interleave; correlation ids repeat across processes).

    Per layer, forward on the main thread: `layer:blockN` > pyprof module marker > pyprof op
    marker (linear) > `aten::linear, seq` > `aten::t` (no kernel) + `aten::addmm, seq` (GEMM), then
    a relu op (marker + `aten::relu`). Backward on the autograd thread: `evaluate_function:` >
    `AddmmBackward0, seq` > two `aten::mm` (two GEMMs), `ReluBackward0` > `threshold_backward`.
    A data-loader thread pushes ranges but launches nothing. pyprof markers are registered
    strings (textId), PyTorch and layer ranges inline text. About 5 NVTX ranges per kernel.
    """
    rng = random.Random(seed)
    syn = SynthExport(path)
    per_step = 5  # kernels per layer per process: addmm, relu, 2x mm, threshold_backward
    layers = 16
    steps = max(1, kernels // (per_step * layers * processes))
    for p in range(processes):
        pid = 4000 + p
        main = syn.thread(pid, pid, "python3")
        grad = syn.thread(pid, pid + 1, "pt_autograd_0")
        loader = syn.thread(pid, pid + 2, "pt_data_worker")
        dom = syn.domain(main, "pyprof", t=100)
        syn.map_device(pid, 0, p % max(1, len(syn.gpus)))
        t = 1000 + p * 137  # the processes run concurrently
        seq = op_id = 0
        for _ in range(steps):
            fwd = []
            for layer in range(layers):
                seq += 1
                op_id += 3
                s_linear = seq
                t0 = t
                t += 300
                m0 = t
                t += 200
                o0 = t
                t += 200
                l0 = t
                t += 150
                syn.push(main, t, t + 400, torch_text("aten::t", seq=s_linear, op_id=op_id + 1, sizes=[[512, 512]]))
                t += 500
                a0 = t
                t += 200
                syn.launch_kernel(main, t, "ampere_sgemm_128x64_tn", gpu_start=t + rng.randint(5000, 9000),
                                         grid=(8, 4, 1), block=(128, 1, 1), regs=128, dynamic_shared=8192)
                t += 2500
                syn.push(main, a0, t, torch_text("aten::addmm", seq=s_linear, op_id=op_id + 2,
                                                 sizes=[[512], [64, 512], [512, 512]], input_op_ids=[(op_id - 1, 0), (0, -1)]))
                t += 100
                syn.push(main, l0, t, torch_text("aten::linear", seq=s_linear, op_id=op_id,
                                                 sizes=[[64, 512], [512, 512], [512]]))
                t += 100
                syn.push(main, o0, t, marker("op", mod="torch.nn.functional", op="linear",
                                             args=[{"shape": [64, 512], "dtype": "float32"},
                                                   {"shape": [512, 512], "dtype": "float32"},
                                                   {"shape": [512], "dtype": "float32"}],
                                             site="train.py:42", module=f"blocks.{layer}.fc"), domain=dom, registered=True)
                t += 100
                syn.push(main, m0, t, marker("module", module=f"blocks.{layer}.fc", cls="Linear",
                                             repr="in_features=512, out_features=512, bias=True"), domain=dom, registered=True)
                seq += 1
                op_id += 1
                r0 = t
                t += 200
                q0 = t
                t += 200
                syn.launch_kernel(main, t, "void at::native::vectorized_elementwise_kernel<4, relu>(int)",
                                  gpu_start=t + 9000, grid=(64, 1, 1), block=(128, 1, 1), regs=16)
                t += 2500
                syn.push(main, q0, t, torch_text("aten::relu", seq=seq, op_id=op_id, sizes=[[64, 512]]))
                t += 100
                syn.push(main, r0, t, marker("op", mod="torch.nn.functional", op="relu",
                                             args=[{"shape": [64, 512], "dtype": "float32"}], site="train.py:43",
                                             module=f"blocks.{layer}"), domain=dom, registered=True)
                t += 100
                syn.push(main, t0, t, f"layer:block{layer}")
                t += 300
                # The data loader works meanwhile: ranges on a thread without kernels.
                syn.push(loader, t0 + 50, t0 + 400, "DataLoader.__next__")
                syn.push(loader, t0 + 100, t0 + 300, torch_text("aten::stack", op_id=op_id + 7))
                syn.push(loader, t0 + 310, t0 + 390, torch_text("aten::pin_memory", op_id=op_id + 8))
                syn.push(main, r0 + 50, r0 + 150, torch_text("aten::view", seq=seq, op_id=op_id + 5, sizes=[[64, 512], []]))
                fwd.append((s_linear, seq))
            t += 5000
            for s_linear, s_relu in reversed(fwd):
                op_id += 1
                e0 = t
                t += 200
                n0 = t
                t += 200
                syn.launch_kernel(grad, t, "void at::native::threshold_backward_kernel(int)", gpu_start=t + 8000,
                                  grid=(64, 1, 1), block=(128, 1, 1), regs=20)
                t += 2500
                syn.push(grad, n0 - 100, t, torch_text("aten::threshold_backward", op_id=op_id + 9,
                                                       sizes=[[64, 512], [64, 512], []]))
                t += 100
                syn.push(grad, n0 - 150, t, torch_text("ReluBackward0", seq=s_relu, op_id=op_id))
                t += 100
                syn.push(grad, e0, t, "autograd::engine::evaluate_function: ReluBackward0")
                t += 300
                op_id += 3
                e0 = t
                t += 200
                n0 = t
                t += 200
                for j in range(2):
                    m0 = t
                    syn.push(grad, t + 20, t + 120, torch_text("aten::empty", op_id=op_id + 20 + j, sizes=[[], [], []]))
                    t += 200
                    syn.launch_kernel(grad, t, "ampere_sgemm_64x64_nn", gpu_start=t + 8000, grid=(8, 8, 1),
                                      block=(64, 1, 1), regs=96)
                    t += 2500
                    syn.push(grad, m0, t, torch_text("aten::mm", op_id=op_id + 1 + j, sizes=[[64, 512], [512, 512]]))
                    t += 100
                syn.push(grad, n0, t, torch_text("AddmmBackward0", seq=s_linear, op_id=op_id))
                t += 100
                syn.push(grad, e0, t, "autograd::engine::evaluate_function: AddmmBackward0")
                t += 300
            # One synchronisation per step: a runtime call without a kernel.
            syn.launch(main, t, t + 20000, api="cudaStreamSynchronize_v3020")
            t += 30000
    return syn.close()
