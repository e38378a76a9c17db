"""pyprof.register_cost prices a user's op in all three modes (its marker, a compiled graph's FX
node, PyTorch's op range) from one formula, and `prof --costs FILE` loads such formulas."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import pyprof
from pyprof.prof.pricing.analysis import Analyzer
from pyprof.prof.pricing.fx_nodes import KernelWork
from pyprof.prof.warnings_tally import Tally

GELU_KERNEL = "void at::native::vectorized_elementwise_kernel<(int)8, mylib::fused_gelu_kernel<c10::BFloat16>>(int)"


def gelu_cost(c):
    """8 FLOPs an element; x read and y written."""
    x = c.tensor(0, "x")
    return 8 * x.numel, 2 * x.nbytes


def kernel(**fields) -> dict:
    rec = {"v": 1, "kind": "kernel", "kShortName": "vectorized_elementwise_kernel", "kLongName": GELU_KERNEL,
           "kDuration": 1000, "pid": 1, "tid": 1, "dir": "fprop", "subSeqId": 0}
    rec.update(fields)
    return rec


def test_one_formula_prices_the_marker_the_fx_node_and_the_op_range():
    pyprof.register_cost("mylib.fused_gelu")(gelu_cost)
    an = Analyzer(Tally())
    marker = {"v": 1, "kind": "op", "mod": "mylib", "op": "fused_gelu",
              "args": [{"shape": [4, 1024], "dtype": "bfloat16"}]}
    f = an.facts(kernel(mod="mylib", op="fused_gelu", marker=marker))
    assert (f.flops, f.bytes, f.level) == (8 * 4096, 2 * 4096 * 2, "marker")
    # A trace without pyprof.init(): the custom op's range, its shape; the dtype from the kernel.
    f = an.facts(kernel(op="fused_gelu", torchOps=[{"name": "mylib::fused_gelu", "opId": 7, "sizes": [[4, 1024]]}]))
    assert (f.flops, f.bytes, f.level) == (8 * 4096, 2 * 4096 * 2, "aten")
    # A compiled graph calling the custom op (torch.library: `mylib.fused_gelu.default`).
    work = KernelWork({"nodes": [{"op": "mylib.fused_gelu.default", "args": [{"shape": [4, 1024], "dtype": "float32"}],
                                  "out": {"shape": [4, 1024], "dtype": "float32"}}]})
    assert work.flops == 8 * 4096 and work.warnings == []


def test_a_cost_object_is_taken_as_it_is_and_a_priced_name_is_refused():
    from pyprof.prof.pricing.registry import Cost, lookup

    @pyprof.register_cost("mylib.scale")
    def scale(c):
        x = c.tensor(0, "x")
        return Cost(x.numel, 2 * x.nbytes, f"n={x.numel}", x.dtype)

    from pyprof.prof.pricing.registry import Call
    cost = lookup("mylib", "scale")(Call({"args": [{"shape": [10], "dtype": "float32"}]}))
    assert (cost.flops, cost.bytes, cost.params) == (10, 80, "n=10")
    with pytest.raises(RuntimeError, match="two formulas for torch.nn.functional.gelu"):
        pyprof.register_cost("torch.nn.functional.gelu")(gelu_cost)


def test_prof_costs_loads_a_file_of_formulas(tmp_path: Path):
    costs = tmp_path / "mycosts.py"
    costs.write_text("import pyprof\n\n@pyprof.register_cost('mylib.fused_silu')\n"
                     "def silu(c):\n    x = c.tensor(0, 'x')\n    return 4 * x.numel, 2 * x.nbytes\n")
    marker = {"v": 1, "kind": "op", "mod": "mylib", "op": "fused_silu", "args": [{"shape": [256], "dtype": "float32"}]}
    records = tmp_path / "r.dict"
    records.write_text(json.dumps(kernel(mod="mylib", op="fused_silu", marker=marker)) + "\n")

    def prof(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pyprof.prof", *args], capture_output=True, text=True)

    p = prof("--costs", str(costs), "--json", "-c", "op,flops,bytes", str(records))
    assert p.returncode == 0 and json.loads(p.stdout) == {"op": "fused_silu", "flops": 1024, "bytes": 2048}
    p = prof("--json", "-c", "op,flops,bytes", str(records))  # without it: unknown, said once
    assert json.loads(p.stdout) == {"op": "fused_silu", "flops": None, "bytes": None} and "unknown op" in p.stderr
    p = prof("--costs", str(tmp_path / "none.py"), str(records))
    assert (p.returncode, p.stderr) == (2, f"pyprof.prof: error: --costs {tmp_path / 'none.py'}: no such file\n")
    costs.write_text("raise ValueError('bad formula file')\n")
    p = prof("--costs", str(costs), str(records))
    assert (p.returncode, p.stderr) == (2, f"pyprof.prof: error: --costs {costs}: ValueError: bad formula file\n")
