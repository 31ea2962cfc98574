"""Layering of the core: every import in tinycore/ points to a module of the same or a lower layer.

The order is written here and in docs/architecture.md ("Layers"); a module belongs to the layer of the longest
prefix listed for it. Imports inside functions and under TYPE_CHECKING count like the others: a lazy import is still
a dependency. Within a package, no two modules may import each other, directly or around a circle (the circles left
are listed in ALLOWED_CIRCLES, which only shrinks).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "tinycore"

LAYERS: list[tuple[str, ...]] = [
    ("tinycore.counters", "tinycore.target", "tinycore.errors"),
    ("tinycore.helpers",),
    ("tinycore.dtype", "tinycore.download", "tinycore.viz.hook"),
    ("tinycore.uop",),
    ("tinycore.plugins.contract",),
    ("tinycore.renderer",),
    ("tinycore.codegen", "tinycore.schedule", "tinycore.gradient"),
    ("tinycore.plugins",),
    ("tinycore.device",),
    ("tinycore.hcq",),
    ("tinycore.engine",),
    ("tinycore.tensor",),
    ("tinycore.engine.jit",),
    ("tinycore.nn",),
    ("tinycore.llm", "tinycore.distributed"),
    ("tinycore.testing", "tinycore.viz"),
    ("tinycore.cli", "tinycore"),
]
"""Lowest first. Packages in one tuple share a layer: they may not import each other (checked below) but each may
import any lower layer."""


def module_name(path: Path) -> str:
    """The dotted module name of a file under tinycore/."""
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> tuple[int, str]:
    """(layer number, the prefix that placed `module` there): the longest listed prefix wins."""
    best: tuple[int, str] | None = None
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            # "tinycore" stands for the package's __init__ only; a module of no listed package has no layer
            inside = module == prefix or (prefix != "tinycore" and module.startswith(prefix + "."))
            if inside and (best is None or len(prefix) > len(best[1])):
                best = (number, prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS here and to docs/architecture.md")
    return best


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every tinycore module `path` imports (`from tinycore import helpers` names the module
    tinycore.helpers when that is a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names if alias.name.startswith("tinycore"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None \
                and node.module.startswith("tinycore"):
            module = node.module
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                location = CORE.parent / candidate.replace(".", "/")
                is_module = location.with_suffix(".py").exists() or location.is_dir()
                found.append((node.lineno, candidate if is_module else module))
    return found


def import_problems(path: Path, importer: str) -> list[str]:
    """The imports of the file `path` (module `importer`) that point to a higher layer or a sibling package."""
    problems = []
    own_layer, own_prefix = layer_of(importer)
    for line, imported in imported_modules(path):
        layer, prefix = layer_of(imported)
        if layer > own_layer or (layer == own_layer and prefix != own_prefix):
            problems.append(f"{importer}:{line} ({own_prefix}, layer {own_layer}) imports {imported} "
                            f"({prefix}, layer {layer})")
    return problems


def upward_imports() -> list[str]:
    """Every import in the core that points to a higher layer, or to another package of the same layer."""
    return [problem for path in sorted(CORE.rglob("*.py")) for problem in import_problems(path, module_name(path))]


def test_every_core_import_points_down() -> None:
    problems = upward_imports()
    assert not problems, "imports that point up or sideways:\n" + "\n".join(problems)


def test_every_core_module_has_a_layer() -> None:
    for path in CORE.rglob("*.py"):
        layer_of(module_name(path))


def test_the_doc_lists_the_same_layers() -> None:
    text = (CORE.parent / "docs" / "architecture.md").read_text()
    for prefixes in LAYERS:
        for prefix in prefixes:
            shown = prefix.replace(".", "/") + ("/" if (CORE.parent / prefix.replace(".", "/")).is_dir() else ".py")
            assert f"`{shown}`" in text or prefix == "tinycore", f"docs/architecture.md does not place {shown}"


@pytest.mark.parametrize(("importer", "source", "expected"), [
    ("tinycore.schedule.fusion", "def f():\n    from tinycore.engine.memory import buffer_of\n", 1),
    ("tinycore.codegen.opt", "from tinycore.schedule import nodes\n", 1),
    ("tinycore.uop.uop", "if TYPE_CHECKING:\n    from tinycore.tensor import Tensor\n", 1),
    ("tinycore.engine.realize", "from tinycore import helpers\nfrom tinycore.schedule import cache\n", 0),
])
def test_the_check_finds_upward_and_sideways_imports(tmp_path: Path, importer: str, source: str, expected: int) -> None:
    path = tmp_path / "module.py"
    path.write_text(source)
    assert len(import_problems(path, importer)) == expected


def import_graph() -> dict[str, set[str]]:
    """Each core module and the core modules it imports (at the top, inside functions or under TYPE_CHECKING); a
    name imported from a package's __init__ is an import of that package."""
    files = {module_name(path): path for path in sorted(CORE.rglob("*.py"))}

    def owner(imported: str) -> str:
        while imported not in files and "." in imported:
            imported = imported.rsplit(".", 1)[0]
        return imported

    return {module: {owner(imported) for _line, imported in imported_modules(path)} - {module}
            for module, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The groups of modules that reach each other through imports (strongly connected, two or more modules)."""
    order: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm; the import graph is shallow enough for recursion
        order[module] = lowest[module] = len(order)
        stack.append(module)
        for imported in graph.get(module, ()):
            if imported not in order:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in stack:
                lowest[module] = min(lowest[module], order[imported])
        if lowest[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return found


ALLOWED_CIRCLES: set[frozenset[str]] = set()
"""The circles the core still has: none (issue 42). A new circle fails the test; if one must ever be listed here, so
does a listed one that is gone or changed, so that the list is brought down with it."""


def test_the_ir_fills_every_function_uop_calls_upward() -> None:
    """UOp's methods reach the simplifier, the printer and the multi-device mapping (and UOp.buffer the engine's
    memory) through a table those modules fill when imported, so that uop.py imports none of them: importing the IR
    and the engine's memory fills every entry with a function."""
    import tinycore.engine.memory
    import tinycore.uop  # noqa: F401 - the package imports the modules that fill the table
    from tinycore.uop.uop import UpperFunctions, upper
    missing = [name for name in UpperFunctions.__annotations__ if not callable(vars(upper).get(name))]
    assert not missing, f"entries of tinycore.uop.uop.upper that no module fills: {missing}"
    from tinycore.uop.uop import UOp
    size = UOp.variable("n", 0, 9)
    assert (size * 1).simplify() is size and (size * 2 + 1).render() == "n*2+1"
    assert ((size * 2 + 1).vmin, (size * 2 + 1).vmax) == (1, 19)
    assert upper.buffer_of is tinycore.engine.memory.buffer_of


