"""Builds the CPU device's worker pool and command queues (tiny_cpu/pool.c) into the wheel, so that running kernels
needs no C compiler. Everything else about the distribution is in pyproject.toml.

The library is opened with ctypes, not imported: it is named like an extension module only so that it is built,
placed and found (importlib's spec of tiny_cpu._pool) wherever the package is installed, editable installs included.
It is optional: where it cannot be built, the install still succeeds and the pool is compiled on first use."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("tiny_cpu._pool", sources=["tiny_cpu/pool.c"], extra_compile_args=["-O2", "-pthread"],
                             extra_link_args=["-pthread"], optional=True)])
