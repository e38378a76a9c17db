"""The source distribution carries what its extension needs to build: a file missing from it makes
the optional extension fail to build on the user's machine, silently (pyprof then runs in Python)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("setuptools", minversion="77", reason="pyproject.toml's build needs setuptools>=77")
ROOT = Path(__file__).resolve().parent.parent


def test_the_sdist_ships_every_extension_source_and_local_header(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "pyprof", tree / "pyprof", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    dist = tmp_path / "dist"
    done = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist)],
                          cwd=tree, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (sdist,) = dist.glob("*.tar.gz")
    # "pyprof" on PyPI is another project: this one is distributed as pyprof-nvtx (import name pyprof).
    assert sdist.name.startswith("pyprof_nvtx-")
    with tarfile.open(sdist) as tar:
        shipped = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    sources = sorted(p for p in (ROOT / "pyprof").rglob("*") if p.suffix in (".c", ".cpp", ".h"))
    assert [p.name for p in sources] == ["_hot.c"]
    for src in sources:
        rel = src.relative_to(ROOT).as_posix()
        assert rel in shipped
        for header in re.findall(r'^#include "([^"]+)"', src.read_text(), re.M):
            assert (src.parent.relative_to(ROOT) / header).as_posix() in shipped, f"{rel} includes {header}"

