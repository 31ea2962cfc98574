"""tiny-webgpu: the WEBGPU device plugin for tinycore (WebGPU adapters through wgpu-native).

The hooks tinycore calls are in `tiny_webgpu.hooks`; device code is imported only when WEBGPU is opened.
"""
