"""tiny-amd: the AMD device plugin for tinycore (AMD GPUs through KFD or the HIP runtime).

The hooks tinycore calls are in `tiny_amd.hooks`; device code is imported only when AMD is opened.
"""
