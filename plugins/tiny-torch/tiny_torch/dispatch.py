"""How an aten operator on tiny tensors runs: views share storage, in-place and out= operators write through
their functional form, mapped operators run on tinycore, the rest decompose (PyTorch's own decompositions) or,
as a last resort, run on the CPU with a warning naming the operator once (TINY_TORCH_FALLBACK=0: an error)."""
from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable
from typing import TypeVar

import torch
from torch._decomp import decomposition_table
from torch.utils._pytree import tree_flatten, tree_map

from tiny_torch.dtypes import to_tiny_dtype
from tiny_torch.storage import TinyStorage
from tiny_torch.templates import run_templated
from tiny_torch.wrapper import TinyTensor, from_cpu, restride, tinycore_device, to_cpu, wrap
from tinycore import Tensor, dtypes
from tinycore.dtype import DType

aten = torch.ops.aten
_Arguments = TypeVar("_Arguments")
OPERATORS: dict[torch._ops.OpOverload, Callable[..., object]] = {}
"""The aten overloads mapped onto tinycore: functional forms, called with tinycore Tensors for tensor arguments."""
DIRECT: dict[torch._ops.OpOverload, Callable[..., object]] = {}
"""Overloads handled on the TinyTensors themselves (copies across devices, storage-level and random in-place ops)."""
FALLBACKS_HIT: set[str] = set()
"""Every operator that ran on the CPU fallback in this process (each warned about once)."""


def register(*overloads: torch._ops.OpOverload, direct: bool = False) -> Callable[[Callable[..., object]],
                                                                                    Callable[..., object]]:
    """Map the given aten overloads onto the decorated function (`direct`: it receives the PyTorch tensors)."""
    def decorate(function: Callable[..., object]) -> Callable[..., object]:
        for overload in overloads:
            (DIRECT if direct else OPERATORS)[overload] = function
        return function
    return decorate


def device_index(args: object) -> int:
    """The tiny device index of the first tiny tensor among `args` (0 when there is none)."""
    first = _first_tiny(args)
    return (first.device.index or 0) if first is not None else 0


def _first_tiny(value: object) -> TinyTensor | None:
    """The first TinyTensor in an operator's arguments (tuples, lists and dict values, nested)."""
    if isinstance(value, TinyTensor):
        return value
    if type(value) is tuple or type(value) is list:
        for item in value:  # type: ignore[attr-defined]
            found = _first_tiny(item)
            if found is not None:
                return found
    elif type(value) is dict:
        for item in value.values():  # type: ignore[attr-defined]
            found = _first_tiny(item)
            if found is not None:
                return found
    return None


def map_arguments(function: Callable[[object], object], value: _Arguments) -> _Arguments:
    """`function` applied to every leaf of an operator's arguments (tuples, lists and dicts rebuilt, nested): what
    pytree's tree_map does for them, without its tree specs, which cost more than the rest of a small operator."""
    kind = type(value)
    if kind is tuple or kind is list:
        return kind(map_arguments(function, item) for item in value)  # type: ignore[call-arg,attr-defined]
    if kind is dict:
        mapped = {key: map_arguments(function, item) for key, item in value.items()}  # type: ignore[attr-defined]
        return mapped  # type: ignore[return-value]
    return function(value)  # type: ignore[return-value]


def to_meta(value: object) -> object:
    """A tensor's metadata twin on the meta device (same size, stride, storage offset and dtype)."""
    if isinstance(value, TinyTensor):
        base = torch.empty(value.tiny_storage.numel, dtype=value.dtype, device="meta")
        return base.as_strided(value.shape, value.stride(), value.storage_offset())
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


_META_CACHE: dict[tuple, object] = {}
_META_CACHE_LIMIT = 8192


