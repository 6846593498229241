"""``Partition``: one part of a partition directory, as training reads it (arrays memory-mapped).

``partition.format.load_partition`` builds it; the sampling sources and trainers use its
methods (owner lookup, id ranges, degrees) instead of re-deriving them from the arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(eq=False)
class Partition:
    """One part of a partition directory, arrays memory-mapped.

    Local ids: ``0 .. num_inner-1`` are the inner nodes (global
    ``part_offsets[part_id] + local``), then the halo nodes. CSR rows are local
    ids ``0 .. num_rows-1`` (inner nodes, then for ``halo_hops >= 2`` the halo
    nodes within ``halo_hops - 1`` hops); columns are local ids over all nodes.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import load_partition, partition
        >>> part = load_partition(partition(tiny_graph(), 2, method="metis", out=tempfile.mkdtemp() + "/p"), 1)
        >>> torch.equal(part.owner(part.global_ids[part.num_inner:]), part.halo_owner)
        True
        >>> part.inner_global_range == (int(part.part_offsets[1]), int(part.part_offsets[2]))
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
    def inner_global_range(self) -> tuple[int, int]:
        """``(start, stop)``: this part owns new global ids ``start <= g < stop``."""
        return int(self.part_offsets[self.part_id]), int(self.part_offsets[self.part_id + 1])

    def owner(self, global_ids: torch.Tensor) -> torch.Tensor:
        """Part owning each new global id (binary search over ``part_offsets``)."""
        ids = torch.as_tensor(global_ids, dtype=torch.int64)
        return torch.searchsorted(self.part_offsets, ids, right=True) - 1

    def global_indices(self, inner_only: bool = False) -> torch.Tensor:
        """The CSR column ids mapped to new global ids (int64); only the inner rows' with ``inner_only``."""
        indices = self.indices[: int(self.indptr[self.num_inner])] if inner_only else self.indices
        return self.global_ids.index_select(0, indices.to(torch.int64))

    def inner_global_ids(self) -> torch.Tensor:
        """New global ids of the inner nodes, ascending (local ``i`` is ``start + i``)."""
        start, stop = self.inner_global_range
        return torch.arange(start, stop, dtype=torch.int64)

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
