"""Cluster sampling (ClusterGCN): batches cover the clusters, blocks are the induced subgraphs."""

from __future__ import annotations

import pytest
import torch

from graphdist.testing import random_graph, tiny_graph, tiny_partition
from sampling import ClusterSampler, NodeLoader, metis_clusters, random_clusters


def test_loader_over_clusters_covers_every_node_once():
    g = random_graph(300, seed=4)
    clusters = random_clusters(g.num_nodes, 10, seed=0)
    sampler = ClusterSampler(g, clusters, num_layers=3)
    loader = NodeLoader(g, torch.arange(sampler.num_clusters), sampler, batch_size=3, seed=0)
    seen = []
    for batch in loader:
        cids = batch.meta["clusters"]
        assert bool(torch.isin(clusters[batch.seed_nodes], cids).all())
        assert torch.equal(torch.bincount(clusters[batch.seed_nodes], minlength=10)[cids],
                           torch.bincount(clusters, minlength=10)[cids])  # whole clusters
        assert len(batch.blocks) == 3 and all(b is batch.blocks[0] for b in batch.blocks)
        assert torch.equal(batch.y, g.y[batch.seed_nodes])
        assert torch.equal(batch.x[:, 0].long(), batch.input_nodes)
        seen.append(batch.seed_nodes)
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(g.num_nodes))


def test_block_is_the_induced_subgraph():
    g = random_graph(120, seed=5)
    clusters = random_clusters(g.num_nodes, 6, seed=1)
    batch = ClusterSampler(g, clusters, num_layers=1).sample(torch.tensor([4, 1]))
    sub, ids = g.subgraph(batch.seed_nodes)
    block = batch.blocks[0]
    assert torch.equal(ids, batch.input_nodes)
    assert block.num_src == block.num_dst == ids.numel()
    want = sorted(zip(sub.edge_index()[0].tolist(), sub.edge_index()[1].tolist()))
    got = sorted(zip(block.src.tolist(), block.dst.tolist()))
    assert got == want and block.num_edges > 0
    assert bool((block.dst[1:] >= block.dst[:-1]).all())
    assert torch.equal(block.in_degrees(), torch.bincount(block.dst, minlength=block.num_dst))


def test_cross_cluster_edges_are_dropped():
    g = tiny_graph()
    batch = ClusterSampler(g, tiny_partition(), num_layers=1).sample(torch.tensor([0]))
    assert batch.seed_nodes.tolist() == [0, 1, 2, 3, 4]
    assert batch.blocks[0].num_edges == 10  # the ring's 10 directed edges; 0-9 and 4-5 cut


def test_metis_clusters_and_validation():
    g = random_graph(200, seed=6)
    clusters = metis_clusters(g, 4)
    assert clusters.shape == (200,) and set(clusters.tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="clusters"):
        ClusterSampler(g, clusters[:10])
    with pytest.raises(ValueError, match="cluster ids"):
        ClusterSampler(g, clusters).sample(torch.tensor([9]))
