"""What a device declares it supports, read by the conformance suite to decide which checks apply.

A device declares its capabilities with a `capabilities` attribute on its device class (or on its renderer), a
`DeviceCapabilities` or a plain dict of the same fields:

    from tinycore.dtype import dtypes
    from tinycore.testing.capabilities import DeviceCapabilities

    class MyDevice(Compiled):
        capabilities = DeviceCapabilities(dtypes=frozenset({dtypes.bool, dtypes.int32, dtypes.float32}),
                                          max_buffers=8)

Checks that need something the device does not declare are reported as "not applicable (declared)", never as
failures. A device that declares nothing gets capabilities inferred from its renderer (`type_map`, `has_local`,
`has_shared`, `has_threads`), and the summary says they were inferred.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from tinycore.dtype import DType, dtypes
from tinycore.plugins.contract import DeviceContract, RendererContract

ALL_DTYPES: frozenset[DType] = frozenset({
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
    dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})
"""Every dtype the conformance suite knows how to check (the fp8 types are not checked yet)."""


@dataclass(frozen=True)
class DeviceCapabilities:
    """The features a device supports.

    dtypes: the element types its kernels can load, compute with and store.
    max_buffers: the most buffers one kernel may take (None: no limit the suite needs to respect).
    local_memory: workgroup-shared memory (DEFINE_LOCAL) is available.
    threads: kernels are split across CPU-style workers (SPECIAL "core_id").
    symbolic: kernels take integer parameters (DEFINE_VAR) so one kernel serves every value of a variable.
    large_grids: the device runs kernels over a million elements in reasonable time (False on interpreters).
    kernels: the device runs kernels at all (False for storage devices such as DISK: only the memory and copy
      checks that need no kernel on the device apply).
    out_of_memory_bytes: an allocation size the device must refuse with a MemoryError (default 2**62 bytes; None:
      not checked, e.g. when the device would swap instead of refusing).
    """

    dtypes: frozenset[DType] = ALL_DTYPES
    max_buffers: int | None = None
    local_memory: bool = False
    threads: bool = False
    symbolic: bool = True
    large_grids: bool = True
    kernels: bool = True
    out_of_memory_bytes: int | None = 1 << 62
    inferred: bool = field(default=False, compare=False)

    @property
    def float64(self) -> bool:
        """float64 (double) is supported."""
        return dtypes.float64 in self.dtypes

    @property
    def half(self) -> bool:
        """float16 (half) is supported."""
        return dtypes.float16 in self.dtypes

    @property
    def int64(self) -> bool:
        """int64 and uint64 are supported."""
        return dtypes.int64 in self.dtypes and dtypes.uint64 in self.dtypes

    def supports(self, dtype: DType) -> bool:
        """True when `dtype` (its scalar type) is declared."""
        return dtype.scalar in self.dtypes

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly description (dtypes by name)."""
        return {"dtypes": sorted(dtype_name(dtype) for dtype in self.dtypes), "float64": self.float64,
                "half": self.half, "int64": self.int64, "max_buffers": self.max_buffers,
                "local_memory": self.local_memory, "threads": self.threads, "symbolic": self.symbolic,
                "large_grids": self.large_grids, "out_of_memory_bytes": self.out_of_memory_bytes,
                "inferred": self.inferred}


def _from_declaration(declared: object, where: str) -> DeviceCapabilities:
    """A DeviceCapabilities from a declared DeviceCapabilities or dict (clear error for anything else)."""
    if isinstance(declared, DeviceCapabilities):
        return declared
    if isinstance(declared, dict):
        known = {item.name for item in fields(DeviceCapabilities)} - {"inferred"}
        unknown = sorted(set(declared) - known)
        if unknown:
            raise ValueError(f"{where}.capabilities has unknown field(s) {unknown}; known fields: {sorted(known)}")
        values = dict(declared)
        if "dtypes" in values:
            values["dtypes"] = frozenset(values["dtypes"])
        return DeviceCapabilities(**values)
    raise TypeError(f"{where}.capabilities must be a DeviceCapabilities or a dict, got {type(declared).__name__}")


USER_DTYPE_NAMES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "fp8e4m3",
                    "fp8e5m2", "float16", "bfloat16", "float32", "float64")
"""The `dtypes` attribute names users write; a DType's own `name` is its C spelling ("long", "unsigned char")."""


def dtype_name(dtype: DType) -> str:
    """The name a user writes for `dtype`, as `dtypes.<name>` spells it: int64 rather than long, float16 rather than
    half, bfloat16 rather than __bf16 (vector dtypes keep their count: float32x4)."""
    scalar = dtype.scalar if hasattr(dtype, "scalar") else dtype
    name = next((name for name in USER_DTYPE_NAMES if getattr(dtypes, name, None) == scalar), scalar.name)
    count = getattr(dtype, "count", 1)
    return f"{name}x{count}" if count > 1 else name


def infer_capabilities(device: DeviceContract) -> DeviceCapabilities:
    """Capabilities of an opened device that declares none: every dtype, local memory and threads as its renderer
    says (a device that declares nothing is checked on everything)."""
    renderer: RendererContract | None = device.renderer  # None: a device that runs no kernels (DISK)
    if renderer is None:
        return DeviceCapabilities(dtypes=ALL_DTYPES, local_memory=False, threads=False, inferred=True)
    return DeviceCapabilities(dtypes=ALL_DTYPES, local_memory=bool(renderer.has_shared) and bool(renderer.has_local),
                              threads=bool(renderer.has_threads), inferred=True)


def capabilities_of(device: DeviceContract) -> DeviceCapabilities:
    """The declared capabilities of the opened device object `device`: its class's (or instance's) `capabilities`,
    else its renderer's, else inferred from the renderer (DeviceContract.capabilities, RendererContract.capabilities).
    """
    if device.capabilities is not None:
        return _from_declaration(device.capabilities, type(device).__name__)
    renderer: RendererContract | None = device.renderer  # None: a device that runs no kernels (DISK)
    if renderer is not None and renderer.capabilities is not None:
        return _from_declaration(renderer.capabilities, "renderer")
    return infer_capabilities(device)


__all__ = ["DeviceCapabilities", "ALL_DTYPES", "capabilities_of", "infer_capabilities", "dtype_name"]
