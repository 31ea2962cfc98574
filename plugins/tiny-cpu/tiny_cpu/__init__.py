"""tiny-cpu: the CPU device plugin for tinycore.

C kernels are compiled by gcc or clang to shared objects and run on the host's cores. The hooks tinycore calls are
in `tiny_cpu.hooks`; device code is imported only when CPU is opened.
"""
