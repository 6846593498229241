"""OwnerMap: node ranges -> rank, several non-contiguous ranges per rank."""

from __future__ import annotations

import pytest
import torch

from sampling.owners import OwnerMap


def test_ranks_own_non_contiguous_ranges():
    offsets = torch.tensor([0, 3, 3, 7, 10])  # part 1 is empty
    owners = OwnerMap.from_parts(offsets, rank_of_part=[1, 0, 0, 1], world_size=3)
    ids = torch.arange(10)
    assert owners.rank_of(ids).tolist() == [1, 1, 1, 0, 0, 0, 0, 1, 1, 1]
    assert owners.ranges_of(1) == [(0, 3), (7, 10)] and owners.ranges_of(0) == [(3, 7)]
    assert owners.world_size == 3 and owners.num_ranks == 2 and owners.num_nodes == 10
    # The default: part p on rank p, the identity of today's layout.
    assert OwnerMap.from_parts(offsets).rank_of(ids).tolist() == [0, 0, 0, 2, 2, 2, 2, 3, 3, 3]


def test_bad_maps_are_refused():
    with pytest.raises(ValueError, match="one rank per part"):
        OwnerMap.from_parts(torch.tensor([0, 2, 4]), rank_of_part=[0])
    with pytest.raises(ValueError, match="names rank 2 but world_size is 2"):
        OwnerMap.from_parts(torch.tensor([0, 2, 4]), rank_of_part=[0, 2], world_size=2)
