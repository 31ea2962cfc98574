"""Readable printing of UOp graphs."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinycore.uop.uop import UOp


def pretty_print(root: "UOp") -> str:
    """A multi-line rendering of the graph under `root`, each shared node printed once and referenced after."""
    names: dict["UOp", str] = {}
    lines = []
    for node in root.toposort:
        names[node] = f"x{len(names)}"
        sources = ", ".join(names[source] for source in node.src)
        lines.append(f"{names[node]} = UOp(Ops.{node.op.name}, {node.dtype!r}, ({sources}), {node.arg!r})")
    return "\n".join(lines) if len(lines) > 1 else lines[0]
