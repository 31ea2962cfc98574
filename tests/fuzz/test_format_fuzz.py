"""Fuzzing the weight-file loaders: seeded mutations of valid safetensors, GGUF and torch (zip and legacy) files.

Each mutated file must either load or raise the documented MalformedFileError (a ValueError); nothing may crash,
hang, read outside the file, or allocate much more than the file's size, and every tensor a load returns must lie
inside the file. TINYCORE_FUZZ_LONG=1 runs ten times as many files.
"""
from __future__ import annotations

import collections
import io
import json
import os
import random
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tiny_disk.allocator as disk_allocator
import torch
from gguf_writer import random_blocks, write_gguf

from tinycore.engine.memory import buffer_of
from tinycore.nn.file_checks import MalformedFileError
from tinycore.nn.gguf import gguf_load
from tinycore.nn.safetensors_disk import safe_load_disk
from tinycore.nn.torch_load import torch_load
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

FILES_PER_FORMAT = 20_000 if os.environ.get("TINYCORE_FUZZ_LONG") == "1" else 2_000
MEMORY_CHECK_EVERY = 10
EXTREMES = [0, 1, 7, 255, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def _safetensors_file() -> bytes:
    header = {"__metadata__": {"k": "v"},
              "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
              "c": {"dtype": "BF16", "shape": [4], "data_offsets": [40, 48]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(range(48))


def _gguf_file(path: Path) -> bytes:
    rng = np.random.default_rng(0)
    metadata = [("general.name", 8, "fuzz"), ("n", 4, 3), ("list", 9, (5, [1, 2, 3])),
                ("words", 9, (8, ["a", "bc"]))]
    tensors = [("f", (2, 4), 0, np.arange(8, dtype=np.float32).tobytes()), ("h", (3,), 1, b"\0\x3c" * 3),
               ("q", (32,), 8, random_blocks(8, 1, rng))]
    return write_gguf(path, metadata, tensors).read_bytes()


def _torch_file(zip_format: bool) -> bytes:
    buffer = io.BytesIO()
    state = collections.OrderedDict(w=torch.arange(6.0).reshape(2, 3), t=torch.arange(6.0).reshape(2, 3).T,
                                    h=torch.ones(3, dtype=torch.bfloat16), meta={"n": [1, "x"]})
    torch.save(state, buffer, _use_new_zipfile_serialization=zip_format)
    return buffer.getvalue()


# ---- mutations ----

def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data))]


def _flip(data: bytes, rng: random.Random) -> bytes:
    mutated = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        mutated[rng.randrange(len(mutated))] = rng.randrange(256)
    return bytes(mutated)


def _extreme_field(data: bytes, rng: random.Random) -> bytes:
    mutated = bytearray(data)
    width = rng.choice([4, 8])
    position = rng.randrange(len(mutated) - width)
    if rng.random() < 0.5:
        position -= position % width
    value = rng.choice(EXTREMES + [len(data), len(data) + 1, rng.randrange(1 << (8 * width))])
    mutated[position:position + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    return bytes(mutated)


def _splice(data: bytes, rng: random.Random) -> bytes:
    start, end = sorted(rng.randrange(len(data)) for _ in range(2))
    if rng.random() < 0.5:
        return data[:start] + data[end:]
    return data[:start] + data[start:end] * rng.randint(2, 4) + data[end:]


def _append(data: bytes, rng: random.Random) -> bytes:
    return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))


def _safetensors_header(data: bytes, rng: random.Random) -> bytes:
    """Rewrite one field of the JSON header: offsets (past the end, negative, reversed, overlapping), dtype, shape."""
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    key = rng.choice(["a", "b", "c"])
    choice = rng.randrange(7)
    if choice == 0:
        header[key]["data_offsets"] = [rng.randint(-100, 100), rng.choice(EXTREMES + [-1, 48, 49])]
    elif choice == 1:
        header[key]["dtype"] = rng.choice(["F33", "", "Q4_0", "I128", 5, None])
    elif choice == 2:
        header[key]["shape"] = rng.choice([[-1], [1 << 62, 1 << 62], [1 << 64], [2.5], "x", [0], [1] * 100])
    elif choice == 3:
        header["b"]["data_offsets"] = [16, 32]  # overlaps "a"
    elif choice == 4:
        header[key] = rng.choice([[], "x", {"dtype": "F32"}, None])
    elif choice == 5:
        header["__metadata__"] = rng.choice([{"k": 1}, [], "x"])
    else:
        raw = json.dumps(header).encode()
        return struct.pack("<Q", rng.choice(EXTREMES + [len(raw) + 1, len(data)])) + raw + body
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


