"""The WebGPU runtime on wgpu-py: adapters and devices, the WGSL "compiler" and compute programs.

An adapter is chosen per tinycore device name: the interface (VULKAN, METAL, DX12, GL) picks the backend and the
device index picks among that backend's adapters (`DEV=GL+WEBGPU`, `WEBGPU:1`). Its GPU device is requested with the
adapter's own limits (storage buffers per stage, binding and buffer sizes) and the features kernels can use
(`shader-f16`, `timestamp-query`).
"""
from __future__ import annotations

import re
import struct
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tiny_webgpu.renderer import KernelLayout, WGSLRenderer
from tinycore.device.compiler import CompileError, Compiler

BACKENDS: dict[str, str] = {"VULKAN": "Vulkan", "METAL": "Metal", "DX12": "D3D12", "GL": "OpenGL"}
"""Interface name (as DEV spells it) -> wgpu backend type, in order of preference."""

_LIMIT_NAMES = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
                "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
                "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
                "max-compute-workgroups-per-dimension")
LLVMPIPE_LOOP_LIMIT = 65535
"""Mesa's llvmpipe (OpenGL) and lavapipe (Vulkan) end any loop after this many iterations."""
_FEATURES = ("shader-f16", "timestamp-query")
_LOCK = threading.RLock()
BIND_GROUP_CACHE_SIZE = 16
"""Bind groups kept per program (least recently used dropped first)."""
_ADAPTERS: list[Any] = []
_CONTEXTS: dict[str, WebGPUContext] = {}


def adapters() -> list[Any]:
    """Every adapter wgpu finds (enumerated once per process)."""
    from tiny_webgpu.environment import prepare_driver_environment
    prepare_driver_environment()
    import wgpu
    with _LOCK:
        if not _ADAPTERS:
            _ADAPTERS.extend(wgpu.gpu.enumerate_adapters_sync())
        return list(_ADAPTERS)


def describe_adapter(adapter: Any) -> str:
    """'name [backend, type]' of an adapter."""
    info = adapter.info
    return f"{info.get('device') or info.get('description') or 'unknown adapter'} " \
           f"[{info.get('backend_type', '?')}, {info.get('adapter_type', '?')}]"


@dataclass
class WebGPUContext:
    """An opened adapter: its GPU device and queue, features, limits and the per-kernel pipeline cache."""

    adapter: Any
    device: Any
    interface: str
    features: frozenset[str]
    limits: dict[str, int]
    pipelines: dict[str, Any] = field(default_factory=dict)
    query_set: Any = None
    query_buffer: Any = None
    sync_buffer: Any = None
    bind_group_users: dict[int, weakref.WeakSet[BindGroupCache]] = field(default_factory=dict)

    def forget_buffer(self, buffer: Any) -> None:
        """Drop every cached bind group that binds `buffer` (called when the allocator frees it)."""
        with _LOCK:
            users = self.bind_group_users.pop(id(buffer), None)
            for cache in list(users or ()):
                cache.drop(buffer)

    @property
    def description(self) -> str:
        """'name [backend, type]'."""
        return describe_adapter(self.adapter)

    @property
    def backend(self) -> str:
        """The wgpu backend type ('Vulkan', 'OpenGL', ...)."""
        return str(self.adapter.info.get("backend_type", "?"))

    @property
    def adapter_type(self) -> str:
        """'CPU', 'DiscreteGPU', 'IntegratedGPU', ..."""
        return str(self.adapter.info.get("adapter_type", "?"))

    def limit(self, name: str) -> int:
        """A limit of the GPU device (wgpu's dashed name)."""
        return int(self.limits[name])

    def synchronize(self) -> None:
        """Wait until all submitted work has finished: read back a small buffer (the queue runs in order; wgpu-py's
        on_submitted_work_done is not usable in every version)."""
        from tiny_webgpu.environment import prepare_driver_environment
        prepare_driver_environment()
        import wgpu
        if self.sync_buffer is None:
            self.sync_buffer = self.device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
        self.device.queue.read_buffer(self.sync_buffer, 0, 4)


