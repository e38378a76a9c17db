from setuptools import find_packages, setup

setup(
    name="pyprof",
    version="0.1.0",
    description="Attribute every GPU kernel of a PyTorch program to its layer, op, shapes and dtypes; "
    "count its FLOPs and bytes, Tensor Core use and distance from the GPU's peak.",
    packages=find_packages(include=["pyprof", "pyprof.*"]),
    python_requires=">=3.9",
    # torch is deliberately not here: parse and prof run on machines without it.
    install_requires=["nvtx>=0.2.5", "SQLAlchemy>=2,<3"],
    extras_require={
        # Plain "torch": on a machine without torch this pulls CUDA wheels; CPU users install
        # a CPU build first (README), which then satisfies it.
        "torch": ["torch>=2.1"],
        "test": ["pytest>=7", "matplotlib", "pandas"],
        "plot": ["matplotlib"],
        "pandas": ["pandas"],
    },
)
