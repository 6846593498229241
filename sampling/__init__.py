"""Neighbourhood sampling over CSR: one ``sample(seeds) -> SampledBatch`` interface.

Holds the uniform neighbour, full-neighbour and cluster samplers, the distributed sampler
(same interface), the remote-feature fetch and cache, and the prefetching loader. All
vectorised torch (no Python loop over nodes), except that large hops run Floyd's draws and the
relabelling as compiled loops with the same results (``sampling.compiled``, numba).

Layers (each a small ABC, dataclasses between them):

- ``NeighborSource.sample_neighbors(nodes, fanout, replace, generator) -> (neighbors, counts)``:
  ``CSRNeighborSource`` locally, the distributed source via all-to-all to the owners.
- ``Sampler.sample(seeds) -> SampledBatch``: ``NeighborSampler`` (fan-outs from the seeds
  outward, ``-1`` = all), ``FullNeighborSampler``, ``ClusterSampler`` (seeds = cluster ids).
- ``FeatureSource.gather(nodes) -> Tensor``: ``LocalFeatureSource``; remote fetch + cache.
- ``NodeLoader``: batches of seeds -> ``SampledBatch`` with ``x``/``y``, prefetched in a thread.
- ``full_neighbor_inference(model, graph, x)``: every node's output, layer by layer, in chunks.

Example:
    >>> import torch
    >>> from graphdist.testing import random_graph
    >>> from sampling import NeighborSampler, NodeLoader
    >>> g = random_graph(200, seed=0)
    >>> loader = NodeLoader(g, g.train_mask, NeighborSampler(g, [10, 5], seed=0), batch_size=64, seed=0)
    >>> batch = next(iter(loader))
    >>> [b.size[1] for b in batch.blocks][-1], batch.x.shape[0] == batch.input_nodes.numel()
    (64, True)
"""

from sampling.base import Block, FeatureSource, LocalFeatureSource, NeighborSource, SampledBatch, Sampler
from sampling.cluster import ClusterSampler, metis_clusters, random_clusters
from sampling.full import FullNeighborSampler, LayerwiseModel, as_layerwise, full_neighbor_inference
from sampling.kernels import sample_csr
from sampling.loader import LoaderStats, NodeLoader
from sampling.neighbor import CSRNeighborSource, NeighborSampler, check_fanouts

__all__ = [
    "Block",
    "CSRNeighborSource",
    "ClusterSampler",
    "FeatureSource",
    "FullNeighborSampler",
    "LayerwiseModel",
    "LoaderStats",
    "LocalFeatureSource",
    "NeighborSampler",
    "NeighborSource",
    "NodeLoader",
    "SampledBatch",
    "Sampler",
    "as_layerwise",
    "check_fanouts",
    "full_neighbor_inference",
    "metis_clusters",
    "random_clusters",
    "sample_csr",
]
