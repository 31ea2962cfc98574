"""tiny-nv: the NV device plugin for tinycore (NVIDIA GPUs through the CUDA driver API).

The hooks tinycore calls are in `tiny_nv.hooks`; device code is imported only when NV is opened.
"""
