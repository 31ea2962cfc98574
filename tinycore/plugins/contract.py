"""The backend contract: everything the core reads from what a device plugin provides, in one place.

A device plugin returns (through the hooks in `hookspecs.py`) a device class, renderers, an allocator, a compiler
and programs. The classes below declare every attribute and method the core reads from each, with its type, its
default and what the core does with it. The base classes a plugin subclasses derive from them:

    RendererContract  <- tinycore.renderer.Renderer (and CStyleLanguage, the C-like base)
    AllocatorContract <- tinycore.device.Allocator (LRUAllocator)
    CompilerContract  <- tinycore.device.Compiler
    DeviceContract    <- tinycore.device.Compiled
    ProgramContract, LaunchableProgram: what `Compiled.runtime(name, binary)` returns (any callable of that shape)

Optional methods are found by the helpers at the end (`makes_views`, `copies_to_buffer`, `opens_existing`,
`compiles_in_batches`, `expects_launches`, `launcher_of`), never by `getattr` with a default.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from tinycore.dtype import DType
    from tinycore.uop.ops import Ops
    from tinycore.uop.patterns import PatternMatcher
    from tinycore.uop.uop import UOp


class RendererContract:
    """What codegen, the scheduler and the engine read from a renderer. Attributes whose default is None mean "the
    core's default" (written next to each)."""

    device: str = ""
    """The device family this renderer renders for ("CPU", "CL", ...)."""
    suffix: str = ""
    """The source language's file suffix ("c", "cl", "cu", "wgsl"), part of the compiler cache key."""
    has_local: bool = True
    """Workgroups with local ids (GPUs). With `has_threads` False, codegen takes the GPU path (codegen/gpu.py)."""
    has_shared: bool = True
    """Shared (local) memory: group reduces through it are allowed."""
    has_threads: bool = False
    """CPU-style split of output axes across workers through SPECIAL "core_id"."""
    decompose_transcendentals: bool = False
    """float32 exp2 and log2 written as arithmetic UOps (codegen/transcendental.py) instead of the renderer's
    builtins, so they vectorize with the rest of the kernel (worth it only with `vector_masks`)."""
    fused_multiply_add: bool = False
    """A float sum of products accumulated across a reduce loop (`acc += a * b`) is written as a MULACC marked FUSED
    (`uop.ops.FUSED`), which the renderer may compute with one rounding (an FMA instruction): one rounding is only
    more accurate, and matmuls reach twice the throughput of a multiply and an add where the CPU has FMA units."""
    int8_dot_products: bool = False
    """The target has fast int8 dot-product instructions (x86's AVX-512 VNNI or AVX-VNNI, Arm's dot product): integer
    products of int8 values may pay over float ones (tinycore.llm.int8_linear reads it; codegen does not yet)."""
    matmul_panel_bytes: int | None = None
    """Bytes of a row of the panels a large matmul copies its second input into (Tensor.dot; None: no packing): each
    panel holds that many bytes of columns for every step of the reduce, contiguously, so the kernel streams it."""
    core_cache_bytes: int | None = None
    """Bytes of cache private to one core (a CPU's L2) that the CPU heuristics size cache blocks by (None: unknown;
    codegen.optimize's defaults)."""
    global_max: tuple[int, ...] | None = (0x8FFFFFFF,) * 3
    """Largest launch grid per dimension (None: 2**31 - 1 each)."""
    local_max: tuple[int, ...] | None = (0x8FFFFFFF,) * 3
    """Largest workgroup per dimension (None: codegen.gpu.DEFAULT_LOCAL_MAX)."""
    max_local_total: int | None = None
    """Most work-items in one workgroup (None: codegen.gpu.DEFAULT_MAX_LOCAL_TOTAL)."""
    shared_max: int = 32768
    """Bytes of shared memory one workgroup may use."""
    max_groups: int | None = None
    """Most workgroups per grid dimension (None: codegen.gpu.MAX_GROUPS_PER_DIMENSION)."""
    group_size: int | None = None
    """Work-items of a group reduce (None: codegen.gpu.DEFAULT_GROUP_SIZE)."""
    group_max_outputs: int | None = None
    """Group reduces only for kernels with at most this many outputs (None: codegen.gpu.GROUP_MAX_OUTPUTS)."""
    register_tile: tuple[int, int] | None = None
    """Preferred (rows, columns) of a matmul's per-work-item register tile on GPUs (None: codegen.gpu's)."""
    supports_float4: bool = True
    """Any vector types at all."""
    vector_widths: dict[DType, tuple[int, ...]] = {}
    """For each scalar dtype, the vector widths loads, stores and ALU ops may use."""
    preferred_vector_bytes: int | None = None
    """Bytes of the vectors the CPU heuristics aim for (None: codegen.optimize.PREFERRED_VECTOR_BYTES)."""
    vector_alu_ops: frozenset[Ops] | dict[DType, frozenset[Ops]] | None = None
    """The ALU ops the language applies to vectors lane-wise (or such a set per scalar dtype); the others are
    devectorized (None: codegen.devectorize's defaults). CAST and BITCAST in the set keep whole-vector conversions
    (between the non-bool dtypes the set allows)."""
    guard_integer_division: bool = False
    """Integer division and remainder by a value that may be 0 are guarded by codegen to give 0 (codegen/division.py,
    the pass "guarded division"); False: the renderer spells that rule itself, or its language already keeps it."""
    emulated_floats: frozenset[DType] = frozenset()
    """Float dtypes the language stores and converts to and from float32 but does not compute with (bfloat16 in C):
    codegen computes each op on them in float32 (codegen/narrow_floats.py, the pass "narrow floats")."""
    masked_load_dtypes: frozenset[DType] = frozenset()
    """Scalar dtypes whose vector loads from consecutive addresses may have a different gate per lane (a row of a
    padded copy that starts or ends in the padding): the INDEX's gate is then a bool vector, and the renderer reads
    only the lanes where it is true (a masked load: the others touch no memory) and gives the load's alternative in
    the rest. Needs `vector_masks`; without it such loads are gathered lane by lane."""
    vector_masks: bool = False
    """Bool vectors may be lane masks: vector comparisons of the dtypes whose `vector_alu_ops` hold them, logic
    (AND, OR, XOR) on such masks and WHERE over them stay vector ops; the renderer writes the masks and selects
    (blends). False: every op with a bool vector source or result is computed lane by lane."""
    tensor_cores: list[object] = []
    """Matrix units codegen may use (none are used yet)."""
    tensor_core_opt: Callable[[Any, list[str]], bool] | None = None
    """`tensor_core_opt(kernel, notes)`: given each GPU kernel first; it may rewrite the kernel for the device's
    matrix units and return True (codegen/gpu.py)."""
    max_buffers: int | None = None
    """Most buffers (outputs and inputs together) one kernel may take (None: no limit); the scheduler splits kernels
    that would take more (schedule/split.py), reading it through `tinycore.engine.memory.device_facts`."""
    atomic_dtypes: frozenset[DType] = frozenset()
    """The scalar dtypes whose global elements kernels can update atomically with each scatter reduce (add, mul, max,
    min): a STORE whose arg is the reduce must then render as one read-modify-write that loses no concurrent update.
    A scatter reduction of such a dtype runs all its axes in parallel; others run the axes that may repeat an
    address in order inside one worker (codegen/atomics.py)."""
    capabilities: ClassVar[object] = None
    """What the conformance suite may check (a dict or tinycore.testing DeviceCapabilities); None: every check."""
    type_map: dict[DType, str] | None = None
    """The type name of each scalar dtype the language spells (C-like renderers); without a declared `capabilities`
    (here or on the device), `Renderer.supported_dtypes` is the dtypes it names. None: every dtype."""
    pre_matcher: PatternMatcher | None = None
    """Lowering rules of the renderer's own, run on the optimized kernel AST before codegen's passes (codegen's
    pipeline, `tinycore.codegen`: the pass "renderer: pre"). None: no pass."""
    extra_matcher: PatternMatcher | None = None
    """Rules run on the expanded stores (no UPCAST, UNROLL or ACCUMULATOR range left, vectors packed) before they
    are linearized (the pass "renderer: extra"). None: no pass."""
    post_matcher: PatternMatcher | None = None
    """Rules run after devectorization, on the stores, accumulator set-ups and updates the program is ordered from
    (the pass "renderer: post"): what the renderer rewrites last, with every op in a form it declared. None: no
    pass."""

    def render(self, uops: list[UOp]) -> str:
        """The source of the linear program `uops` (see docs/architecture.md, "Kernel-level graph")."""
        raise NotImplementedError(f"{type(self).__name__} must implement render")

    def render_named(self, uops: list[UOp], name: str) -> str:
        """`render(uops)` with the function called `name` (renderers that take a name override this)."""
        return self.render(uops)

    def supports_vector(self, dtype: DType, width: int) -> bool:
        """True when `width` lanes of scalar `dtype` may be used in one load, store or ALU op."""
        return width == 1 or width in self.vector_widths.get(dtype.scalar, ())


