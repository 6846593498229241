"""``Partition``: one part of a partition directory, as training reads it (arrays memory-mapped).

``partition.format.load_partition`` builds it; the sampling sources and trainers use its
methods (owner lookup, id ranges, degrees) instead of re-deriving them from the arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch


@dataclass(eq=False)
class Partition:
    """One part of a partition directory (or a worker's union of several), arrays memory-mapped.

    Local ids: ``0 .. num_inner-1`` are the inner nodes (global
    ``part_offsets[part_id] + local``; a union's inner nodes are its parts' ranges one after
    another, in part order, so still ascending by global id), then the halo nodes. CSR rows are local
    ids ``0 .. num_rows-1`` (inner nodes, then for ``halo_hops >= 2`` the halo
    nodes within ``halo_hops - 1`` hops); columns are local ids over all nodes.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import load_partition, partition
        >>> part = load_partition(partition(tiny_graph(), 2, method="metis", out=tempfile.mkdtemp() + "/p"), 1)
        >>> torch.equal(part.owner(part.global_ids[part.num_inner:]), part.halo_owner)
        True
        >>> part.inner_ranges == [(int(part.part_offsets[1]), int(part.part_offsets[2]))]
        True
    """

    part_id: int
    num_parts: int
    meta: dict
    indptr: torch.Tensor
    indices: torch.Tensor
    global_ids: torch.Tensor
    num_inner: int
    halo_owner: torch.Tensor
    part_offsets: torch.Tensor
    x: Optional[torch.Tensor]
    y: Optional[torch.Tensor]
    train_mask: Optional[torch.Tensor]
    val_mask: Optional[torch.Tensor]
    test_mask: Optional[torch.Tensor]
    orig_ids: torch.Tensor
    part_ids: tuple[int, ...] = ()  # a union's parts (``partition.merge``); empty: just ``part_id``
    edge_type: Optional[torch.Tensor] = None  # a typed graph's relation of every edge of the CSR
    schema: Optional[Any] = None  # a typed graph's ``Schema`` over this directory's (relabelled) ids

    @property
    def parts(self) -> tuple[int, ...]:
        """The parts whose inner nodes this holds, ascending."""
        return self.part_ids or (self.part_id,)

    @property
    def name(self) -> str:
        """``part 3`` or ``parts [2, 5]``, for messages."""
        return f"part {self.part_id}" if len(self.parts) == 1 else f"parts {list(self.parts)}"

    @property
    def num_local(self) -> int:
        """Inner plus halo nodes."""
        return int(self.global_ids.numel())

    @property
    def num_rows(self) -> int:
        """Rows of the local CSR (inner nodes, plus halo rows when ``halo_hops >= 2``)."""
        return int(self.indptr.numel()) - 1

    @property
    def num_halo(self) -> int:
        return self.num_local - self.num_inner

    @property
    def inner_ranges(self) -> list[tuple[int, int]]:
        """``(start, stop)`` per part held: it owns new global ids ``start <= g < stop``, ascending."""
        return [(int(self.part_offsets[p]), int(self.part_offsets[p + 1])) for p in self.parts]

    def inner_local(self, global_ids: torch.Tensor, all_inner: bool = False) -> torch.Tensor:
        """Local id of each global id among the inner nodes, ``-1`` where another part owns it.

        ``all_inner``: the caller knows every id is inner (``is_inner``): no mask is computed.

        Example:
            >>> import tempfile
            >>> from graphdist.testing import tiny_graph
            >>> from partition.api import load_partition, partition
            >>> part = load_partition(partition(tiny_graph(), 2, method="metis", out=tempfile.mkdtemp() + "/p"), 1)
            >>> start = int(part.part_offsets[1])
            >>> part.inner_local(torch.tensor([start + 1, 0])).tolist()
            [1, -1]
        """
        ids = torch.as_tensor(global_ids, dtype=torch.int64)
        ranges = self.inner_ranges
        if len(ranges) == 1:
            start, stop = ranges[0]
            local = ids - start
            return local if all_inner else local.masked_fill_((ids < start) | (ids >= stop), -1)
        starts = torch.tensor([a for a, _ in ranges], dtype=torch.int64)
        stops = torch.tensor([b for _, b in ranges], dtype=torch.int64)
        base = torch.cumsum(stops - starts, 0) - (stops - starts)
        which = (torch.searchsorted(starts, ids, right=True) - 1).clamp_(min=0)
        local = ids - starts.index_select(0, which) + base.index_select(0, which)
        return local.masked_fill_((ids < starts[0]) | (ids >= stops.index_select(0, which)), -1)

    def is_inner(self, global_ids: torch.Tensor) -> torch.Tensor:
        """True where this part owns the global id: ``inner_local(ids) >= 0`` in two compares a range.

        Example:
            >>> import tempfile
            >>> from graphdist.testing import tiny_graph
            >>> from partition.api import load_partition, partition
            >>> part = load_partition(partition(tiny_graph(), 2, method="metis", out=tempfile.mkdtemp() + "/p"), 1)
            >>> part.is_inner(torch.tensor([int(part.part_offsets[1]), 0])).tolist()
            [True, False]
        """
        ids = torch.as_tensor(global_ids, dtype=torch.int64)
        ranges = self.inner_ranges
        if len(ranges) == 1:  # one part: three passes, not five (the distributed sampler asks every hop)
            return (ids >= ranges[0][0]).logical_and_(ids < ranges[0][1])
        inner = torch.zeros(ids.shape, dtype=torch.bool)
        for start, stop in ranges:
            inner |= (ids >= start) & (ids < stop)
        return inner

    def owner(self, global_ids: torch.Tensor) -> torch.Tensor:
        """Part owning each new global id (binary search over ``part_offsets``)."""
        ids = torch.as_tensor(global_ids, dtype=torch.int64)
        return torch.searchsorted(self.part_offsets, ids, right=True) - 1

    def global_indices(self, inner_only: bool = False) -> torch.Tensor:
        """The CSR column ids mapped to new global ids (int64); only the inner rows' with ``inner_only``."""
        indices = self.indices[: int(self.indptr[self.num_inner])] if inner_only else self.indices
        return self.global_ids.index_select(0, indices.to(torch.int64))

    def inner_global_ids(self) -> torch.Tensor:
        """New global ids of the inner nodes, ascending (local ``i`` is its ``i``-th)."""
        return torch.cat([torch.arange(a, b, dtype=torch.int64) for a, b in self.inner_ranges])

    def mask_global_ids(self, mask: str = "train_mask") -> torch.Tensor:
        """Global ids of the inner nodes in ``mask`` (every inner node when the directory has none)."""
        values = getattr(self, mask)
        ids = self.inner_global_ids()
        return ids if values is None else ids[values.to(torch.bool)]

    def inner_csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The subgraph induced by the inner nodes: ``(indptr, indices)`` over local inner ids.

        Edges from halo nodes are dropped (what a worker sees when it trains on its part alone).
        """
        from graphdist.data.graph import counts_to_indptr

        indptr = self.indptr[: self.num_inner + 1]
        indices = self.indices[: int(indptr[-1])].to(torch.int64)
        rows = torch.repeat_interleave(torch.arange(self.num_inner), indptr[1:] - indptr[:-1],
                                       output_size=indices.numel())
        keep = indices < self.num_inner
        return counts_to_indptr(torch.bincount(rows[keep], minlength=self.num_inner)), indices[keep]

    def in_degrees(self) -> torch.Tensor:
        """Global in-degree of each inner node, self loops not counted: its CSR row holds every
        in-neighbour (GCN normalises by ``d + 1`` with exactly one self loop, as PyG's ``GCNConv``)."""
        from graphdist.data.graph import loop_free_degrees

        return loop_free_degrees(self.indptr[: self.num_inner + 1], self.indices)


__all__ = ["Partition"]
