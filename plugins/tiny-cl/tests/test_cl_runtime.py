"""The CL runtime on the machine's OpenCL driver: device numbering, the binary cache, the LRU allocator, copies,
sub-buffer views, profiling, DEBUG=2 timings, `tiny devices` and shutdown."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy
import pyopencl
import pytest
from cl_programs import run_source
from tiny_cl.allocator import UnalignedView
from tiny_cl.compiler import CLCompiler, unpack_binary, written_parameters
from tiny_cl.driver import device_index, list_devices, open_device

from tinycore.device.buffer import Buffer
from tinycore.device.registry import Device, DeviceOpenError
from tinycore.dtype import dtypes
from tinycore.helpers import Context

ADD_ONE = """__kernel void add_one(__global float* data0, __global const float* data1) {
  int gidx0 = get_global_id(0);
  data0[gidx0] = data1[gidx0] + 1.0f;
}
"""


def test_devices_are_numbered_across_platforms(cl_device):
    found = list_devices()
    expected = [device for platform in pyopencl.get_platforms() for device in platform.get_devices()]
    assert [device.int_ptr for _, device in found] == [device.int_ptr for device in expected]
    assert cl_device.opened.device.int_ptr == expected[0].int_ptr
    assert Device["CL:0"] is cl_device and cl_device.device == "CL"
    assert cl_device.description == f"CL:0 = {expected[0].name.strip()} on {found[0][0].name.strip()} " \
                                    f"({expected[0].version.strip()})"
    assert (device_index("CL"), device_index("CL:3")) == (0, 3)
    with pytest.raises(ValueError, match="not a CL device name"):
        device_index("CPU:1")


def test_a_device_number_past_the_end_says_what_exists():
    count = len(list_devices())
    with pytest.raises(DeviceOpenError, match=rf"asked for CL:{count + 3} but OpenCL reports {count} device\(s\): "
                                              r"CL:0 = "):
        Device[f"CL:{count + 3}"]


def test_renderer_capabilities_come_from_the_device(cl_device):
    renderer, hardware = cl_device.renderer, cl_device.opened.device
    assert (renderer.has_local, renderer.has_shared, renderer.has_threads) == (True, True, False)
    assert renderer.local_max == tuple(hardware.max_work_item_sizes[:3])
    assert renderer.shared_max == hardware.local_mem_size
    assert Device.selected_renderers["CL"] == "OPENCL"
    # pointers of 8 bytes within CL_DEVICE_MAX_PARAMETER_SIZE, leaving room for integer arguments
    assert renderer.max_buffers == hardware.max_parameter_size // 8 - 8


def test_binary_cache_is_keyed_by_source_and_driver_and_reused_from_disk(cl_device, tmp_path, monkeypatch):
    monkeypatch.setattr("tinycore.device.compiler.cache_dir", lambda: tmp_path / "tinycore")
    first = CLCompiler(cl_device.opened)
    library = first.compile_cached(ADD_ONE)
    assert first.cache_path(first.cache_key(ADD_ONE)).exists()
    binary, facts = unpack_binary(library)
    assert binary and (facts.group_shape, facts.written) == (False, (0,))
    second = CLCompiler(cl_device.opened)

    def no_compiling(source: str) -> bytes:
        raise AssertionError("the cached binary should have been read from disk")

    monkeypatch.setattr(second, "compile", no_compiling)
    assert second.compile_cached(ADD_ONE) == library
    assert cl_device.opened.device.driver_version in second.version()
    assert CLCompiler(cl_device.opened).cache_key(ADD_ONE) != CLCompiler(cl_device.opened).cache_key(ADD_ONE + " ")


def test_driver_version_changes_the_cache_key(cl_device, monkeypatch):
    compiler = CLCompiler(cl_device.opened)
    before = compiler.cache_key(ADD_ONE)
    monkeypatch.setattr(type(cl_device.opened), "identity", property(lambda self: "PoCL 99 | another driver"))
    assert compiler.cache_key(ADD_ONE) != before


def test_program_runs_and_profiles(cl_device):
    values = numpy.arange(1000, dtype=numpy.float32)
    result, _ = run_source(cl_device, "add_one", ADD_ONE, [numpy.zeros(1000, numpy.float32), values], (1000, 1, 1))
    numpy.testing.assert_array_equal(result, values + 1)
    program = cl_device.runtime("add_one", cl_device.compiler.compile_cached(ADD_ONE))
    handles = [cl_device.allocator.alloc(4000) for _ in range(2)]
    elapsed = program(*handles, global_size=(1000, 1, 1), local_size=(1, 1, 1), wait=True)
    assert isinstance(elapsed, float) and 0 < elapsed < 10
    assert program(*handles, global_size=(1000, 1, 1), local_size=(1, 1, 1)) is None
    cl_device.synchronize()


def test_allocator_reuses_freed_buffers_and_releases_its_cache(cl_device):
    allocator = cl_device.allocator
    allocator.free_cache()
    first = allocator.alloc(4096)
    allocator.free(first, 4096)
    assert allocator.cached_bytes == 4096 and allocator.alloc(4096) is first
    allocator.free(first, 4096)
    allocator.free_cache()
    assert allocator.cached_bytes == 0
    with pytest.raises(ValueError, match="positive int"):
        allocator.alloc(0)
    with pytest.raises(MemoryError, match="largest single allocation"):
        allocator.alloc(int(cl_device.opened.device.max_mem_alloc_size) + 1)


def test_copies_in_and_out_of_buffers(cl_device):
    buffer = Buffer("CL", 257, dtypes.int16)
    values = numpy.arange(-128, 129, dtype=numpy.int16)
    buffer.copyin(memoryview(values))
    numpy.testing.assert_array_equal(buffer.numpy(), values)
    assert buffer.tobytes() == values.tobytes()


def test_aligned_views_are_sub_buffers_that_kernels_take(cl_device):
    alignment = cl_device.opened.base_address_alignment
    offset = alignment // 4  # float elements at the first aligned origin past the start
    base = Buffer("CL", offset + 64, dtypes.float32).copyin(memoryview(numpy.zeros(offset + 64, numpy.float32)))
    output = base.view(32, dtypes.float32, offset)
    source = base.view(32, dtypes.float32, offset + 32)
    source.copyin(memoryview(numpy.arange(32, dtype=numpy.float32)))
    output.ensure_allocated()
    assert isinstance(output._buf, pyopencl.Buffer) and output._buf.offset == alignment
    program = cl_device.runtime("add_one", cl_device.compiler.compile_cached(ADD_ONE))
    program(output._buf, source._buf, global_size=(32, 1, 1), local_size=(1, 1, 1), wait=True)
    expected = numpy.zeros(offset + 64, numpy.float32)
    expected[offset:offset + 32] = numpy.arange(32) + 1
    expected[offset + 32:] = numpy.arange(32)
    numpy.testing.assert_array_equal(base.numpy(), expected)
    whole = base.view(base.size, dtypes.float32, 0).ensure_allocated()
    assert whole._buf is base._buf


def test_unaligned_views_copy_and_are_staged_for_kernels(cl_device):
    base = Buffer("CL", 16, dtypes.float32).copyin(memoryview(numpy.arange(16, dtype=numpy.float32)))
    view = base.view(4, dtypes.float32, 3).ensure_allocated()
    assert isinstance(view._buf, UnalignedView) and view._buf.offset == 12
    numpy.testing.assert_array_equal(view.numpy(), numpy.arange(3, 7, dtype=numpy.float32))
    view.copyin(memoryview(numpy.full(4, -1, numpy.float32)))
    numpy.testing.assert_array_equal(base.numpy()[2:8], [2, -1, -1, -1, -1, 7])
    inner = view.view(2, dtypes.float32, 1).ensure_allocated()
    numpy.testing.assert_array_equal(inner.numpy(), [-1, -1])
    program = cl_device.runtime("add_one", cl_device.compiler.compile_cached(ADD_ONE))
    before = base.numpy()
    # an unaligned output view: only its 4 elements change; the input view is read-only and not copied back
    source = base.view(4, dtypes.float32, 9).ensure_allocated()
    program(view._buf, source._buf, global_size=(4, 1, 1), wait=True)
    expected = before.copy()
    expected[3:7] = before[9:13] + 1
    numpy.testing.assert_array_equal(base.numpy(), expected)


def test_written_parameters_are_read_from_the_signature():
    assert written_parameters(ADD_ONE) == (0,)
    signature = "__kernel void k(__global const float* data0, __global int* data1, const int n, __global uchar* d2) {"
    assert written_parameters(signature) == (1, 3)
    assert written_parameters("not a kernel") is None


def test_launch_errors_name_the_kernel(cl_device):
    program = cl_device.runtime("add_one", cl_device.compiler.compile_cached(ADD_ONE))
    handle = cl_device.allocator.alloc(64)
    with pytest.raises(RuntimeError, match="launching kernel 'add_one' on CL:0"):
        program(handle, handle, global_size=(3, 1, 1), local_size=(10 ** 6, 1, 1))
    with pytest.raises(RuntimeError, match="has no kernel 'missing'"):
        cl_device.runtime("missing", cl_device.compiler.compile_cached(ADD_ONE))
    with pytest.raises(ValueError, match="missing header"):
        cl_device.runtime("add_one", b"not a binary")


def test_debug_2_prints_kernel_times_and_close_releases_memory(cl_device, capsys):
    from tinycore.tensor import Tensor
    values = numpy.arange(64, dtype=numpy.float32)
    with Context(DEBUG=2):
        result = (Tensor(values, device="CL") * 3).numpy()
    numpy.testing.assert_array_equal(result, values * 3)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("kernel ")]
    assert lines and " us " in lines[-1]
    assert float(lines[-1].split()[2]) > 0
    cl_device.allocator.free(cl_device.allocator.alloc(128), 128)
    cl_device.close()
    assert cl_device.allocator.cached_bytes == 0


def test_open_device_is_shared_by_the_device_and_its_renderer(cl_device):
    assert open_device("CL") is cl_device.opened and cl_device.compiler.opened is cl_device.opened


def test_tiny_devices_shows_platform_and_device_names():
    environment = {**os.environ, "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "devices", "--json"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    (row,) = [device for device in json.loads(result.stdout)["devices"] if device["name"] == "CL"]
    platform, device = list_devices()[0]
    assert row["status"] == "ok" and platform.name.strip() in row["reason"]
    assert f"CL:0 = {device.name.strip()}" in row["reason"]
    assert [renderer["name"] for renderer in row["renderers"]] == ["OPENCL"]


def test_dev_cl_runs_a_program_and_exits_cleanly():
    script = ("import numpy; from tinycore.tensor import Tensor; "
              "t = Tensor(numpy.arange(6, dtype=numpy.float32).reshape(2, 3)); "
              "print(t.device, (t.sum(1) * 2).numpy().tolist())")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env={**os.environ, "DEV": "CL"}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["CL", "[6.0,", "24.0]"]


def test_an_empty_launch_runs_nothing(cl_device):
    program = cl_device.runtime("add_one", cl_device.compiler.compile_cached(ADD_ONE))
    handle = cl_device.allocator.alloc(16)
    cl_device.allocator.copyin(handle, memoryview(numpy.arange(4, dtype=numpy.float32)).cast("B"))
    assert program(handle, handle, global_size=(0, 1, 1), wait=True) == 0.0
    result = numpy.empty(4, numpy.float32)
    cl_device.allocator.copyout(memoryview(result).cast("B"), handle)
    numpy.testing.assert_array_equal(result, numpy.arange(4))
