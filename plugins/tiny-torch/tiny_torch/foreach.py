"""The optimizers' fused `_foreach_*` operators: each element runs through the matching single-tensor operator,
and every storage written is realized in one schedule at the end."""
from __future__ import annotations

import torch

from tiny_torch.dispatch import DEFERRED, PENDING, SCALARS_AS_BUFFERS, aten, dispatch, flush

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
