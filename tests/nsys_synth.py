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


def seq_payload(seq: int, gap: int = 0) -> int:
    """The int64 payload of a pyprof op range (docs/markers.md): the autograd sequence number at
    the call, and the nodes created since the previous payload op call returned, above bit 40."""
    return (gap << 40) | seq


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
_GRAPH_NODE_COLS = ["start", "end", "eventClass", "globalTid", "nameId", "graphNodeId", "originalGraphNodeId"]
_FLUSH = 50000


class SynthExport:
    """Writes one synthetic export. Rows are flushed in batches, so huge exports fit in memory.

    Flags select schema variants: `text_id` (NVTX_EVENTS has textId; without it registered
    strings are written inline), `mangled_name`, `end_global_tid`, `graph_node_id` (optional
    columns), `target_info` (TARGET_INFO_GPU and TARGET_INFO_CUDA_DEVICE), `cuda_device_map`,
    `version` (META_DATA_EXPORT; None: no such table), `int64_value` (NVTX_EVENTS has the
    int64Value payload column).
    """

    def __init__(self, path: str, *, text_id: bool = True, mangled_name: bool = True, end_global_tid: bool = True,
                 graph_node_id: bool = True, target_info: bool = True, cuda_device_map: bool = True,
                 version: str | None = "2025.3.1.90", gpus: Sequence[dict[str, Any]] = (H100,),
                 int64_value: bool = True) -> None:
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
                          and (end_global_tid or c != "endGlobalTid") and (int64_value or c != "int64Value")]
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
              registered: bool = False, end_thread: int | None = None, payload: int | None = None) -> None:
        """One NVTX_EVENTS row; `registered` puts the text in StringIds (textId) instead of `text`;
        `payload`: its int64Value."""
        text_id = None
        if registered and self.text_id and text is not None:
            text_id, text = self.string(text), None
        values = {"start": start, "end": end, "eventType": etype, "text": text, "globalTid": thread,
                  "endGlobalTid": end_thread if end_thread is not None else (thread if end is not None else None),
                  "textId": text_id, "domainId": domain, "int64Value": payload}
        self._add("NVTX_EVENTS", self.nvtx_cols, tuple(values.get(c) for c in self.nvtx_cols))

    def push(self, thread: int, start: int, end: int | None, text: str | None, *, domain: int = 0,
             registered: bool = False, payload: int | None = None) -> None:
        """A push/pop range (eventType 59)."""
        self.event(PUSH_POP, thread, start, end, text, domain=domain, registered=registered, payload=payload)

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

    def graph_node(self, thread: int, t: int, node: int, original: int | None = None) -> None:
        """A CUDA_GRAPH_NODE_EVENTS row: node `node` created at `t` on `thread`, by stream capture
        (no `original`) or as the instantiated copy of captured node `original`."""
        self._add("CUDA_GRAPH_NODE_EVENTS", _GRAPH_NODE_COLS,
                  (t, t, 77, thread, self.string("Graph Node Creation"), node, original))

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


# ---------------------------------------------------------------------------------------------
# Large exports from a small one, at SQLite's speed (benchmarks).

# Per table: the columns shifted in time, and whether its correlation ids are shifted too.
_REPEATED = {"CUPTI_ACTIVITY_KIND_KERNEL": True, "CUPTI_ACTIVITY_KIND_RUNTIME": True,
             "CUPTI_ACTIVITY_KIND_MEMCPY": True, "CUPTI_ACTIVITY_KIND_MEMSET": True, "NVTX_EVENTS": False}


