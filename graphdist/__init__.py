"""graphdist: distributed GNN training on partitioned graphs.

The public API is imported lazily, so that ``partition`` importing
``graphdist.data`` creates no import cycle and spawned workers start fast.

Example:
    >>> import graphdist as gd
    >>> g = gd.synthetic(1000, avg_degree=8, num_features=16, num_classes=4, seed=0)
    >>> g.num_nodes
    1000
"""

from __future__ import annotations

from graphdist._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "Graph": "graphdist.data",
    "load_graph": "graphdist.data",
    "synthetic": "graphdist.data",
    "partition": "partition.api",
    "load_partition": "partition.api",
    "train": "graphdist.api",
    "Trainer": "graphdist.api",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
