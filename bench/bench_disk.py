"""Memory bench for DISK loading: peak RSS of loading a large safetensors file and summing one tensor on CPU.

    python bench/bench_disk.py [--gigabytes 1.0] [--directory /tmp]

The file (many 16 MiB float32 tensors) is written in chunks by this script, then a fresh Python process loads it
with safe_load_disk, copies one tensor to CPU, sums it, checks the sum, and reports its peak resident memory
(ru_maxrss) next to the peak of the same process that only imported tinycore. Not run in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TENSOR_ELEMENTS = 4 * 1024 * 1024  # 16 MiB of float32

MEASURE = r"""
import json, resource, sys, time
import numpy
from tinycore.tensor import Tensor
from tinycore.nn.safetensors_disk import safe_load_disk
Tensor([1.0], device="CPU").realize()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
tensors = safe_load_disk(sys.argv[1])
total = tensors[sys.argv[2]].to("CPU").sum().item()
elapsed = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"tensors": len(tensors), "sum": total, "seconds": elapsed, "rss_before_kib": before,
                  "rss_after_kib": after}))
"""


def write_file(path: Path, tensor_count: int) -> None:
    """A safetensors file of `tensor_count` float32 tensors; tensor i holds the value i everywhere."""
    header: dict[str, dict[str, object]] = {}
    nbytes = TENSOR_ELEMENTS * 4
    for index in range(tensor_count):
        header[f"layer{index}"] = {"dtype": "F32", "shape": [TENSOR_ELEMENTS],
                                   "data_offsets": [index * nbytes, (index + 1) * nbytes]}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        for index in range(tensor_count):
            handle.write(struct.pack("<f", float(index)) * TENSOR_ELEMENTS)


def main() -> None:
    """Write the file, measure in a fresh process, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--directory", default=tempfile.gettempdir())
    arguments = parser.parse_args()
    tensor_count = max(2, int(arguments.gigabytes * (1 << 30)) // (TENSOR_ELEMENTS * 4))
    path = Path(arguments.directory) / f"tinycore-bench-disk-{os.getpid()}.safetensors"
    try:
        started = time.perf_counter()
        write_file(path, tensor_count)
        print(f"wrote {path.stat().st_size / (1 << 30):.2f} GiB ({tensor_count} tensors) in "
              f"{time.perf_counter() - started:.1f} s")
        chosen = tensor_count // 2
        root = Path(__file__).resolve().parent.parent
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run([sys.executable, "-c", MEASURE, str(path), f"layer{chosen}"], capture_output=True,
                                text=True, env=environment, check=True)
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        expected = float(chosen) * TENSOR_ELEMENTS
        assert abs(figures["sum"] - expected) <= 1e-3 * expected, (figures["sum"], expected)
        file_mib = path.stat().st_size / (1 << 20)
        peak_mib, base_mib = figures["rss_after_kib"] / 1024, figures["rss_before_kib"] / 1024
        print(f"load + sum of one 16 MiB tensor: {figures['seconds']:.2f} s; peak RSS {peak_mib:.0f} MiB "
              f"(after import and a first CPU kernel: {base_mib:.0f} MiB; growth {peak_mib - base_mib:.0f} MiB) "
              f"for a {file_mib:.0f} MiB file ({100 * peak_mib / file_mib:.1f}% of the file size)")
    finally:
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
