"""Recipes: a front-end operation's graph recorded once per structure of its inputs and rebuilt from new inputs.

An operation like `t[:, i, :, j, :] = v` spends most of its time in Python deciding what to build (normalising the
index, numpy's placement rules, broadcasts, validation), though for inputs of the same structure it always builds the
same nodes over different leaves. A recipe records, for one structure, the nodes built above the inputs (the
leaves) as steps `(op, dtype, arg, source slots)`; replaying them over new leaves builds exactly the graph the
operation would build, because node construction is deterministic and hash-consed.

A recipe holds no input and no buffer: leaves are passed at each replay, the constants it keeps (CONST nodes and
their DEVICE) read no memory, and a graph that reached anything else but its leaves is not recorded. The key is
made of the leaves' structure keys (graphs with buffers abstracted, see tinycore/schedule/cache.py), which buffers
the leaves share, and whatever non-tensor arguments the caller puts in; so a recipe never returns a graph the
operation would not have built for those inputs. The recipe also carries the structure key of the graph it
builds, with the positions of its buffers among the leaves' buffers, so realize skips the walk that computes it.
"""
from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING

from tinycore.dtype import DType, dtypes
from tinycore.schedule.cache import (
    known_template,
    node_structure_key,
    schedule_generation,
    set_node_structure_key,
    set_node_template,
)
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp, _arg_key, _touches_several_devices

if TYPE_CHECKING:
    from tinycore.schedule.cache import _Template

RECIPE_LIMIT = 1024
"""How many recipes are remembered (all are forgotten when the table is full: structures seen again are recorded
again)."""

_STRUCTURE_IDS: dict[tuple[object, ...], int] = {}
_NEXT_ID = count()
LEAF_ATTRIBUTE = "_recipe_leaf"
"""Where leaf_info keeps its answer on a node (read directly on hot paths)."""
_CHAIN_ATTRIBUTE = "_recipe_chains"
Step = tuple[Ops, DType, object, object, tuple[int, ...]]
"""One node to build: op, dtype, arg, the arg's cache key and the slots of its sources."""


LEAF_MULTI, LEAF_INDEX, LEAF_OTHER = 0, 1, 2
"""Kinds of leaf: a multi-device value (recipes take none), an integer tensor (no bool), anything else."""


def leaf_info(node: UOp) -> tuple[int, list[UOp], int]:
    """A small id for the structure of `node`'s graph (equal ids: equal structure keys), its BUFFER nodes and its
    kind (LEAF_*), kept on the node."""
    found = node.__dict__.get(LEAF_ATTRIBUTE)
    if found is None:
        key, buffers = node_structure_key(node)
        number = _STRUCTURE_IDS.get(key)
        if number is None:
            if len(_STRUCTURE_IDS) >= 4 * RECIPE_LIMIT:
                _STRUCTURE_IDS.clear()  # ids are never reused, so ids kept on live nodes stay unambiguous
            number = _STRUCTURE_IDS[key] = next(_NEXT_ID)
        kind = LEAF_MULTI if node.op is Ops.MULTI else LEAF_INDEX if dtypes.is_int(node.dtype) else LEAF_OTHER
        found = node.__dict__[LEAF_ATTRIBUTE] = (number, buffers, kind)
    return found


class Recipe:
    """The steps that build one operation's graph over its leaves (see the module docstring)."""

    __slots__ = ("constants", "chains", "steps", "result_key", "origins", "template")

    def __init__(self, constants: tuple[UOp, ...], chains: tuple[tuple[int, tuple[Step, ...]], ...],
                 steps: tuple[Step, ...], result_key: tuple[object, ...], origins: tuple[tuple[int, int], ...]):
        self.constants, self.chains, self.steps = constants, chains, steps
        self.result_key, self.origins = result_key, origins
        self.template: tuple[int, _Template] | None = None

    def build(self, leaves: list[UOp], leaf_buffers: list[list[UOp]]) -> UOp:
        """The operation's graph over `leaves` (whose buffers are `leaf_buffers`), its structure key recorded."""
        values = leaves + list(self.constants)
        make = UOp.keyed
        for owner, chain in self.chains:
            # nodes over one leaf alone (an index's broadcast) are kept on that leaf: they live as long as it does,
            # so a leaf used again finds them built
            leaf = leaves[owner]
            kept = leaf.__dict__.get(_CHAIN_ATTRIBUTE)
            if kept is None:
                kept = leaf.__dict__[_CHAIN_ATTRIBUTE] = {}
            nodes = kept.get(self)  # a leaf owns one chain per recipe (a repeated leaf: at its first place)
            if nodes is None:
                start = len(values)
                for op, dtype, arg, arg_key, sources in chain:
                    values.append(make(op, dtype, tuple([values[slot] for slot in sources]), arg, arg_key))
                kept[self] = tuple(values[start:])
            else:
                values.extend(nodes)
        for op, dtype, arg, arg_key, sources in self.steps:
            values.append(make(op, dtype, tuple([values[slot] for slot in sources]), arg, arg_key))
        result = values[-1]
        set_node_structure_key(result, (self.result_key, [leaf_buffers[leaf][position]
                                                          for leaf, position in self.origins]))
        if self.template is None or self.template[0] != schedule_generation():
            self.template = known_template(self.result_key)  # realize then skips hashing the key
        if self.template is not None:
            set_node_template(result, self.template)
        return result


