"""`torch.compile(model, backend="tiny")`: AOTAutograd turns the captured FX graph into aten graphs (forward and
backward); each runs on tiny tensors as one lazy tinycore graph whose outputs are realized in one schedule."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import register_backend

from tiny_torch.wrapper import TinyTensor


def _realize_outputs(outputs: object) -> None:
    flats = []
    for leaf in torch.utils._pytree.tree_flatten(outputs)[0]:
        if isinstance(leaf, TinyTensor):
            leaf.tiny_storage.flat = leaf.tiny_storage.flat.contiguous()
            flats.append(leaf.tiny_storage.flat)
    if flats:
        flats[0].realize(*flats[1:])


def _compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """One aten graph: its operators only add nodes to the lazy tinycore graph; the outputs realize together."""
    @torch._dynamo.disable  # the graph runs tinycore code, which dynamo must not trace again
    def run(*inputs: torch.Tensor) -> object:
        outputs = graph_module(*inputs)
        _realize_outputs(outputs)
        return outputs
    run._boxed_call = False  # type: ignore[attr-defined]
    return run


tiny_backend = aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph)
"""The torch.compile backend named "tiny"."""
register_backend(name="tiny")(tiny_backend)
