"""Relabelling and per-part CSR construction with halo nodes.

New global ids put each part's inner nodes in one contiguous range
(``part_offsets[p] .. part_offsets[p+1]``), so the owner of any node is a
binary search over ``part_offsets`` (as in DistDGL). Within a part, local ids
are the inner nodes first (local ``i`` = global ``part_offsets[p] + i``), then
the halo nodes grouped by hop distance, each group sorted by global id.

Rows of the per-part CSR are destinations, as in `Graph`: the inner nodes and,
for ``halo_hops = h >= 2``, the halo nodes within ``h - 1`` hops, so a part's
local ``h``-hop in-neighbourhood is complete.

Example:
    >>> from graphdist.testing import tiny_graph, tiny_partition
    >>> from partition.csr import graph_arrays
    >>> relabel = Relabel.from_parts(tiny_partition().numpy(), 2)
    >>> part = build_part(*graph_arrays(tiny_graph()), relabel, 0, halo_hops=1)
    >>> part.num_inner, part.global_ids[part.num_inner:].tolist()  # 5 and 9 border ring 0
    (5, [5, 9])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from graphdist.data.graph import counts_to_indptr
from partition.csr import gather_rows


@dataclass
class Relabel:
    """The id maps of a partition: ``orig_ids[new] = orig``, ``new_ids[orig] = new``."""

    orig_ids: np.ndarray  # int64 [N]
    new_ids: np.ndarray  # int64 [N]
    part_offsets: np.ndarray  # int64 [P + 1]

    @classmethod
    def from_parts(cls, parts: np.ndarray, num_parts: int) -> "Relabel":
        """Orders nodes by part (stable, so original order survives within a part)."""
        parts = np.asarray(parts)
        orig_ids = np.argsort(parts, kind="stable").astype(np.int64, copy=False)
        new_ids = np.empty_like(orig_ids)
        new_ids[orig_ids] = np.arange(orig_ids.size, dtype=np.int64)
        offsets = counts_to_indptr(np.bincount(parts, minlength=num_parts))
        return cls(orig_ids=orig_ids, new_ids=new_ids, part_offsets=offsets)

    @property
    def num_parts(self) -> int:
        return self.part_offsets.size - 1

    def node_map(self) -> np.ndarray:
        """new global id -> part, int64."""
        return np.repeat(np.arange(self.num_parts, dtype=np.int64), np.diff(self.part_offsets))

    def owner(self, new_global: np.ndarray) -> np.ndarray:
        """Part of each new global id, by binary search over ``part_offsets``."""
        return np.searchsorted(self.part_offsets, new_global, side="right").astype(np.int64) - 1


@dataclass
class PartArrays:
    """One part's graph arrays, ready to be written (all int64)."""

    indptr: np.ndarray
    indices: np.ndarray  # local column ids
    global_ids: np.ndarray  # local -> new global
    halo_owner: np.ndarray
    num_inner: int
    halo_by_hop: list[int]  # halo nodes first reached at hop 1, 2, ...

    @property
    def num_halo(self) -> int:
        return int(self.global_ids.size - self.num_inner)

    @property
    def num_rows(self) -> int:
        return int(self.indptr.size - 1)


def build_part(
    indptr: np.ndarray,
    indices: np.ndarray,
    relabel: Relabel,
    part_id: int,
    halo_hops: int = 1,
    scratch: np.ndarray | None = None,
) -> PartArrays:
    """The CSR of part ``part_id`` over local ids, with its ``halo_hops``-hop halo.

    Args:
        indptr, indices: the whole graph's CSR in original ids (rows = destinations).
        relabel: the id maps.
        part_id: which part.
        halo_hops: h >= 1; rows for inner nodes and halo nodes within h - 1 hops.
        scratch: optional int64 ``[N]`` array filled with -1, reused across parts to map
            global -> local ids without a per-part O(N) allocation; left filled with -1.

    Returns:
        The part's arrays.
    """
    if halo_hops < 1:
        raise ValueError(f"halo_hops: expected an integer >= 1 (got {halo_hops})")
    n = relabel.orig_ids.size
    local_of = np.full(n, -1, dtype=np.int64) if scratch is None else scratch
    lo, hi = int(relabel.part_offsets[part_id]), int(relabel.part_offsets[part_id + 1])
    local_of[lo:hi] = np.arange(hi - lo, dtype=np.int64)
    next_local = hi - lo
    row_counts: list[np.ndarray] = []
    row_cols: list[np.ndarray] = []  # new global ids of each row block's in-neighbours
    halo_groups: list[np.ndarray] = []
    rows_orig = relabel.orig_ids[lo:hi]
    for hop in range(1, halo_hops + 1):
        counts, cols = gather_rows(indptr, indices, rows_orig)
        cols = relabel.new_ids[cols]
        row_counts.append(counts)
        row_cols.append(cols)
        fresh = np.unique(cols[local_of[cols] < 0])  # sorted new global ids not yet local
        local_of[fresh] = next_local + np.arange(fresh.size, dtype=np.int64)
        next_local += fresh.size
        halo_groups.append(fresh)
        if hop < halo_hops:
            rows_orig = relabel.orig_ids[fresh]
    part = PartArrays(
        indptr=counts_to_indptr(np.concatenate(row_counts)),
        indices=local_of[np.concatenate(row_cols)],
        global_ids=np.concatenate([np.arange(lo, hi, dtype=np.int64), *halo_groups]),
        halo_owner=np.empty(0, dtype=np.int64),
        num_inner=hi - lo,
        halo_by_hop=[int(g.size) for g in halo_groups],
    )
    part.halo_owner = relabel.owner(part.global_ids[part.num_inner :])
    local_of[part.global_ids] = -1  # leave the scratch clean for the next part
    return part


def edges_by_source_part(indptr: Any, indices: Any, halo_owner: Any, num_inner: int, num_parts: int,
                         part_id: int) -> list[int]:
    """In-edges of a part's inner nodes, counted by the part their source belongs to (own part included).

    Example:
        >>> import numpy as np
        >>> edges_by_source_part(np.array([0, 2, 3]), np.array([1, 2, 3]), np.array([1, 1]), 2, 2, 0)
        [1, 2]
    """
    indptr, indices, halo_owner = np.asarray(indptr), np.asarray(indices), np.asarray(halo_owner)
    src = indices[: int(indptr[num_inner])]
    halo = src >= num_inner
    counts = np.bincount(halo_owner[src[halo] - num_inner].astype(np.int64), minlength=num_parts)[:num_parts]
    counts[part_id] += int(np.count_nonzero(~halo))
    return [int(c) for c in counts]
