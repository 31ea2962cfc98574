"""Random GGUF blocks and tiny random-weight GGUF models for the tinycore.llm tests (from tinycore.llm.test_model),
greedy decoding by the float32 numpy reference of the transformer (llm_reference, which reads the file back with
gguf's own reader and dequantization), the text of byte-vocabulary tokens, and a `tiny llm --serve` subprocess with
a raw HTTP client for the server tests."""
from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator

import numpy
import pytest

from tinycore.device.registry import Device
from tinycore.llm.test_model import HALF_FIELDS, MODEL_FACTORS, random_blocks, weight_array, write_test_model

__all__ = ["HALF_FIELDS", "MODEL_FACTORS", "byte_text", "greedy_reference", "random_blocks", "raw_request", "served",
           "weight_array", "write_model"]

write_model = write_test_model
"""A tiny random-weight model (tinycore.llm.test_model.write_test_model, whose output is byte for byte what the gguf
package's GGUFWriter writes: tests/llm/test_llm_test_model.py)."""


def greedy_reference(path: str, ids: list[int], count: int, stop: tuple[int, ...] = ()) -> list[int]:
    """The tokens greedy decoding picks after `ids`, by the numpy reference (whole sequence each step)."""
    import llm_reference
    sequence = list(ids)
    generated: list[int] = []
    for _ in range(count):
        token = int(numpy.argmax(llm_reference.logits(path, sequence)[-1]))
        generated.append(token)
        if token in stop:
            break
        sequence.append(token)
    return generated


def byte_text(tokens: list[int]) -> str:
    """The text of byte-vocabulary tokens (ids below 256 stand for the bytes of the byte-level alphabet, in order)."""
    return bytes(token for token in tokens if token < 256).decode("utf-8", errors="replace")


@contextlib.contextmanager
def served(path: str, *options: str) -> Iterator[str]:
    """The base URL (http://127.0.0.1:PORT/v1) of a `tiny llm --serve 0` subprocess on the model at `path`, with
    further command-line `options`; the server is stopped on exit."""
    process = subprocess.Popen([sys.executable, "-m", "tinycore.cli", "llm", "--model", path, "--serve", "0",
                                *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("serving"):
            process.kill()
            errors = process.stderr.read() if process.stderr else ""
            raise AssertionError(f"the server did not start: {line!r} {errors}")
        yield line.rsplit(" on ", 1)[1].strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


def raw_request(base: str, data: bytes, timeout: float = 60.0) -> tuple[int, dict[str, object]]:
    """Send the bytes `data` as they are to the server at `base` (its URL) and read one HTTP response: its status
    and its JSON body."""
    address = urllib.parse.urlsplit(base)
    connection = socket.create_connection((address.hostname, address.port), timeout=timeout)
    try:
        connection.sendall(data)
        response = http.client.HTTPResponse(connection)
        response.begin()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def record_largest_allocation(monkeypatch: pytest.MonkeyPatch, device: str) -> list[int]:
    """Patches `device`'s allocator class to record the largest allocation asked for: a one-item list, updated."""
    allocator = Device[device].allocator
    largest = [0]
    original = type(allocator).alloc

    def recording(self: object, size: int, options: object = None) -> object:
        largest[0] = max(largest[0], size)
        return original(self, size, options)  # type: ignore[arg-type]
    monkeypatch.setattr(type(allocator), "alloc", recording)
    return largest