@dataclass(frozen=True)
class BufferSpec:
    """How a buffer is allocated (the `options` an allocator gets).

    `image`: an image dtype for texture memory (None for plain memory); `uncached` / `cpu_access` / `host`:
    placement hints a device may honour; `nolru`: never keep this allocation in the LRU cache after it is freed;
    `external_ptr`: wrap memory that someone else owns (never freed by the allocator).
    """

    image: DType | None = None
    uncached: bool = False
    cpu_access: bool = False
    host: bool = False
    nolru: bool = False
    external_ptr: int | None = None


Handle = TypeVar("Handle")
"""An allocator's handle on device memory: whatever the device's programs take as a buffer argument (an address, a
driver object); opaque to the core, which only passes it back to the allocator and the programs."""


class AllocatorContract(Generic[Handle]):
    """What Buffer and the engine call on a device's allocator. Subclasses implement the underscored methods; the
    public ones (in tinycore.device.Allocator) wrap them. A plugin names its handle type:
    `class MyAllocator(LRUAllocator[int])`."""

    device: str = "?"
    """The canonical name of the device the allocator serves."""
    before_host_access: Callable[[], None] | None = None
    """Set by a queue-based device to its `synchronize`: called before the host reads or writes device memory or
    releases it, so that no queued command still uses it."""

    def _alloc(self, size: int, options: BufferSpec | None) -> Handle:
        """Allocate `size` bytes (options: a BufferSpec); return the opaque handle. Required."""
        raise NotImplementedError(f"{type(self).__name__} must implement _alloc")

    def _free(self, opaque: Handle, size: int, options: BufferSpec | None) -> None:
        """Release a handle from `_alloc` (default: nothing to release, memory owned by Python objects)."""

    def _copyin(self, dest: Handle, src: memoryview) -> None:
        """Copy host bytes `src` into device memory `dest`. Required."""
        raise NotImplementedError(f"{type(self).__name__} must implement _copyin")

    def _copyout(self, dest: memoryview, src: Handle) -> None:
        """Copy device memory `src` into the host buffer `dest`. Required."""
        raise NotImplementedError(f"{type(self).__name__} must implement _copyout")

    def _offset(self, opaque: Handle, size: int, offset: int) -> Handle:
        """Optional: a handle for `size` bytes starting `offset` bytes into `opaque` (a view sharing its memory).
        A device that overrides it gets buffer views and copies of contiguous ranges without a kernel."""
        raise NotImplementedError(f"{self.device} does not support buffer views (sub-buffers at an offset)")

    def _as_memoryview(self, opaque: Handle, size: int) -> memoryview:
        """Optional: the host-visible memory of a handle (zero-copy reads and writes)."""
        raise NotImplementedError(f"{self.device} memory is not host visible: use copyout instead")

    def open_existing(self, size: int) -> Handle:
        """Optional: an opaque handle on the first `size` bytes of memory that already exists, read only (a DISK
        device's existing file: never created, grown or written). The file loaders of tinycore.nn (safetensors, GGUF,
        torch files) read through it when `opens_existing` says an allocator has it, else they allocate a Buffer."""
        raise NotImplementedError(f"{type(self).__name__} opens no existing memory")

    def copy_to_buffer(self, source: Handle, destination: Any) -> None:
        """Optional: copy the handle `source` of this device straight into the Buffer `destination` of another
        device (no host bounce). The engine uses it when overridden (see `copies_to_buffer`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot copy to another device's buffer")


class CompilerContract:
    """What the engine calls on a device's compiler. `name`, `flags` and `version()` key the disk cache with the
    source, so a different compiler or flags never reuse a binary."""

    name: str = "compiler"
    """The compiler's name (part of the cache key)."""
    flags: tuple[str, ...] = ()
    """Its flags (part of the cache key)."""

    def version(self) -> str:
        """A string identifying the exact compiler build (part of the cache key)."""
        return ""

    def compile(self, src: str) -> bytes:
        """Compile `src` to a binary; raise CompileError with the compiler's log on failure. Required."""
        raise NotImplementedError(f"{type(self).__name__} must implement compile")

    def compile_batch(self, kernels: Sequence[tuple[str, str]]) -> tuple[bytes, list[str]]:
        """Optional: compile several (name, source) kernels into one binary; returns it and the symbol of each.
        The engine compiles all new kernels of a schedule together when this is overridden."""
        raise NotImplementedError(f"{type(self).__name__} compiles one kernel at a time")


