"""tiny-disk: the DISK device plugin for tinycore (Files as device memory (mmap, pread), for loading weights).

The hooks tinycore calls are in `tiny_disk.hooks`; device code is imported only when DISK is opened.
"""
