"""pyprof's optional extensions; everything else about the package is in pyproject.toml.

pyprof/nvtx/_hot.c is the marker cache's hit path, in C without torch. pyprof/nvtx/_aten.cpp reads
a tensor's shape, strides and dtype from ATen for it, built against the torch importable here:
pip's default isolated build has none (it is then skipped with a line saying so), so install with
`pip install --no-build-isolation` into an environment that has torch. Both are optional: without
a compiler, or when one fails to build, the install still succeeds and pyprof.nvtx.memo does the
same look-up with what was built (in Python at worst).
"""
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# depends: rebuilt when the shared header changes, and shipped in the sdist with the sources.
HOT = Extension("pyprof.nvtx._hot", ["pyprof/nvtx/_hot.c"], depends=["pyprof/nvtx/_aten.h"], optional=True)


def _aten_build():
    """(the _aten Extension, a build_ext command that builds it beside _hot), or None without a
    usable torch here."""
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except Exception as e:  # not installed (pip's isolated build), or broken: _hot alone
        print(f"pyprof: no usable torch in this build environment ({type(e).__name__}: {e}): "
              "pyprof.nvtx._aten not built (pip install --no-build-isolation builds it)", file=sys.stderr)
        return None
    # pyprof.nvtx.memo compares built_for with the running torch's before using the module.
    built_for = f"{torch.__version__} {torch.version.git_version}"
    aten = CppExtension("pyprof.nvtx._aten", ["pyprof/nvtx/_aten.cpp"], depends=["pyprof/nvtx/_aten.h"], optional=True,
                        define_macros=[("PYPROF_BUILT_FOR", '"%s"' % built_for)])

    class BuildBoth(BuildExtension.with_options(use_ninja=False)):
        """torch's BuildExtension (it knows the flags its headers need: C++ standard, ABI) for
        _aten alone: it would give _hot's C source C++ flags, and its own checks may fail where a
        plain C build does not."""

        def build_extensions(self) -> None:
            every = self.extensions
            try:
                self.extensions = [e for e in every if e is not aten]
                build_ext.build_extensions(self)
                self.extensions = [aten]
                try:
                    super().build_extensions()
                except Exception as e:  # optional covers compile errors only, not BuildExtension's own
                    print(f"pyprof: pyprof.nvtx._aten not built ({type(e).__name__}: {e})", file=sys.stderr)
            finally:
                self.extensions = every

    return aten, BuildBoth


built = _aten_build()
setup(ext_modules=[HOT] + ([built[0]] if built else []), cmdclass={"build_ext": built[1]} if built else {})