@runtime_checkable
class ProgramContract(Protocol):
    """A loaded kernel, as `Compiled.runtime(name, binary)` returns it."""

    def __call__(self, *buffers: object, global_size: Sequence[int] = ..., local_size: Sequence[int] | None = ...,
                 vals: Sequence[int] = ..., wait: bool = ...) -> float | None:
        """Launch on the opaque buffer handles; with `wait` block until done and return the kernel time (s)."""


@runtime_checkable
class LaunchableProgram(ProgramContract, Protocol):
    """A program that can prepare a launch once: `launcher(global_size, local_size)` returns a callable taking only
    the buffer handles (and `vals`), which the engine then calls for every launch of that kernel."""

    def launcher(self, global_size: Sequence[int],
                 local_size: Sequence[int] | None = None) -> Callable[..., float | None]:
        """A fast launch function for these launch dimensions."""


class GraphContract(Protocol):
    """A device's runner of a whole TinyJit capture, as `DeviceContract.graph` builds it: the captured calls (kernel
    launches and copies, in order) replayed as one unit with new input buffers and Variable values."""

    calls: list[Any]
    """The captured calls it replays (the JIT reads their buffers and runners)."""

    @property
    def kernel_count(self) -> int:
        """How many kernel launches (not copies) a replay runs."""

    def run(self, input_buffers: Sequence[Any], var_vals: Mapping[Any, int] | None = None) -> None:
        """Replay with `input_buffers` in place of the captured inputs and `var_vals` for the captured values of
        those Variables."""

    def held_buffers(self) -> list[Any]:
        """The Buffers it holds besides those of `calls` (the last replay's inputs), for the JIT to release."""

    def refreshed(self) -> GraphContract:
        """A runner of the same calls after the JIT allocated their intermediate buffers again (it may be this one,
        its device handles updated, or a new one built over the new memory)."""