def test_the_core_has_no_new_circles() -> None:
    found = set(circles(import_graph()))
    new = ["\n  " + " <-> ".join(sorted(group)) for group in found - ALLOWED_CIRCLES]
    gone = ["\n  " + " <-> ".join(sorted(group)) for group in ALLOWED_CIRCLES - found]
    assert not new, "modules of the core that import each other (move what both need to a third module):" + "".join(new)
    assert not gone, "circles listed in ALLOWED_CIRCLES that are no longer there: remove them" + "".join(gone)


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}}, {frozenset({"a", "b"})}),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, {frozenset({"a", "b", "c"})}),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, set()),
])
def test_the_circle_check_finds_circles(graph: dict[str, set[str]], expected: set[frozenset[str]]) -> None:
    assert set(circles(graph)) == expected


def test_the_graph_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tinycore.uop.uop import UOp\n"
                    "def f():\n    from tinycore.engine.search import beam_search\n")
    assert {module for _line, module in imported_modules(path)} == {"tinycore.uop.uop", "tinycore.engine.search"}


def private_core_imports(path: Path) -> list[str]:
    """`from tinycore... import _name` (or a `_module` in the path) in the file `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("tinycore"):
            module = node.module or ""
            names = [alias.name for alias in node.names if alias.name.startswith("_")]
            if names or any(part.startswith("_") for part in module.split(".")):
                found.append(f"{path}:{node.lineno} from {module} import {', '.join(names) or '...'}")
    return found


def test_plugins_import_no_private_core_name() -> None:
    repository = CORE.parent
    packages = [*repository.glob("plugins/tiny-*/tiny_*"), *repository.glob("examples/plugin-template/tiny_*")]
    assert packages
    problems = [problem for package in packages for path in sorted(package.rglob("*.py"))
                for problem in private_core_imports(path)]
    assert not problems, "plugins importing private names of the core:\n" + "\n".join(problems)


def test_the_private_import_check_finds_one(tmp_path: Path) -> None:
    path = tmp_path / "renderer.py"
    path.write_text("from tinycore.renderer.cstyle import CStyleLanguage, _Walk\n")
    assert len(private_core_imports(path)) == 1


def mixin_typing_problems(path: Path) -> list[str]:
    """The methods of the Mixin classes in `path` that annotate `self` or `cls` by hand, and every use of the name
    `Tensor` there."""
    problems = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin"):
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and method.args.args and \
                        method.args.args[0].arg in ("self", "cls") and method.args.args[0].annotation is not None:
                    problems.append(f"{path.name}:{method.lineno} {node.name}.{method.name} annotates "
                                    f"{method.args.args[0].arg}")
        if isinstance(node, ast.Name) and node.id == "Tensor":
            problems.append(f"{path.name}:{node.lineno} names Tensor")
    return problems


def test_tensor_mixins_type_self_as_self() -> None:
    """The Tensor's mixins leave `self` unannotated (mypy types it as Self, the class the chain ends in) and never
    name the Tensor class: what they call from above them is declared in tinycore/tensor/base.py."""
    problems = [problem for path in sorted((CORE / "tensor").glob("*.py")) if path.name != "tensor.py"
                for problem in mixin_typing_problems(path)]
    assert not problems, "mixins that type self by hand or name the Tensor class:\n" + "\n".join(problems)


def test_the_mixin_check_finds_a_named_tensor(tmp_path: Path) -> None:
    path = tmp_path / "mixin.py"
    path.write_text("class ShapeMixin:\n    def flat(self: Tensor) -> Tensor:\n        return self\n")
    assert len(mixin_typing_problems(path)) == 3  # the annotated self, and Tensor named twice


def test_the_tensor_is_one_chain_of_mixins() -> None:
    """Each mixin subclasses the one below it, TensorBase at the bottom; TensorBase declares for mypy only (nothing at
    run time, so no declaration can stand in for a real method), and tensor_class gives the Tensor."""
    from tinycore.tensor import base, creation, elementwise, extras, indexing, keccak, linalg, movement, nn, reduce
    from tinycore.tensor.tensor import Tensor
    chain = [Tensor, extras.ExtrasMixin, keccak.KeccakMixin, linalg.LinalgMixin, nn.NNMixin, indexing.IndexingMixin,
             creation.CreationMixin, reduce.ReduceMixin, elementwise.ElementwiseMixin, movement.MovementMixin,
             base.TensorBase, object]
    assert list(Tensor.__mro__) == chain
    assert [name for name in vars(base.TensorBase) if not name.startswith("__")] == []
    assert base.tensor_class(creation.CreationMixin) is Tensor
    with pytest.raises(TypeError):
        base.tensor_class(int)  # type: ignore[type-var]


# names the contract declares that other objects share (a SINK's arg, a plugin spec, a device still being built),
# so a getattr of them is not a read of a backend attribute
_SHARED_NAMES = {"name", "device"}


def contract_names() -> set[str]:
    """Every attribute and method the backend contract declares on renderers, allocators, compilers and devices."""
    from tinycore.plugins import contract
    names: set[str] = set()
    for declared in (contract.RendererContract, contract.AllocatorContract, contract.CompilerContract,
                     contract.DeviceContract):
        names |= set(declared.__annotations__) | {name for name in vars(declared) if not name.startswith("__")}
    return names - _SHARED_NAMES


def contract_getattr_reads(path: Path, names: set[str]) -> list[str]:
    """The `getattr(x, "attribute", ...)` calls in `path` whose attribute the contract declares."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
            found.append(f"{path}:{node.lineno} getattr(..., {node.args[1].value!r})")
    return found


def test_the_core_reads_contract_attributes_as_typed_attributes() -> None:
    names = contract_names()
    assert {"capabilities", "broken", "open_existing", "type_map", "max_buffers"} <= names
    problems = [problem for path in sorted(CORE.rglob("*.py")) for problem in contract_getattr_reads(path, names)]
    assert not problems, "declared in tinycore/plugins/contract.py, read by getattr:\n" + "\n".join(problems)


def test_the_contract_getattr_check_finds_one(tmp_path: Path) -> None:
    path = tmp_path / "reader.py"
    path.write_text("def broken_of(device):\n    return getattr(device, 'broken', None)\n")
    assert len(contract_getattr_reads(path, contract_names())) == 1
