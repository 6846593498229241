"""Partition methods: pure functions ``Graph -> node_to_part`` (int64 numpy ``[num_nodes]``).

=========  ==================================================  =====================
method     idea                                                edges kept / labels
=========  ==================================================  =====================
metis      pymetis k-way on the symmetrised graph, balance on  most edges; parts are
           (nodes, train nodes, edges), then a train-balance    label-skewed
           refinement pass (METIS's multi-constraint is weak)
super      METIS into C >> parts mini-clusters, clusters       between the two
           shuffled into parts of equal node count (SuperTMA)
stream     one pass of LDG (or Fennel) over the nodes in a     between metis and
           seeded order, in vectorised blocks                  random; low memory
random     a seeded permutation dealt round-robin (RandomTMA)  ~1/parts of edges;
                                                               global label mix
=========  ==================================================  =====================

Each method is one module here (``metis`` and its ``refine`` pass, ``supertma``, ``stream``,
``random``); this package holds only the registry. ``METHODS`` is the one list of method names
(the CLI's ``--method`` choices come from it). ``PARTITIONERS`` maps each name to its function
and imports the method modules on first use, so reading ``METHODS`` imports neither torch nor
pymetis (pymetis loads only when METIS runs).

Example:
    >>> from graphdist.testing import tiny_graph
    >>> from partition.methods import PARTITIONERS
    >>> parts = PARTITIONERS["random"](tiny_graph(), 2, seed=0)
    >>> np.bincount(parts).tolist()
    [5, 5]
    >>> METHODS
    ('metis', 'random', 'super', 'stream')
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # at run time Graph would import torch, which reading METHODS must not
    from graphdist.data.graph import Graph

__all__ = ["METHODS", "PARTITIONERS", "Partitioner"]

Partitioner = Callable[..., np.ndarray]

# method name -> (module, function); the one declaration of the method names. Nothing here binds
# the name ``random``, so ``partition.methods.random`` stays the module, not its function.
_FUNCTIONS = {
    "metis": ("partition.methods.metis", "metis"),
    "random": ("partition.methods.random", "random"),
    "super": ("partition.methods.supertma", "super_clusters"),
    "stream": ("partition.methods.stream", "stream"),
}
METHODS = tuple(_FUNCTIONS)
PARTITIONERS: dict[str, Partitioner]  # built by __getattr__ on first use


def _check_parts(graph: Graph, num_parts: int) -> None:
    if not isinstance(num_parts, (int, np.integer)) or num_parts < 1:
        raise ValueError(f"num_parts: expected an integer >= 1 (got {num_parts!r})")
    if num_parts > graph.num_nodes:
        raise ValueError(
            f"num_parts: expected at most the number of nodes, {graph.num_nodes:,} (got {num_parts:,})"
        )


def __getattr__(name: str) -> Any:
    if name != "PARTITIONERS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = {method: getattr(importlib.import_module(module), function)
             for method, (module, function) in _FUNCTIONS.items()}
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + ["PARTITIONERS"])
