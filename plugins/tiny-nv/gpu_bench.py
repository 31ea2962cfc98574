"""NV benchmark for a machine with an NVIDIA GPU (run by gpu_check.sh): copy bandwidth host<->device and
device<->device, elementwise GB/s against the measured device copy bandwidth, fp16 and fp32 matmul TFLOPS, and
torch + cuBLAS beside them when torch with CUDA is installed.

Run: `python plugins/tiny-nv/gpu_bench.py --json REPORT.json [--size 8192]` with DEV naming the interface
(DEV=CUDA+NV). Every figure is the median of a few timed repeats after a first (compiling) run, each ended by a
device synchronisation; results are checked against numpy on a slice.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy

from tinycore.device.registry import Device
from tinycore.dtype import dtypes
from tinycore.plugins.contract import copies_to_buffer
from tinycore.tensor import Tensor


def timed(function: Callable[[], Any], repeats: int, synchronize: Callable[[], None]) -> float:
    """Median seconds of `repeats` calls of `function`, after one untimed call, each ended by `synchronize`."""
    function()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def copy_bandwidth(device: Any, nbytes: int, repeats: int) -> dict[str, float]:
    """GB/s of host->device, device->host and device->device copies of `nbytes` through the device's allocator."""
    allocator = device.allocator
    host = numpy.ones(nbytes, numpy.uint8)
    back = numpy.empty_like(host)
    first, second = allocator.alloc(nbytes), allocator.alloc(nbytes)
    synchronize = device.synchronize
    to_device = timed(lambda: allocator.copyin(first, memoryview(host)), repeats, synchronize)
    to_host = timed(lambda: allocator.copyout(memoryview(back), first), repeats, synchronize)
    result = {"host_to_device_GBps": nbytes / to_device / 1e9, "device_to_host_GBps": nbytes / to_host / 1e9}
    if copies_to_buffer(allocator):
        copier = allocator.copy_to_buffer
        from tinycore.device.buffer import Buffer
        target = Buffer(device.device, nbytes, dtypes.uint8).allocate()
        within = timed(lambda: copier(first, target), repeats, synchronize)
        # a device copy reads and writes every byte: the memory traffic is twice the size
        result["device_to_device_GBps"] = 2 * nbytes / within / 1e9
    allocator.free(first, nbytes)
    allocator.free(second, nbytes)
    return result


def elementwise(device_name: str, count: int, repeats: int) -> dict[str, float]:
    """GB/s of out = a * 2 + b over `count` float32s (reads two arrays, writes one)."""
    a = Tensor.rand(count, device=device_name).realize()
    b = Tensor.rand(count, device=device_name).realize()
    out = Tensor.empty(count, device=device_name).realize()
    seconds = timed(lambda: out.assign(a * 2 + b).realize(), repeats, Device[device_name].synchronize)
    head = (a[:1000] * 2 + b[:1000]).numpy()
    numpy.testing.assert_allclose(out[:1000].numpy(), head, rtol=1e-6)
    return {"elementwise_GBps": 3 * 4 * count / seconds / 1e9, "elementwise_seconds": seconds}


def matmul(device_name: str, size: int, dtype: Any, repeats: int) -> dict[str, float]:
    """TFLOPS of a size x size x size matmul in `dtype` (float accumulation), checked on a few outputs."""
    a = Tensor.rand(size, size, device=device_name).cast(dtype).realize()
    b = Tensor.rand(size, size, device=device_name).cast(dtype).realize()
    out = Tensor.empty(size, size, dtype=dtype, device=device_name).realize()
    seconds = timed(lambda: out.assign(a @ b).realize(), repeats, Device[device_name].synchronize)
    rows = a[:4].cast(dtypes.float32).numpy()
    expected = rows @ b.cast(dtypes.float32).numpy()
    tolerance = 2e-2 if dtype != dtypes.float32 else 1e-3
    numpy.testing.assert_allclose(out[:4].cast(dtypes.float32).numpy(), expected, rtol=tolerance, atol=tolerance * 8)
    return {"TFLOPS": 2 * size ** 3 / seconds / 1e12, "seconds": seconds}


def torch_figures(size: int, count: int, repeats: int) -> dict[str, Any]:
    """The same figures from torch (cuBLAS for matmul) when torch with CUDA is installed."""
    try:
        import torch
    except ImportError:
        return {"available": False, "reason": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"available": False, "reason": f"torch {torch.__version__} has no CUDA device"}
    figures: dict[str, Any] = {"available": True, "version": torch.__version__}
    synchronize = torch.cuda.synchronize
    for name, dtype in (("fp16", torch.float16), ("fp32", torch.float32)):
        a = torch.rand(size, size, device="cuda", dtype=dtype)
        b = torch.rand(size, size, device="cuda", dtype=dtype)
        seconds = timed(lambda a=a, b=b: torch.matmul(a, b), repeats, synchronize)
        figures[f"matmul_{name}_TFLOPS"] = 2 * size ** 3 / seconds / 1e12
    a, b = torch.rand(count, device="cuda"), torch.rand(count, device="cuda")
    out = torch.empty_like(a)
    seconds = timed(lambda: torch.add(a * 2, b, out=out), repeats, synchronize)
    figures["elementwise_GBps"] = 3 * 4 * count / seconds / 1e9  # a * 2 makes a temporary: torch moves more
    return figures


def main() -> None:
    """Run every figure and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where to write the report")
    parser.add_argument("--size", type=int, default=8192, help="matmul size (default 8192)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="tiny sizes: a smoke test of the script (DEV=MOCK+NV)")
    arguments = parser.parse_args()
    if arguments.small:
        arguments.size, arguments.repeats = 16, 1
    device = Device["NV"]
    report: dict[str, Any] = {"device": getattr(device, "description", "NV"), "matmul_size": arguments.size,
                              "renderer": type(device.renderer).__name__, "arch": getattr(device.renderer, "arch", "")}
    count = 1 << (8 if arguments.small else 28)  # 1 GiB per float32 array on a GPU
    report["copies"] = copy_bandwidth(device, 4 * count, arguments.repeats)
    report["elementwise"] = elementwise("NV", count, arguments.repeats)
    device_copy = report["copies"].get("device_to_device_GBps")
    if device_copy:
        report["elementwise"]["fraction_of_device_copy"] = report["elementwise"]["elementwise_GBps"] / device_copy
    for name, dtype in (("fp16", dtypes.float16), ("fp32", dtypes.float32)):
        try:
            repeats = arguments.repeats if arguments.small else max(2, arguments.repeats // 2)
            report[f"matmul_{name}"] = matmul("NV", arguments.size, dtype, repeats)
        except Exception as error:  # noqa: BLE001 - one failing figure must not lose the others
            report[f"matmul_{name}"] = {"error": f"{type(error).__name__}: {error}"[:2000]}
    report["torch"] = {"available": False, "reason": "--small"} if arguments.small else \
        torch_figures(arguments.size, count, arguments.repeats)
    if report["torch"].get("available") and "TFLOPS" in report.get("matmul_fp16", {}):
        report["matmul_fp16"]["fraction_of_cublas"] = report["matmul_fp16"]["TFLOPS"] / \
            report["torch"]["matmul_fp16_TFLOPS"]
    with open(arguments.json, "w") as file:
        json.dump(report, file, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
