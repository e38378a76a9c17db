"""pyprof's optional extension; everything else about the package is in pyproject.toml.

pyprof/nvtx/_hot.c is the marker cache's hit path, in C without torch. It is optional: without a
compiler, or when it fails to build, the install still succeeds and pyprof.nvtx.memo does the same
look-up in Python.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("pyprof.nvtx._hot", ["pyprof/nvtx/_hot.c"], optional=True)])
