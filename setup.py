"""pyprof's optional C extension; everything else about the package is in pyproject.toml.

pyprof/nvtx/_hot.c is the marker cache's hit path. `optional=True`: without a C compiler the
install still succeeds and pyprof.nvtx.memo does the same look-up in Python.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("pyprof.nvtx._hot", ["pyprof/nvtx/_hot.c"], optional=True)])
