"""``LinkSampler``: batches of edges -> the sampled neighbourhoods of both ends of every positive and
negative pair, through any node ``Sampler`` (local or distributed).

A loader hands it edge ids (positions in its ``edges``, as a ``NodeLoader`` hands seeds); for each
positive edge ``(u, v)`` it draws ``num_negatives`` negatives ``(u, w)``: ``w`` uniform over all
nodes, or with probability proportional to ``degree^0.75`` (``degree``: word2vec's and PinSage's
smoothing, which keeps hubs from being almost every negative). Negatives are not checked
against the graph: at the densities of real graphs a uniform ``w`` is an edge of ``u`` with
probability ``deg(u)/N``, which DGL's and PyG's samplers accept too. The pairs' distinct ends are
the seeds of one node sample, so a node in several pairs is computed once. The batch's
``meta["pairs"]`` (``[2, P]`` positions in ``seed_nodes``) and ``meta["pair_labels"]`` (1 positive, 0
negative) are what the model scores.

Example:
    >>> from graphdist.testing import random_graph
    >>> from sampling import NeighborSampler
    >>> g = random_graph(50, seed=0)
    >>> edges = torch.tensor([[0, 1, 2], [3, 4, 5]])
    >>> s = LinkSampler(NeighborSampler(g, [3], seed=0), edges, num_nodes=50, num_negatives=2, seed=0)
    >>> batch = s.sample(torch.tensor([0, 2]))
    >>> pairs = batch.seed_nodes[batch.meta["pairs"]]
    >>> pairs[:, :2].tolist(), batch.meta["pair_labels"].tolist()
    ([[0, 2], [3, 5]], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Iterator, Optional

import torch
from torch import Tensor

from partition.edges import NEGATIVES
from sampling.base import SampledBatch, Sampler

DEGREE_POWER = 0.75  # degree-biased negatives: P(w) ~ degree(w)^0.75


class LinkSampler(Sampler):
    """Samples the computation graph of a batch of edges and their negatives.

    Args:
        sampler: the node sampler (neighbour, distributed) that samples the pairs' ends.
        edges: int64 ``[2, E]`` positive edges in global ids; batches are positions in it.
        num_nodes: global node count (negatives are drawn from ``[0, num_nodes)``).
        num_negatives: negatives per positive (>= 0).
        negative: ``uniform`` or ``degree`` (needs ``degree``).
        degree: int ``[num_nodes]`` degree of every node, for ``degree``.
        seed: seeds the negatives' generator (the node sampler has its own).

    Raises:
        ValueError: bad arguments, naming them.
    """

    def __init__(self, sampler: Sampler, edges: Tensor, num_nodes: int, num_negatives: int = 1,
                 negative: str = "uniform", degree: Optional[Tensor] = None, seed: int = 0) -> None:
        if edges.dim() != 2 or edges.shape[0] != 2:
            raise ValueError(f"edges: expected a [2, E] tensor (got shape {tuple(edges.shape)})")
        if num_negatives < 0:
            raise ValueError(f"--num-negatives: expected >= 0 (got {num_negatives})")
        if negative not in NEGATIVES:
            raise ValueError(f"--neg-sampling: expected one of {', '.join(NEGATIVES)} (got {negative!r})")
        if negative == "degree" and (degree is None or degree.numel() != num_nodes):
            raise ValueError(f"degree: degree-biased negatives need one degree per node ({num_nodes})")
        self.sampler, self.edges = sampler, edges.to(torch.int64)
        self.num_nodes, self.num_negatives, self.negative = int(num_nodes), int(num_negatives), negative
        self.generator = torch.Generator().manual_seed(int(seed))
        self._cdf: Optional[Tensor] = None
        if negative == "degree":
            weights = degree.to(torch.float64).clamp(min=0).pow(DEGREE_POWER)
            if float(weights.sum()) <= 0:
                raise ValueError("degree: every node has degree 0; use --neg-sampling uniform")
            self._cdf = torch.cumsum(weights, 0) / weights.sum()

    @property
    def lookahead(self) -> int:
        return self.sampler.lookahead

    def negatives(self, count: int) -> Tensor:
        """``count`` negative destinations drawn from this sampler's generator."""
        if self._cdf is None:
            return torch.randint(0, self.num_nodes, (count,), generator=self.generator)
        u = torch.rand(count, generator=self.generator, dtype=torch.float64)
        return torch.searchsorted(self._cdf, u).clamp(max=self.num_nodes - 1)

    def pairs_of(self, edge_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(seeds, pairs, labels)`` of a batch: the distinct ends, each pair's positions in them, 1/0."""
        src, dst = self.edges[:, edge_ids.to(torch.int64)]
        k = self.num_negatives
        neg_src = src.repeat_interleave(k)
        ends = torch.cat([src, neg_src, dst, self.negatives(src.numel() * k)])
        seeds, where = torch.unique(ends, return_inverse=True)
        p = src.numel() * (1 + k)
        labels = torch.cat([torch.ones(src.numel()), torch.zeros(src.numel() * k)])
        return seeds, torch.stack([where[:p], where[p:]]), labels

    def sample(self, seeds: Tensor) -> SampledBatch:
        """``seeds`` are edge ids (positions in ``edges``)."""
        nodes, pairs, labels = self.pairs_of(seeds)
        return _attach(self.sampler.sample(nodes), pairs, labels)

    def sample_stream(self, seed_batches: Iterable[Tensor]) -> Iterator[SampledBatch]:
        """The node sampler's stream over each batch's ends; the pairs follow in order (it may read ahead)."""
        pending: deque = deque()

        def node_batches() -> Iterator[Tensor]:
            for edge_ids in seed_batches:
                nodes, pairs, labels = self.pairs_of(edge_ids)
                pending.append((pairs, labels))
                yield nodes

        for batch in self.sampler.sample_stream(node_batches()):
            yield _attach(batch, *pending.popleft())

    def get_state(self) -> Tensor:
        inner = self.sampler.get_state()
        state = self.generator.get_state()
        return torch.cat([state, inner.view(torch.uint8)]) if inner is not None else state

    def set_state(self, state: Optional[Tensor]) -> None:
        if state is None:
            return
        size = self.generator.get_state().numel()
        self.generator.set_state(state[:size].clone())
        inner = state[size:]
        self.sampler.set_state(inner.clone() if inner.numel() else None)


def _attach(batch: SampledBatch, pairs: Tensor, labels: Tensor) -> SampledBatch:
    batch.meta["pairs"], batch.meta["pair_labels"] = pairs, labels
    return batch


__all__ = ["LinkSampler", "NEGATIVES"]
