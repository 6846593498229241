"""``OwnerMap``: which rank serves each global node id (node ranges -> rank).

The partition directory numbers nodes so that every part's inner nodes are one contiguous
range (``part_offsets``); a rank may own several parts, not necessarily adjacent, so the map
is a sorted list of range starts with the rank of each range. Lookup is one binary search
per id, as DistDGL does. The distributed sources route requests through it; the trainer
builds it from the placement ``Plan`` (``rank_of_part``), so sampling never imports placement.

Example:
    >>> import torch
    >>> owners = OwnerMap.from_parts(torch.tensor([0, 4, 6, 10]), rank_of_part=[1, 0, 1])
    >>> owners.rank_of(torch.tensor([0, 3, 4, 7, 9])).tolist()
    [1, 1, 0, 1, 1]
    >>> owners.num_ranks, owners.ranges_of(1)
    (2, [(0, 4), (6, 10)])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class OwnerMap:
    """Sorted node-range starts, the rank owning each range, and the end of the last one.

    Attributes:
        starts: int64 ``[R]`` first global id of each range, ascending.
        ranks: int64 ``[R]`` rank owning each range.
        num_nodes: end of the last range (global ids lie in ``[0, num_nodes)``).
        world_size: ranks taking part in the exchanges (some may own no range).
    """

    starts: Tensor
    ranks: Tensor
    num_nodes: int
    world_size: int

    @classmethod
    def from_parts(cls, part_offsets: Tensor, rank_of_part: Optional[Sequence[int]] = None,
                   world_size: Optional[int] = None) -> "OwnerMap":
        """Ranges from a partition's ``part_offsets``; part ``p`` served by ``rank_of_part[p]`` (default ``p``).

        ``world_size`` defaults to the highest rank named plus one.
        """
        offsets = torch.as_tensor(part_offsets, dtype=torch.int64)
        num_parts = offsets.numel() - 1
        ranks = torch.arange(num_parts) if rank_of_part is None else torch.as_tensor(list(rank_of_part))
        if ranks.numel() != num_parts:
            raise ValueError(f"rank_of_part: expected one rank per part ({num_parts}) (got {ranks.numel()})")
        world = int(ranks.max()) + 1 if world_size is None and num_parts else int(world_size or 0)
        if num_parts and int(ranks.max()) >= world:
            raise ValueError(f"rank_of_part names rank {int(ranks.max())} but world_size is {world}")
        return cls(starts=offsets[:-1].clone(), ranks=ranks.to(torch.int64), num_nodes=int(offsets[-1]),
                   world_size=world)

    @property
    def num_ranks(self) -> int:
        """Ranks that own at least one range."""
        return int(torch.unique(self.ranks).numel())

    def rank_of(self, ids: Tensor) -> Tensor:
        """Rank serving each global id (int64, same shape)."""
        ids = torch.as_tensor(ids, dtype=torch.int64)
        return self.ranks.index_select(0, torch.searchsorted(self.starts, ids, right=True) - 1)

    def split(self, ids: Tensor) -> tuple[list[Tensor], Tensor]:
        """``ids`` grouped by the rank serving them (one tensor per rank, ``world_size`` of them) and the
        permutation that grouped them (stable: each group keeps the order asked).

        Example:
            >>> owners = OwnerMap.from_parts(torch.tensor([0, 4, 6, 10]), rank_of_part=[1, 0, 1])
            >>> groups, order = owners.split(torch.tensor([7, 5, 0]))
            >>> [g.tolist() for g in groups], order.tolist()
            ([[5], [7, 0]], [1, 0, 2])
        """
        ids = torch.as_tensor(ids, dtype=torch.int64)
        ranks = self.rank_of(ids)
        if ids.numel() and int(ranks.min()) == int(ranks.max()):
            # One serving rank (every remote id, with two workers): already grouped, no sort.
            groups = [ids[:0]] * self.world_size
            groups[int(ranks[0])] = ids
            return groups, torch.arange(ids.numel())
        order = torch.argsort(ranks, stable=True)
        counts = torch.bincount(ranks, minlength=self.world_size).tolist()
        return list(torch.split(ids.index_select(0, order), counts)), order

    def sole_peer(self, rank: int) -> Optional[int]:
        """The one rank other than ``rank`` that owns nodes, else None: every id ``rank`` does not
        own goes there, with no lookup (two workers).

        Example:
            >>> owners = OwnerMap.from_parts(torch.tensor([0, 4, 6, 10]), rank_of_part=[1, 0, 1])
            >>> owners.sole_peer(0), OwnerMap.from_parts(torch.tensor([0, 2, 4, 6])).sole_peer(0)
            (1, None)
        """
        peers = {int(r) for r in self.ranks.tolist()} - {int(rank)}
        return peers.pop() if len(peers) == 1 else None

    def ranges_of(self, rank: int) -> list[tuple[int, int]]:
        """``(start, stop)`` of every non-empty range ``rank`` owns, ascending."""
        stops = torch.cat([self.starts[1:], torch.tensor([self.num_nodes])])
        return [(int(a), int(b)) for a, b, r in zip(self.starts, stops, self.ranks) if int(r) == rank and b > a]


__all__ = ["OwnerMap"]