def key_of(leaves: list[UOp], infos: list[tuple[int, list[UOp], int]],
           arguments: tuple[object, ...]) -> tuple[tuple[object, ...], list[list[UOp]]]:
    """RecipeBook.key for leaves whose `leaf_info` the caller has already."""
    ids = tuple([info[0] for info in infos])
    buffers = [info[1] for info in infos]
    flat = [buffer for own in buffers for buffer in own]
    if len(set(leaves)) == len(leaves) and len(set(flat)) == len(flat):
        return (arguments, ids), buffers  # nothing shared between leaves (the common case)
    first: dict[UOp, int] = {}
    sharing: list[int] = []  # which leaf, or which buffer, each one first was: how the leaves share nodes
    for position, leaf in enumerate(leaves):
        sharing.append(first.setdefault(leaf, position))
        for buffer in buffers[position]:
            sharing.append(first.setdefault(buffer, -1 - len(first)))
    return (arguments, ids, tuple(sharing)), buffers


class RecipeBook:
    """Recipes of one operation by key; `key()` says whether a call's inputs can be looked up at all."""

    def __init__(self) -> None:
        self.recipes: dict[tuple[object, ...], Recipe] = {}

    @staticmethod
    def key(leaves: list[UOp], arguments: tuple[object, ...]) -> tuple[tuple[object, ...], list[list[UOp]]]:
        """The lookup key of a call with these leaves and (hashable, exactly keyed) non-tensor `arguments`, and
        each leaf's buffers."""
        return key_of(leaves, [leaf_info(leaf) for leaf in leaves], arguments)

    def get(self, key: tuple[object, ...]) -> Recipe | None:
        """The recipe recorded under `key`, if any."""
        return self.recipes.get(key)

    def record(self, key: tuple[object, ...], leaves: list[UOp], leaf_buffers: list[list[UOp]], result: UOp) -> None:
        """Record how `result` was built over `leaves`; nothing when it depends on anything else that holds memory
        (a new buffer, another tensor's graph)."""
        slots: dict[UOp, int] = {}
        for position, leaf in enumerate(leaves):
            slots.setdefault(leaf, position)
        order: list[UOp] = []
        seen: set[UOp] = set()
        stack: list[tuple[UOp, bool]] = [(result, False)]
        while stack:
            node, sources_done = stack.pop()
            if sources_done:
                order.append(node)
                continue
            if node in slots or node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            for source in reversed(node.src):
                if source not in slots and source not in seen:
                    stack.append((source, False))
        if result in slots:
            return
        dependent: set[UOp] = set()
        constants: list[UOp] = []
        built: list[UOp] = []
        for node in order:
            if any(source in slots or source in dependent for source in node.src):
                dependent.add(node)
                built.append(node)
            else:
                if any(inner.op in (Ops.BUFFER, Ops.BUFFER_VIEW) for inner in node.toposort):
                    return
                constants.append(node)
        position = len(leaves)
        for constant in constants:
            slots[constant] = position
            position += 1
        # the nodes over exactly one leaf, grouped by leaf and built first (see Recipe.build), then the others
        owners: dict[UOp, set[int]] = {}
        for node in built:
            if node.op is Ops.MULTI or _touches_several_devices(node.op, node.src):
                return  # built one node per device by UOp's constructor, which a replay would skip
            found: set[int] = set()
            for source in node.src:
                if source in owners:
                    found |= owners[source]
                elif source in slots and slots[source] < len(leaves):
                    found.add(slots[source])
            owners[node] = found
        grouped: dict[int, list[UOp]] = {}
        rest: list[UOp] = []
        for node in built:
            if len(owners[node]) == 1 and node is not result:
                grouped.setdefault(next(iter(owners[node])), []).append(node)
            else:
                rest.append(node)

        def steps_of(nodes: list[UOp]) -> tuple[Step, ...]:
            nonlocal position
            steps = []
            for node in nodes:
                steps.append((node.op, node.dtype, node.arg, _arg_key(node.arg),
                              tuple(slots[source] for source in node.src)))
                slots[node] = position
                position += 1
            return tuple(steps)

        chains = tuple((owner, steps_of(nodes)) for owner, nodes in grouped.items())
        steps = steps_of(rest)
        result_key, result_buffers = node_structure_key(result)
        origin: dict[UOp, tuple[int, int]] = {}
        for owner, own in enumerate(leaf_buffers):
            for index, buffer in enumerate(own):
                origin.setdefault(buffer, (owner, index))
        if any(buffer not in origin for buffer in result_buffers):
            return
        if len(self.recipes) >= RECIPE_LIMIT:
            self.recipes.clear()
        self.recipes[key] = Recipe(tuple(constants), chains, steps, result_key,
                                   tuple(origin[buffer] for buffer in result_buffers))
