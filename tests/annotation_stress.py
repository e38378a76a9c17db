"""Annotation stress, run as its own process by tests/fuzz/test_fuzz_annotation.py under the counting
NVTX tool (tests/nvtx_count_tool.c): worker threads call ops, modules, optimizer steps, wrapped
functions and `pyprof.annotate` blocks, some of which raise, while the main thread toggles
`pyprof.init()` / `restore()` / `init(nested=True)`, recordings and `torch.jit.script` (which
unwraps and rewraps torch for every thread). Prints one JSON object: what the tool counted and
what went wrong; the test asserts on it and on an empty stderr at exit.

    python tests/annotation_stress.py TOOL.so ITERATIONS THREADS
"""
from __future__ import annotations

import ctypes
import json
import random
import sys
import threading

import torch
import torch.nn.functional as F

import pyprof
from pyprof.nvtx import emit, recording, wrappers


class Boom(Exception):
    """Raised on purpose inside wrapped calls."""


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.inner = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 4))

    def forward(self, x: torch.Tensor, fail: bool = False) -> torch.Tensor:
        y = self.inner(self.fc(x))
        if fail:
            raise Boom("inside forward")
        return torch.add(y, 1.0)


def user_fn(x: torch.Tensor, fail: bool) -> torch.Tensor:
    if fail:
        raise Boom("inside a wrapped user function")
    return x * 2


wrapped_user_fn = pyprof.wrap(user_fn, "stress")


def step(rng: random.Random, net: Block, opt: torch.optim.Optimizer) -> None:
    """One random action; Boom when it was told to fail."""
    fail = rng.random() < 0.3
    x = torch.ones(2, 4)
    action = rng.randrange(6)
    if action == 0:
        out = net(x, fail=fail)
        assert out.shape == (2, 4)
    elif action == 1:
        with pyprof.annotate("stress"):
            y = F.relu(x) + torch.mul(x, 3)
            assert float(y.sum()) == 32.0
            if fail:
                raise Boom("inside annotate")
    elif action == 2:
        net(x).sum().backward()
        opt.step()
        opt.zero_grad()
        if fail:
            raise Boom("after a step")
    elif action == 3:
        assert float(wrapped_user_fn(x, fail).sum()) == 16.0
    elif action == 4:
        @pyprof.annotate("decorated")
        def inner() -> torch.Tensor:
            with pyprof.annotate("nested"):
                if fail:
                    raise Boom("inside a decorated function")
                return torch.matmul(x, x.t())
        assert float(inner().sum()) == 16.0
    else:
        t = x.clone()
        t[0] = 5.0  # Tensor.__setitem__
        t += 1      # Tensor.__iadd__
        if fail:
            torch.cat([t, torch.ones(3)])  # a shape error raised by torch itself
        assert float(t.sum()) == 6.0 * 4 + 2.0 * 4


def worker(tool: ctypes.CDLL, n: int, seed: int, out: dict) -> None:
    rng = random.Random(seed)
    net = Block()
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    bad = []
    for i in range(n):
        try:
            step(rng, net, opt)
        except (Boom, RuntimeError):
            pass
        except Exception as err:  # anything else is pyprof's doing
            bad.append(f"iteration {i}: {type(err).__name__}: {err}")
        if tool.tool_depth() != 0:
            bad.append(f"iteration {i}: {tool.tool_depth()} ranges left open")
            break
        tl = wrappers.thread_state()
        if (tl.depth, tl.mod, tl.names, emit._pushed.stack) != (0, "", None, []):
            bad.append(f"iteration {i}: thread state left behind {tl.depth, tl.mod, tl.names, emit._pushed.stack}")
            break
    out[seed] = {"bad": bad, "underflows": tool.tool_underflows()}


def toggle(stop: threading.Event, rng: random.Random) -> int:
    """Flip the switches until `stop` is set; returns how many times."""
    n = 0
    scripted = torch.nn.Linear(2, 2)
    while not stop.is_set():
        choice = rng.randrange(5)
        if choice == 0:
            pyprof.restore()
        elif choice == 1:
            pyprof.init()
        elif choice == 2:
            pyprof.init(nested=True)
        elif choice == 3:
            with recording():
                stop.wait(0.001)
        else:
            torch.jit.script(scripted)
        n += 1
        stop.wait(0.0005)
    return n


def main() -> None:
    tool_path, iterations, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tool = ctypes.CDLL(tool_path)  # the library NVTX loaded: the same counters
    assert emit.state.live, "the NVTX tool was not loaded"
    torch.manual_seed(0)
    pyprof.init()
    results: dict = {}
    workers = [threading.Thread(target=worker, args=(tool, iterations, seed, results)) for seed in range(threads)]
    stop = threading.Event()
    for t in workers:
        t.start()
    flips = [0]
    flipper = threading.Thread(target=lambda: flips.__setitem__(0, toggle(stop, random.Random(99))))
    flipper.start()
    for t in workers:
        t.join()
    stop.set()
    flipper.join()
    pyprof.init()  # left on: the interpreter exits with the wrappers installed and a live tool
    print(json.dumps({"pushes": tool.tool_pushes(), "pops": tool.tool_pops(), "toggles": flips[0],
                      "threads": results, "main_depth": tool.tool_depth()}))


if __name__ == "__main__":
    main()
