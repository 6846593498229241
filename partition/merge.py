"""A worker's union of several parts: one ``Partition`` over their inner nodes, halo recomputed.

A partition directory may hold more parts than a job has workers (``placement`` then gives a
worker several parts), so one partitioning serves every cluster size. The union's inner nodes
are its parts' inner nodes, part after part (each part is one global id range, so they stay
ascending by global id); its CSR rows are the parts' rows; its halo is every node the rows
read that the union does not own (a halo node of one part that another part of the union owns
becomes inner: its rows and features are local now). The result is materialised (the parts'
memory maps are copied once); training then treats it as one part.

Example:
    >>> import tempfile
    >>> from graphdist.testing import tiny_graph
    >>> from partition.api import load_partition, partition
    >>> out = partition(tiny_graph(), 4, method="random", seed=0, out=tempfile.mkdtemp() + "/p")
    >>> both = merge_partitions([load_partition(out, 0), load_partition(out, 1)])
    >>> both.parts, both.num_inner == sum(load_partition(out, p).num_inner for p in (0, 1))
    ((0, 1), True)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

import torch

from graphdist.data.graph import counts_to_indptr, ranges
from partition.part import Partition

__all__ = ["load_parts", "merge_partitions"]


def merge_partitions(parts: Sequence[Partition]) -> Partition:
    """The union of ``parts`` (of one directory) as one ``Partition``; one part is returned as is.

    Raises:
        ValueError: no parts, parts of different directories, or a part given twice.
    """
    if not parts:
        raise ValueError("merge_partitions: expected at least one part")
    parts = sorted(parts, key=lambda p: p.part_id)
    ids = [p.part_id for p in parts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"merge_partitions: part given twice in {ids}")
    if any(p.meta is not parts[0].meta and p.meta != parts[0].meta for p in parts):
        raise ValueError("merge_partitions: the parts come from different partition directories")
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    inner = torch.cat([p.inner_global_ids() for p in parts])  # ascending: the parts' ranges in order
    num_inner = int(inner.numel())
    union = replace(first, part_ids=tuple(ids), num_inner=num_inner,
                    global_ids=inner)  # inner_local works from here on: the ranges come from part_ids
    row_ptrs: list[torch.Tensor] = []
    row_cols: list[torch.Tensor] = []
    row_types: list[torch.Tensor] = []  # a typed graph's relation of every edge, in the same order
    for p in parts:  # inner rows of every part
        _append_rows(p, torch.arange(p.num_inner), row_ptrs, row_cols, row_types)
    # Halo rows (halo_hops >= 2): one per node still outside the union, from the first part holding it.
    candidates = [(p, torch.arange(p.num_inner, p.num_rows)) for p in parts]
    halo_nodes = torch.cat([p.global_ids.index_select(0, r) for p, r in candidates])
    first_seen = _first_occurrences(halo_nodes) & (union.inner_local(halo_nodes) < 0)
    for (p, r), keep in zip(candidates, torch.split(first_seen, [int(r.numel()) for _, r in candidates])):
        _append_rows(p, r[keep], row_ptrs, row_cols, row_types)
    with_rows = halo_nodes[first_seen]
    columns = torch.cat(row_cols) if row_cols else torch.zeros(0, dtype=torch.int64)
    others = torch.unique(columns)
    others = others[(union.inner_local(others) < 0) & ~torch.isin(others, with_rows)]
    global_ids = torch.cat([inner, with_rows, others])
    indices = _local_ids(global_ids, columns)
    return replace(
        union,
        indptr=counts_to_indptr(torch.cat(row_ptrs)),
        indices=indices.to(first.indices.dtype) if global_ids.numel() < 2**31 else indices,
        global_ids=global_ids,
        halo_owner=first.owner(global_ids[num_inner:]),
        x=_cat([p.x for p in parts]),
        y=_cat([p.y for p in parts]),
        train_mask=_cat([p.train_mask for p in parts]),
        val_mask=_cat([p.val_mask for p in parts]),
        test_mask=_cat([p.test_mask for p in parts]),
        edge_type=torch.cat(row_types) if row_types else None,
    )


def load_parts(path: object, part_ids: Sequence[int], verify: bool = True, meta: Optional[dict] = None) -> Partition:
    """The parts ``part_ids`` of a partition directory as one ``Partition`` (memory-mapped when one).

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import partition
        >>> out = partition(tiny_graph(), 2, method="random", seed=0, out=tempfile.mkdtemp() + "/p")
        >>> load_parts(out, [0, 1]).num_halo
        0
    """
    from partition.format import load_partition

    return merge_partitions([load_partition(path, p, verify=verify, meta=meta) for p in part_ids])


def _append_rows(part: Partition, rows: torch.Tensor, ptrs: list[torch.Tensor], cols: list[torch.Tensor],
                 types: list[torch.Tensor]) -> None:
    """Rows ``rows`` (ascending local ids) of ``part``'s CSR: their lengths, their columns as global ids and
    (a typed graph) their edges' relations."""
    starts = part.indptr.index_select(0, rows)
    counts = part.indptr.index_select(0, rows + 1) - starts
    positions = ranges(starts, counts)
    ptrs.append(counts)
    cols.append(part.global_ids.index_select(0, part.indices.index_select(0, positions).to(torch.int64)))
    if part.edge_type is not None:
        types.append(part.edge_type.index_select(0, positions))


def _first_occurrences(ids: torch.Tensor) -> torch.Tensor:
    """True at the first position of each distinct value of ``ids``."""
    _, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1 if ids.numel() else 0,), ids.numel(), dtype=torch.int64)
    first.scatter_reduce_(0, inverse, torch.arange(ids.numel()), reduce="amin")
    keep = torch.zeros(ids.numel(), dtype=torch.bool)
    keep[first] = True
    return keep


def _local_ids(global_ids: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """The position of each of ``columns`` in ``global_ids`` (every column is there)."""
    order = torch.argsort(global_ids)
    return order.index_select(0, torch.searchsorted(global_ids.index_select(0, order), columns))


def _cat(arrays: Sequence[Optional[torch.Tensor]]) -> Optional[torch.Tensor]:
    return None if any(a is None for a in arrays) else torch.cat(list(arrays))
