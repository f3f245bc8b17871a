"""Build of perfwatch's compiled E-Divisive kernels (everything else is in pyproject.toml).

The kernels are a Cython extension compiled at install time.  Floating-point
results must round exactly as the source is written (the compatibility mode
reproduces numpy's sums bit for bit), so the C compiler gets no fast-math and
no floating-point contraction (a fused multiply-add rounds once where numpy
rounds twice).
"""

import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

if sys.platform == "win32":
    extra_compile_args = ["/fp:precise"]
else:
    extra_compile_args = ["-O2", "-fno-fast-math", "-ffp-contract=off"]

extensions = [
    Extension(
        "perfwatch.detectors._kernels",
        ["src/perfwatch/detectors/_kernels.pyx"],
        extra_compile_args=extra_compile_args,
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )
)
