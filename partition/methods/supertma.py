"""SuperTMA: METIS into many mini-clusters, the clusters shuffled into parts of equal node count.

Keeps most of each cluster's edges while giving every part a label mix close to the global one.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from graphdist.data.graph import Graph
from partition.csr import symmetric_csr
from partition.methods import _check_parts
from partition.methods.metis import run_metis

__all__ = ["super_clusters"]


def super_clusters(graph: Graph, num_parts: int, seed: int = 0, num_clusters: Optional[int] = None) -> np.ndarray:
    """SuperTMA: METIS into C mini-clusters, clusters shuffled into parts of equal node count.

    Args:
        graph: the graph.
        num_parts: number of parts.
        seed: seeds both METIS and the shuffle (default 0).
        num_clusters: C; default ``max(1000, 50 * num_parts)``, capped by the node count.

    Example:
        >>> from graphdist.testing import random_graph
        >>> parts = super_clusters(random_graph(400), 4, num_clusters=40)
        >>> np.bincount(parts).tolist()  # equal up to one cluster
        [101, 98, 100, 101]
    """
    _check_parts(graph, num_parts)
    n = graph.num_nodes
    c = num_clusters if num_clusters is not None else max(1000, 50 * num_parts)
    c = max(num_parts, min(int(c), n))
    xadj, adjncy = symmetric_csr(graph)
    # Recursive bisection: ~5x faster than k-way for ~1000 clusters (15.5 s -> 2.8 s on a
    # 200k-node graph) and the clusters' exact shape matters little once they are shuffled.
    clusters = run_metis(xadj, adjncy, c, seed, recursive=True)
    c = int(clusters.max()) + 1 if clusters.size else 0
    sizes = np.bincount(clusters, minlength=c)
    shuffled = np.random.default_rng(seed).permutation(c)
    # Deal shuffled clusters into consecutive slots of N/P nodes by each cluster's midpoint.
    ends = np.cumsum(sizes[shuffled])
    mids = ends - sizes[shuffled] / 2.0
    slot = np.minimum((mids * num_parts / max(n, 1)).astype(np.int64), num_parts - 1)
    part_of_cluster = np.empty(c, dtype=np.int64)
    part_of_cluster[shuffled] = slot
    return part_of_cluster[clusters]