def payload_steps(path: str, steps: int = 6) -> str:
    """Training steps attributed through op ranges' sequence payloads and node ranges alone
    (docs/markers.md), for cutting into windows: per step, on the main thread, linear ops (two
    nodes each; every third step with an emit_nvtx aten range of its second node), a gap node,
    cross_entropy (two nodes), then `Tensor.backward` (not on odd steps: the loss's span stays
    pending while its nodes run); a helper thread of the same process runs one payload op with
    sequence numbers of its own. Backward on the autograd thread: node ranges in reverse order,
    a launch between nodes outside any range, AccumulateGrad."""
    syn = SynthExport(path)
    main, grad, helper = syn.thread(5, 5), syn.thread(5, 6), syn.thread(5, 7)
    dom = syn.domain(main, "pyprof", registered=True)
    lin = marker("op", mod="torch.nn.functional", op="linear", args=[], site="m.py:1")
    xent = marker("op", mod="torch.nn.functional", op="cross_entropy", args=[], site="m.py:2", module="loss")
    back = marker("op", mod="Tensor", op="backward", args=[], site="m.py:3")
    t, seq, helper_seq = 1000, 0, 0
    for s in range(steps):
        nodes = []
        for i in range(3):
            gap = 1 if i == 2 else 0  # a node made by unwrapped code before the third linear
            seq += gap
            syn.push(main, t, t + 800, lin, domain=dom, registered=True, payload=seq_payload(seq, gap))
            if s % 3 == 0:
                syn.push(main, t + 100, t + 700, torch_text("aten::addmm", seq=seq + 1, op_id=seq))
            syn.launch_kernel(main, t + 200)
            nodes += [("TBackward0", seq), ("AddmmBackward0", seq + 1)]
            seq += 2
            t += 1000
        syn.push(helper, t - 500, t - 100, lin, domain=dom, registered=True, payload=seq_payload(helper_seq))
        helper_seq += 1
        syn.push(main, t, t + 800, xent, domain=dom, registered=True, payload=seq_payload(seq))
        syn.launch_kernel(main, t + 300)
        nodes += [("LogSoftmaxBackward0", seq), ("NllLossBackward0", seq + 1), ("MulBackward0", seq - 3)]
        seq += 2
        t += 1000
        if s % 2 == 0:
            syn.push(main, t, t + 1000 * len(nodes) + 2000, back, domain=dom, registered=True, payload=seq_payload(seq))
        t += 500
        for name, n in reversed(nodes):
            syn.push(grad, t, t + 700, torch_text(name, seq=n, op_id=n))
            syn.launch_kernel(grad, t + 100)
            syn.launch_kernel(grad, t + 800)  # between nodes: no range encloses it
            t += 1000
        syn.push(grad, t, t + 500, torch_text("torch::autograd::AccumulateGrad", op_id=0))
        syn.launch_kernel(grad, t + 100)
        t += 5000
    return syn.close()


