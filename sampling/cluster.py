"""Cluster sampling (ClusterGCN): a batch is the subgraph induced by a few whole clusters.

Nodes are grouped into clusters once (METIS for few cut edges, or random); a batch of cluster
ids becomes one induced subgraph, used as the block of every layer (destinations = sources =
the batch's nodes), so a ``SampledBatch`` from here runs through the same models as a
neighbour-sampled one. Edges to nodes outside the batch are dropped: that is ClusterGCN's
approximation, which grouping several random clusters per batch reduces.

The "seeds" a ``ClusterSampler`` takes are cluster ids, so a ``NodeLoader`` over
``torch.arange(num_clusters)`` with ``batch_size = clusters per batch`` is a ClusterGCN
loader; ``batch.seed_nodes`` are all the batch's nodes (mask the loss with e.g.
``graph.train_mask[batch.seed_nodes]``), or, given ``supervised`` (a node mask such as the
train mask), only the batch's supervised nodes: they come first among the batch's nodes and
the last block keeps only their rows, so the model's output is one row per seed, as with a
neighbour sampler, and a step's loss and gradient weight count supervised nodes only.

Example:
    >>> from graphdist.testing import tiny_graph, tiny_partition
    >>> sampler = ClusterSampler(tiny_graph(), tiny_partition(), num_layers=2)
    >>> batch = sampler.sample(torch.tensor([1]))
    >>> batch.seed_nodes.tolist(), batch.blocks[0].num_edges, batch.blocks[0] is batch.blocks[1]
    ([5, 6, 7, 8, 9], 10, True)
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from graphdist.data.graph import Graph, counts_to_indptr, ranges
from sampling.base import Block, SampledBatch, Sampler

__all__ = ["ClusterSampler", "random_clusters", "metis_clusters"]


def random_clusters(num_nodes: int, num_clusters: int, seed: int = 0) -> Tensor:
    """Node -> cluster id, clusters of equal size (+-1) in random order.

    Example:
        >>> torch.bincount(random_clusters(10, 3)).tolist()
        [4, 3, 3]
    """
    if num_clusters < 1:
        raise ValueError(f"num_clusters: expected >= 1 (got {num_clusters})")
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    clusters = torch.empty(num_nodes, dtype=torch.int64)
    clusters[perm] = torch.arange(num_nodes) % num_clusters
    return clusters


def metis_clusters(graph: Graph, num_clusters: int, seed: int = 0) -> Tensor:
    """Node -> cluster id by METIS (pymetis) on the symmetrised graph without self loops.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> metis_clusters(tiny_graph(), 2).unique().numel()
        2
    """
    import pymetis  # lazy: only ClusterGCN set-up needs it

    if num_clusters < 1:
        raise ValueError(f"num_clusters: expected >= 1 (got {num_clusters})")
    if num_clusters == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.int64)
    sym = graph.to_undirected()
    src, dst = sym.indices.to(torch.int64), sym.dst_of_edges()
    keep = src != dst  # METIS rejects self loops
    sub = Graph.from_edge_index(torch.stack([src[keep], dst[keep]]), num_nodes=graph.num_nodes)
    xadj, adjncy = sub.indptr.numpy(), sub.indices.to(torch.int64).numpy()
    options = pymetis.Options(seed=seed)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2; the xadj keywords are deprecated there
        _, membership = pymetis.part_graph(num_clusters, pymetis.CSRAdjacency(xadj, adjncy), options=options)
    else:
        _, membership = pymetis.part_graph(num_clusters, xadj=xadj, adjncy=adjncy, options=options)
    return torch.as_tensor(membership, dtype=torch.int64)


class ClusterSampler(Sampler):
    """Induced subgraphs of batches of clusters, one block shared by every layer.

    Args:
        graph: the graph.
        clusters: int ``[num_nodes]`` node -> cluster id in ``[0, num_clusters)``.
        num_layers: how many layers the batch's ``blocks`` list has. Default 2.
        supervised: bool ``[num_nodes]``: the batch's seeds are its nodes in this mask (the last block
            keeps their rows only); None: every node of the batch. Default None.

    Raises:
        ValueError: on a clusters array of the wrong shape or with negative ids.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> s = ClusterSampler(tiny_graph(), torch.arange(10) % 2, num_layers=1)
        >>> s.num_clusters, s.sample(torch.tensor([0])).seed_nodes.tolist()
        (2, [0, 2, 4, 6, 8])
    """

    def __init__(self, graph: Graph, clusters: Any, num_layers: int = 2, supervised: Optional[Tensor] = None) -> None:
        clusters = torch.as_tensor(clusters).to(torch.int64).view(-1)
        if clusters.numel() != graph.num_nodes:
            raise ValueError(f"clusters: expected one id per node, {graph.num_nodes} (got {clusters.numel()})")
        if clusters.numel() and int(clusters.min()) < 0:
            raise ValueError(f"clusters: expected ids >= 0 (got {int(clusters.min())})")
        if num_layers < 1:
            raise ValueError(f"num_layers: expected >= 1 (got {num_layers})")
        if supervised is not None and supervised.numel() != graph.num_nodes:
            raise ValueError(f"supervised: expected one flag per node, {graph.num_nodes} (got {supervised.numel()})")
        self.graph = graph
        self.num_layers = num_layers
        self.supervised = supervised.to(torch.bool) if supervised is not None else None
        sizes = torch.bincount(clusters)
        self.cluster_ptr = counts_to_indptr(sizes)
        # Nodes grouped by cluster, ascending ids within a cluster (stable sort).
        self.cluster_nodes = torch.sort(clusters, stable=True).indices
        self._local = torch.full((graph.num_nodes,), -1, dtype=torch.int64)

    @property
    def num_clusters(self) -> int:
        return int(self.cluster_ptr.numel()) - 1

    def sample(self, seeds: Tensor) -> SampledBatch:
        """Induced subgraph of the clusters ``seeds`` (cluster ids, distinct)."""
        cluster_ids = torch.as_tensor(seeds, dtype=torch.int64).view(-1)
        if cluster_ids.numel() and (int(cluster_ids.min()) < 0 or int(cluster_ids.max()) >= self.num_clusters):
            raise ValueError(f"seeds: expected cluster ids in [0, {self.num_clusters}) (got {cluster_ids.tolist()[:8]})")
        starts = self.cluster_ptr.index_select(0, cluster_ids)
        counts = self.cluster_ptr.index_select(0, cluster_ids + 1) - starts
        nodes = self.cluster_nodes.index_select(0, ranges(starts, counts))
        if self.supervised is None:
            block = self._induced_block(nodes)
            return SampledBatch(blocks=[block] * self.num_layers, input_nodes=nodes, seed_nodes=nodes,
                                meta={"clusters": cluster_ids})
        mine = self.supervised.index_select(0, nodes)
        nodes = torch.cat([nodes[mine], nodes[~mine]])  # seeds first: a block's destinations lead its sources
        block = self._induced_block(nodes)
        seeds = int(mine.sum())
        last = Block(src=block.src[: int(block.indptr[seeds])], dst=block.dst[: int(block.indptr[seeds])],
                     num_src=block.num_src, num_dst=seeds, indptr=block.indptr[: seeds + 1])
        return SampledBatch(blocks=[block] * (self.num_layers - 1) + [last], input_nodes=nodes,
                            seed_nodes=nodes[:seeds], meta={"clusters": cluster_ids})

    def _induced_block(self, nodes: Tensor) -> Block:
        g, local, n = self.graph, self._local, nodes.numel()
        local.index_put_((nodes,), torch.arange(n))
        try:
            row_start = g.indptr.index_select(0, nodes)
            deg = g.indptr.index_select(0, nodes + 1) - row_start
            src_all = local.index_select(0, g.indices.index_select(0, ranges(row_start, deg)).to(torch.int64))
            dst_all = torch.repeat_interleave(torch.arange(n), deg)
            keep = src_all >= 0  # rows come in node order, so kept edges stay sorted by dst
            src, dst = src_all[keep], dst_all[keep]
        finally:
            local.index_fill_(0, nodes, -1)
        indptr = counts_to_indptr(torch.bincount(dst, minlength=n))
        return Block(src=src, dst=dst, num_src=n, num_dst=n, indptr=indptr)
