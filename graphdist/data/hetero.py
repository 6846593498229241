"""Typed graphs: node types and relations on top of the one CSR every kernel reads.

A typed graph is a ``Graph`` with a :class:`Schema` and an ``edge_type`` array:

- Node ids are global and each node type owns one contiguous range, ``schema.offsets[t]`` to
  ``schema.offsets[t + 1]``, in ``schema.node_types`` order. A node's id within its type (the row
  of its type's feature matrix or embedding table) is its id minus its type's offset.
- ``edge_type[e]`` is the relation of edge ``e`` (aligned with ``indices``). Within each row the
  edges are sorted by relation, then source, so row ``v``'s edges of relation ``r`` are one slice:
  ``relation_indptr(graph)`` is the CSR over the virtual rows ``v * R + r`` and the existing
  sampling kernels draw each relation's slice by sampling those rows.
- ``x`` is one ``[N, F]`` table, ``F`` the widest type's width: a type of width ``F_t`` uses its first
  ``F_t`` columns (the rest are zeros), a featureless type (width 0) none. Models map every type to
  one width with ``graphdist.models.hetero.TypedEncoder``; everything in between (loaders, caches,
  halo exchange) keeps handling one table of one width. The price is the padding: a type narrower
  than the widest costs the difference in zeros (docs/hetero.md says when that matters).
- ``y`` and the masks cover all ``N`` nodes; only the target type's rows are labelled (``-1`` and
  ``False`` elsewhere), so the seeds are target nodes by construction.

Every homogeneous method (partitioners, GraphSAGE on the homogeneous view) reads the same CSR and
ignores the typing.

The schema, its checks and the field builders live in ``graphdist.data.schema`` (which the ``Graph``
class imports); this module is the front: :func:`typed_graph`, and PyG's ``HeteroData`` out.

Example:
    >>> g = typed_graph({"paper": 3, "author": 2},
    ...                 {("author", "writes", "paper"): torch.tensor([[0, 1, 1], [0, 0, 2]])})
    >>> g.schema.node_types, g.schema.offsets, g.num_edges
    (('paper', 'author'), (0, 3, 5), 3)
    >>> g.schema.node_type(torch.tensor([0, 4])).tolist(), g.edge_type.tolist()
    ([0, 1], [0, 0, 0])
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from graphdist.data.graph import MASK_NAMES, Graph
from graphdist.data.schema import (SEP, Relation, Schema, check_typed, hetero_fields, relation_indptr,  # noqa: F401 - the front
                                   typed_csr, typed_fields)

__all__ = ["Relation", "Schema", "check_typed", "hetero_from_pyg", "hetero_to_pyg", "relation_indptr", "typed_graph"]


def typed_graph(
    num_nodes: Mapping[str, int],
    edges: Mapping[Any, Any],
    x: Optional[Mapping[str, Any]] = None,
    y: Optional[Any] = None,
    masks: Optional[Mapping[str, Any]] = None,
    target: Optional[str] = None,
    name: str = "typed",
) -> Graph:
    """Builds a typed ``Graph`` (``Graph.from_types``; the arguments are ``graphdist.data.schema.typed_fields``').

    Example:
        >>> g = typed_graph({"p": 2, "w": 3}, {("w", "in", "p"): [[0, 2], [1, 1]]},
        ...                 x={"p": torch.ones(2, 4)}, y=torch.tensor([0, 1]), target="p")
        >>> g.schema.widths, g.x.shape, g.y.tolist()
        ((4, 0), torch.Size([5, 4]), [0, 1, -1, -1, -1])
    """
    return Graph.from_types(num_nodes, edges, x=x, y=y, masks=masks, target=target, name=name)


def hetero_from_pyg(data: Any, name: str = "hetero", target: Optional[str] = None) -> Graph:
    """A typed graph from a PyG ``HeteroData`` (``Graph.from_hetero``)."""
    return Graph.from_hetero(data, name=name, target=target)


def hetero_to_pyg(graph: Graph) -> Any:
    """The PyG ``HeteroData`` of a typed graph (ids within types; the inverse of :func:`hetero_from_pyg`).

    Example:
        >>> g = typed_graph({"a": 2, "b": 1}, {("b", "r", "a"): [[0, 0], [0, 1]]}, x={"a": torch.ones(2, 3)})
        >>> d = hetero_to_pyg(g)
        >>> d["b", "r", "a"].edge_index.tolist(), tuple(d["a"].x.shape), d["b"].num_nodes
        ([[0, 0], [0, 1]], (2, 3), 1)
    """
    from torch_geometric.data import HeteroData

    s = _schema_of(graph)
    data = HeteroData()
    for i, t in enumerate(s.node_types):
        lo, hi = s.offsets[i], s.offsets[i + 1]
        data[t].num_nodes = hi - lo
        if s.widths[i]:
            data[t].x = graph.x[lo:hi, : s.widths[i]]
        if t == s.target:
            for field in ("y", *MASK_NAMES):
                value = getattr(graph, field)
                if value is not None:
                    data[t][field] = value[lo:hi]
    dst = graph.dst_of_edges()
    rel = graph.edge_type.to(torch.int64)
    for r_id, r in enumerate(s.relations):
        pick = rel == r_id
        src_off, dst_off = s.offsets[s.type_id(r.src)], s.offsets[s.type_id(r.dst)]
        data[r.src, r.name, r.dst].edge_index = torch.stack(
            [graph.indices[pick].to(torch.int64) - src_off, dst[pick] - dst_off])
    return data


def _schema_of(graph: Graph) -> Schema:
    if graph.schema is None or graph.edge_type is None:
        raise ValueError(f"{graph.name}: expected a typed graph (it has no node types or relations)")
    return graph.schema