def open_adapter(device: str, interface: str | None, indices: Sequence[int] = ()) -> WebGPUContext:
    """Open (once per device name) the adapter of backend `interface` (None: any, in BACKENDS order) at the index
    DEV or the device name gives; a clear RuntimeError naming what was found otherwise."""
    with _LOCK:
        if device in _CONTEXTS:
            return _CONTEXTS[device]
        found = adapters()
        if interface is not None:
            backend = BACKENDS.get(interface)
            candidates = [adapter for adapter in found if adapter.info.get("backend_type") == backend]
        else:
            order = list(BACKENDS.values())
            candidates = sorted(found, key=lambda adapter: order.index(adapter.info.get("backend_type"))
                                if adapter.info.get("backend_type") in order else len(order))
        index = indices[0] if indices else (int(device.split(":", 1)[1]) if ":" in device else 0)
        if index >= len(candidates):
            listed = "; ".join(describe_adapter(adapter) for adapter in found) or "none"
            which = f"{interface} " if interface else ""
            raise RuntimeError(f"{device}: no {which}WebGPU adapter number {index} (wgpu found: {listed}); install "
                               f"a driver (e.g. Debian's mesa-vulkan-drivers) or pick another with "
                               f"DEV=VULKAN+WEBGPU / DEV=GL+WEBGPU")
        adapter = candidates[index]
        features = frozenset(name for name in _FEATURES if name in adapter.features)
        limits = {name: adapter.limits[name] for name in _LIMIT_NAMES if name in adapter.limits}
        gpu = adapter.request_device_sync(label=f"tinycore {device}", required_features=sorted(features),
                                          required_limits=dict(limits))
        backend_interface = next((name for name, value in BACKENDS.items()
                                  if value == adapter.info.get("backend_type")), "?")
        context = WebGPUContext(adapter, gpu, backend_interface, features, dict(gpu.limits))
        _CONTEXTS[device] = context
        return context


def open_interface_factory(interface: str) -> Any:
    """The InterfaceSpec factory for backend `interface`: `factory(device, indices) -> WebGPUContext`."""
    def factory(device: str, indices: tuple[int, ...]) -> WebGPUContext:
        return open_adapter(device, interface, indices)
    return factory


open_vulkan = open_interface_factory("VULKAN")
open_metal = open_interface_factory("METAL")
open_dx12 = open_interface_factory("DX12")
open_gl = open_interface_factory("GL")


def context_for(device: str) -> WebGPUContext:
    """The opened adapter of `device`, opened through the registry's interface selection when not yet open."""
    with _LOCK:
        if device in _CONTEXTS:
            return _CONTEXTS[device]
    try:
        from tinycore.device.registry import select_interface
    except ImportError:  # pragma: no cover - a core without interface selection
        return open_adapter(device, None)
    _spec, context = select_interface(device)
    return context


class WGSLCompiler(Compiler):
    """Checks WGSL source with the adapter's shader compiler; the "binary" is the source itself."""

    def __init__(self, context: WebGPUContext):
        super().__init__("webgpu-kernels")
        self.context = context
        self.name = f"wgsl-{context.backend}"

    def version(self) -> str:
        """The adapter and backend (part of the cache key)."""
        return self.context.description

    def compile(self, src: str) -> bytes:
        """`src` as bytes once the adapter's shader compiler accepts it; CompileError with its log otherwise."""
        try:
            self.context.device.create_shader_module(code=src)
        except Exception as error:
            raise CompileError(f"the WebGPU adapter {self.context.description} rejected a WGSL kernel",
                               log=f"{error}\n--- source ---\n{src}") from error
        return src.encode()


