"""Test helpers: tiny graphs and ``launch(fn, world_size=2)`` on gloo.

Example:
    >>> from graphdist.testing import tiny_graph
    >>> tiny_graph().num_nodes
    10
"""

from graphdist.testing.graphs import random_graph, tiny_graph, tiny_partition, typed_random_graph
from graphdist.testing.env import require
from graphdist.testing.launch import WorkerFailed, WorkerTimeout, launch, one_rank_group

__all__ = ["WorkerFailed", "WorkerTimeout", "launch", "one_rank_group", "require", "random_graph", "tiny_graph", "tiny_partition",
           "typed_random_graph"]
