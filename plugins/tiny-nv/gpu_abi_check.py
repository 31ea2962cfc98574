"""What the simulated GPU cannot show, for a machine with an NVIDIA GPU (gpu_check.sh runs it on DEV=NV+NV): CUDA C
kernels compiled by NVRTC and launched as bare CUBINs through the queue interface, whose answers depend on what the
launch gives them beyond their parameters, compared with numpy:

- `probe`: blockDim and gridDim (constant buffer 0's head), a local array indexed at run time (the stack: its pointer
  from constant buffer 0, the QMD's local memory), generic pointers to shared and local memory (the windows);
- `lookup`: a `__constant__` table (constant bank 3) and a device global reached through an address in constant bank
  4 (a relocation applied by the loader).

`--compile-only ARCH` compiles both and computes numpy's answers without a GPU (what CI runs).
"""
from __future__ import annotations

import argparse
import sys

import numpy

BLOCK, GRID, STRIDE = 64, 4, 3

PROBE = r"""
extern "C" __global__ void probe(float* out, const float* a, int n) {
  __shared__ float s[64];
  float local[32];
  for (int i = 0; i < 32; i++) local[i] = a[(i * n + threadIdx.x) % 64];
  s[threadIdx.x] = local[(int)a[threadIdx.x] & 31];
  __syncthreads();
  const float* g = (blockIdx.x & 1) ? s : a;      // generic: shared or global
  const float* l = (blockIdx.x & 2) ? local : a;  // generic: local or global
  out[blockIdx.x * blockDim.x + threadIdx.x] = g[63 - threadIdx.x] + l[threadIdx.x & 31] + gridDim.x * 1000.0f
      + blockDim.x * 100000.0f;
}
"""

TABLE = ", ".join(f"{0.5 * i}f" for i in range(64))
LOOKUP = r"""
__constant__ float table[64] = {TABLE};
__device__ float bias[4] = {1.f, 2.f, 3.f, 4.f};
extern "C" __global__ void lookup(float* out, const int* index) {
  int i = threadIdx.x;
  out[i] = table[index[i] & 63] + bias[i & 3];
}
""".replace("TABLE", TABLE)


def probe_expected(a: numpy.ndarray) -> numpy.ndarray:
    """numpy's answer of `probe` over GRID blocks of BLOCK threads with n = STRIDE."""
    out = numpy.zeros(GRID * BLOCK, numpy.float32)
    for block in range(GRID):
        local = [[a[(i * STRIDE + t) % 64] for i in range(32)] for t in range(BLOCK)]
        shared = [local[t][int(a[t]) & 31] for t in range(BLOCK)]
        for t in range(BLOCK):
            g = shared[63 - t] if block & 1 else a[63 - t]
            value = local[t][t & 31] if block & 2 else a[t & 31]
            out[block * BLOCK + t] = numpy.float32(g) + numpy.float32(value) + GRID * 1000.0 + BLOCK * 100000.0
    return out


def lookup_expected(index: numpy.ndarray) -> numpy.ndarray:
    """numpy's answer of `lookup`."""
    table = numpy.arange(64, dtype=numpy.float32) * 0.5
    return table[index & 63] + numpy.array([1, 2, 3, 4], numpy.float32)[numpy.arange(len(index)) & 3]


def main() -> int:
    """Run the checks (or compile only); prints one line a kernel, exit status 1 when one differs from numpy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-only", metavar="ARCH", help="compile for sm_XX and stop (no GPU needed)")
    options = parser.parse_args()
    from tiny_nv.cubin import kernel_image, module_data
    from tiny_nv.nvrtc import compile_cuda
    a = numpy.arange(64, dtype=numpy.float32) + 0.25
    index = numpy.arange(64, dtype=numpy.int32) * 5
    if options.compile_only:
        probe, lookup = compile_cuda(PROBE, options.compile_only), compile_cuda(LOOKUP, options.compile_only)
        print("probe stack", kernel_image(probe, "probe").stack_bytes, "lookup banks",
              [bank for bank, _address, _size in module_data(lookup).banks(0)],
              float(probe_expected(a).sum()), float(lookup_expected(index).sum()))
        return 0
    from tiny_nv.nv_hcq import NVQueueProgram

    from tinycore.device.registry import Device
    device = Device["NV"]
    arch = f"sm_{device.gpu.sm}"
    failures = 0
    for name, source, inputs, expected, grid, block, values in (
            ("probe", PROBE, [a], probe_expected(a), GRID, BLOCK, (STRIDE,)),
            ("lookup", LOOKUP, [index], lookup_expected(index), 1, 64, ())):
        kernel = NVQueueProgram(device, name, compile_cuda(source, arch))
        output = device.allocator.alloc(expected.nbytes)
        buffers = []
        for array in inputs:
            buffers.append(device.allocator.alloc(array.nbytes))
            device.allocator._copyin(buffers[-1], memoryview(array).cast("B"))
        kernel(output, *buffers, global_size=(grid, 1, 1), local_size=(block, 1, 1), vals=values, wait=True)
        result = numpy.empty_like(expected)
        device.allocator._copyout(memoryview(result).cast("B"), output)
        ok = bool(numpy.array_equal(result, expected))
        failures += not ok
        print(name, "matches numpy" if ok else f"DIFFERS from numpy at {numpy.flatnonzero(result != expected)[:8]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
