"""ai.onnx.ml TreeEnsemble (opset 5): decision-tree ensembles evaluated with tensor ops on the device.

The trees are attributes, fixed when the model is built; only the walk depends on the input. So the host turns the
attributes once into flat tables over one index space (interior nodes first, then leaves) and the device walks every
(sample, tree) pair in lockstep: each step gathers the node's feature, threshold and mode, compares, and moves to
the true or the false child; a leaf's children are itself, so a pair that reached its leaf stays there. After as many
steps as the deepest tree is deep, every pair sits on a leaf, whose weights are summed (or averaged, or the minimum or
maximum taken) per target. Why not the host: the work is the same gathers and compares for every sample, which is a
tensor program, and the input stays on the device (a JIT replays it like any other graph).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from tinycore.dtype import DType, dtypes
from tinycore.nn.onnx.common import host_tensor, index_dtype
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor

ML = "ai.onnx.ml"
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AVERAGE, SUM, MIN, MAX = range(4)
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)


@dataclasses.dataclass(frozen=True)
class TreeTables:
    """An ensemble's attributes as host arrays over one index space: interior nodes 0..N-1, leaves N..N+L-1."""
    features: np.ndarray
    splits: np.ndarray
    modes: np.ndarray
    true_next: np.ndarray
    false_next: np.ndarray
    missing_true: np.ndarray
    members: np.ndarray | None
    """Each node's set for BRANCH_MEMBER, padded with NaN to the largest set ([N+L, largest]); None without any."""
    roots: np.ndarray
    leaf_weights: np.ndarray
    leaf_targets: np.ndarray
    depth: int
    """The most interior nodes on any root-to-leaf path: the number of steps the walk takes."""
    interior: int
    """The number of interior nodes (where the leaves' indices start)."""


def _host(value: Tensor | list[float] | list[int] | None) -> np.ndarray | None:
    """An attribute (a list or a Tensor) on the host."""
    if value is None:
        return None
    return value.numpy().reshape(-1) if isinstance(value, Tensor) else np.asarray(value).reshape(-1)


def _member_sets(modes: np.ndarray, membership: np.ndarray | None, width: int) -> np.ndarray | None:
    """The BRANCH_MEMBER nodes' sets (membership_values split at NaN, in node order) padded with NaN."""
    member_nodes = [int(index) for index in np.flatnonzero(modes == MEMBER)]
    if not member_nodes:
        return None
    if membership is None:
        raise ValueError("TreeEnsemble has BRANCH_MEMBER nodes but no membership_values")
    sets: list[list[float]] = [[]]
    for value in membership.tolist():
        if np.isnan(value):
            sets.append([])
        else:
            sets[-1].append(value)
    sets = sets[:-1] if not sets[-1] else sets
    if len(sets) != len(member_nodes):
        raise ValueError(f"TreeEnsemble has {len(member_nodes)} BRANCH_MEMBER nodes but membership_values holds "
                         f"{len(sets)} sets (each ends with a NaN)")
    largest = max(len(members) for members in sets) or 1
    table = np.full((width, largest), np.nan, dtype=np.float64)
    for node, members in zip(member_nodes, sets, strict=True):
        table[node, :len(members)] = members
    return table


def _depth(roots: np.ndarray, true_next: np.ndarray, false_next: np.ndarray, interior: int) -> int:
    """The most interior nodes on a path from any root to a leaf; ValueError for a cycle."""
    deepest = 0
    for root in roots.tolist():
        stack = [(int(root), 1, frozenset([int(root)]))]
        while stack:
            node, depth, seen = stack.pop()
            deepest = max(deepest, depth)
            for child in (int(true_next[node]), int(false_next[node])):
                if child < interior:
                    if child in seen:
                        raise ValueError(f"TreeEnsemble's trees have a cycle through node {child}")
                    stack.append((child, depth + 1, seen | {child}))
    return deepest


