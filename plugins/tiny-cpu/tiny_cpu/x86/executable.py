"""Executable memory for machine code written in Python: mmap read+write, copy the bytes in, then mprotect to
read+execute (W^X: never writable and executable at once), and call through ctypes."""

from __future__ import annotations

import ctypes
import mmap
import platform
from typing import Any

_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def host_is_x86_64() -> bool:
    """True when this process runs x86-64 code natively."""
    return platform.machine().lower() in ("x86_64", "amd64")


class ExecutableCode:
    """Machine code mapped into this process, read+execute only. `function(restype, *argtypes)` gives a ctypes
    callable for its entry point (offset 0); the mapping lives as long as this object or any such callable."""

    def __init__(self, code: bytes) -> None:
        if not host_is_x86_64():
            raise RuntimeError(f"x86-64 machine code cannot run on this {platform.machine()} host; use DEV=CPU")
        if not code:
            raise ValueError("no machine code to load")
        self.size = -(-len(code) // _PAGE) * _PAGE
        address = _libc.mmap(
            None, self.size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0
        )
        if address in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), "mmap of executable memory failed")
        self.address: int = address
        ctypes.memmove(self.address, code, len(code))
        if _libc.mprotect(self.address, self.size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            error = ctypes.get_errno()
            _libc.munmap(self.address, self.size)
            raise OSError(error, "mprotect to read+execute failed (is executable memory forbidden here?)")

    def function(self, restype: Any, *argtypes: Any) -> Any:
        """A ctypes function calling the code's entry point with the System V ABI."""
        prototype = ctypes.CFUNCTYPE(restype, *argtypes)
        function = prototype(self.address)
        function._code = self  # type: ignore[attr-defined]  # keeps the mapping alive while the callable is
        return function

    def __del__(self) -> None:
        if getattr(self, "address", None):
            _libc.munmap(self.address, self.size)
            self.address = 0
