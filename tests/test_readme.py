"""What the README tells a newcomer to install and run is what the project needs."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_readme_set_up_installs_the_setuptools_the_build_needs() -> None:
    """Each environment the README sets up gets the setuptools pyproject.toml builds with (the
    analysis-only one too: with the venv's own setuptools 65 tests/test_sdist.py skips), through
    the test extra, which every set-up installs in one plain pip command."""
    readme = (ROOT / "README.md").read_text()
    project = (ROOT / "pyproject.toml").read_text()
    need = re.search(r'requires = \["(setuptools>=\d+)"\]', project).group(1)
    assert f'"{need}"' in re.search(r"^test = \[(.+)\]$", project, re.M).group(1)
    for step in ("setup", "analysis-setup"):
        line = re.search(rf"<!-- ci:{step} -->\n```\n(.+)\n", readme).group(1)
        pip = line.split(" && ")[-1]
        assert pip.startswith("pip install ") and pip.endswith(" -e '.[test]'"), step
        assert "--no-build-isolation" not in line and line.count("pip install") == 1, step


def test_the_readme_names_the_distribution() -> None:
    name = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert name == "pyprof-nvtx"
    assert "`pyprof-nvtx`" in (ROOT / "README.md").read_text()
