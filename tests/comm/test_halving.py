"""Halving-doubling on a BiGraph-declared topology: the BiGraph rank map, a plain sum, its byte counts."""

from __future__ import annotations

import torch

from graphdist.testing import launch

SIZES = [1, 7, 1000, 4097, 300_001]  # fewer elements than ranks; not divisible by P; 2 pieces in the pipeline


def _bigraph_body(rank: int, world_size: int) -> None:
    import os

    from graphdist import comm
    from graphdist.comm.rankmap import hd_positions, host_positions

    os.environ["GRAPHDIST_TOPOLOGY"] = "8x1:bigraph"
    topology = comm.discover_topology()
    assert topology.bigraph, topology
    hd = comm.allreduce_algorithm("hd", topology)
    assert hd.positions == hd_positions(topology) != host_positions(topology)

    def values(r: int, n: int, dtype: torch.dtype) -> torch.Tensor:  # small integers: any order sums exactly
        return torch.randint(-1000, 1000, (n,), generator=torch.Generator().manual_seed(100 * r + n)).to(dtype)

    for dtype in (torch.float32, torch.float64):
        tensors = [values(rank, n, dtype) for n in SIZES]
        plain = [sum(values(r, n, torch.float64) for r in range(world_size)).to(dtype) for n in SIZES]
        comm.reset_byte_counts()
        handles = [hd(t, None, "grad") for t in tensors]  # several in flight at once, as DWBP issues them
        for t, expect, h in zip(tensors, plain, handles):
            assert h.wait() is t
            assert torch.equal(t, expect), (dtype, t.numel())
        sent = sum(hd.bytes_sent(t.numel() * t.element_size(), rank, world_size)[0] for t in tensors)
        # every step crosses hosts (one rank per host): all of it is inter-host, 2 (P-1)/P of each tensor
        assert comm.byte_counts()["grad"] == sent == comm.inter_host_byte_counts()["grad"]
        assert sent == sum(int(2 * 7 / 8 * t.numel() * t.element_size()) for t in tensors)


def test_hd_on_a_bigraph_topology_equals_a_plain_sum():
    launch(_bigraph_body, 8, timeout=120)
