"""tiny-cl: the CL device plugin for tinycore (OpenCL devices through the ICD loader (libOpenCL)).

The hooks tinycore calls are in `tiny_cl.hooks`; device code is imported only when CL is opened.
"""