Mutation = Callable[[bytes, random.Random], bytes]
GENERIC: list[Mutation] = [_truncate, _flip, _extreme_field, _extreme_field, _splice, _append]


# ---- the harness ----

class _ReadGuard:
    """Records every read the DISK allocator makes that goes past the end of the file being loaded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.size = 0
        self.violations: list[tuple[int, int]] = []
        original = os.preadv

        def guarded(descriptor: int, buffers: list[Any], offset: int) -> int:
            requested = sum(memoryview(buffer).nbytes for buffer in buffers)
            if offset < 0 or offset + requested > self.size:
                self.violations.append((offset, requested))
            return original(descriptor, buffers, offset)
        monkeypatch.setattr(disk_allocator.os, "preadv", guarded)


def _tensors_in(result: Any) -> list[Tensor]:
    found: list[Tensor] = []
    stack, seen = [result], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Tensor):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    return found


def _check_inside_file(tensors: list[Tensor], size: int) -> None:
    """Every DISK buffer behind `tensors` must be a range inside the file."""
    for tensor in tensors:
        for node in tensor.uop.toposort:
            if node.op is Ops.BUFFER and str(node.src[0].arg).startswith("DISK"):
                handle = buffer_of(node)._buf
                if handle is not None:
                    assert 0 <= handle.offset and handle.offset + handle.size <= size, (handle, size)


def _fuzz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, original: bytes,
          load: Callable[[Path], Any], mutations: list[Mutation], seed: int, count: int = FILES_PER_FORMAT) -> None:
    rng = random.Random(seed)
    path = tmp_path / name
    guard = _ReadGuard(monkeypatch)
    outcomes: collections.Counter[str] = collections.Counter()
    slowest = 0.0
    for iteration in range(count):
        mutated = rng.choice(mutations)(original, rng)
        path.write_bytes(mutated)
        guard.size = len(mutated)
        measure = iteration % MEMORY_CHECK_EVERY == 0
        if measure:
            tracemalloc.start()
        started = time.perf_counter()
        try:
            result = load(path)
            outcomes["loaded"] += 1
            _check_inside_file(_tensors_in(result), len(mutated))
            del result
        except MalformedFileError as error:
            assert str(path) in str(error), error
            outcomes[type(error).__name__] += 1
        except Exception as error:  # noqa: BLE001 - reported with the reproducer
            pytest.fail(f"{name} iteration {iteration} (seed {seed}) raised {type(error).__name__}: {error}")
        finally:
            if measure:
                used = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
        slowest = max(slowest, time.perf_counter() - started)
        if measure:
            assert used <= 64 * len(mutated) + (4 << 20), f"{name} iteration {iteration}: {used} bytes allocated"
    assert guard.violations == [], guard.violations[:5]
    # a hang guard, not a speed check: generous enough for a loaded CI machine compiling a first kernel
    assert slowest < 120.0, f"a {name} load took {slowest:.1f} s (a loop the file's counts drive?)"
    assert 0 < outcomes["loaded"] < count, outcomes  # the mutations break files, and not all of them
    assert sum(outcomes.values()) == count


def test_fuzz_safetensors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fuzz(tmp_path, monkeypatch, "fuzz.safetensors", _safetensors_file(), safe_load_disk,
          GENERIC + [_safetensors_header] * 4, seed=1)


def test_fuzz_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fuzz(tmp_path, monkeypatch, "fuzz.gguf", _gguf_file(tmp_path / "base.gguf"), gguf_load, GENERIC, seed=2)


@pytest.mark.parametrize("zip_format", [True, False])
def test_fuzz_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zip_format: bool) -> None:
    """Half of the torch files start from the zip format, half from the legacy one."""
    _fuzz(tmp_path, monkeypatch, "fuzz.pt", _torch_file(zip_format), torch_load, GENERIC, seed=3 + zip_format,
          count=FILES_PER_FORMAT // 2)
