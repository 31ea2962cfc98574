"""Graph rewrites the runner applies once, when it is built, so that the kernels read weights in the layout they are
fastest with. Each keeps the graph's results: it only moves work from every call to the constant nodes, which the
runner computes once (runner.constant_nodes)."""
from __future__ import annotations

from collections.abc import Collection

from tinycore.dtype import dtypes
from tinycore.helpers import ContextVar
from tinycore.nn.onnx.parser import Graph, Node
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor

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


PACKED_SUFFIX = "::packed"
"""Appended to a weight's name for the value that holds it in column panels (see pack_constant_matmul_weights)."""

PANEL_COLUMNS = 16
"""Columns per panel of a packed weight: the width of the column block a CPU matmul kernel keeps in registers."""


def pack_constant_matmul_weights(graph: Graph, fixed: Collection[str]) -> dict[str, str]:
    """MatMul nodes whose B is a fixed 2-D float weight read it through a packed name instead; the
    runner stores such a weight once as panels of PANEL_COLUMNS columns, each panel's rows one after another, and
    binds the packed name to a (K, N) view of them (pack_panels). A matmul kernel then walks one contiguous block of
    memory per column block instead of one short piece of every row. Gemm is left as it is: the attention's out_proj
    (its A a permuted view) ran slower with its weight packed (DEBUG=2 minima 317-446 -> 527 us for 4 layers).
    Returns {packed name: weight's name}."""
    aliases = {node.outputs[0]: node.inputs[0] for node in graph.nodes
               if node.op == "Identity" and node.domain == "" and node.inputs and node.inputs[0] in fixed}
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    packed: dict[str, str] = {}
    for index, node in enumerate(graph.nodes):
        inputs = node.inputs
        if node.domain != "" or node.op != "MatMul" or len(inputs) < 2 or inputs[1] not in fixed:
            continue
        source = inputs[1]
        while source in aliases:
            source = aliases[source]
        if not _packs(source, graph) or _sliced(node.outputs[0], readers):
            continue
        packed[source + PACKED_SUFFIX] = source
        graph.nodes[index] = Node(node.name, PANEL_MATMUL, RUNNER_DOMAIN, 1,
                                  (inputs[0], source + PACKED_SUFFIX, source), node.outputs, node.attributes)
    return packed


RUNNER_DOMAIN = "ai.tinycore.runner"
"""The domain of the nodes the runner's rewrites make (no ONNX file names it)."""

PANEL_MATMUL = "PanelMatMul"
"""The op a MatMul with a packed weight becomes: it takes the weight packed and as stored, and picks one per call."""

PANEL_MIN_ROWS = 8
"""Fewest product rows that read the packed weight: a one-row product (1 x 2048 @ 2048 x 2048) ran 2.3x slower from
panels (588-638 -> 1371-1427 us alone), 8 rows (8 x 512 @ 512 x 512) faster (31 -> 22 us)."""


@onnx_op(PANEL_MATMUL, 1, domain=RUNNER_DOMAIN)
def panel_matmul(x: Tensor, packed: Tensor, weight: Tensor) -> Tensor:
    """MatMul of x by a weight given twice, packed in panels (pack_panels) and as stored: the packed one where the
    product has at least PANEL_MIN_ROWS rows (x's axes before the last, all of them fixed sizes)."""
    from tinycore.nn.onnx.ops_math import matmul
    rows = 1
    for size in x.shape[:-1]:
        rows = rows * size if isinstance(size, int) else -len(x.shape)
    return matmul(x, packed if x.ndim >= 2 and rows >= PANEL_MIN_ROWS else weight)


SLICING_OPS = frozenset({"Slice", "Split", "Gather", "GatherElements", "GatherND", "Pad", "Compress"})
"""Ops whose window on a product packed in panels can make its kernel index every lane through a division: a window
whose columns do not start and end at panel boundaries ran 20-40x slower (a 64 x 768 product's columns 8-520)."""


def _sliced(product: str, readers: dict[str, list[Node]]) -> bool:
    """Whether a SLICING_OPS node reads `product`, directly or after an elementwise bias or scale: such a weight is
    left unpacked (which windows stay on panel boundaries is not known before the call)."""
    for reader in readers.get(product, []):
        if reader.op in SLICING_OPS:
            return True
        if reader.op in ("Add", "Sub", "Mul", "Div") and any(node.op in SLICING_OPS
                                                               for node in readers.get(reader.outputs[0], [])):
            return True
    return False


def _packs(name: str, graph: Graph) -> bool:
    """Whether the weight `name` is a 2-D float initializer with more than one panel of whole columns: the only
    ones pack_panels changes."""
    weight = graph.initializers.get(name)
    if not isinstance(weight, Tensor) or weight.ndim != 2 or not dtypes.is_float(weight.dtype):
        return False
    columns = weight.shape[1]
    return isinstance(columns, int) and columns % PANEL_COLUMNS == 0 and columns > PANEL_COLUMNS


PANEL_BYTES = ContextVar("ONNX_PANEL_BYTES", 64 << 20)
"""Most bytes of packed weight copies a runner keeps (weights packed in graph order while they fit): a packed weight
is a second copy beside the stored one, which one-row products still read, so this bounds the extra memory. 0 turns
packing off."""


def packed_weight(weight: Tensor, budget: int) -> Tensor | None:
    """`weight` packed in panels (pack_panels) when it lives on a device whose renderer loops over rows (the CPU's
    register-tiled product is what panels are for; nothing was measured elsewhere) and fits in `budget` bytes, else
    None (the product then reads the weight as stored)."""
    from tinycore.tensor.conv_layouts import loops_over_rows
    if weight.nbytes() > budget or not loops_over_rows(weight):
        return None
    return pack_panels(weight)


def pack_panels(weight: Tensor) -> Tensor:
    """A 2-D float weight (K, N) with N a multiple of PANEL_COLUMNS, wider than one panel, stored realized as N /
    PANEL_COLUMNS contiguous panels of (K, PANEL_COLUMNS), returned as a (K, N) view of them with the same values;
    any other value is returned as it is."""
    if weight.ndim != 2 or not dtypes.is_float(weight.dtype):
        return weight
    rows, columns = weight.shape
    if not isinstance(columns, int) or columns % PANEL_COLUMNS or columns <= PANEL_COLUMNS:
        return weight
    panels = weight.reshape(rows, columns // PANEL_COLUMNS, PANEL_COLUMNS).permute(1, 0, 2).contiguous().realize()
    return panels.permute(1, 0, 2).reshape(rows, columns)
