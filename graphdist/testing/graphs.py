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


def typed_random_graph(num_papers: int = 40, seed: int = 0, num_classes: int = 3) -> Graph:
    """A small typed graph for tests: papers (4 features, labelled), authors (2 features), and featureless
    terms; relations cites, writes/written_by and has/in, with every type receiving messages.

    Example:
        >>> g = typed_random_graph(20)
        >>> g.schema.node_types, g.schema.widths, g.schema.num_relations
        (('paper', 'author', 'term'), (4, 2, 0), 5)
    """
    from graphdist.data.hetero import typed_graph

    gen = torch.Generator().manual_seed(seed)
    n_p, n_a, n_t = num_papers, max(2, num_papers // 2), max(2, num_papers // 4)

    def pairs(n_src: int, n_dst: int, count: int) -> torch.Tensor:
        return torch.stack([torch.randint(0, n_src, (count,), generator=gen), torch.randint(0, n_dst, (count,), generator=gen)])

    writes, has = pairs(n_a, n_p, 2 * n_p), pairs(n_t, n_p, 3 * n_p)
    edges = {("paper", "cites", "paper"): pairs(n_p, n_p, 3 * n_p), ("author", "writes", "paper"): writes,
             ("paper", "written_by", "author"): writes.flip(0), ("term", "in", "paper"): has,
             ("paper", "has", "term"): has.flip(0)}
    y = torch.randint(0, num_classes, (n_p,), generator=gen)
    split = torch.randperm(n_p, generator=gen)
    masks = {name: torch.zeros(n_p, dtype=torch.bool).index_fill_(0, split[i::3], True)
             for i, name in enumerate(("train_mask", "val_mask", "test_mask"))}
    x = {"paper": torch.randn(n_p, 4, generator=gen), "author": torch.randn(n_a, 2, generator=gen)}
    return typed_graph({"paper": n_p, "author": n_a, "term": n_t}, edges, x=x, y=y, masks=masks, target="paper",
                       name=f"typed-random-{num_papers}")
