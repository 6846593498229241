"""The data layer: the ``Graph`` CSR container, dataset loaders and synthetic generators.

Example:
    >>> from graphdist.data import Graph
    >>> Graph.from_edge_index([[0], [1]]).num_edges
    1
"""

from graphdist.data.graph import Graph, check_finite_features, edges_to_csr
from graphdist.data.synthetic import synthetic  # eager: the submodule shares the function's name

__all__ = ["Graph", "check_finite_features", "edges_to_csr", "load_graph", "synthetic"]


def __getattr__(name: str):
    # Loaders pull in more (gzip/csv parsing, torch_geometric): imported on first use
    # so `from graphdist.data import Graph` stays light.
    if name == "load_graph":
        from graphdist.data.loaders import load_graph

        return load_graph
    raise AttributeError(f"module 'graphdist.data' has no attribute {name!r}")