def tree_tables(nodes_featureids: list[int], nodes_splits: Tensor, nodes_modes: Tensor,
                nodes_truenodeids: list[int], nodes_falsenodeids: list[int], nodes_trueleafs: list[int],
                nodes_falseleafs: list[int], leaf_targetids: list[int], leaf_weights: Tensor, tree_roots: list[int],
                n_targets: int, nodes_missing_value_tracks_true: list[int] | None,
                membership_values: Tensor | None) -> TreeTables:
    """The attributes checked and laid out as TreeTables."""
    modes = _host(nodes_modes).astype(np.int64)  # type: ignore[union-attr]
    interior, leaves = len(modes), len(leaf_targetids)
    lengths = {"nodes_featureids": len(nodes_featureids), "nodes_truenodeids": len(nodes_truenodeids),
               "nodes_falsenodeids": len(nodes_falsenodeids), "nodes_trueleafs": len(nodes_trueleafs),
               "nodes_falseleafs": len(nodes_falseleafs), "nodes_splits": int(nodes_splits.numel())}
    wrong = {name: length for name, length in lengths.items() if length != interior}
    if wrong or int(leaf_weights.numel()) != leaves:
        raise ValueError(f"TreeEnsemble's nodes_* attributes must all have {interior} entries (as nodes_modes) and "
                         f"leaf_weights {leaves} (as leaf_targetids): got {wrong or lengths}, {leaf_weights.numel()}")
    if modes.size and (modes.min() < LEQ or modes.max() > MEMBER):
        raise ValueError(f"TreeEnsemble nodes_modes must be 0..6 (BRANCH_LEQ..BRANCH_MEMBER), got {sorted(set(modes))}")
    targets = np.asarray(leaf_targetids, dtype=np.int64)
    if targets.size and (targets.min() < 0 or targets.max() >= n_targets):
        raise ValueError(f"TreeEnsemble leaf_targetids must lie in [0, n_targets={n_targets})")
    true_leaf, false_leaf = np.asarray(nodes_trueleafs, bool), np.asarray(nodes_falseleafs, bool)
    # a leaf's index in the shared space is after every interior node
    true_next = np.asarray(nodes_truenodeids, np.int64) + np.where(true_leaf, interior, 0)
    false_next = np.asarray(nodes_falsenodeids, np.int64) + np.where(false_leaf, interior, 0)
    for name, children, leaf in (("true", true_next, true_leaf), ("false", false_next, false_leaf)):
        bound = np.where(leaf, interior + leaves, interior)
        if children.size and ((children < 0) | (children >= bound)).any():
            raise ValueError(f"TreeEnsemble nodes_{name}nodeids point outside the nodes or leaves")
    roots = np.asarray(tree_roots, np.int64)
    if roots.size == 0 or roots.min() < 0 or roots.max() >= interior:
        raise ValueError(f"TreeEnsemble tree_roots must name interior nodes (0..{interior - 1}), got {tree_roots}")
    width = interior + leaves
    itself = np.arange(interior, width)
    missing = np.zeros(width, dtype=bool)
    if nodes_missing_value_tracks_true:
        missing[:interior] = np.asarray(nodes_missing_value_tracks_true, bool)
    return TreeTables(
        features=np.concatenate([np.asarray(nodes_featureids, np.int64), np.zeros(leaves, np.int64)]),
        splits=np.concatenate([_host(nodes_splits).astype(np.float64), np.zeros(leaves)]),  # type: ignore[union-attr]
        modes=np.concatenate([modes, np.zeros(leaves, np.int64)]),
        true_next=np.concatenate([true_next, itself]), false_next=np.concatenate([false_next, itself]),
        missing_true=missing, members=_member_sets(modes, _host(membership_values), width),
        roots=roots, leaf_weights=_host(leaf_weights).astype(np.float64),  # type: ignore[union-attr]
        leaf_targets=targets, depth=_depth(roots, true_next, false_next, interior), interior=interior)


_TABLES: dict[int, tuple[Tensor, TreeTables]] = {}
"""Built tables by the identity of the node's leaf_weights attribute (kept alive beside them): a node's attributes
are the same objects in every call, so the tables are built once per node."""


def _walk(x: Tensor, tables: TreeTables) -> tuple[Tensor, Tensor]:
    """The leaf weight and target reached by each (sample, tree): two [N, trees] tensors."""
    device, index = x.device, index_dtype(x.device)

    def table(values: np.ndarray, dtype: DType | None = None) -> Tensor:
        return host_tensor(values, device).cast(dtype or index)

    features, modes = table(tables.features), table(tables.modes)
    true_next, false_next = table(tables.true_next), table(tables.false_next)
    splits, missing = table(tables.splits, x.dtype), table(tables.missing_true, dtypes.bool)
    members = table(tables.members, x.dtype) if tables.members is not None else None
    position = table(tables.roots).reshape(1, -1).expand(x.shape[0], len(tables.roots)).contiguous()
    for _ in range(tables.depth):
        value = x.gather(1, features[position])
        split, mode = splits[position], modes[position]
        went_true = ((mode == LEQ) & (value <= split)) | ((mode == LT) & (value < split)) | \
            ((mode == GTE) & (value >= split)) | ((mode == GT) & (value > split)) | \
            ((mode == EQ) & (value == split)) | ((mode == NEQ) & (value != split))
        if members is not None:
            went_true = went_true | ((mode == MEMBER) & (value.unsqueeze(-1) == members[position]).any(-1))
        went_true = went_true | (missing[position] & (value != value))
        position = went_true.where(true_next[position], false_next[position]).contiguous()
    leaf = position - tables.interior
    return table(tables.leaf_weights, x.dtype)[leaf], table(tables.leaf_targets)[leaf]