def _meta_key(value: object) -> object:
    """A hashable stand-in for an argument that fixes what a meta kernel sees of it."""
    if isinstance(value, TinyTensor):
        return ("tiny", tuple(value.shape), value.stride(), value.storage_offset(), value.dtype,
                value.tiny_storage.numel)
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.stride(), value.dtype, value.device.type)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_meta_key(part) for part in value)
    if isinstance(value, (float, int)):
        return (type(value), value)  # 1.0, 1 and True promote differently, and hash alike
    return value


def meta_result(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """What PyTorch's meta kernel says the result is (shapes, dtypes, strides), or None when it has none.
    Cached by the arguments' metadata: the meta kernels are the dispatcher's largest fixed cost per operator."""
    try:
        key = (func, _meta_key(args), _meta_key(tuple(sorted(kwargs.items()))))
        hash(key)
    except TypeError:
        return _run_meta(func, args, kwargs)
    if key not in _META_CACHE:
        if len(_META_CACHE) >= _META_CACHE_LIMIT:
            _META_CACHE.clear()
        _META_CACHE[key] = _run_meta(func, args, kwargs)
    return _META_CACHE[key]


def _run_meta(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return func(*tree_map(to_meta, args), **tree_map(to_meta, kwargs))
    except Exception:
        return None


def _unwrap(index: int) -> Callable[[object], object]:
    def unwrap(value: object) -> object:
        if isinstance(value, TinyTensor):
            return value.tiny_value()
        if isinstance(value, torch.Tensor):
            return from_cpu(value, index)
        if isinstance(value, torch.dtype):
            return to_tiny_dtype(value)
        return value
    return unwrap


def _is_pointwise(func: torch._ops.OpOverload) -> bool:
    return torch.Tag.pointwise in func.tags


SCALARS_AS_BUFFERS: list[bool] = []
"""Non-empty while a `_foreach_*.ScalarList` operator runs: its float scalars (an optimizer's bias corrections,
new every step) reach tinycore as one-element buffers, not constants, so each step reuses the compiled kernels."""


def _scalars_as_buffers(values: tuple, dtype: DType, index: int) -> tuple:
    return tuple(Tensor([value], dtype=dtype, device=tinycore_device(index)).reshape(())
                 if isinstance(value, float) else value for value in values)


def run_mapped(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """Run a mapped functional operator on tinycore and wrap its results, checked against the meta kernel."""
    index = device_index((args, kwargs))
    meta = meta_result(func, args, kwargs)
    unwrap = _unwrap(index)
    tiny_args, tiny_kwargs = map_arguments(unwrap, args), map_arguments(unwrap, kwargs)
    if SCALARS_AS_BUFFERS:
        first = next((value for value in tiny_args if isinstance(value, Tensor)), None)
        dtype = to_tiny_dtype(meta.dtype) if isinstance(meta, torch.Tensor) else None
        dtype = first.dtype if dtype is None and first is not None else dtype
        if dtype is not None and dtypes.is_float(dtype):
            tiny_args = _scalars_as_buffers(tiny_args, dtype, index)
            tiny_kwargs = dict(zip(tiny_kwargs, _scalars_as_buffers(tuple(tiny_kwargs.values()), dtype, index),
                                   strict=True))
    if _is_pointwise(func) and isinstance(meta, torch.Tensor) and meta.dtype != torch.bool:
        # PyTorch's type promotion decides the computing dtype, not tinycore's
        dtype = to_tiny_dtype(meta.dtype)
        def cast(value: object) -> object:
            return value.cast(dtype) if isinstance(value, Tensor) and value.dtype != dtype else value
        tiny_args, tiny_kwargs = map_arguments(cast, tiny_args), map_arguments(cast, tiny_kwargs)
    result = run_templated(func, OPERATORS[func], tiny_args, tiny_kwargs)
    return _wrap_results(func, result, meta, index)


def _wrap_results(func: torch._ops.OpOverload, result: object, meta: object, index: int) -> object:
    if isinstance(result, Tensor):
        return _wrap_one(func, result, meta, index)
    if isinstance(result, (tuple, list)):
        metas = meta if isinstance(meta, (tuple, list)) else [None] * len(result)
        wrapped = [_wrap_one(func, part, part_meta, index) if isinstance(part, Tensor) else part
                   for part, part_meta in zip(result, metas, strict=False)]
        return tuple(wrapped) if isinstance(result, tuple) else wrapped
    return result


def _wrap_one(func: torch._ops.OpOverload, value: Tensor, meta: object, index: int) -> TinyTensor:
    if isinstance(meta, torch.Tensor):
        if tuple(value.shape) != tuple(meta.shape):
            raise RuntimeError(f"tiny device: {func} produced shape {tuple(value.shape)} where PyTorch expects "
                               f"{tuple(meta.shape)}; please report this with the call that caused it")
        dtype = to_tiny_dtype(meta.dtype)
        if value.dtype != dtype:
            value = value.cast(dtype)
    wrapped = wrap(value, index)
    if wrapped.tiny_storage.numel == 1:
        LAZY_SCALARS[id(wrapped.tiny_storage)] = wrapped.tiny_storage
    return wrapped


def run_view(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """A view operator: PyTorch's meta kernel computes sizes, strides and offset; the result shares storage."""
    base = next(leaf for leaf in tree_flatten((args, kwargs))[0] if isinstance(leaf, TinyTensor))
    meta = meta_result(func, args, kwargs)
    if meta is None:
        # the meta kernel refused the arguments (select(1, -4) of a (2, 3) tensor): its own error, as the CPU's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            func(*tree_map(to_meta, args), **tree_map(to_meta, kwargs))
        raise RuntimeError(f"tiny device: the view operator {func} has no meta kernel to compute its strides")

    def share(value: object) -> object:
        if isinstance(value, torch.Tensor):
            return TinyTensor(base.tiny_storage, tuple(value.shape), tuple(value.stride()), value.storage_offset(),
                              base.device.index or 0)
        return value
    return map_arguments(share, meta)


PENDING: dict[int, TinyStorage] = {}
"""Storages written in place since the last flush (realized together, so shared subgraphs are computed once)."""
LAZY_SCALARS: weakref.WeakValueDictionary[int, TinyStorage] = weakref.WeakValueDictionary()
"""One-element results of mapped operators since the last flush, still alive. The next flush realizes them with the
pending storages: a training step's loss, read by `loss.item()` after `backward()`, is then computed in the schedule
that realizes its gradient (the two share the forward graph below them) instead of in a schedule of its own."""
MAX_PENDING_WRITES = 2
"""Writes a storage may pile up lazily before every pending storage is realized (bounds the graph behind values
that are updated every step, like parameters and optimizer state). Two, not one: a value written once per training
step (batch norm's running statistics, its step counter) then waits for the step's next realize (the optimizer's)
and is computed with it, instead of scheduling the forward pass below it apart at each layer."""


DEFERRED: list[bool] = []
"""Non-empty while a `_foreach_*` operator runs: its element writes are realized together when it ends."""


def commit(*tensors: TinyTensor, sources: tuple = ()) -> None:
    """Note in-place writes; realize all pending storages together once one was written MAX_PENDING_WRITES times.
    The tiny tensors among `sources` (the operands of the in-place operator, such as gradients) are realized with
    them, so later in-place operators that read them again do not recompute their graphs."""
    for leaf in tree_flatten(sources)[0]:
        if isinstance(leaf, TinyTensor) and not leaf.tiny_storage.realized:
            PENDING[id(leaf.tiny_storage)] = leaf.tiny_storage
    for tensor in tensors:
        storage = tensor.tiny_storage
        storage.pending_writes += 1
        PENDING[id(storage)] = storage
    if DEFERRED:
        return
    if any(storage.pending_writes >= MAX_PENDING_WRITES for storage in PENDING.values()) or len(PENDING) > 512:
        flush()


def flush() -> None:
    """Realize every storage written in place since the last flush, in one schedule, with the one-element values
    computed since then that are still alive and lazy (LAZY_SCALARS)."""
    for scalar in list(LAZY_SCALARS.values()):
        if not scalar.realized:
            PENDING.setdefault(id(scalar), scalar)
    LAZY_SCALARS.clear()
    storages = list(PENDING.values())
    PENDING.clear()
    flats = []
    for storage in storages:
        storage.pending_writes = 0
        storage.realized = True
        storage.flat = storage.flat.contiguous()
        flats.append(storage.flat)
    if flats:
        flats[0].realize(*flats[1:])


OVERLAP_TOLERATED = {aten.index_put_.default, aten.masked_fill_.Scalar, aten.masked_fill_.Tensor}
"""In-place operators PyTorch lets write into an expanded tensor (with a deprecation warning); the others refuse."""


def check_no_internal_overlap(target: object) -> None:
    """Refuse an in-place write into a tensor whose elements share memory (an expanded dim), as PyTorch does: the
    result would depend on the order the elements are written in."""
    if isinstance(target, torch.Tensor) and any(size > 1 and stride == 0
                                                for size, stride in zip(target.shape, target.stride(), strict=True)):
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location. Please clone() the tensor before performing the operation.")


def check_inplace_result(target: object, result: object, kwargs: dict) -> None:
    """The checks PyTorch makes before an in-place operator writes its result into `target`: the same shape (the
    inputs may not broadcast the target), a result dtype that casts to the target's, no other dtype asked for."""
    if not isinstance(target, torch.Tensor) or not isinstance(result, torch.Tensor):
        return
    if tuple(result.shape) != tuple(target.shape):
        raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape "
                           f"{list(result.shape)}")
    requested = kwargs.get("dtype")
    if requested is not None and requested != target.dtype:
        raise RuntimeError(f"Bad in-place call: input tensor dtype {target.dtype} and output tensor dtype "
                           f"{requested} should match")
    if not torch.can_cast(result.dtype, target.dtype):
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output type {target.dtype}")


def functional_of(func: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The functional overload of an in-place aten operator (add_.Tensor -> add.Tensor), if PyTorch has one."""
    name = func._schema.name.split("::")[1]
    if not name.endswith("_") or name.startswith("_foreach"):
        return None
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    # the overload taking the same arguments: names differ (transpose_.default is transpose.int) and so do meanings
    # (pow_.Scalar is pow.Tensor_Scalar; pow.Scalar raises a number to tensor powers)
    signature = _signature(func)
    overloads = packet.overloads()
    for overload in sorted(overloads, key=lambda other: other != func._overloadname):
        candidate = getattr(packet, overload)
        if _signature(candidate) == signature:
            return candidate
    return None


def _signature(func: torch._ops.OpOverload) -> tuple[tuple[str, str], ...]:
    return tuple((argument.name, str(argument.type)) for argument in func._schema.arguments if not argument.is_out)


def _has_out(func: torch._ops.OpOverload) -> bool:
    return any(argument.is_out for argument in func._schema.arguments)


def dispatch(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """Run one aten operator whose arguments include a tiny tensor."""
    if func in DIRECT:
        return DIRECT[func](*args, **kwargs)
    if func in OPERATORS:
        return run_mapped(func, args, kwargs)
    if func.is_view:
        return run_view(func, args, kwargs)
    functional = functional_of(func)
    if functional is not None and functional.is_view:  # unsqueeze_, t_, as_strided_: only the metadata changes
        view = run_view(functional, args, kwargs)
        target = args[0]
        assert isinstance(view, TinyTensor) and isinstance(target, TinyTensor)
        restride(target, target, tuple(view.shape), tuple(view.stride()), int(view.storage_offset()))
        return target
    if functional is not None and (functional in OPERATORS or functional in decomposition_table):
        if func not in OVERLAP_TOLERATED:
            check_no_internal_overlap(args[0])
        result = dispatch(functional, args, kwargs)
        target = args[0]
        check_inplace_result(target, result, kwargs)
        target.tiny_write(result.tiny_value())  # type: ignore[union-attr]
        commit(target, sources=(args[1:], kwargs))
        return target
    if _has_out(func):
        handled = run_out(func, args, kwargs)
        if handled is not NotImplemented:
            return handled
    if func._schema.name.startswith("aten::_foreach_"):
        from tiny_torch.foreach import run_foreach
        handled = run_foreach(func, args, kwargs)
        if handled is not NotImplemented:
            return handled
    if func in decomposition_table and not _has_out(func):
        return decomposition_table[func](*args, **kwargs)
    decomposed = func.decompose(*args, **kwargs)
    if decomposed is not NotImplemented:
        return decomposed
    return run_on_cpu(func, args, kwargs)


def run_out(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """An out= operator (torch.add(a, b, out=c)): its functional overload runs, and each result is written into its
    out= tensor, which PyTorch's way is resized first when its shape differs. NotImplemented when there is no
    functional overload the tiny device runs."""
    arguments = func._schema.arguments
    packet = getattr(aten, func._schema.name.split("::")[1], None)
    if packet is None:
        return NotImplemented
    inputs = tuple((argument.name, str(argument.type)) for argument in arguments if not argument.is_out)
    functional = next((getattr(packet, name) for name in packet.overloads()
                       if not _has_out(getattr(packet, name)) and _signature(getattr(packet, name)) == inputs), None)
    if functional is None or not (functional in OPERATORS or functional in decomposition_table):
        return NotImplemented
    values = dict(zip((argument.name for argument in arguments), args, strict=False)) | kwargs
    outs = [values[argument.name] for argument in arguments if argument.is_out]
    call_kwargs = {argument.name: values[argument.name] for argument in arguments
                   if not argument.is_out and argument.name in values}
    result = dispatch(functional, (), call_kwargs)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    tiny_outs = [tensor for tensor in outs if isinstance(tensor, TinyTensor)]
    tiny_results = [tensor for tensor in results if isinstance(tensor, TinyTensor)]
    if len(tiny_outs) != len(outs) or len(tiny_results) != len(outs):
        return NotImplemented
    for out, value in zip(tiny_outs, tiny_results, strict=True):
        if not torch.can_cast(value.dtype, out.dtype):
            raise RuntimeError(f"result type {value.dtype} can't be cast to the desired output type {out.dtype}")
        if tuple(out.shape) != tuple(value.shape):
            fresh = wrap(value.tiny_value().cast(to_tiny_dtype(out.dtype)), out.device.index or 0)
            restride(out, fresh, tuple(fresh.shape), tuple(fresh.stride()), 0)
            out.tiny_storage = fresh.tiny_storage
        else:
            check_no_internal_overlap(out)
            out.tiny_write(value.tiny_value())
    commit(*tiny_outs)
    return tiny_outs[0] if len(tiny_outs) == 1 else tuple(tiny_outs)


BACKWARD_ERRORS: list[Exception] = []
"""Exceptions raised by operators inside a backward pass, raised again on the caller's thread when it ends."""


def defer_backward_error(func: torch._ops.OpOverload, args: tuple, kwargs: dict, error: Exception) -> object:
    """Keep `error` for the end of the backward pass and return zero placeholders shaped like the operator's result.
    PyTorch's autograd engine loses a Python backend's exception (the process aborts, or a SystemError without the
    message), so the operator must return; the backward pass then raises `error` itself (see
    run_backward_raising), so a gradient computed from a placeholder never reaches the user without that error
    (.grad of a leaf may hold zeros after the failed pass)."""
    meta = meta_result(func, args, kwargs)
    if meta is None:
        raise error
    BACKWARD_ERRORS.append(error)
    index = device_index((args, kwargs))

    def placeholder(value: object) -> object:
        if isinstance(value, torch.Tensor):
            shape = tuple(int(extent) for extent in value.shape)
            dtype = to_tiny_dtype(value.dtype)
            zeros = Tensor.zeros(*shape, dtype=dtype, device=tinycore_device(index)) if shape else \
                Tensor(0, dtype=dtype, device=tinycore_device(index))
            return wrap(zeros, index)
        return value
    return tree_map(placeholder, meta)


def run_backward_raising(engine_run_backward: Callable[..., object]) -> Callable[..., object]:
    """Wrap PyTorch's entry to its autograd engine so that the first error an operator hit during the backward pass
    is raised at the backward()/grad() call."""
    def run_backward(*args: object, **kwargs: object) -> object:
        BACKWARD_ERRORS.clear()
        try:
            result = engine_run_backward(*args, **kwargs)
        finally:
            errors = list(BACKWARD_ERRORS)
            BACKWARD_ERRORS.clear()
        if errors:
            raise errors[0]
        return result
    run_backward.tiny_torch_wrapped = True  # type: ignore[attr-defined]
    return run_backward


def fallback_allowed() -> bool:
    """False when TINY_TORCH_FALLBACK=0 asks for an error instead of running unmapped operators on the CPU."""
    return os.environ.get("TINY_TORCH_FALLBACK", "1") != "0"


def run_on_cpu(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """The CPU fallback: copy tiny arguments to the CPU, run PyTorch's kernel, copy results and mutated arguments
    back. Warns once per operator."""
    name = str(func)
    if not fallback_allowed():
        raise NotImplementedError(f"aten operator {name} is not mapped onto tinycore for the tiny device; unset "
                                  f"TINY_TORCH_FALLBACK=0 to run it on the CPU (copies in and out)")
    if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(func.name(), "CPU"):
        raise NotImplementedError(f"aten operator {name} is not mapped onto tinycore for the tiny device, and PyTorch "
                                  f"has no CPU kernel for it to fall back on (it is an accelerator-only operator); "
                                  f"please report it to tiny-torch with the call that reached it")
    if name not in FALLBACKS_HIT:
        FALLBACKS_HIT.add(name)
        warnings.warn(f"tiny device: aten operator {name} is not mapped onto tinycore and runs on the CPU "
                      f"(copies in and out); TINY_TORCH_FALLBACK=0 makes this an error", stacklevel=3)
    index = device_index((args, kwargs))
    originals: dict[int, TinyTensor] = {}

    def to_host(value: object) -> object:
        if isinstance(value, TinyTensor):
            host = to_cpu(value.tiny_value(), value.dtype)
            originals[id(host)] = value
            return host
        if isinstance(value, torch.device) and value.type == "tiny":
            return torch.device("cpu")
        return value
    host_args, host_kwargs = tree_map(to_host, args), tree_map(to_host, kwargs)
    host_kwargs = {key: (torch.device("cpu") if key == "device" and value is not None else value)
                   for key, value in host_kwargs.items()}
    result = func(*host_args, **host_kwargs)
    written: list[TinyTensor] = []
    for position, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        host = host_kwargs.get(argument.name) if argument.kwarg_only or position >= len(host_args) \
            else host_args[position]
        for leaf in tree_flatten(host)[0]:
            if isinstance(leaf, torch.Tensor) and id(leaf) in originals:
                originals[id(leaf)].tiny_write(from_cpu(leaf, index))
                written.append(originals[id(leaf)])
    commit(*written)

    def to_device(value: object) -> object:
        if isinstance(value, torch.Tensor):
            return originals[id(value)] if id(value) in originals else wrap(from_cpu(value, index), index)
        return value
    return tree_map(to_device, result)


def cpu_device_of(index: int) -> str:
    """The tinycore device name for tiny:index (re-exported for the operator modules)."""
    return tinycore_device(index)