GraphFactory = Callable[[list[Any], list[Any], list[Any]], "GraphContract | None"]
"""`graph(calls, input_buffers, keep_alive)`: the device's runner of a whole capture, or None when it cannot run
these calls (the JIT then replays them call by call). `keep_alive` are buffers the runner must hold."""


class DeviceContract:
    """An opened device, as the device class named by `tiny_devices` builds it (subclass tinycore.device.Compiled)."""

    device: str
    """The canonical name ("CPU", "CL:1")."""
    allocator: AllocatorContract
    """Its memory."""
    renderer: RendererContract
    """The renderer chosen for it (DEV=DEVICE:RENDERER, or the first the plugins offer)."""
    compiler: CompilerContract
    """The compiler for its renderer's source."""
    runtime: Callable[[str, bytes], ProgramContract]
    """`runtime(function name, binary)` loads a program (ProgramContract)."""
    graph: GraphFactory | None
    """How TinyJit replays a capture whose first call runs on this device as one unit (GraphFactory), or None: it
    replays call by call."""
    capabilities: object = None
    """What the conformance suite may check and `Renderer.supported_dtypes` answers (a dict or
    tinycore.testing DeviceCapabilities); None: the renderer's declaration, else every check."""
    broken: str | None = None
    """Why the device refuses further work (a queue wait timed out), or None while it is usable; a signal wait on a
    broken device raises it at once instead of waiting out its timeout."""

    def synchronize(self) -> None:
        """Wait until every launched program and copy on this device has finished (default: all are synchronous)."""

    def expect_launches(self) -> None:
        """Optional: a realize on this device has started and may launch kernels within a fraction of a millisecond.

        The engine calls it first thing in a realize (before scheduling or looking up a launch plan) once the device
        has a compiled kernel. A device whose first launch after a pause waits for something to wake up (the CPU
        device's sleeping worker threads: 40-90 us on a virtual machine) starts waking it here, while the realize's
        Python runs. It runs once per realize, so it must be cheap, and it must not block; the default does nothing.
        """


def makes_views(allocator: AllocatorContract) -> bool:
    """True when `allocator` overrides `_offset` (buffers that are views of other buffers)."""
    return type(allocator)._offset is not AllocatorContract._offset


def copies_to_buffer(allocator: AllocatorContract) -> bool:
    """True when `allocator` overrides `copy_to_buffer` (direct copies to another device's Buffer)."""
    return type(allocator).copy_to_buffer is not AllocatorContract.copy_to_buffer


def opens_existing(allocator: AllocatorContract) -> bool:
    """True when `allocator` overrides `open_existing` (read-only handles on memory that already exists)."""
    return type(allocator).open_existing is not AllocatorContract.open_existing


def compiles_in_batches(compiler: CompilerContract) -> bool:
    """True when `compiler` overrides `compile_batch`."""
    return type(compiler).compile_batch is not CompilerContract.compile_batch


def expects_launches(device: DeviceContract) -> bool:
    """True when `device` overrides `expect_launches` (the engine then calls it at the start of each realize)."""
    return type(device).expect_launches is not DeviceContract.expect_launches


def launcher_of(program: object) -> Callable[..., Callable[..., float | None]] | None:
    """The program's `launcher` method when it is a LaunchableProgram, else None."""
    return program.launcher if isinstance(program, LaunchableProgram) else None
