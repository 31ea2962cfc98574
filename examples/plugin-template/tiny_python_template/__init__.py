"""tiny-python-template: a tinycore device plugin providing PYTHON, a device written in pure Python.

Kernels are not compiled: the renderer writes the linear program (the list of UOps codegen produced) into the
"source", and the runtime runs it with tinycore's UOp interpreter. Copy this package to start a new device plugin.
"""
