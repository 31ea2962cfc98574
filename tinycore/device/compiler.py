"""Compiler base: source to binary, with an on-disk cache that survives corrupt or unwritable cache directories."""
from __future__ import annotations

import hashlib
import pathlib

from tinycore.helpers import CACHELEVEL, DEBUG, cache_dir, write_atomically
from tinycore.plugins.contract import CompilerContract

# A cache entry is MAGIC + sha256(payload) + payload; anything else is treated as a miss.
_MAGIC = b"TINYCORE-BIN1\n"
_DIGEST_SIZE = 32


class CompileError(RuntimeError):
    """A compiler rejected a program. `log` holds the compiler's own output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(f"{message}\n{log}" if log else message)
        self.log = log


class Compiler(CompilerContract):
    """Turns source into a binary the device's runtime loads, with a memory and disk cache.

    Subclasses implement `compile(src) -> bytes` and describe themselves with `name`, `version()` and `flags`,
    which (with the source) key the disk cache, so a different compiler or different flags never reuse a binary
    (see `tinycore.plugins.contract.CompilerContract`).
    """

    def __init__(self, cache_subdir: str = "kernels"):
        self.cache_subdir = cache_subdir
        self._memory_cache: dict[str, bytes] = {}

    def disassemble(self, lib: bytes) -> str:
        """Human-readable machine code of a binary (optional)."""
        raise NotImplementedError(f"{type(self).__name__} cannot disassemble")

    def cache_key(self, src: str) -> str:
        """The hex digest keying `src` compiled by this compiler with these flags."""
        identity = "\0".join((self.name, self.version(), *self.flags, src))
        return hashlib.sha256(identity.encode()).hexdigest()

    def cache_path(self, key: str) -> pathlib.Path:
        """Where the binary for `key` is stored on disk."""
        safe_name = "".join(character if character.isalnum() else "_" for character in self.name)
        return cache_dir() / self.cache_subdir / f"{safe_name}-{key}.bin"

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, reusing a binary from memory or disk when the same source, compiler and flags were seen.

        A missing, truncated or corrupt cache file is recompiled and rewritten; an unwritable cache directory only
        means the binary is not stored. CACHELEVEL=0 turns the disk cache off.
        """
        key = self.cache_key(src)
        found = self._memory_cache.get(key)
        if found is not None:
            return found
        use_disk = CACHELEVEL.value > 0
        binary = self._read_cache(key) if use_disk else None
        if binary is None:
            binary = self.compile(src)
            if use_disk:
                self._write_cache(key, binary)
        self._memory_cache[key] = binary
        return binary

    def _read_cache(self, key: str) -> bytes | None:
        try:
            data = self.cache_path(key).read_bytes()
        except OSError:
            return None
        header = len(_MAGIC) + _DIGEST_SIZE
        if len(data) < header or not data.startswith(_MAGIC):
            return None
        digest, payload = data[len(_MAGIC):header], data[header:]
        if hashlib.sha256(payload).digest() != digest:
            if DEBUG >= 1:
                print(f"compile cache entry {self.cache_path(key)} is corrupt: recompiling")
            return None
        return payload

    def _write_cache(self, key: str, binary: bytes) -> None:
        write_atomically(self.cache_path(key), _MAGIC + hashlib.sha256(binary).digest() + binary,
                         "compile cache entry")
