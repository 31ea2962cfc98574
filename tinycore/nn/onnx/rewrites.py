"""Graph rewrites the runner applies once, when it is built, so that the kernels read weights in the layout they are
fastest with. Each keeps the graph's results: it only moves work from every call to the constant nodes, which the
runner computes once (runner.constant_nodes)."""
from __future__ import annotations

from collections.abc import Collection

from tinycore.nn.onnx.parser import Graph, Node

TRANSPOSED_SUFFIX = "::transposed"
"""Appended to a weight's name for the value that holds it transposed (a name no ONNX exporter makes)."""


def transpose_constant_gemm_weights(graph: Graph, fixed: Collection[str]) -> int:
    """Gemm nodes with transB=1 whose B is fixed (an initializer or a constant node's output, the layout of torch's
    Linear) read B through a Transpose node placed before them, and run with transB=0; the runner computes that
    Transpose once and stores it contiguous (runner.OnnxRunner._constants). A matmul kernel then reads each column
    block of B as vectors instead of gathering every lane from another row. Returns how many nodes changed."""
    # exporters name one shared weight once per layer through Identity nodes: one transposed copy serves them all
    aliases = {node.outputs[0]: node.inputs[0] for node in graph.nodes
               if node.op == "Identity" and node.domain == "" and node.inputs and node.inputs[0] in fixed}
    changed, rewritten = 0, []
    for node in graph.nodes:
        inputs = node.inputs
        if (node.op == "Gemm" and node.domain == "" and node.attributes.get("transB") == 1 and len(inputs) > 1
                and inputs[1] in fixed):
            source = inputs[1]
            while source in aliases:
                source = aliases[source]
            transposed = source + TRANSPOSED_SUFFIX
            if transposed not in fixed:
                rewritten.append(Node(f"{node.name}{TRANSPOSED_SUFFIX}", "Transpose", "", node.opset, (source,),
                                      (transposed,), {"perm": [1, 0]}))
                fixed = {*fixed, transposed}
            node = Node(node.name, node.op, node.domain, node.opset, (inputs[0], transposed, *inputs[2:]),
                        node.outputs, {**node.attributes, "transB": 0})
            changed += 1
        rewritten.append(node)
    graph.nodes[:] = rewritten
    return changed
