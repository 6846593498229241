"""RandomTMA: every node uniformly over parts, with exactly equal part sizes.

(This module is named ``random`` like the method; the package uses absolute imports only, so it
never shadows the standard library's ``random``.)
"""

from __future__ import annotations

import numpy as np

from graphdist.data.graph import Graph
from partition.methods import _check_parts

__all__ = ["random"]


def random(graph: Graph, num_parts: int, seed: int = 0) -> np.ndarray:
    """Every node uniformly over parts (RandomTMA), with exactly equal part sizes.

    A seeded permutation dealt round-robin: each node's part is uniform, and
    part sizes differ by at most one (independent draws would differ by ~sqrt(N/P)).

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> np.bincount(random(tiny_graph(), 2, seed=1)).tolist()
        [5, 5]
    """
    _check_parts(graph, num_parts)
    rng = np.random.default_rng(seed)
    return rng.permutation(graph.num_nodes).astype(np.int64) % num_parts
