"""The optimizers' fused `_foreach_*` operators: each element runs through the matching single-tensor operator,
and every storage written is realized in one schedule at the end."""
from __future__ import annotations

import torch

from tiny_torch.dispatch import DEFERRED, PENDING, SCALARS_AS_BUFFERS, aten, dispatch, flush
from tiny_torch.updates import jitted_update
from tiny_torch.wrapper import TinyTensor, wrap
from tinycore import Tensor

_ELEMENT_OVERLOAD = {"List": "Tensor", "Scalar": "Scalar", "ScalarList": "Scalar", "Tensor": "Tensor",
                     "default": "default", "ScalarAndTensor": "Tensor"}


def _element_overload(name: str, overload: str) -> torch._ops.OpOverload | None:
    packet = getattr(aten, name, None)
    if packet is None:
        return None
    for candidate in (_ELEMENT_OVERLOAD.get(overload, overload), "default", "Tensor", "Scalar"):
        if candidate in packet.overloads():
            return getattr(packet, candidate)
    return None


def run_foreach(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """Run `_foreach_NAME[_]` element by element through aten.NAME[_], or NotImplemented when there is none."""
    name = func._schema.name.split("::")[1].removeprefix("_foreach_")
    element = _element_overload(name, func._overloadname)
    if element is None:
        return NotImplemented
    count = len(args[0])
    if name.endswith("_") and _jitted_inplace(func, element, args, kwargs):
        return None
    per_element = [[arg[position] if isinstance(arg, (list, tuple)) else arg for arg in args]
                   for position in range(count)]
    element_kwargs = [{key: value[position] if isinstance(value, (list, tuple)) else value
                       for key, value in kwargs.items()} for position in range(count)]
    DEFERRED.append(True)
    scalar_list = func._overloadname.endswith("ScalarList")
    if scalar_list:
        SCALARS_AS_BUFFERS.append(True)
    try:
        results = [dispatch(element, tuple(element_args), element_kw)
                   for element_args, element_kw in zip(per_element, element_kwargs, strict=False)]
    finally:
        DEFERRED.pop()
        if scalar_list:
            SCALARS_AS_BUFFERS.pop()
    if name.endswith("_"):
        flush()
        return None
    if not DEFERRED and PENDING:
        flush()
    return results


def _jitted_inplace(func: torch._ops.OpOverload, element: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """An in-place `_foreach_*_` whose lists hold whole storages (an optimizer's step counts, its moments) run as
    one TinyJit replay (see tiny_torch.updates). Its numbers are part of the capture's key, so the ScalarList
    overloads (new numbers every step) keep the lazy path; so do keyword arguments and CPU tensors."""
    if kwargs or func._overloadname.endswith("ScalarList"):
        return False
    lists = [position for position, arg in enumerate(args) if isinstance(arg, (list, tuple))]
    if not lists or any(not isinstance(value, TinyTensor) for position in lists for value in args[position]):
        return False
    others = [arg for position, arg in enumerate(args) if position not in lists]
    if any(isinstance(arg, torch.Tensor) for arg in others):
        return False
    try:
        hash(tuple(others))
    except TypeError:
        return False
    count = len(args[0])
    reads = [args[position][index] for index in range(count) for position in lists]
    index = args[0][0].device.index or 0 if count else 0

    def update(values: list[Tensor], numbers: list[Tensor]) -> list[Tensor]:
        results = []
        DEFERRED.append(True)
        try:
            for start in range(0, len(values), len(lists)):
                wrapped = iter(wrap(value, index) for value in values[start:start + len(lists)])
                element_args = tuple(next(wrapped) if position in lists else arg for position, arg in enumerate(args))
                target = element_args[0]
                dispatch(element, element_args, {})
                PENDING.pop(id(target.tiny_storage), None)
                results.append(target.tiny_storage.flat)
        finally:
            DEFERRED.pop()
        return results
    key = ("foreach", func, tuple(lists), tuple(arg if position not in lists else None for position, arg in
                                             enumerate(args)))
    return jitted_update(key, reads, list(args[0]), [], update)
