"""Typed graphs' schema: node types, relations and their checks, without the ``Graph`` class.

``graphdist.data.graph`` checks a typed ``Graph`` with :func:`check_typed` and builds one from
:func:`typed_fields` / :func:`hetero_fields`; ``graphdist.data.hetero`` is the front (its docstring
describes the layout). This module never imports ``graph.py``, so the two do not import each other.

Example:
    >>> f = typed_fields({"paper": 3, "author": 2},
    ...                  {("author", "writes", "paper"): torch.tensor([[0, 1, 1], [0, 0, 2]])})
    >>> f["schema"].node_types, f["schema"].offsets, f["edge_type"].tolist()
    (('paper', 'author'), (0, 3, 5), [0, 0, 0])
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from graphdist.data.arrays import MASK_NAMES, as_tensor, counts_to_indptr, row_chunks

__all__ = ["Relation", "Schema", "check_typed", "edge_type_dtype", "hetero_fields", "relation_indptr", "relation_offsets",
           "typed_csr",
           "typed_fields"]

# The separator of a relation's parts in names and files: ``author__writes__paper`` (PyG's own).
SEP = "__"


@dataclass(frozen=True)
class Relation:
    """One edge type: messages flow from ``src`` nodes to ``dst`` nodes.

    Example:
        >>> Relation("author", "writes", "paper").key
        'author__writes__paper'
    """

    src: str
    name: str
    dst: str

    @property
    def key(self) -> str:
        """``src__name__dst``: the relation's name in files (the typed npz) and in logs."""
        return SEP.join((self.src, self.name, self.dst))

    @classmethod
    def parse(cls, value: Union[str, Sequence[str], "Relation"]) -> "Relation":
        """A relation from ``"src__name__dst"``, a ``(src, name, dst)`` triple (PyG's edge type) or itself.

        Raises:
            ValueError: on anything else.
        """
        if isinstance(value, Relation):
            return value
        parts = value.split(SEP) if isinstance(value, str) else list(value)
        if len(parts) != 3 or not all(isinstance(p, str) and p for p in parts):
            raise ValueError(f"relation: expected (src_type, name, dst_type) or 'src{SEP}name{SEP}dst' (got {value!r})")
        return cls(*parts)


