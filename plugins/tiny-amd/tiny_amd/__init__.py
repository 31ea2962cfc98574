"""tiny-amd: the AMD device plugin for tinycore (AMD GPUs; kernels as HIP-style C compiled by clang to code objects).

The hooks tinycore calls are in `tiny_amd.hooks`; device code is imported only when AMD is opened.
"""
