"""pyprof's optional extensions; everything else about the package is in pyproject.toml.

pyprof/nvtx/_hot.c is the marker cache's hit path, in C without torch. pyprof/nvtx/_aten.cpp reads
a tensor's shape, strides and dtype from ATen for it, built against the torch importable here:
pip's default isolated build has none (it is then skipped with a line saying so), so install with
`pip install --no-build-isolation` into an environment that has torch. Both are `optional`: without
a compiler the install still succeeds and pyprof.nvtx.memo does the same look-up in Python.
"""
import sys

from setuptools import Extension, setup

extensions = [Extension("pyprof.nvtx._hot", ["pyprof/nvtx/_hot.c"], optional=True)]
commands = {}
try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    print("pyprof: torch is not importable in this build environment: pyprof.nvtx._aten not built "
          "(pip install --no-build-isolation builds it)", file=sys.stderr)
else:
    # torch's BuildExtension knows the flags its headers need (C++ standard, ABI); pyprof.nvtx.memo
    # compares built_for with the running torch's version before using the module.
    extensions.append(CppExtension("pyprof.nvtx._aten", ["pyprof/nvtx/_aten.cpp"], optional=True,
                                   define_macros=[("PYPROF_BUILT_FOR", '"%s"' % torch.__version__)]))
    commands["build_ext"] = BuildExtension.with_options(use_ninja=False)
    # It builds _hot too and gives every source without a -std flag its C++ one.
    if sys.platform != "win32":
        extensions[0].extra_compile_args = ["-std=gnu11"]

setup(ext_modules=extensions, cmdclass=commands)
