"""Sampling typed graphs: a fan-out per relation, drawn by the homogeneous kernels on virtual rows.

A typed graph sorts each row's edges by relation (``graphdist.data.hetero``), so node ``v``'s
edges of relation ``r`` are the virtual row ``v * R + r`` of ``relation_indptr``. A hop of fan-outs
``(f_0, ..., f_{R-1})`` samples every (node, relation) row with ``sampling.kernels``; the result
is grouped by node, then relation, and its counts are ``[n, R]``: ``NeighborSampler`` sums them
into the block's per-destination counts and spreads them into each edge's relation.

The distributed sampler answers a hop with one ``[n, sum(f_r)]`` table per request
(:func:`sample_relations_padded`): slot ``j`` belongs to relation ``slot_relations(fanouts)[j]``,
so no relation ids cross the wire (:func:`padded_relation_counts` reads them back).

A relation's fan-out may be 0 (that relation is not sampled) or -1 (all its edges); a layer
given as one int applies to every relation.

Example:
    >>> from graphdist.data.hetero import relation_indptr, typed_graph
    >>> g = typed_graph({"a": 3}, {("a", "x", "a"): [[1, 2], [0, 0]], ("a", "y", "a"): [[1], [0]]})
    >>> nbrs, counts = sample_relations(relation_indptr(g), g.indices, torch.tensor([0]), (-1, -1))
    >>> nbrs.tolist(), counts.tolist()  # node 0: x-edges from 1 and 2, then its y-edge from 1
    ([1, 2, 1], [[2, 1]])
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from graphdist.data.graph import counts_to_indptr, ranges
from sampling.kernels import sample_csr, sample_csr_padded

__all__ = ["Fanout", "layer_fanouts", "padded_relation_counts", "relation_fanouts", "sample_relations",
           "sample_relations_padded", "slot_relations", "spread_relations"]

# One layer's fan-out: one count for every relation, or a count per relation.
Fanout = Union[int, Sequence[int]]


def layer_fanouts(fanout: Fanout, num_relations: int) -> tuple[int, ...]:
    """One layer's per-relation fan-outs (an int applies to every relation).

    Example:
        >>> layer_fanouts(5, 3), layer_fanouts([2, 0, -1], 3)
        ((5, 5, 5), (2, 0, -1))
    """
    if isinstance(fanout, int):
        return (int(fanout),) * num_relations
    out = tuple(int(f) for f in fanout)
    if len(out) != num_relations:
        raise ValueError(f"fanout: expected one count per relation ({num_relations}) (got {list(out)})")
    if any(f < -1 for f in out):
        raise ValueError(f"fanout: expected counts >= 0 or -1 for all (got {list(out)})")
    return out


def relation_fanouts(schema: object, fanouts: Sequence[int], overrides: Optional[Mapping[str, Sequence[int]]] = None
                     ) -> list[tuple[int, ...]]:
    """Per layer, per relation fan-outs: ``fanouts`` for every relation, ``overrides`` for the named ones.

    Args:
        schema: the graph's ``Schema`` (relations are named by name when unique, or ``src__name__dst``).
        fanouts: one count per layer, from the seeds outward (``--fanouts``).
        overrides: relation -> one count per layer (``--relation-fanouts``).

    Raises:
        ValueError: an unknown relation or a count list of the wrong length.

    Example:
        >>> from graphdist.data.hetero import Relation, Schema
        >>> s = Schema(("p", "w"), (0, 2, 5), (Relation("p", "cites", "p"), Relation("w", "in", "p")), (4, 0), "p")
        >>> relation_fanouts(s, [10, 5], {"cites": [15, 0]})
        [(15, 10), (0, 5)]
    """
    layers = [list((int(f),) * schema.num_relations) for f in fanouts]  # type: ignore[attr-defined]
    for name, counts in (overrides or {}).items():
        r = schema.relation_id(name)  # type: ignore[attr-defined]
        counts = [int(c) for c in counts]
        if len(counts) != len(layers):
            raise ValueError(f"relation fan-outs of {name}: expected one count per layer ({len(layers)}) (got {counts})")
        if any(c < -1 for c in counts):
            raise ValueError(f"relation fan-outs of {name}: expected counts >= 0 or -1 for all (got {counts})")
        for layer, c in zip(layers, counts):
            layer[r] = c
    return [tuple(layer) for layer in layers]


def _virtual_rows(rows: Tensor, num_relations: int, relations: Optional[Sequence[int]] = None) -> Tensor:
    """``rows[i] * R + r`` for every row and relation (all, or ``relations``), row-major."""
    rel = torch.arange(num_relations, dtype=torch.int64) if relations is None else torch.tensor(relations, dtype=torch.int64)
    return (rows.to(torch.int64).view(-1, 1) * num_relations + rel.view(1, -1)).view(-1)


def sample_relations(rel_indptr: Tensor, indices: Tensor, rows: Tensor, fanouts: Sequence[int],
                     replace: bool = False, generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
    """Up to ``fanouts[r]`` in-neighbours of each row per relation ``r``; grouped by row, then relation.

    Args:
        rel_indptr: int64 ``[N R + 1]``, the CSR of the virtual rows ``v * R + r``.
        indices: the graph's ``indices`` (any id type ``sampling.kernels`` reads).
        rows: int64 ``[n]`` rows to sample.
        fanouts: ``R`` counts (``-1`` all, ``0`` none).

    Returns:
        ``(neighbors, counts)``: int64 neighbours, and int64 ``[n, R]`` how many of each relation.
    """
    R = len(fanouts)
    n = rows.numel()
    counts = torch.zeros(n * R, dtype=torch.int64)
    pieces: list[tuple[Tensor, Tensor]] = []  # (positions in the virtual-row order, their draws)
    for k in sorted(set(fanouts)):
        if k == 0:
            continue
        rels = [r for r, f in enumerate(fanouts) if f == k]
        vrows = _virtual_rows(rows, R, rels)
        nbrs, c = sample_csr(rel_indptr, indices, vrows, k, replace, generator)
        where = _virtual_rows(torch.arange(n, dtype=torch.int64), R, rels)  # their places in node-major order
        counts[where] = c
        pieces.append((where, nbrs))
    if len(pieces) == 1 and len(pieces[0][0]) == n * R:  # one fan-out for every relation: in order already
        return pieces[0][1], counts.view(n, R)
    starts = counts_to_indptr(counts)[:-1]
    out = torch.empty(int(counts.sum()), dtype=torch.int64)
    for where, nbrs in pieces:
        out[ranges(starts[where], counts[where])] = nbrs
    return out, counts.view(n, R)


def slot_relations(fanouts: Sequence[int]) -> Tensor:
    """The relation of every slot of a padded typed table (``sum(fanouts)`` slots, relations in order).

    Example:
        >>> slot_relations((2, 0, 1)).tolist()
        [0, 0, 2]
    """
    return torch.repeat_interleave(torch.arange(len(fanouts)), torch.tensor([max(f, 0) for f in fanouts]))


def sample_relations_padded(rel_indptr: Tensor, indices: Tensor, rows: Tensor, fanouts: Sequence[int],
                            replace: bool = False, generator: Optional[torch.Generator] = None) -> Tensor:
    """:func:`sample_relations` as one ``[n, sum(fanouts)]`` table padded with ``-1`` (no ``-1`` fan-out).

    Example:
        >>> from graphdist.data.hetero import relation_indptr, typed_graph
        >>> g = typed_graph({"a": 3}, {("a", "x", "a"): [[1, 2], [0, 0]], ("a", "y", "a"): [[1], [0]]})
        >>> t = sample_relations_padded(relation_indptr(g), g.indices, torch.tensor([0]), (2, 2))
        >>> sorted(t[0, :2].tolist()), t[0, 2:].tolist()
        ([1, 2], [-1, 1])
    """
    if any(f < 0 for f in fanouts):
        raise ValueError(f"fanouts: a padded sample needs fixed fan-outs (got {list(fanouts)})")
    R, n = len(fanouts), rows.numel()
    tables = [sample_csr_padded(rel_indptr, indices, _virtual_rows(rows, R, [r]), f, replace, generator)
              for r, f in enumerate(fanouts) if f > 0]
    if not tables:
        return torch.empty((n, 0), dtype=torch.int64)
    dtype = tables[0].dtype
    return torch.cat([t.to(dtype) for t in tables], dim=1)


def padded_relation_counts(table: Tensor, fanouts: Sequence[int]) -> Tensor:
    """``[n, R]`` real entries of each relation's slots in a padded typed table.

    Example:
        >>> padded_relation_counts(torch.tensor([[4, -1, 7], [-1, -1, -1]]), (2, 1)).tolist()
        [[1, 1], [0, 0]]
    """
    n = table.shape[0]
    real = (table >= 0).to(torch.int64)
    out = torch.zeros((n, len(fanouts)), dtype=torch.int64)
    col = 0
    for r, f in enumerate(fanouts):
        if f > 0:
            out[:, r] = real[:, col: col + f].sum(dim=1)
            col += f
    return out


def spread_relations(counts: Tensor) -> Tensor:
    """Each edge's relation from ``[n, R]`` counts (edges grouped by node, then relation).

    Example:
        >>> spread_relations(torch.tensor([[2, 1], [0, 1]])).tolist()
        [0, 0, 1, 1]
    """
    n, R = counts.shape
    return torch.repeat_interleave(torch.arange(R, dtype=torch.int64).repeat(n), counts.reshape(-1))
