"""The operator table: each ONNX operator's implementation per domain and opset version.

An implementation is registered with the opset version its semantics start at (`since`); a node runs the newest
implementation whose `since` is at most the opset its model imports for that domain. `host_inputs` lists inputs
that must be known on the host (shapes, axes, pads): the runner hands those over as Python lists. `context=True`
passes the node's NodeContext (subgraphs, the random seed, the number of outputs) as the keyword `context`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol, Union

import numpy as np

from tinycore.nn.onnx.parser import Graph, Node
from tinycore.tensor import Tensor

OpFunction = Callable[..., Any]

Value = Union[Tensor, np.ndarray, list[Tensor], None]
"""What flows along a graph edge: a tensor, a string tensor (a numpy object array of str, held on the host), a
sequence of tensors, or an empty optional."""


class NodeContext(Protocol):
    """What an op registered with `context=True` receives (the runner provides it; declared here so that the
    operator files depend on the table only, not on the runner that imports them)."""

    node: Node
    device: str

    def run_subgraph(self, graph: Graph, inputs: Sequence[Value]) -> list[Value]:
        """Run `graph` with its declared inputs bound to `inputs` in order; enclosing scopes' values are visible."""
        ...


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One registered implementation."""
    name: str
    domain: str
    since: int
    function: OpFunction
    host_inputs: tuple[int, ...]
    context: bool
    strings: bool = False
    """Whether the implementation takes string tensors (numpy object arrays) among its inputs."""


OPS: dict[tuple[str, str], list[OpSpec]] = {}
"""(domain, op type) -> implementations, sorted by `since`."""

STRING_OPS: dict[tuple[str, str], OpSpec] = {}
"""(domain, op type) -> the string form of a numeric op (Reshape, Concat, Equal, Cast...): what the runner calls
when a string tensor is among the node's inputs, or the node casts to STRING."""


def onnx_op(name: str, since: int = 1, domain: str = "", host_inputs: tuple[int, ...] = (),
            context: bool = False, strings: bool = False) -> Callable[[OpFunction], OpFunction]:
    """Register the decorated function as op `name` of `domain` from opset `since` on (`strings`: it takes string
    tensors too)."""
    def register(function: OpFunction) -> OpFunction:
        specs = OPS.setdefault((domain, name), [])
        specs.append(OpSpec(name, domain, since, function, host_inputs, context, strings))
        specs.sort(key=lambda spec: spec.since)
        return function
    return register


def string_op(name: str, domain: str = "", host_inputs: tuple[int, ...] = (),
              context: bool = False) -> Callable[[OpFunction], OpFunction]:
    """Register the decorated function as the string form of op `name` (every opset: the string forms read the
    inputs and attributes of all of the op's versions)."""
    def register(function: OpFunction) -> OpFunction:
        STRING_OPS[(domain, name)] = OpSpec(name, domain, 1, function, host_inputs, context, True)
        return function
    return register


def find_op(domain: str, name: str, opset: int) -> OpSpec | None:
    """The implementation of `name` for `opset` of `domain`, or None."""
    candidates = [spec for spec in OPS.get((domain, name), []) if spec.since <= max(opset, 1)]
    return candidates[-1] if candidates else None


def known_versions(domain: str, name: str) -> list[int]:
    """The `since` versions registered for an op (empty when it is unknown), for error messages."""
    return [spec.since for spec in OPS.get((domain, name), [])]
