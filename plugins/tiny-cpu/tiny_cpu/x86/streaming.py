"""Streaming (non-temporal) stores for large outputs: `vmovntps` writes whole lines to memory without reading them in.

A plain vector store first reads the line it writes into the cache (a read for ownership), so an elementwise kernel
over 16M floats moves each output byte twice, and its stores push the inputs out of the cache. `vmovntps` writes
around the cache: in a C harness of the same loop on the bench's host it moved 1.5-1.7x the bytes per second on
outputs of 16 MiB and more, where reading the output back soon after costs nothing (it no longer fits the cache
anyway); on outputs of 4 MiB the re-read cost more than the store saved (bench/README.md, "Fused elementwise against
the copy bandwidth"). So a buffer is streamed only when:

- it holds at least `STREAM_BYTES`;
- the kernel only stores to it (nothing reads it back), every store a float32 vector at an element index that is a
  multiple of its lane count (so each store is aligned to its own size once the base is aligned to 64 bytes);
- its pointer is an argument the function can test before its prologue.

`vmovntps` faults on an unaligned address, and a buffer view at an offset is aligned only to its element, so the
function tests the streamed bases at entry (`FunctionBuilder.assemble`, `stream_bases`): aligned to 64 bytes, it runs
the streamed body, which ends with an `sfence` (the worker's stores are ordered before the pool reports the share
done); otherwise the same body with plain `vmovups` stores.
"""

from __future__ import annotations

from tinycore.dtype import PtrDType, dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

STREAM_BYTES = 16 << 20
"""The smallest output (bytes) whose stores go around the cache."""
STREAM_ALIGNMENT = 64
"""The base alignment (bytes) the entry test asks of a streamed buffer: a zmm store's size, so every vector store at
a multiple of its lanes is aligned."""


def multiple_of(index: UOp, factor: int) -> bool:
    """True when integer expression `index` is a multiple of `factor` for every value of its variables (a sufficient
    test over constants, sums, products and left shifts; False where it cannot tell)."""
    if index.op is Ops.CONST:
        return isinstance(index.arg, int) and index.arg % factor == 0
    if index.op in (Ops.ADD, Ops.SUB):
        return all(multiple_of(source, factor) for source in index.src)
    if index.op is Ops.MUL:
        return any(multiple_of(source, factor) for source in index.src)
    if index.op is Ops.SHL and index.src[1].op is Ops.CONST and isinstance(index.src[1].arg, int):
        return multiple_of(index.src[0], factor) or (1 << index.src[1].arg) % factor == 0
    return False


def streamed_buffers(uops: list[UOp]) -> set[UOp]:
    """The DEFINE_GLOBALs of `uops` whose stores can go around the cache (the conditions of the module's docstring,
    less the entry test of the base's alignment)."""
    candidates = {uop for uop in uops if uop.op is Ops.DEFINE_GLOBAL and isinstance(uop.dtype, PtrDType)
                  and uop.dtype.base == dtypes.float32 and uop.dtype.size * 4 >= STREAM_BYTES}
    if not candidates:
        return set()
    stored: set[UOp] = set()
    refused: set[UOp] = set()
    indexes = {uop: uop.src[0] for uop in uops if uop.op is Ops.INDEX and uop.src and uop.src[0] in candidates}
    for uop in uops:
        for position, source in enumerate(uop.src):
            buffer = indexes.get(source)
            if buffer is None:
                continue
            value = uop.src[1] if uop.op is Ops.STORE and len(uop.src) > 1 else None
            lanes = value.dtype.count if value is not None else 0
            if uop.op is Ops.STORE and position == 0 and uop.arg is None and value is not None \
                    and value.dtype.scalar == dtypes.float32 and lanes in (4, 8, 16) \
                    and len(source.src) > 1 and multiple_of(source.src[1], lanes):
                stored.add(buffer)
            else:  # a load, a scalar or combining store, an unaligned vector: the buffer keeps plain stores
                refused.add(buffer)
        if uop.op is Ops.DEFINE_GLOBAL or uop.op is Ops.INDEX:
            continue
        refused |= {source for source in uop.src if source in candidates}  # the pointer used other than indexed
    return stored - refused