@onnx_op("TreeEnsemble", 5, domain=ML)
def tree_ensemble(x: Tensor, nodes_featureids: list[int], nodes_modes: Tensor, nodes_splits: Tensor,
                  nodes_truenodeids: list[int], nodes_falsenodeids: list[int], nodes_trueleafs: list[int],
                  nodes_falseleafs: list[int], leaf_targetids: list[int], leaf_weights: Tensor, tree_roots: list[int],
                  n_targets: int, aggregate_function: int = SUM, post_transform: int = NONE,
                  nodes_missing_value_tracks_true: list[int] | None = None, membership_values: Tensor | None = None,
                  nodes_hitrates: Tensor | None = None) -> Tensor:
    """[N, n_targets] scores: each sample walked down every tree (a NaN feature goes to the false child unless its node
    tracks missing values to the true one), the leaf weights aggregated per target, then post-transformed."""
    if x.ndim != 2:
        raise ValueError(f"TreeEnsemble takes [N, F] inputs, got shape {list(x.shape)}")
    cached = _TABLES.get(id(leaf_weights))
    if cached is None or cached[0] is not leaf_weights:
        tables = tree_tables(nodes_featureids, nodes_splits, nodes_modes, nodes_truenodeids, nodes_falsenodeids,
                             nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets,
                             nodes_missing_value_tracks_true, membership_values)
        _TABLES[id(leaf_weights)] = (leaf_weights, tables)
    else:
        tables = cached[1]
    if int(tables.features.max(initial=0)) >= x.shape[1] or int(tables.features.min(initial=0)) < 0:
        raise ValueError(f"TreeEnsemble nodes_featureids reach feature {int(tables.features.max())}, the input has "
                         f"{x.shape[1]} (features 0..{x.shape[1] - 1})")
    weights, targets = _walk(x, tables)
    hit = targets.unsqueeze(-1) == Tensor.arange(n_targets, device=x.device).cast(targets.dtype)
    spread = weights.unsqueeze(-1)
    if aggregate_function in (SUM, AVERAGE):
        scores = hit.where(spread, 0.0).sum(1)
        if aggregate_function == AVERAGE:
            scores = scores / len(tables.roots)
    elif aggregate_function in (MIN, MAX):
        # a target no tree reaches keeps the largest (smallest) finite value of the dtype, as the reference leaves it
        largest = float(np.finfo(np.dtype(x.dtype.fmt)).max) if x.dtype.fmt is not None else float(dtypes.max(x.dtype))
        extreme = largest if aggregate_function == MIN else -largest
        spread_or = hit.where(spread, extreme)
        scores = spread_or.min(1) if aggregate_function == MIN else spread_or.max(1)
    else:
        raise ValueError(f"TreeEnsemble aggregate_function must be 0..3 (AVERAGE, SUM, MIN, MAX), got "
                         f"{aggregate_function}")
    scores = scores.cast(x.dtype)
    if post_transform == NONE:
        return scores
    if post_transform == SOFTMAX:
        return scores.softmax(-1)
    if post_transform == LOGISTIC:
        return scores.sigmoid()
    if post_transform == SOFTMAX_ZERO:
        # zeros stay zero and take no share of the softmax; a row of zeros stays zeros
        exps = (scores != 0).where((scores - scores.max(-1, keepdim=True)).exp(), 0.0)
        total = exps.sum(-1, keepdim=True)
        return (total > 0).where(exps / total, 0.0)
    if post_transform == PROBIT:
        return _probit(scores)
    raise ValueError(f"TreeEnsemble post_transform must be 0..4, got {post_transform}")


def _probit(scores: Tensor) -> Tensor:
    """The inverse normal CDF, sqrt(2) * erfinv(2p - 1), with erfinv in Winitzki's closed form (a = 0.147, about 2e-3
    relative): onnxruntime and onnx's reference compute PROBIT that way, so the node agrees with them rather than with
    the exact quantile. A score of 0 or 1 gives 0, as there; one outside [0, 1] gives NaN."""
    centered = scores * 2 - 1
    inner = (1 - centered) * (1 + centered)
    log = inner.log()
    first = 2 / (math.pi * 0.147) + 0.5 * log
    root = (-first + (first * first - log / 0.147).sqrt()).sqrt()
    return (inner == 0).where(0.0, (centered < 0).where(-root, root) * math.sqrt(2))
