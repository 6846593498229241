"""Tiny graphs whose features double as node ids (``x[v] == v``)."""

from __future__ import annotations

import torch

from graphdist.data.graph import Graph

# Two 5-node rings (0-4, 5-9) joined by the edges 4-5 and 0-9, undirected.
_TINY_EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (5, 6), (6, 7), (7, 8), (8, 9), (9, 5), (4, 5), (0, 9)]


def _id_features(num_nodes: int, dim: int = 1) -> torch.Tensor:
    return torch.arange(num_nodes, dtype=torch.float32).view(-1, 1).repeat(1, dim)


def tiny_graph(feature_dim: int = 1) -> Graph:
    """10 nodes in two rings of 5 joined by 2 edges; ``x[v] = v``, ``y = v // 5``.

    Train nodes are the even ids, val the odd ids below 5, test the odd ids from 5.

    Example:
        >>> g = tiny_graph()
        >>> g.num_nodes, g.num_edges
        (10, 24)
    """
    pairs = torch.tensor(_TINY_EDGES, dtype=torch.int64).t()
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    ids = torch.arange(10)
    return Graph.from_edge_index(
        edge_index,
        num_nodes=10,
        x=_id_features(10, feature_dim),
        y=ids // 5,
        train_mask=ids % 2 == 0,
        val_mask=(ids % 2 == 1) & (ids < 5),
        test_mask=(ids % 2 == 1) & (ids >= 5),
        name="tiny",
    )


def tiny_partition() -> torch.Tensor:
    """The known 2-part split of ``tiny_graph``: each ring is a part (edge cut 4 of 24)."""
    return (torch.arange(10) >= 5).to(torch.int64)


def random_graph(
    num_nodes: int = 100, avg_degree: float = 4.0, num_classes: int = 3, seed: int = 0, feature_dim: int = 1
) -> Graph:
    """An undirected Erdos-Renyi-like graph with ``x[v] = v`` and random labels and masks.

    Example:
        >>> random_graph(50, seed=1).num_nodes
        50
    """
    gen = torch.Generator().manual_seed(seed)
    num_pairs = int(num_nodes * avg_degree / 2)
    src = torch.randint(0, num_nodes, (num_pairs,), generator=gen)
    dst = torch.randint(0, num_nodes, (num_pairs,), generator=gen)
    keep = src != dst
    edge_index = torch.stack([src[keep], dst[keep]])
    split = torch.rand(num_nodes, generator=gen)
    graph = Graph.from_edge_index(
        edge_index,
        num_nodes=num_nodes,
        x=_id_features(num_nodes, feature_dim),
        y=torch.randint(0, num_classes, (num_nodes,), generator=gen),
        train_mask=split < 0.6,
        val_mask=(split >= 0.6) & (split < 0.8),
        test_mask=split >= 0.8,
        name=f"random-{num_nodes}",
    )
    return graph.to_undirected()
