"""Neighbour sampling on the CSR's own device: torch operations only, so a GPU samples what it trains on.

``DeviceNeighborSampler`` is the device twin of ``NeighborSampler`` over a local CSR (one worker, or
``--replicate graph``): the same fan-out order (``fanouts[0]`` is the hop from the seeds), the same
blocks (every layer's sources start with its destinations, then new nodes in order of first
appearance), the same draws' law (up to ``fanout`` distinct neighbours, uniformly; all of them when
fewer). It draws differently: Floyd's algorithm vectorised over the frontier (k rounds, each a
membership test against the draws so far) with a generator of the device, so a run is
deterministic per device, not across devices (``--sample-on`` records the choice in the
checkpoint). Relabelling is a sort (``torch.unique``) and a first-position reduction, not the CPU
sampler's mark array.

On a CPU "device" it runs too (the tests'), slower than the compiled CPU sampler, and draws exactly as
``NeighborSampler`` does (the same Floyd rounds, the same generator calls: the tests check them equal
batch for batch); a CUDA generator draws otherwise.

Example:
    >>> from graphdist.testing import tiny_graph
    >>> g = tiny_graph()
    >>> s = DeviceNeighborSampler(g.indptr, g.indices, [2, 2], device="cpu", seed=0)
    >>> b = s.sample(torch.tensor([0, 5]))
    >>> b.input_nodes[:2].tolist(), b.blocks[-1].num_dst, int(b.blocks[-1].in_degrees().max()) <= 2
    ([0, 5], 2, True)
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from sampling.base import Block, SampledBatch, SeededSampler
from sampling.neighbor import check_fanouts

__all__ = ["DeviceNeighborSampler", "csr_bytes"]


def csr_bytes(indptr: Tensor, indices: Tensor) -> int:
    """Bytes the CSR takes on a device as this sampler holds it (int64).

    Example:
        >>> csr_bytes(torch.zeros(11, dtype=torch.int64), torch.zeros(40, dtype=torch.int32))
        408
    """
    return 8 * (int(indptr.numel()) + int(indices.numel()))


class DeviceNeighborSampler(SeededSampler):
    """Samples up to ``fanouts[i]`` neighbours per node and hop with torch operations on ``device``.

    Args:
        indptr, indices: the CSR over global ids (copied to ``device`` as int64).
        fanouts: neighbours per node, seeds' hop first; -1 takes every neighbour.
        device: where the CSR lives and the sampling runs.
        replace: draw with replacement (every node with a neighbour gets exactly ``fanout``).
        seed: seeds the device's generator (None: drawn from torch's global one).
    """

    def __init__(self, indptr: Tensor, indices: Tensor, fanouts: Sequence[int], device: Union[str, torch.device],
                 replace: bool = False, seed: Optional[int] = None) -> None:
        self.device = torch.device(device)
        self.indptr = indptr.to(self.device, torch.int64)
        self.indices = indices.to(self.device, torch.int64)
        self.fanouts = check_fanouts(fanouts)
        self.replace = bool(replace)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel()) - 1

    def sample(self, seeds: Tensor) -> SampledBatch:
        seeds = torch.as_tensor(seeds).to(self.device, torch.int64).view(-1)
        nodes, blocks = seeds, []
        for fanout in self.fanouts:
            nbrs, counts = self.sample_neighbors(nodes, fanout)
            known, src = _relabel(nodes, nbrs)
            dst = torch.repeat_interleave(torch.arange(nodes.numel(), device=self.device), counts,
                                          output_size=int(nbrs.numel()))
            indptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
            blocks.append(Block(src=src, dst=dst, num_src=int(known.numel()), num_dst=int(nodes.numel()), indptr=indptr))
            nodes = known  # the next hop samples every source of this layer
        blocks.reverse()  # built seeds outward; blocks[0] is the input layer
        return SampledBatch(blocks=blocks, input_nodes=nodes, seed_nodes=seeds)

    def sample_neighbors(self, nodes: Tensor, fanout: int) -> tuple[Tensor, Tensor]:
        """``(neighbours, counts)``: up to ``fanout`` in-neighbours of each node, grouped by node in order."""
        start = self.indptr.index_select(0, nodes)
        degree = self.indptr.index_select(0, nodes + 1) - start
        if fanout < 0:  # every neighbour
            total = int(degree.sum())
            offsets = torch.cumsum(degree, 0) - degree
            pos = torch.arange(total, device=self.device) - torch.repeat_interleave(offsets, degree, output_size=total)
            return self.indices.index_select(0, torch.repeat_interleave(start, degree, output_size=total) + pos), degree
        if self.replace:
            counts = torch.where(degree > 0, fanout, 0)
            draws = torch.rand((nodes.numel(), fanout), generator=self.generator, device=self.device)
            pos = (draws * degree.unsqueeze(1)).long()
        else:
            counts = degree.clamp(max=fanout)
            pos = self._floyd(degree, fanout)
        valid = torch.arange(fanout, device=self.device).unsqueeze(0) < counts.unsqueeze(1)
        picked = (start.unsqueeze(1) + pos)[valid]  # row-major: grouped by node, in node order
        return self.indices.index_select(0, picked), counts

    def _floyd(self, degree: Tensor, k: int) -> Tensor:
        """``[n, k]`` positions: ``k`` distinct ones in ``[0, degree)`` per row (Floyd), or ``0..k-1`` where
        ``degree <= k`` (every neighbour; the positions past the degree are masked by the caller)."""
        n = degree.numel()
        chosen = torch.empty((n, k), dtype=torch.int64, device=self.device)
        for i in range(k):
            top = degree - k + i  # Floyd's j: this round draws t in [0, j]
            t = (torch.rand(n, generator=self.generator, device=self.device) * (top + 1).clamp(min=1)).long()
            if i:
                t = torch.where((chosen[:, :i] == t.unsqueeze(1)).any(1), top, t)
            chosen[:, i] = t
        return torch.where((degree <= k).unsqueeze(1), torch.arange(k, device=self.device).expand(n, k), chosen)


def _relabel(nodes: Tensor, nbrs: Tensor) -> tuple[Tensor, Tensor]:
    """``(known, src)``: ``nodes`` then the new neighbours in order of first appearance, and each neighbour's
    position there (``nodes`` are distinct and keep their positions)."""
    both = torch.cat([nodes, nbrs])
    unique, inverse = torch.unique(both, return_inverse=True)
    first = torch.full((unique.numel(),), both.numel(), dtype=torch.int64, device=both.device)
    first.scatter_reduce_(0, inverse, torch.arange(both.numel(), device=both.device), reduce="amin")
    order = torch.argsort(first)
    local = torch.empty_like(order)
    local[order] = torch.arange(order.numel(), device=both.device)
    return unique.index_select(0, order), local.index_select(0, inverse[nodes.numel():])
