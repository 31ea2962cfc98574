"""Lazy graph templates of mapped operators, keyed by the structure of their arguments.

Building an operator's lazy tinycore graph through the Tensor API costs far more in Python than the graph's size
suggests (a convolution's backward differentiates the forward with tinycore's autograd at every call). An eager
training step calls the same operators with arguments of the same sizes, dtypes and options every step, so the
graph each call builds is the same but for the tensors it reads. The first call with a given structure builds the
graph once more on placeholders (new buffer nodes that are never allocated); that call and every later one with the
same structure get their results by substituting their own tensors for the placeholders, one pass over the nodes.

An operator whose graph may depend on the values it reads (it realizes something while it is built), whose output
sizes depend on the data, or which draws random numbers, is never templated: it is built call by call as before.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from tinycore import Tensor
from tinycore.counters import GlobalCounters
from tinycore.uop import Ops, UOp
from tinycore.uop.buffer import new_buffer_uop

_NOT_TEMPLATED = object()  # a structure whose graph is built call by call
_TEMPLATES: dict[tuple, object] = {}
_TEMPLATE_LIMIT = 4096  # distinct (operator, argument structure) pairs kept; past that the cache starts over
_REFUSING_TAGS = (torch.Tag.nondeterministic_seeded, torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape)


class _Template:
    """An operator's results built on placeholders, and the placeholders' buffer nodes in argument order."""

    __slots__ = ("buffers", "results", "as_tuple")

    def __init__(self, buffers: list[UOp], results: list[UOp | None], as_tuple: bool | None):
        self.buffers, self.results, self.as_tuple = buffers, results, as_tuple

    def apply(self, tensors: list[Tensor]) -> object:
        """The results for `tensors` (the call's tensor arguments in the order the key found them)."""
        mapping = {buffer: tensor.uop.reshape((buffer.arg[1],)) for buffer, tensor in zip(self.buffers, tensors,
                                                                                           strict=True)}
        results = [Tensor(result.substitute(mapping)) if result is not None else None for result in self.results]
        if self.as_tuple is None:
            return results[0]
        return tuple(results) if self.as_tuple else results


def _structure(value: object, tensors: list[Tensor]) -> object:
    """A hashable stand-in for an argument that fixes the graph an operator builds from it; the tensors found are
    appended to `tensors`. Raises TypeError for an argument that cannot be keyed."""
    kind = type(value)
    if kind is Tensor:
        shape = value.shape  # type: ignore[attr-defined]
        device = value.device  # type: ignore[attr-defined]
        if device.__class__ is not str or not all(size.__class__ is int for size in shape):
            raise TypeError("a multi-device tensor or a symbolic shape is not templated")
        tensors.append(value)  # type: ignore[arg-type]
        return (Tensor, shape, value.dtype, device)  # type: ignore[attr-defined]
    if kind is tuple or kind is list:
        return (kind,) + tuple(_structure(item, tensors) for item in value)  # type: ignore[attr-defined]
    if kind is dict:
        return (dict,) + tuple((key, _structure(item, tensors)) for key, item in value.items())  # type: ignore
    if kind is float or kind is int or kind is bool:
        return (kind, value)  # 1.0, 1 and True hash alike and may build different graphs (promotion differs)
    if value is None or kind is str or isinstance(value, (torch.dtype, torch.memory_format)):
        return value
    hash(value)  # a DType or another immutable option; anything unhashable is refused here
    return (kind, value)


def _placeholder(tensor: Tensor) -> Tensor:
    shape = tensor.shape
    count = 1
    for size in shape:
        count *= size  # type: ignore[operator]
    return Tensor(new_buffer_uop(tensor.device, tensor.dtype, count).reshape(shape))  # type: ignore[arg-type]


def _replace_tensors(value: object, placeholders: list[Tensor]) -> object:
    """`value` with its tensors replaced, in the order _structure found them, by the next of `placeholders`."""
    kind = type(value)
    if kind is Tensor:
        return placeholders.pop(0)
    if kind is tuple or kind is list:
        return kind(_replace_tensors(item, placeholders) for item in value)  # type: ignore[call-arg,attr-defined]
    if kind is dict:
        return {key: _replace_tensors(item, placeholders) for key, item in value.items()}  # type: ignore[attr-defined]
    return value


def _buffer_node(node: UOp) -> UOp:
    while node.op is not Ops.BUFFER:
        node = node.src[0]
    return node


def _build(function: Callable[..., object], args: tuple, kwargs: dict, tensors: list[Tensor]) -> object:
    """The template of `function` over placeholders of `tensors`, or _NOT_TEMPLATED when the graph may depend on
    the values (a kernel ran or a placeholder was allocated, to be read, while it was built; or building it raised,
    as a data-dependent shape may on the placeholders' contents) or a result is not a lazy tensor."""
    placeholders = [_placeholder(tensor) for tensor in tensors]
    buffers = [_buffer_node(placeholder.uop) for placeholder in placeholders]
    queue = list(placeholders)
    stand_in_args = _replace_tensors(args, queue)
    stand_in_kwargs = _replace_tensors(kwargs, queue)
    kernels = GlobalCounters.kernel_count
    try:
        result = function(*stand_in_args, **stand_in_kwargs)  # type: ignore[misc]
    except Exception:  # noqa: BLE001  (built on the placeholders' garbage values: the call itself says what is wrong)
        return _NOT_TEMPLATED
    if GlobalCounters.kernel_count != kernels or any(buffer.buffer.is_allocated() for buffer in buffers):
        return _NOT_TEMPLATED
    parts = [result] if isinstance(result, Tensor) else list(result) if isinstance(result, (tuple, list)) else None
    # results are tensors, or None where an output is not asked for (a first layer's input gradient)
    if not parts or not all(type(part) is Tensor or part is None for part in parts):
        return _NOT_TEMPLATED
    known = set(buffers)
    for part in parts:  # a result that is a buffer of its own (a constant) would be one buffer shared by every call
        base = part.uop.base if part is not None else None  # type: ignore[union-attr]
        if base is not None and base.op in (Ops.BUFFER, Ops.BUFFER_VIEW) and base not in known:
            return _NOT_TEMPLATED
    as_tuple = None if isinstance(result, Tensor) else isinstance(result, tuple)
    return _Template(buffers, [part.uop if part is not None else None for part in parts], as_tuple)  # type: ignore


def run_templated(func: torch._ops.OpOverload | str, function: Callable[..., object], args: tuple,
                  kwargs: dict) -> object:
    """`function(*args, **kwargs)` (a mapped operator on tinycore values, or a helper that builds a graph from
    tinycore values alone, named by a string) through the template of its argument structure, built on first use;
    operators and arguments that cannot be templated are called directly."""
    if not isinstance(func, str) and any(tag in func.tags for tag in _REFUSING_TAGS):
        return function(*args, **kwargs)
    tensors: list[Tensor] = []
    try:
        key = (func, _structure(args, tensors), _structure(kwargs, tensors))
        template = _TEMPLATES.get(key)
    except TypeError:
        return function(*args, **kwargs)
    if not tensors:
        return function(*args, **kwargs)
    if template is None:
        if len(_TEMPLATES) >= _TEMPLATE_LIMIT:
            _TEMPLATES.clear()
        template = _TEMPLATES[key] = _build(function, args, kwargs, tensors)
    if template is _NOT_TEMPLATED:
        return function(*args, **kwargs)
    return template.apply(tensors)  # type: ignore[union-attr]