def repeat(src: str, dst: str, copies: int, offset: int = 0) -> str:
    """Write `dst`: the activity and NVTX rows of export `src` repeated `copies` times one after
    the other on the timeline (each copy shifted by the span of `src` plus 1 ms, correlation ids
    shifted past the previous copy's), everything else once. The whole timeline is moved by
    `offset` ns (ranks of one job start at slightly different times). Returns `dst`.

    Row order within a copy is `src`'s; domain-create events are written once, as nsys does.
    """
    if os.path.exists(dst):
        os.unlink(dst)
    db = sqlite3.connect(dst)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("ATTACH DATABASE ? AS s", (src,))
    tables = [r[0] for r in db.execute("SELECT name FROM s.sqlite_master WHERE type = 'table'")]
    span = 1 + max(db.execute(f"SELECT max(ifnull(\"end\", start)) FROM s.{t}").fetchone()[0] or 0
                   for t in tables if t in _REPEATED) + 1_000_000
    corr = 1 + max(db.execute(f"SELECT max(correlationId) FROM s.{t}").fetchone()[0] or 0
                   for t in tables if _REPEATED.get(t))
    for table in tables:
        sql = db.execute("SELECT sql FROM s.sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        db.execute(sql)
        cols = [r[1] for r in db.execute(f"PRAGMA s.table_info({table})")]
        if table not in _REPEATED:
            db.execute(f"INSERT INTO main.{table} SELECT * FROM s.{table}")
            continue
        for k in range(copies):
            exprs = []
            for c in cols:
                if c in ("start", "end"):
                    exprs.append(f'"{c}" + {k * span + offset}')
                elif c == "correlationId" and _REPEATED[table]:
                    exprs.append(f"correlationId + {k * corr}")
                else:
                    exprs.append(f'"{c}"')
            where = f" WHERE eventType != {DOMAIN_CREATE}" if table == "NVTX_EVENTS" and k else ""
            db.execute(f"INSERT INTO main.{table} SELECT {', '.join(exprs)} FROM s.{table}{where}")
    db.commit()
    db.execute("DETACH DATABASE s")
    db.close()
    return dst


# ---------------------------------------------------------------------------------------------
# One export per rank of a data-parallel job (ranks side by side, collectives, overlap).

NCCL_STREAM = 20
COMPUTE_STREAM = 7


def nccl_kernel(coll: str, dtype: str = "f32", op: str = "Sum") -> str:
    """The demangled name of an NCCL >= 2.19 kernel (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`)."""
    reduce = f"_{op}" if coll in ("AllReduce", "ReduceScatter", "Reduce") else ""
    return f"ncclDevKernel_{coll}{reduce}_{dtype}_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def step_delay(seed: int, rank: int, step: int) -> int:
    """How late (ns) `rank` starts `step`: the same in every rank's export, so that each can
    compute when the slowest rank arrives at a collective."""
    return random.Random(seed * 1_000_003 + step * 7919 + rank).randrange(0, 20_000, 10)


def rank_export(path: str, rank: int, world: int, steps: int = 2, layers: int = 4, buckets: int = 2,
                seed: int = 0, pid: int | None = None, markers: bool = True) -> str:
    """A data-parallel training run as rank `rank` of `world` sees it, `steps` steps.

    Per step: forward (a GEMM per layer, pyprof linear markers and emit_nvtx ranges) on the main
    thread; backward (two GEMMs per layer) on the autograd thread, where after every
    `layers // buckets` layers DDP's reducer all-reduces a gradient bucket (float32, 1 MiB per
    layer): a `record_param_comms` range around an `NCCL:ncclAllReduce` range around the launch
    of an `ncclDevKernel_AllReduce_Sum_f32_RING_LL` kernel on the NCCL stream, overlapping the
    next layers' backward GEMMs; then on the main thread `torch.distributed.all_reduce` of the
    loss (pyprof marker with `dist`, 4 bytes) and `all_gather_into_tensor` of a bfloat16 shard
    (128 elements per rank), and an `SGD.step` (a step boundary).

    Rank r starts step s late by step_delay(seed, r, s); a collective's kernel starts when its
    rank launches it and ends when the last rank's has run 50 us past its own start: the GPU
    timeline of a real collective, so each rank's wait is the last arrival minus its own.
    """
    syn = SynthExport(path)
    pid = 1000 + rank if pid is None else pid
    main = syn.thread(pid, pid, "python3")
    grad = syn.thread(pid, pid + 1, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=100, registered=True) if markers else 0
    nccl_dom = syn.domain(grad, "NCCL", t=200, registered=True)
    syn.map_device(pid, rank % 8, 0)
    dist = {"rank": rank, "world": world, "group": "0", "groupRank": rank, "groupSize": world}
    per_bucket = max(1, layers // buckets)
    step_len = 2_000_000
    seq = op_id = 0
    gpu = {COMPUTE_STREAM: 0, NCCL_STREAM: 0}  # when each stream is free

    def compute(t: int, thread: int, name: str, dur: int) -> None:
        start = max(t + 4000, gpu[COMPUTE_STREAM])
        gpu[COMPUTE_STREAM] = start + dur
        syn.launch_kernel(thread, t, name, gpu_start=start, duration=dur, stream=COMPUTE_STREAM, grid=(8, 8, 1))

    late: dict[int, int] = {}  # step -> the largest delay of any rank

    def collective(t: int, thread: int, name: str, offset: int, step: int) -> None:
        # Every rank launches this collective `offset` ns into its step; the kernel ends 50 us
        # after the slowest rank's starts.
        start = max(t + 3000, gpu[NCCL_STREAM])
        if step not in late:
            late[step] = max(step_delay(seed, r, step) for r in range(world))
        last = step * step_len + late[step] + offset + 3000
        end = max(last, start) + 50_000
        gpu[NCCL_STREAM] = end
        corr = syn.launch(thread, t, t + 1500, api="cudaLaunchKernelExC_v11060")
        syn.kernel(pid, corr, start, end, name, stream=NCCL_STREAM, grid=(2, 1, 1), block=(256, 1, 1))

    for s in range(steps):
        t0 = s * step_len + step_delay(seed, rank, s)
        t = t0
        fwd = []
        for layer in range(layers):
            seq += 1
            op_id += 2
            l0 = t
            if markers:
                m0 = t + 50
            t += 300
            compute(t, main, "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32", 20_000)
            syn.push(main, t - 100, t + 2600, torch_text("aten::addmm", seq=seq, op_id=op_id,
                                                          sizes=[[1024], [64, 1024], [1024, 1024]]))
            t += 3000
            if markers:
                syn.push(main, m0, t, marker("op", mod="torch.nn.functional", op="linear",
                                             args=[{"shape": [64, 1024], "dtype": "float32"},
                                                   {"shape": [1024, 1024], "dtype": "float32"},
                                                   {"shape": [1024], "dtype": "float32"}],
                                             site="train.py:40", module=f"layers.{layer}"), domain=dom, registered=True)
            syn.push(main, l0, t + 100, f"layer:layer{layer}")
            t += 400
            fwd.append(seq)
        t = t0 + 200_000
        for i, sq in enumerate(reversed(fwd)):
            op_id += 1
            n0 = t
            for _ in range(2):
                compute(t, grad, "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 25_000)
                t += 3000
            syn.push(grad, n0, t, torch_text("AddmmBackward0", seq=sq, op_id=op_id))
            t += 500
            if (i + 1) % per_bucket == 0:
                op_id += 1
                c0 = t
                syn.push(grad, c0 + 100, c0 + 2500, "ncclAllReduce", domain=nccl_dom, registered=True)
                collective(c0 + 200, grad, nccl_kernel("AllReduce"), c0 + 200 - t0, s)
                syn.push(grad, c0, c0 + 2700, torch_text("record_param_comms", op_id=op_id))
                t += 3000
        t = t0 + 600_000
        for op, name, args, off in (
                ("all_reduce", nccl_kernel("AllReduce"), [{"shape": [1], "dtype": "float32"}], 600_000),
                ("all_gather_into_tensor", nccl_kernel("AllGather", "bf16"),
                 [{"shape": [128 * world], "dtype": "bfloat16"}, {"shape": [128], "dtype": "bfloat16"}], 700_000)):
            t = t0 + off
            if markers:
                syn.push(main, t, t + 3000, marker("op", mod="torch.distributed", op=op, args=args, site="train.py:60",
                                                   dist=dist), domain=dom, registered=True)
            syn.push(main, t + 100, t + 2500, "nccl" + op.split("_")[0].capitalize() + "".join(
                w.capitalize() for w in op.split("_")[1:2]), domain=nccl_dom, registered=True)
            collective(t + 200, main, name, off + 200, s)
        t = t0 + 900_000
        if markers:
            syn.push(main, t, t + 5000, marker("op", mod="torch.optim", op="SGD.step", args=[],
                                               kwargs={"params": {"count": layers, "numel": layers * 1024 * 1024,
                                                                  "dtype": "float32"}}, site="train.py:70"),
                     domain=dom, registered=True)
        compute(t + 200, main, "void at::native::multi_tensor_apply_kernel<SGD>(int)", 30_000)
    return syn.close()


def rank_set(folder: str, world: int, steps: int = 2, seed: int = 0, **kw: Any) -> list[str]:
    """`world` exports trace_0.sqlite .. trace_{world-1}.sqlite of one job in `folder` (rank_export)."""
    os.makedirs(folder, exist_ok=True)
    return [rank_export(os.path.join(folder, f"trace_{r}.sqlite"), r, world, steps, seed=seed, **kw)
            for r in range(world)]