def simd_lanes(description: str) -> int:
    """32-bit SIMD lanes of a CPU adapter from its name ('llvmpipe (LLVM 15.0.6, 256 bits)' -> 8); 8 when unnamed."""
    found = re.search(r"(\d+) bits", description)
    return max(1, int(found.group(1)) // 32) if found else 8


def make_wgsl_renderer(device: str, arch: str | None) -> tuple[WGSLRenderer, WGSLCompiler]:
    """The WGSL renderer and compiler for `device`, configured from its adapter's features, limits and type."""
    if arch:
        raise ValueError(f"the WGSL renderer takes no arch (got {arch!r}); WebGPU adapters compile WGSL themselves")
    context = context_for(device)
    renderer = WGSLRenderer(device, has_f16="shader-f16" in context.features,
                            max_storage_buffers=context.limit("max-storage-buffers-per-shader-stage"),
                            max_workgroup_storage=context.limit("max-compute-workgroup-storage-size"),
                            adapter_name=context.description,
                            max_loop_iterations=LLVMPIPE_LOOP_LIMIT if "llvmpipe" in context.description else None,
                            max_workgroup_size=(context.limit("max-compute-workgroup-size-x"),
                                                context.limit("max-compute-workgroup-size-y"),
                                                context.limit("max-compute-workgroup-size-z")),
                            max_workgroup_invocations=context.limit("max-compute-invocations-per-workgroup"),
                            max_workgroups_per_dimension=context.limit("max-compute-workgroups-per-dimension"),
                            cpu_adapter=context.adapter_type == "CPU", simd_lanes=simd_lanes(context.description))
    return renderer, WGSLCompiler(context)


class BindGroupCache:
    """A bounded LRU of one program's bind groups, keyed by the (id(buffer), byte offset, size) of every handle.

    Each entry holds its wgpu buffer objects, so an id in a key cannot be reused by another buffer while the entry
    lives; the allocator also drops the entries of a buffer it frees (`WebGPUContext.forget_buffer`).
    """

    def __init__(self, context: WebGPUContext, capacity: int = BIND_GROUP_CACHE_SIZE):
        self.context, self.capacity = context, capacity
        self.entries: OrderedDict[tuple[tuple[int, int, int], ...], tuple[Any, list[int], tuple[Any, ...]]] = \
            OrderedDict()
        self.created = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: tuple[tuple[int, int, int], ...]) -> tuple[Any, list[int]] | None:
        """The (bind group, buffer starts) cached under `key`, marked most recently used; None when absent."""
        with _LOCK:
            found = self.entries.get(key)
            if found is None:
                return None
            self.entries.move_to_end(key)
            return found[0], found[1]

    def put(self, key: tuple[tuple[int, int, int], ...], group: Any, starts: list[int], buffers: tuple[Any, ...]
            ) -> None:
        """Cache `group` (binding `buffers`) under `key`, evicting the least recently used entry beyond capacity."""
        with _LOCK:
            self.created += 1
            self.entries[key] = (group, starts, buffers)
            self.entries.move_to_end(key)
            for buffer in buffers:
                self.context.bind_group_users.setdefault(id(buffer), weakref.WeakSet()).add(self)
            while len(self.entries) > self.capacity:
                self.entries.popitem(last=False)

    def drop(self, buffer: Any) -> None:
        """Remove every entry that binds `buffer`."""
        with _LOCK:
            for key in [key for key, (_group, _starts, buffers) in self.entries.items()
                        if any(bound is buffer for bound in buffers)]:
                del self.entries[key]


@dataclass
class WebGPUHandle:
    """A buffer argument: `nbytes` bytes starting `byte_offset` into the GPU buffer `buffer` (views share it)."""

    buffer: Any
    byte_offset: int
    nbytes: int


