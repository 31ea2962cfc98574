"""Linearization: expanded stores with REDUCEs over RANGEs -> a list of UOps in execution order.

1. Loop tree. Ranges not reduced over are the output loops, nested in axis-id order. The REDUCEs that reduce over
   the same ranges form a group sharing one loop nest, hung below the deepest loop their values need from outside.
2. Accumulators. Each REDUCE becomes a DEFINE_REG, an initialising STORE of the reduce identity before its loops,
   `STORE(INDEX(acc, 0), op(LOAD(INDEX(acc, 0)), value))` in the innermost loop and a LOAD after the loops (a distinct
   node: its arg is "result").
3. Placement. Every node is placed in the outermost loop where all its sources exist (loop-invariant code moves out
   of inner loops; hash-consing already shares common subexpressions).
4. Ordering. Inside each loop body, nodes are ordered by their dependencies, values first, then accumulator set-up,
   then nested loops, then stores.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Union

from tinycore.codegen.devectorize import legalize
from tinycore.codegen.division import guard_divisions
from tinycore.codegen.narrow_floats import compute_narrow_floats
from tinycore.dtype import ConstType, DType, dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.uop.axis import AxisType, axis_id, new_range, range_dependencies
from tinycore.uop.ops import FUSED, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp

DEFINE_OPS = (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.DEFINE_REG, Ops.DEFINE_LOCAL)
RESULT_ARG = "result"
BodyItem = Union[UOp, tuple[str, UOp]]
"""An item of a loop body being ordered: a node, or ("block", first RANGE) for a loop nested in it."""


class LinearizeError(ValueError):
    """A kernel whose ranges cannot be arranged into nested loops."""


def reduce_identity(op: Ops, dtype: DType) -> ConstType:
    """The starting value of an accumulator for the reduce op `op`."""
    if op is Ops.ADD or op in (Ops.OR, Ops.XOR):
        return 0
    if op is Ops.MUL:
        return 1
    if op is Ops.MAX:
        return dtypes.min(dtype.scalar)
    if op is Ops.AND:
        return True if dtypes.is_bool(dtype) else -1
    raise LinearizeError(f"no identity for reduce op {op}: reduces use ADD, MUL, MAX, AND, OR or XOR")


@dataclass
class LoopTree:
    """The nesting of loops: `parent[range]` is the enclosing RANGE (None at the top level)."""

    parent: dict[UOp, UOp | None] = field(default_factory=dict)
    ancestry: dict[UOp, tuple[UOp, ...]] = field(default_factory=dict)

    def add(self, range_node: UOp, parent: UOp | None) -> None:
        """Place `range_node` directly inside `parent`."""
        self.parent[range_node] = parent
        self.ancestry[range_node] = (self.ancestry[parent] if parent is not None else ()) + (range_node,)

    def path(self, loop: UOp | None) -> tuple[UOp, ...]:
        """The loops from the outermost down to `loop` (empty for the top level)."""
        return self.ancestry[loop] if loop is not None else ()

    def deepest(self, first: UOp | None, second: UOp | None, what: UOp | None = None) -> UOp | None:
        """The deeper of two loops on one nesting path; LinearizeError when neither encloses the other."""
        if first is None or first is second:
            return second
        if second is None:
            return first
        first_path, second_path = self.ancestry[first], self.ancestry[second]
        if first in second_path:
            return second
        if second in first_path:
            return first
        raise LinearizeError(f"{what.op if isinstance(what, UOp) else 'a node'} needs loops {axis_id(first)} and "
                             f"{axis_id(second)}, which are not nested: a REDUCE's range is used outside it")


def sum_terms(value: UOp, dtype: DType) -> list[UOp]:
    """The terms of a nest of ADDs of `dtype`, left to right (`(a + b) + c` gives [a, b, c])."""
    terms: list[UOp] = []
    pending = [value]
    while pending:
        term = pending.pop()
        if term.op is Ops.ADD and term.dtype == dtype:
            pending.extend(reversed(term.src))
        else:
            terms.append(term)
    return terms


def _fused_sum(value: UOp) -> UOp:
    """A float sum with products among its terms (a factor of an accumulated product: a quantized block's partial
    sum `x0 * q0 + x1 * q1 + ...` that its scale multiplies once) as a chain of MULACCs marked FUSED, started from
    the sum of its other terms; anything else unchanged. One rounding per step is only more accurate, and the
    order of a reduce's arithmetic is the codegen's anyway."""
    if value.op is not Ops.ADD or value.dtype.scalar not in (dtypes.float32, dtypes.float64):
        return value
    terms = sum_terms(value, value.dtype)
    products = [term for term in terms if term.op is Ops.MUL and term.dtype == value.dtype]
    others = [term for term in terms if not (term.op is Ops.MUL and term.dtype == value.dtype)]
    if not products:
        return value
    result = others[0] if others else products[0]
    for term in others[1:]:
        result = result + term
    for term in products[0 if others else 1:]:
        result = UOp(Ops.MULACC, value.dtype, (term.src[0], term.src[1], result), FUSED)
    return result


def fused_accumulation(running: UOp, value: UOp) -> UOp:
    """`running + value` with every product among the terms of the sum `value` accumulated by a MULACC marked FUSED
    (`acc = a * b + acc`, one rounding where the renderer has an FMA); the other terms are added after them."""
    terms = sum_terms(value, running.dtype)
    result = running
    for term in terms:
        if term.op is Ops.MUL and term.dtype == running.dtype:
            first, second = (_fused_sum(factor) for factor in term.src)
            result = UOp(Ops.MULACC, running.dtype, (first, second, result), FUSED)
    for term in terms:
        if not (term.op is Ops.MUL and term.dtype == running.dtype):
            result = result + term
    return result


def _rename_shared_ranges(sink: UOp) -> UOp:
    """Give fresh ranges to REDUCEs that share some but not all ranges with another REDUCE."""
    while True:
        owner: dict[UOp, tuple[UOp, ...]] = {}
        conflict = None
        for node in sink.toposort:
            if node.op is not Ops.REDUCE:
                continue
            ranges = node.src[1:]
            if any(r in owner and owner[r] != ranges for r in ranges):
                conflict = node
                break
            owner.update(dict.fromkeys(ranges, ranges))
        if conflict is None:
            return sink
        next_id = max(axis_id(n) for n in sink.toposort if n.op is Ops.RANGE) + 1
        fresh = {r: new_range(r.src[0], next_id + i, AxisType.REDUCE) for i, r in enumerate(conflict.src[1:])}
        replacement = UOp(Ops.REDUCE, conflict.dtype, (conflict.src[0].substitute(fresh),) + tuple(fresh.values()),
                          conflict.arg)
        sink = sink.substitute({conflict: replacement})


class Linearizer:
    """Builds the linear program of one kernel from its expanded stores."""

    def __init__(self, stores: list[UOp], renderer: RendererContract):
        self.renderer = renderer
        self.sink = _rename_shared_ranges(UOp(Ops.SINK, dtypes.void, tuple(stores)))
        self.tree = LoopTree()
        self.group_parent: dict[tuple[UOp, ...], UOp | None] = {}
        self.stores: list[UOp] = list(self.sink.src)
        self.forced: dict[UOp, UOp | None] = {}  # nodes whose loop is fixed, not derived from their sources
        self.block_inputs: dict[UOp, list[UOp]] = {}  # first range of a group -> its initialising stores
        self.block_outputs: dict[UOp, list[UOp]] = {}  # first range of a group -> its result loads
        self.updates: list[UOp] = []
        self.inits: list[UOp] = []
        self.registers: list[UOp] = []
        self.placed_stores: dict[UOp, UOp | None] = {}
        self.roots: list[UOp] = []
        self.graph: UOp = self.sink
        self.place: dict[UOp, UOp | None] = {}

    # ---- 1. loop tree ----

    def build_tree(self) -> None:
        """Nest the output loops and hang every reduce group below the loops its values need."""
        reduces = [node for node in self.sink.toposort if node.op is Ops.REDUCE]
        groups: dict[tuple[UOp, ...], list[UOp]] = {}
        for node in reduces:
            groups.setdefault(node.src[1:], []).append(node)
        reduced = {r for ranges in groups for r in ranges}
        outputs = sorted((n for n in self.sink.toposort if n.op is Ops.RANGE and n not in reduced), key=axis_id)
        previous = None
        for range_node in outputs:
            self.tree.add(range_node, previous)
            previous = range_node
        deps = range_dependencies(self.sink)
        pending = dict(groups)
        while pending:
            progressed = False
            for ranges, members in list(pending.items()):
                needed = frozenset().union(*(deps[m] for m in members)) | \
                    frozenset().union(*(deps[r.src[0]] for r in ranges))
                if not needed <= self.tree.parent.keys():
                    continue
                parent = None
                for loop in needed:
                    parent = self.tree.deepest(parent, loop, members[0])
                self.group_parent[ranges] = parent
                for range_node in ranges:
                    self.tree.add(range_node, parent)
                    parent = range_node
                del pending[ranges]
                progressed = True
            if not progressed:
                raise LinearizeError("reduces depend on each other's ranges in a cycle: the kernel cannot be nested")

    # ---- 2. accumulators ----

    def make_accumulators(self) -> None:
        """Replace each REDUCE by its accumulator's result; collect the set-up and update stores."""
        self.stores = list(graph_rewrite(self.sink, accumulator_rules, self, name="place accumulators").src)

    def accumulate(self, node: UOp) -> UOp:
        """The REDUCE `node` (its value's reduces already replaced) as the LOAD of its accumulator's result; its
        register, set-up and update are recorded."""
        value, ranges = node.src[0], node.src[1:]
        parent, innermost = self.group_parent[ranges], ranges[-1]
        register = UOp(Ops.DEFINE_REG, node.dtype.ptr(1, "reg"), (), len(self.registers))
        self.registers.append(register)
        address = register.index(UOp.const(dtypes.int32, 0))
        init = address.store(UOp.const(node.dtype, reduce_identity(node.arg, node.dtype)))
        running = UOp(Ops.LOAD, node.dtype, (address,))
        fused = self.renderer.fused_multiply_add and node.arg is Ops.ADD and \
            node.dtype.scalar in (dtypes.float32, dtypes.float64)
        update = address.store(fused_accumulation(running, value) if fused else running.alu(node.arg, value))
        result = UOp(Ops.LOAD, node.dtype, (address,), RESULT_ARG)
        self.forced[running] = innermost
        self.forced[result] = parent
        self.inits.append(init)
        self.updates.append(update)
        self.block_inputs.setdefault(ranges[0], []).append(init)
        self.block_outputs.setdefault(ranges[0], []).append(result)
        self.placed_stores[init] = parent
        self.placed_stores[update] = innermost
        return result

    # ---- 3. legalisation and placement ----

    def legalize_and_place(self) -> None:
        """Split unsupported vector ops, then give every node the loop it runs in."""
        roots = self.stores + self.inits + self.updates
        legal = legalize(roots, self.renderer)
        if self.renderer.guard_integer_division:
            legal = guard_divisions(legal)
        if self.renderer.emulated_floats:
            legal = compute_narrow_floats(legal, self.renderer.emulated_floats)
        if self.renderer.post_matcher is not None:
            legal = list(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(legal)), self.renderer.post_matcher,
                                       self.renderer, name="renderer: post").src)
        # the roots keep their positions; an accumulator's loads (of a register at index 0) are no vector ops and
        # come out of both passes as they went in, so `forced` and the blocks' results keep their keys
        memo = dict(zip(roots, legal, strict=True))
        self.stores = [memo[s] for s in self.stores]
        self.forced.update({memo[s]: p for s, p in self.placed_stores.items()})
        self.block_inputs = {k: [memo[s] for s in v] for k, v in self.block_inputs.items()}
        self.roots = self.stores + [memo[s] for s in self.inits] + [memo[s] for s in self.updates]
        self.graph = UOp(Ops.SINK, dtypes.void, tuple(self.roots))
        self.place = {}
        result_block = {result: first for first, results in self.block_outputs.items() for result in results}
        for node in self.graph.toposort:
            if node is self.graph:
                continue
            if node in self.forced:
                self.place[node] = self.forced[node]
            elif node.op is Ops.RANGE:
                if node not in self.tree.parent:
                    raise LinearizeError(f"range {axis_id(node)} appears only after its reduce was lowered")
                self.place[node] = node
            elif node.op in DEFINE_OPS or not node.src:
                self.place[node] = None
            else:
                loop = None
                for source in node.src:
                    loop = self.tree.deepest(loop, self.place[source], node)
                for source in node.src:
                    if source in result_block and result_block[source] in self.tree.path(loop):
                        raise LinearizeError(f"{node.op} uses a REDUCE result inside that REDUCE's own loop: a "
                                             f"reduce range is used outside the REDUCE (ranges are not nested)")
                self.place[node] = loop

    # ---- 4. ordering ----

    def _order_stores_before_loads(self, depends: dict[BodyItem, set[BodyItem]],
                                   child_towards: Callable[..., UOp]) -> None:
        """A LOAD of a global buffer comes after every STORE to that buffer whose value reads no load of it (a row
        value stored in a reduce's loop and read back by the output loop, codegen/row_values.py): no data dependency
        orders them. Stores that read the buffer (an update in place, the output loop's own stores) add nothing, so
        no cycle can form through them."""
        writes: dict[UOp, list[UOp]] = {}
        for root in self.roots:
            if root.op is Ops.STORE and root.src[0].op is Ops.INDEX and root.src[0].src[0].op is Ops.DEFINE_GLOBAL:
                target = root.src[0].src[0]
                if not any(node.op is Ops.LOAD and node.src[0].op is Ops.INDEX and node.src[0].src[0] is target
                           for node in root.src[1].toposort):
                    writes.setdefault(target, []).append(root)
        if not writes:
            return
        for node, loop in self.place.items():
            if node.op is not Ops.LOAD or node.src[0].op is not Ops.INDEX or node.src[0].src[0] not in writes:
                continue
            for store in writes[node.src[0].src[0]]:
                load_path, store_path = self.tree.path(loop), self.tree.path(self.place[store])
                shared = 0
                while shared < min(len(load_path), len(store_path)) and load_path[shared] is store_path[shared]:
                    shared += 1
                common = load_path[shared - 1] if shared else None
                later = node if loop is common else ("block", child_towards(common, loop))
                earlier = store if self.place[store] is common else ("block", child_towards(common, self.place[store]))
                depends.setdefault(later, set()).add(earlier)

    def order(self) -> list[UOp]:
        """The linear program."""
        position = {node: i for i, node in enumerate(self.graph.toposort)}
        children: dict[UOp | None, list[UOp]] = {}
        for range_node, parent in self.tree.parent.items():
            if range_node in position:
                children.setdefault(parent, []).append(range_node)
        members: dict[UOp | None, list[UOp]] = {}
        for node, loop in self.place.items():
            if node.op in DEFINE_OPS or node.op is Ops.RANGE:
                continue
            members.setdefault(loop, []).append(node)
        # dependencies between the items of one loop body: nodes and the child loops (blocks)
        depends: dict[BodyItem, set[BodyItem]] = {}

        def child_towards(outer: UOp | None, inner: UOp) -> UOp:
            """The loop directly inside `outer` on the way down to `inner`."""
            path = self.tree.path(inner)
            return path[len(self.tree.path(outer))]

        for node, loop in self.place.items():
            if node.op in DEFINE_OPS:
                continue
            home = node if node.op is Ops.RANGE else loop  # the loop body the node's sources must reach
            for source in node.src:
                if source.op in DEFINE_OPS:
                    continue
                source_loop = self.place[source]
                if node.op is not Ops.RANGE and source_loop is loop:
                    depends.setdefault(node, set()).add(source)
                elif home is not None:
                    depends.setdefault(("block", child_towards(source_loop, home)), set()).add(source)
        for first_range, inits in self.block_inputs.items():
            depends.setdefault(("block", first_range), set()).update(inits)
        for first_range, results in self.block_outputs.items():
            for result in results:
                depends.setdefault(result, set()).add(("block", first_range))
        self._order_stores_before_loads(depends, child_towards)
        init_set = set(s for v in self.block_inputs.values() for s in v)
        program: list[UOp] = []
        defines = [n for n in self.graph.toposort if n.op in DEFINE_OPS]
        define_order = {Ops.DEFINE_GLOBAL: 0, Ops.DEFINE_VAR: 1, Ops.SPECIAL: 2, Ops.DEFINE_LOCAL: 3,
                        Ops.DEFINE_REG: 4}
        defines.sort(key=lambda n: (define_order[n.op], str(n.arg)))
        # thread counts are computed before the thread indices that use them
        launch_sizes = [n for special in defines if special.op is Ops.SPECIAL for n in special.src[0].toposort
                        if n.op not in DEFINE_OPS] if any(n.op is Ops.SPECIAL for n in defines) else []
        launch_set = set(launch_sizes)
        for define in defines:
            if define.op is Ops.SPECIAL:
                program.extend(n for n in dict.fromkeys(launch_sizes) if n not in program)
                launch_sizes = []
            program.append(define)
        members = {loop: [n for n in nodes if n not in launch_set] for loop, nodes in members.items()}

        def rank(item: BodyItem) -> tuple[int, int]:
            """Ordering priority: values, accumulator set-up, nested loops, stores; then graph order."""
            if isinstance(item, tuple):
                return 2, position[item[1]]
            if item.op is Ops.STORE:
                return (1 if item in init_set else 3), position[item]
            return 0, position[item]

        def emit(loop: UOp | None, nested: Callable[..., None]) -> None:
            """Append the body of `loop` (None: the kernel's top level), nested loops recursively by `nested` (this
            function: a closure that named itself would be a reference cycle, and this walk's dicts and sets would
            live until the cyclic collector found them)."""
            items: list[BodyItem] = [*members.get(loop, []), *(("block", c) for c in children.get(loop, []))]
            item_set = set(items)
            waiting = {item: {d for d in depends.get(item, ()) if d in item_set} for item in items}
            users: dict[BodyItem, list[BodyItem]] = {}
            for item, needs in waiting.items():
                for need in needs:
                    users.setdefault(need, []).append(item)
            chain_keys = _chain_keys(items, users, position)  # {} keeps graph order: (kind, 0, position, position)

            def rank_in_body(item: BodyItem) -> tuple[int, ...]:
                kind, order = rank(item)
                return (kind, *chain_keys.get(item, (0, order)), order)
            ready = [(rank_in_body(item), i, item) for i, item in enumerate(items) if not waiting[item]]
            heapq.heapify(ready)
            order_counter = len(items)
            done = 0
            while ready:
                _, _, item = heapq.heappop(ready)
                done += 1
                if isinstance(item, tuple):
                    range_node = item[1]
                    program.append(range_node)
                    nested(range_node, nested)
                    program.append(UOp(Ops.END, dtypes.void, (range_node,)))
                else:
                    program.append(item)
                for user in users.get(item, ()):
                    waiting[user].discard(item)
                    if not waiting[user]:
                        order_counter += 1
                        heapq.heappush(ready, (rank_in_body(user), order_counter, user))
            if done != len(items):
                raise LinearizeError("a dependency cycle between loop bodies: the kernel cannot be ordered")

        emit(None, emit)
        return program


