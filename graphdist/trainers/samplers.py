"""``--sampler``: how a worker's training batches are drawn, by name.

``neighbor`` (the default) samples each seed's neighbourhood with ``--fanouts``, across parts;
``cluster`` is ClusterGCN: the worker's part is split once into clusters (METIS on the part's
own subgraph, ``sampling.cluster.metis_clusters``) and each step trains on the subgraph induced
by ``CLUSTERS_PER_BATCH`` random clusters, every layer on the same edges, the loss on the batch's
train nodes. Edges between clusters, and to other parts, are left out while training: that is
ClusterGCN's approximation, which several clusters per batch reduce; evaluation stays exact.
A cluster batch reads nothing remote, so its steps exchange only gradients.

Both strategies that sample (``minibatch``, ``aggregation``) build their training loader with
:func:`training_loader`; the names are declared in ``graphdist.options.SAMPLERS``.

Example (one part, two steps an epoch, batches of clusters whose seeds are train nodes):
    >>> import tempfile
    >>> from graphdist.testing import tiny_graph
    >>> from partition.api import load_partition, partition
    >>> part = load_partition(partition(tiny_graph(), 1, method="random", out=tempfile.mkdtemp() + "/p"), 0)
    >>> graph = local_graph(part, "none", with_degrees=False)
    >>> loader = cluster_loader(graph, steps=2, num_layers=2, seed=0, prefetch=False)
    >>> len(loader), sorted(int(n) for b in loader for n in b.seed_nodes) == graph.train_mask.nonzero().view(-1).tolist()
    (2, True)
"""

from __future__ import annotations

from typing import Any

import torch

from graphdist.trainers.features import feature_table

# Clusters a step trains on. ClusterGCN draws several per batch so that the edges between them
# are kept and a batch's labels mix; with steps x 4 clusters a batch holds about the batch
# share's train nodes, as a neighbour-sampled step does (its steps per epoch come from the plan).
CLUSTERS_PER_BATCH = 4

__all__ = ["CLUSTERS_PER_BATCH", "cluster_loader", "induced_graph", "local_graph", "training_loader"]


def induced_graph(part: Any, table: torch.Tensor) -> Any:
    """The part's inner nodes alone as a ``Graph`` (local ids), with features, labels and masks.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import load_partition, partition
        >>> part = load_partition(partition(tiny_graph(), 2, method="random", out=tempfile.mkdtemp() + "/p"), 0)
        >>> g = induced_graph(part, part.x)
        >>> g.num_nodes == part.num_inner, g.num_edges < int(part.indptr[part.num_inner])
        (True, True)
    """
    from graphdist.data.graph import Graph

    indptr, indices = part.inner_csr()
    masks = {name: getattr(part, name).to(torch.bool) for name in ("train_mask", "val_mask", "test_mask")
             if getattr(part, name) is not None}
    y = (part.y if part.y.dim() == 2 else part.y.to(torch.int64)) if part.y is not None else None
    return Graph(indptr=indptr, indices=indices, x=table, y=y, name=part.name.replace(" ", "-"), validate_features=False,
                 **masks)


def local_graph(part: Any, feature_norm: str, with_degrees: bool) -> Any:
    """What a worker trains on without its peers: the part's induced subgraph (:func:`induced_graph`)
    with its feature table, and, for a model that reads degrees (GCN), the subgraph's own degrees
    as the table's last column (training sees only these edges)."""
    table = feature_table(part, feature_norm, with_degrees=False)
    graph = induced_graph(part, table)
    if with_degrees:
        degrees = graph.degrees(self_loops=False).to(table.dtype).view(-1, 1)
        graph.x = torch.cat([table, degrees], dim=1)
    return graph


def cluster_loader(graph: Any, steps: int, num_layers: int, seed: int, prefetch: bool, device: Any = None,
                   loaders: int = 0) -> Any:
    """A ClusterGCN loader over ``graph`` (a worker's :func:`local_graph`): ``steps`` batches an epoch,
    each the induced subgraph of ``CLUSTERS_PER_BATCH`` clusters, seeds its train nodes.

    Deterministic: the clusters (METIS, seeded) and the loader's order follow ``seed``. ``device``: where the
    loader copies each batch ahead of its step; ``loaders``: its loader processes (``--loaders``).
    """
    from sampling import NodeLoader
    from sampling.cluster import ClusterSampler, metis_clusters

    n = graph.num_nodes
    count = max(1, min(n, steps * CLUSTERS_PER_BATCH))
    clusters = metis_clusters(graph, count, seed=seed) if n else torch.zeros(0, dtype=torch.int64)
    train = graph.train_mask if graph.train_mask is not None else torch.ones(n, dtype=torch.bool)
    sampler = ClusterSampler(graph, clusters, num_layers=num_layers, supervised=train)
    ids = torch.arange(sampler.num_clusters)
    return NodeLoader(graph, ids, sampler, batch_size=max(1, -(-sampler.num_clusters // steps)), shuffle=True,
                      num_batches=steps, prefetch=prefetch, seed=seed, device=device, loaders=loaders)


def training_loader(name: str, graph: Any, train: torch.Tensor, steps: int, batch_share: int, cfg: Any,
                    seed: int, prefetch: bool, sampler_seed: int, device: Any = None, loaders: int = 0) -> Any:
    """The loader ``--sampler name`` trains a worker's local ``graph`` with (``aggregation``'s local steps).

    ``neighbor``: batches of ``batch_share`` of the ``train`` nodes, neighbourhoods sampled with
    ``cfg.fanouts``; ``cluster``: :func:`cluster_loader`. ``device``: where batches are copied ahead of their step;
    ``loaders``: the loader processes that sample them (``--loaders``).
    """
    from sampling import NeighborSampler, NodeLoader

    if name == "cluster":
        return cluster_loader(graph, steps, cfg.layers, seed, prefetch, device, loaders)
    return NodeLoader(graph, train, NeighborSampler(graph, cfg.fanouts, seed=sampler_seed), batch_size=batch_share,
                      num_batches=steps, prefetch=prefetch, seed=seed, device=device, loaders=loaders,
                      timeout_s=cfg.timeout)