class WebGPUProgram:
    """A compute pipeline for one WGSL kernel, called as
    `program(*handles, global_size=(..), local_size=(..), vals=(ints), wait=False)`."""

    def __init__(self, context: WebGPUContext, name: str, lib: bytes):
        from tiny_webgpu.environment import prepare_driver_environment
        prepare_driver_environment()
        import wgpu
        self.context, self.name = context, name
        source = lib.decode()
        self.layout = KernelLayout.parse(source)
        device = context.device
        entries = [{"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "uniform"}}]
        entries += [{"binding": position + 1, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "storage"}}
                    for position in range(len(self.layout.element_sizes))]
        self.bind_group_layout = device.create_bind_group_layout(entries=entries)
        with _LOCK:
            cached = context.pipelines.get(source)
            if cached is None:
                try:
                    module = device.create_shader_module(code=source)
                    layout = device.create_pipeline_layout(bind_group_layouts=[self.bind_group_layout])
                    cached = device.create_compute_pipeline(layout=layout, compute={"module": module,
                                                                                    "entry_point": name})
                except Exception as error:
                    raise CompileError(f"the WebGPU adapter {context.description} cannot build kernel {name}",
                                       log=f"{error}\n--- source ---\n{source}") from error
                context.pipelines[source] = (cached, self.bind_group_layout)
            else:
                cached, self.bind_group_layout = cached
        self.pipeline = cached
        fields = 6 + len(self.layout.element_sizes) + len(self.layout.variables)
        self.params_size = max(16, (fields * 4 + 15) // 16 * 16)
        self.params = device.create_buffer(size=self.params_size, usage=wgpu.BufferUsage.UNIFORM |
                                           wgpu.BufferUsage.COPY_DST)
        self.alignment = context.limit("min-storage-buffer-offset-alignment") \
            if "min-storage-buffer-offset-alignment" in context.limits else 256
        self.max_binding = context.limit("max-storage-buffer-binding-size")
        self.max_groups = context.limit("max-compute-workgroups-per-dimension")
        self.bind_groups = BindGroupCache(context)

    def _binding(self, position: int, handle: WebGPUHandle) -> tuple[dict[str, Any], int]:
        """The bind group entry of buffer `position` and its start (elements for word arrays, bytes for packed)."""
        if not isinstance(handle, WebGPUHandle):
            raise TypeError(f"kernel {self.name}: buffer {position} is {handle!r}, not a WEBGPU buffer handle")
        bind_offset = handle.byte_offset - handle.byte_offset % self.alignment
        skipped = handle.byte_offset - bind_offset
        size = handle.buffer.size - bind_offset
        if skipped + handle.nbytes > self.max_binding:
            raise RuntimeError(f"kernel {self.name}: buffer {position} spans {skipped + handle.nbytes} bytes, more "
                               f"than the adapter's maxStorageBufferBindingSize ({self.max_binding} bytes) "
                               f"({self.context.description}); use smaller tensors on WEBGPU")
        size = min(size, self.max_binding - self.max_binding % 4)
        element_size = self.layout.element_sizes[position]
        if self.layout.packed[position]:
            start = skipped
        else:
            if skipped % element_size:
                raise RuntimeError(f"kernel {self.name}: buffer {position} is a view at byte {handle.byte_offset}, "
                                   f"not a multiple of its element size {element_size}; make it contiguous first")
            start = skipped // element_size
        return {"binding": position + 1, "resource": {"buffer": handle.buffer, "offset": bind_offset,
                                                      "size": size}}, start

    def _bind_group(self, handles: Sequence[Any]) -> tuple[Any, list[int]]:
        """A new bind group for the uniform parameters and `handles`, and the buffer starts the kernel reads."""
        entries, starts = [], []
        for position, handle in enumerate(handles):
            entry, start = self._binding(position, handle)
            entries.append(entry)
            starts.append(start)
        params = {"binding": 0, "resource": {"buffer": self.params, "offset": 0, "size": self.params_size}}
        return self.context.device.create_bind_group(layout=self.bind_group_layout, entries=[params] + entries), starts

    def dispatch_size(self, global_size: Sequence[int], local_size: Sequence[int] | None
                      ) -> tuple[tuple[int, int, int], int, int, int]:
        """(workgroup counts x/y/z, thread total, y stride, z stride) for a launch, within the per-dimension limit."""
        sizes = [int(size) for size in (list(global_size) + [1, 1, 1])[:3]]
        limit = self.max_groups
        if not self.layout.flat:
            if local_size is not None:
                launched = tuple(int(size) for size in (list(local_size) + [1, 1, 1])[:3])
                if launched != self.layout.workgroup:
                    raise RuntimeError(f"kernel {self.name} was compiled for workgroups of "
                                       f"{'x'.join(map(str, self.layout.workgroup))} (WGSL fixes @workgroup_size in "
                                       f"the shader) but is launched with local size {'x'.join(map(str, launched))}")
            if any(size > limit for size in sizes):
                raise RuntimeError(f"kernel {self.name}: {sizes} workgroups exceed the adapter's "
                                   f"maxComputeWorkgroupsPerDimension ({limit})")
            return (sizes[0], sizes[1], sizes[2]), 0, 0, 0
        total = sizes[0] * sizes[1] * sizes[2]
        per_group = self.layout.workgroup[0]
        groups = -(-total // per_group)
        x = max(1, min(groups, limit))
        rest = -(-groups // x)
        y = max(1, min(rest, limit))
        z = -(-rest // y)
        if z > limit:
            raise RuntimeError(f"kernel {self.name}: {total} threads need more than {limit}^3 workgroups")
        return (x, y, max(z, 1)), total, x * per_group, x * y * per_group

    def __call__(self, *handles: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: Sequence[int] = (), wait: bool = False) -> float | None:
        if len(handles) != len(self.layout.element_sizes):
            raise TypeError(f"kernel {self.name} takes {len(self.layout.element_sizes)} buffers, got {len(handles)}")
        if len(vals) != len(self.layout.variables):
            raise TypeError(f"kernel {self.name} takes {len(self.layout.variables)} variables "
                            f"({', '.join(self.layout.variables)}), got {len(vals)}")
        device = self.context.device
        try:
            key = tuple((id(handle.buffer), handle.byte_offset, handle.nbytes) for handle in handles)
        except AttributeError:
            key = None
        cached = self.bind_groups.get(key) if key is not None else None
        if cached is None:
            group, starts = self._bind_group(handles)
            if key is not None:
                self.bind_groups.put(key, group, starts, tuple(handle.buffer for handle in handles))
        else:
            group, starts = cached
        groups, total, stride_y, stride_z = self.dispatch_size(global_size, local_size)
        sizes = [int(size) for size in (list(global_size) + [1, 1, 1])[:3]]
        data = struct.pack(f"<6I{len(starts)}i{len(vals)}i", total, stride_y, stride_z, *sizes, *starts,
                           *[int(value) for value in vals])
        device.queue.write_buffer(self.params, 0, data + bytes(self.params_size - len(data)))
        timed = wait and "timestamp-query" in self.context.features
        encoder = device.create_command_encoder()
        writes = None
        if timed:
            query_set, query_buffer = self._queries()
            writes = {"query_set": query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
        compute = encoder.begin_compute_pass(timestamp_writes=writes) if writes else encoder.begin_compute_pass()
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, group)
        if all(groups) and (total or not self.layout.flat):
            compute.dispatch_workgroups(*groups)
        compute.end()
        if timed:
            encoder.resolve_query_set(query_set, 0, 2, query_buffer, 0)
        started = time.perf_counter()
        device.queue.submit([encoder.finish()])
        if not wait:
            return None
        if timed:
            begin, end = struct.unpack("<2Q", bytes(device.queue.read_buffer(query_buffer, 0, 16)))
            if end > begin:
                return (end - begin) * 1e-9
        self.context.synchronize()
        return time.perf_counter() - started

    def _queries(self) -> tuple[Any, Any]:
        from tiny_webgpu.environment import prepare_driver_environment
        prepare_driver_environment()
        import wgpu
        context = self.context
        if context.query_set is None:
            context.query_set = context.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            context.query_buffer = context.device.create_buffer(
                size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        return context.query_set, context.query_buffer