@dataclass(frozen=True)
class Schema:
    """Node types, their id ranges and feature widths, the relations, and the labelled type.

    Attributes:
        node_types: type names, in id-range order.
        offsets: ``len(node_types) + 1`` ints; type ``t`` owns ids ``[offsets[t], offsets[t + 1])``.
        relations: the edge types; ``edge_type`` values index this tuple.
        widths: feature width of every type (0: featureless, a learnable embedding in the models).
        target: the type that carries labels and masks (None: no labels).
        ranges: after partitioning, the relabelled ids' layout: ``(first id, type, index of that id within
            its type)`` of every run of one type, sorted by id (``Schema.relabelled``). None: the types'
            own ranges (``offsets``).
        index: after partitioning, every relabelled id's row within its type *in the original graph*
            (``Schema.relabelled(..., orig_ids=)``), so a featureless type's embedding row is the same node
            however the graph was partitioned; not saved (``to_dict``), rebuilt from ``orig_ids.npy``.

    Example:
        >>> s = Schema(("paper", "author"), (0, 3, 5), (Relation("author", "writes", "paper"),), (4, 0), "paper")
        >>> s.num_nodes("author"), s.featureless, s.relation_id("writes")
        (2, ('author',), 0)
    """

    node_types: tuple[str, ...]
    offsets: tuple[int, ...]
    relations: tuple[Relation, ...]
    widths: tuple[int, ...]
    target: Optional[str] = None
    ranges: Optional[tuple[tuple[int, int, int], ...]] = None
    index: Optional[Tensor] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.node_types or len(set(self.node_types)) != len(self.node_types):
            raise ValueError(f"node types: expected distinct names (got {list(self.node_types)})")
        if len(self.offsets) != len(self.node_types) + 1 or self.offsets[0] != 0 or any(
                b < a for a, b in zip(self.offsets, self.offsets[1:])):
            raise ValueError(f"offsets: expected {len(self.node_types) + 1} non-decreasing ids from 0 (got "
                             f"{list(self.offsets)})")
        if len(self.widths) != len(self.node_types) or any(w < 0 for w in self.widths):
            raise ValueError(f"widths: expected one width >= 0 per node type (got {list(self.widths)})")
        if not self.relations:
            raise ValueError("relations: expected at least one relation")
        keys = [r.key for r in self.relations]
        if len(set(keys)) != len(keys):
            raise ValueError(f"relations: expected distinct relations (got {keys})")
        for r in self.relations:
            for end in (r.src, r.dst):
                if end not in self.node_types:
                    raise ValueError(f"relation {r.key}: unknown node type {end!r} (types: {list(self.node_types)})")
        if self.target is not None and self.target not in self.node_types:
            raise ValueError(f"target: unknown node type {self.target!r} (types: {list(self.node_types)})")

    # ----------------------------------------------------------------- queries
    @property
    def num_types(self) -> int:
        return len(self.node_types)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    @property
    def featureless(self) -> tuple[str, ...]:
        """The types without features (each gets an embedding table in the models)."""
        return tuple(t for t, w in zip(self.node_types, self.widths) if w == 0)

    def type_id(self, name: str) -> int:
        """The index of node type ``name``.

        Raises:
            ValueError: an unknown type, listing the known ones.
        """
        if name not in self.node_types:
            raise ValueError(f"Expected a node type in {list(self.node_types)} (got {name!r})")
        return self.node_types.index(name)

    def num_nodes(self, name: str) -> int:
        t = self.type_id(name)
        return self.offsets[t + 1] - self.offsets[t]

    def relation_id(self, name: Union[str, Sequence[str], Relation]) -> int:
        """The index of a relation given by its name (when unique), ``src__name__dst`` or triple.

        Raises:
            ValueError: an unknown or ambiguous name, listing the relations.
        """
        keys = [r.key for r in self.relations]
        if isinstance(name, str) and SEP not in name:
            hits = [i for i, r in enumerate(self.relations) if r.name == name]
            if len(hits) == 1:
                return hits[0]
            what = "ambiguous" if hits else "unknown"
            raise ValueError(f"Expected a relation in {keys} (got {what} name {name!r}; write src{SEP}name{SEP}dst)")
        key = Relation.parse(name).key
        if key not in keys:
            raise ValueError(f"Expected a relation in {keys} (got {key!r})")
        return keys.index(key)

    def _runs(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(first id, type, index within the type) of every run of ids of one type."""
        if self.ranges is not None:
            starts, types, index = zip(*self.ranges) if self.ranges else ((), (), ())
            return starts, types, index
        return self.offsets[:-1], tuple(range(self.num_types)), (0,) * self.num_types

    def node_type(self, ids: Tensor) -> Tensor:
        """Type index (int64) of every global id in ``ids``.

        Example:
            >>> Schema(("a", "b"), (0, 2, 5), (Relation("a", "r", "b"),), (1, 1)).node_type(torch.tensor([1, 2])).tolist()
            [0, 1]
        """
        starts, types, _ = self._runs()
        run = self._run_of(ids, starts)
        return torch.tensor(types, dtype=torch.int64, device=ids.device)[run]

    def type_index(self, ids: Tensor) -> Tensor:
        """Each global id's position within its type: its row in the type's embedding table.

        Example:
            >>> Schema(("a", "b"), (0, 2, 5), (Relation("a", "r", "b"),), (1, 1)).type_index(torch.tensor([1, 2])).tolist()
            [1, 0]
        """
        if self.index is not None:
            return self.index.index_select(0, ids.to(torch.int64).cpu()).to(ids.device)
        starts, _, index = self._runs()
        run = self._run_of(ids, starts)
        first = torch.tensor(starts, dtype=torch.int64, device=ids.device)[run]
        return ids.to(torch.int64) - first + torch.tensor(index, dtype=torch.int64, device=ids.device)[run]

    @staticmethod
    def _run_of(ids: Tensor, starts: Sequence[int]) -> Tensor:
        bounds = torch.tensor(starts[1:], dtype=torch.int64, device=ids.device)
        return torch.bucketize(ids.to(torch.int64), bounds, right=True)

    def relabelled(self, part_offsets: Sequence[int], type_counts: Sequence[Sequence[int]],
                   orig_ids: Optional[Tensor] = None) -> "Schema":
        """This schema over a partition's ids: part ``p`` holds ``type_counts[p][t]`` nodes of type ``t``,
        in type order from ``part_offsets[p]`` (the partitioner keeps each part's nodes in original order,
        and the original ids are grouped by type). ``orig_ids`` (new id -> original id): rows within a type
        are the original graph's (``index``); without it, rows count in the new order.

        Example:
            >>> s = Schema(("a", "b"), (0, 2, 5), (Relation("a", "r", "b"),), (1, 0))
            >>> r = s.relabelled([0, 3, 5], [[1, 2], [1, 1]])  # part 0: a0, b0, b1; part 1: a1, b2
            >>> r.node_type(torch.arange(5)).tolist(), r.type_index(torch.arange(5)).tolist()
            ([0, 1, 1, 0, 1], [0, 0, 1, 1, 2])
        """
        runs, seen = [], [0] * self.num_types
        for p, counts in enumerate(type_counts):
            at = int(part_offsets[p])
            for t, c in enumerate(counts):
                if c:
                    runs.append((at, t, seen[t]))
                    at, seen[t] = at + int(c), seen[t] + int(c)
        index = None
        if orig_ids is not None:
            orig = orig_ids.to(torch.int64)
            index = orig - torch.tensor(self.offsets[:-1], dtype=torch.int64)[self.node_type(orig)]
        return replace(self, ranges=tuple(runs), index=index)

    # ------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (partition metadata, checkpoints); :meth:`from_dict` reads it back."""
        out = {"node_types": list(self.node_types), "offsets": list(self.offsets),
               "relations": [r.key for r in self.relations], "widths": list(self.widths), "target": self.target}
        return out if self.ranges is None else {**out, "ranges": [list(r) for r in self.ranges]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Schema":
        return cls(tuple(d["node_types"]), tuple(int(o) for o in d["offsets"]),
                   tuple(Relation.parse(k) for k in d["relations"]), tuple(int(w) for w in d["widths"]),
                   d.get("target"), tuple(tuple(int(v) for v in r) for r in d["ranges"]) if d.get("ranges") else None)

    def describe(self) -> str:
        """One line for logs: ``3 node types (paper 2,708, word 1,433*), 3 relations; * featureless``."""
        types = ", ".join(f"{t} {self.offsets[i + 1] - self.offsets[i]:,}{'*' if self.widths[i] == 0 else ''}"
                          for i, t in enumerate(self.node_types))
        star = "; * featureless" if self.featureless else ""
        return f"{self.num_types} node types ({types}), {self.num_relations} relations{star}"

    def __str__(self) -> str:
        return json.dumps(self.to_dict())


def edge_type_dtype(num_relations: int) -> torch.dtype:
    """The narrowest integer dtype that holds every relation index (int8 up to 127 relations)."""
    return torch.int8 if num_relations <= 127 else torch.int16 if num_relations <= 32767 else torch.int32




def typed_fields(
    num_nodes: Mapping[str, int],
    edges: Mapping[Any, Any],
    x: Optional[Mapping[str, Any]] = None,
    y: Optional[Any] = None,
    masks: Optional[Mapping[str, Any]] = None,
    target: Optional[str] = None,
    name: str = "typed",
) -> dict[str, Any]:
    """The ``Graph`` fields of a typed graph from per-type counts, per-relation edges and per-type data
    (``Graph.from_types`` and ``graphdist.data.hetero.typed_graph`` build the graph from them).

    Args:
        num_nodes: node count of every type; the order is the id-range order.
        edges: ``(src_type, name, dst_type)`` (or ``"src__name__dst"``) -> int ``[2, E_r]`` of
            (source, destination) ids *within their types*.
        x: type -> float ``[N_t, F_t]`` features; a type left out is featureless.
        y: int64 ``[N_target]`` labels of the target type (``-1`` unlabelled), optional.
        masks: ``train_mask``/``val_mask``/``test_mask`` -> bool ``[N_target]``, optional.
        target: the labelled type; default the one type with features when ``y`` is given and only
            one type has them, else required with ``y``.
        name: the graph's name.

    Raises:
        ValueError: naming the relation, type or field on any inconsistency.

    Example:
        >>> f = typed_fields({"p": 2, "w": 3}, {("w", "in", "p"): [[0, 2], [1, 1]]},
        ...                  x={"p": torch.ones(2, 4)}, y=torch.tensor([0, 1]), target="p")
        >>> f["schema"].widths, f["x"].shape, f["y"].tolist()
        ((4, 0), torch.Size([5, 4]), [0, 1, -1, -1, -1])
    """
    types = [str(t) for t in num_nodes]
    counts = [int(num_nodes[t]) for t in num_nodes]
    if any(c < 0 for c in counts):
        raise ValueError(f"num_nodes: expected counts >= 0 (got {dict(zip(types, counts))})")
    offsets = [0, *np.cumsum(counts).tolist()]
    n = offsets[-1]
    x = dict(x or {})
    for t in x:
        if t not in types:
            raise ValueError(f"x: unknown node type {t!r} (types: {types})")
    widths = []
    for t, c in zip(types, counts):
        feats = as_tensor(x[t], f"x[{t}]") if t in x and x[t] is not None else None
        if feats is not None and (feats.dim() != 2 or feats.shape[0] != c):
            raise ValueError(f"x[{t}]: expected shape [{c}, F] (got {tuple(feats.shape)})")
        widths.append(0 if feats is None else int(feats.shape[1]))
        x[t] = feats
    if y is not None and target is None:
        featured = [t for t, w in zip(types, widths) if w > 0]
        if len(featured) != 1:
            raise ValueError(f"target: expected the labelled node type (got labels and {len(featured)} featured types)")
        target = featured[0]
    relations = tuple(Relation.parse(k) for k in edges)
    schema = Schema(tuple(types), tuple(offsets), relations, tuple(widths), target)
    src, dst, rel = [], [], []
    for r_id, (key, ei) in enumerate(edges.items()):
        r = relations[r_id]
        ei = as_tensor(ei, f"edges[{r.key}]")
        if ei.dim() != 2 or ei.shape[0] != 2 or ei.dtype.is_floating_point:
            raise ValueError(f"edges[{r.key}]: expected integer ids of shape [2, E] (got {ei.dtype} "
                             f"{tuple(ei.shape)})")
        ei = ei.to(torch.int64)
        for row, end in ((0, r.src), (1, r.dst)):
            limit = schema.num_nodes(end)
            if ei.shape[1] and (int(ei[row].min()) < 0 or int(ei[row].max()) >= limit):
                bad = int(ei[row].min()) if int(ei[row].min()) < 0 else int(ei[row].max())
                raise ValueError(f"edges[{r.key}]: {end} ids must lie in [0, {limit}) (got {bad})")
        src.append(ei[0] + offsets[schema.type_id(r.src)])
        dst.append(ei[1] + offsets[schema.type_id(r.dst)])
        rel.append(torch.full((ei.shape[1],), r_id, dtype=torch.int64))
    indptr, indices, edge_type = typed_csr(torch.cat(src), torch.cat(dst), torch.cat(rel), n, len(relations))
    node_data: dict[str, Any] = {}
    width = max(widths)
    if width or any(w == 0 for w in widths):
        table = torch.zeros(n, width, dtype=torch.float32)
        for t, feats in x.items():
            if feats is not None:
                i = schema.type_id(t)
                table[offsets[i]:offsets[i + 1], : feats.shape[1]] = feats.to(torch.float32)
        node_data["x"] = table
    if target is not None:
        node_data.update(_target_rows(schema, target, y, masks or {}))
    return {"indptr": indptr, "indices": indices, "name": name, "edge_type": edge_type, "schema": schema, **node_data}


def _target_rows(schema: Schema, target: str, y: Any, masks: Mapping[str, Any]) -> dict[str, Tensor]:
    """``y`` and masks over every node, the target type's rows filled (``-1`` and ``False`` elsewhere)."""
    t = schema.type_id(target)
    lo, hi, n = schema.offsets[t], schema.offsets[t + 1], schema.offsets[-1]
    out: dict[str, Tensor] = {}
    if y is not None:
        y = as_tensor(y, "y")
        if y.dim() != 1 or y.shape[0] != hi - lo or y.dtype.is_floating_point:
            raise ValueError(f"y: expected integer labels of shape [{hi - lo}] for the {target} nodes "
                             f"(got {y.dtype} {tuple(y.shape)})")
        full = torch.full((n,), -1, dtype=torch.int64)
        full[lo:hi] = y.to(torch.int64)
        out["y"] = full
    for field in MASK_NAMES:
        if masks.get(field) is None:
            continue
        mask = as_tensor(masks[field], field)
        if mask.dtype != torch.bool or mask.dim() != 1 or mask.shape[0] != hi - lo:
            raise ValueError(f"{field}: expected bool of shape [{hi - lo}] for the {target} nodes "
                             f"(got {mask.dtype} {tuple(mask.shape)})")
        full_mask = torch.zeros(n, dtype=torch.bool)
        full_mask[lo:hi] = mask
        out[field] = full_mask
    return out


def typed_csr(src: Tensor, dst: Tensor, rel: Tensor, num_nodes: int, num_relations: int
              ) -> tuple[Tensor, Tensor, Tensor]:
    """CSR over destinations with each row's edges sorted by relation, then source; and the relations.

    Two stable sorts (source, then the virtual row ``dst * R + rel``) instead of one combined key:
    ``(dst * R + rel) * N + src`` overflows int64 past a few billion nodes.
    """
    order = torch.sort(src, stable=True).indices
    vrow = dst[order] * num_relations + rel[order]
    order = order[torch.sort(vrow, stable=True).indices]
    indptr = counts_to_indptr(torch.bincount(dst, minlength=num_nodes))
    return indptr, src[order], rel[order].to(edge_type_dtype(num_relations))


def relation_indptr(graph: Any) -> Tensor:
    """The CSR offsets of the virtual rows ``v * R + r``: row ``v``'s edges of relation ``r``.

    Computed once per graph and kept on it (``8 (N R + 1)`` bytes).

    Example:
        >>> from graphdist.data.graph import Graph
        >>> g = Graph.from_types({"a": 2}, {("a", "x", "a"): [[0], [1]], ("a", "y", "a"): [[1, 0], [1, 1]]})
        >>> relation_indptr(g).tolist()  # row 1: one x edge, then two y edges
        [0, 0, 0, 1, 3]
    """
    cached = getattr(graph, "_relation_indptr", None)
    if cached is not None:
        return cached
    if graph.edge_type is None or graph.schema is None:
        raise ValueError(f"{graph.name}: expected a typed graph (schema and edge_type)")
    out = relation_offsets(graph.indptr, graph.edge_type, graph.schema.num_relations)
    graph._relation_indptr = out
    return out


def relation_offsets(indptr: Tensor, edge_type: Tensor, num_relations: int) -> Tensor:
    """CSR offsets of the virtual rows ``row * R + r`` of a CSR whose rows' edges are sorted by relation
    (a whole typed graph's, or a partition's inner rows: ``edge_type`` may run past the rows' edges).

    Example:
        >>> relation_offsets(torch.tensor([0, 1, 3]), torch.tensor([0, 1, 1]), 2).tolist()
        [0, 1, 1, 1, 3]
    """
    counts = indptr[1:] - indptr[:-1]
    rows = torch.repeat_interleave(torch.arange(counts.numel(), dtype=torch.int64), counts)
    vrow = rows * num_relations + edge_type[: rows.numel()].to(torch.int64)
    return counts_to_indptr(torch.bincount(vrow, minlength=counts.numel() * num_relations))


_CHECK_EDGES = 1 << 20  # edges per chunk of check_typed: ~50 MB of temporaries


def check_typed(graph: Any) -> None:
    """Raises ``ValueError`` unless ``edge_type`` and ``schema`` agree with the CSR.

    Checks: both present or both absent; one relation per edge, in range; every edge's ends have
    its relation's types; each row's edges sorted by relation; ``x``, if any, as wide as the widest type.
    """
    if (graph.edge_type is None) != (graph.schema is None):
        raise ValueError("edge_type and schema: expected both (a typed graph) or neither")
    if graph.schema is None:
        return
    s, et = graph.schema, graph.edge_type
    if s.offsets[-1] != graph.num_nodes:
        raise ValueError(f"schema: the node types cover {s.offsets[-1]} ids (got a graph of {graph.num_nodes} nodes)")
    if et.dim() != 1 or et.numel() != graph.num_edges or et.dtype.is_floating_point:
        raise ValueError(f"edge_type: expected integers of shape [{graph.num_edges}] (got {et.dtype} {tuple(et.shape)})")
    if et.numel() == 0:
        return
    lo, hi = int(et.min()), int(et.max())
    if lo < 0 or hi >= s.num_relations:
        raise ValueError(f"edge_type: relation ids must lie in [0, {s.num_relations}) (got {lo}..{hi})")
    src_types = torch.tensor([s.type_id(r.src) for r in s.relations])
    dst_types = torch.tensor([s.type_id(r.dst) for r in s.relations])
    # Rows in chunks of about _CHECK_EDGES edges: the int64 temporaries of a whole 36M-edge graph
    # would take ~2 GB, and a memory-mapped graph is checked each time it is opened.
    for first, last in row_chunks(graph.indptr, _CHECK_EDGES):
        begin, end = int(graph.indptr[first]), int(graph.indptr[last])
        rel = et[begin:end].to(torch.int64)
        dst = torch.repeat_interleave(torch.arange(first, last, dtype=torch.int64),
                                      graph.indptr[first + 1:last + 1] - graph.indptr[first:last])
        src = graph.indices[begin:end]
        for ends, want, what in ((src, src_types[rel], "source"), (dst, dst_types[rel], "destination")):
            bad = (s.node_type(ends) != want).nonzero()
            if bad.numel():
                e = int(bad[0, 0])
                raise ValueError(f"edge {begin + e} ({int(src[e])} -> {int(dst[e])}): its {what} is not a "
                                 f"{s.node_types[int(want[e])]} node as relation {s.relations[int(rel[e])].key} "
                                 "requires")
        vrow = dst * s.num_relations + rel  # a chunk ends at a row's end: across chunks the rows grow
        if bool((vrow[1:] < vrow[:-1]).any()):
            raise ValueError("edge_type: expected each row's edges sorted by relation (build typed graphs with "
                             "typed_graph)")
    width = max(s.widths)
    if graph.x is not None and graph.x.shape[1] != width:  # no x: the structure alone (a replicated CSR)
        raise ValueError(f"x: expected {width} columns, the widest node type's (got {graph.x.shape[1]})")


def hetero_fields(data: Any, name: str = "hetero", target: Optional[str] = None) -> dict[str, Any]:
    """The ``Graph`` fields of a typed graph from a PyG ``HeteroData`` (``Graph.from_hetero`` builds it).

    The target is ``target`` or the one node type with ``y``; its masks come along.

    Raises:
        ValueError: no or several labelled types without ``target``, or bad arrays (named).
    """
    labelled = [t for t in data.node_types if getattr(data[t], "y", None) is not None]
    if target is None and len(labelled) > 1:
        raise ValueError(f"target: expected one node type with y (got {labelled}); pass target=")
    target = target if target is not None else (labelled[0] if labelled else None)
    num_nodes = {t: int(data[t].num_nodes) for t in data.node_types}
    edges = {tuple(et): data[et].edge_index for et in data.edge_types}
    x = {t: data[t].x for t in data.node_types if getattr(data[t], "x", None) is not None}
    y = getattr(data[target], "y", None) if target is not None else None
    if y is not None and y.dim() == 2 and y.shape[1] == 1:
        y = y.view(-1)
    masks = {f: getattr(data[target], f, None) for f in MASK_NAMES} if target is not None else {}
    return typed_fields(num_nodes, edges, x=x, y=y, masks=masks, target=target, name=name)