def _reads_register(node: UOp) -> bool:
    """True for a load of a register accumulator (DEFINE_REG)."""
    if node.op is not Ops.LOAD:
        return False
    target = node.src[0]
    while target.op in (Ops.INDEX, Ops.CAST) and target.src:
        target = target.src[0]
    return target.op is Ops.DEFINE_REG


def _chain_keys(items: list[BodyItem], users: dict[BodyItem, list[BodyItem]],
                position: dict[UOp, int]) -> dict[BodyItem, tuple[int, int]]:
    """Ordering keys for a loop body where at least two accumulators (register values a reduce carries) take several
    multiply-adds each (a reduce unrolled inside the register tile: a convolution's window), else {}. A chain's k-th
    FMA gets (k, its graph position) and every other value the smallest key of the values using it, so the body runs
    step by step across all accumulators, each load and broadcast just before its first use. In graph order the body
    ran accumulator by accumulator: every input vector of the unrolled window stayed live across all channels and a
    4 x 16 convolution tile spilled an accumulator (gcc does not reorder for register pressure on x86)."""
    steps: dict[UOp, int] = {}
    for mulacc in sorted((i for i in items if isinstance(i, UOp) and i.op is Ops.MULACC), key=lambda n: position[n]):
        accumulated = mulacc.src[2]
        if accumulated in steps:
            steps[mulacc] = steps[accumulated] + 1
        elif _reads_register(accumulated):
            steps[mulacc] = 0
    if sum(1 for step in steps.values() if step == 1) < 2:
        return {}
    # Kahn's order of the body (sources first), then keys from the last item back: a value's users have theirs
    remaining = {item: 0 for item in items}
    for item in items:
        for user in users.get(item, ()):
            remaining[user] += 1
    ordered = [item for item in items if remaining[item] == 0]
    for item in ordered:
        for user in users.get(item, ()):
            remaining[user] -= 1
            if remaining[user] == 0:
                ordered.append(user)
    keys: dict[BodyItem, tuple[int, int]] = {}
    for item in reversed(ordered):
        if item in steps:
            keys[item] = (steps[item], position[item])
        else:
            keys[item] = min((keys[user] for user in users.get(item, ())),
                             default=(len(items), position.get(item, 0) if isinstance(item, UOp) else 0))
    return keys


accumulator_rules = PatternMatcher([(UPat(Ops.REDUCE, name="node"), lambda ctx, node: ctx.accumulate(node))])
"""Each REDUCE as its accumulator (context: the Linearizer, which records the registers, set-ups and updates). Sources
come first, so the registers are numbered in the order the walk meets the reduces, inner ones first."""


def linearize_stores(stores: list[UOp], renderer: RendererContract, name: str = "kernel") -> list[UOp]:
    """The linear program computing `stores` (expanded stores whose values may hold REDUCEs over RANGEs)."""
    linearizer = Linearizer(stores, renderer)
    linearizer.build_tree()
    linearizer.make_accumulators()
    linearizer.legalize_and_place()
    return linearizer.order() + [UOp(Ops.SINK, dtypes.void, (), name)]
