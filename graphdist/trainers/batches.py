"""The distributed half of mini-batch training on one part: sampler, features, loader (``DistributedBatches``).

``MinibatchStrategy`` trains on it every step; ``AggregationStrategy`` uses it for its global
correction steps.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from graphdist import comm
from graphdist.trainers.base import WorkerContext
from graphdist.trainers.features import feature_table, replicated_feature_table
from graphdist.trainers.kit import loader_count, loader_seed, sampler_seed, use_prefetch
from graphdist.trainers.typed import relation_overrides


class DistributedBatches:
    """The distributed half of mini-batch training on one part: sampler, features, loader.

    Set-up (collective, the same order on every rank): a sampling group, the owner map, the
    neighbour source and sampler, the feature table and its remote-row cache, the train seeds
    and the loader at the plan's batch share. ``MinibatchStrategy`` trains on it every step;
    ``AggregationStrategy`` uses it for its global correction steps. ``replicate`` is
    ``--replicate`` and ``sampler`` ``--sampler`` (the minibatch strategy's; the correction steps
    replicate nothing and sample neighbourhoods: they correct toward the whole graph). Evaluation
    reads the distributed sources whatever the sampler. ``device``: the worker's, where the
    loader copies each batch ahead of its step (CUDA: on a side stream, ``sampling.staging``).
    """

    def __init__(self, ctx: WorkerContext, part: Any, with_degrees: bool, num_batches: Optional[int] = None,
                 stretch: Optional[Any] = None, task: Optional[Any] = None, replicate: str = "none",
                 sampler: str = "neighbor", device: Optional[torch.device] = None) -> None:
        from sampling import LocalFeatureSource, NeighborSampler, NodeLoader
        from sampling.distributed import DistFeatureSource, DistNeighborSource
        from sampling.owners import OwnerMap

        from graphdist.trainers.tasks import SingleLabel

        cfg = ctx.cfg
        task = task if task is not None else SingleLabel()
        self.ctx, self.partition = ctx, part
        # Sampling and feature fetch may run in the prefetch thread: their collectives get a
        # group of their own, so they never interleave with gradient sync on the default group.
        self.group = comm.new_group(cfg.timeout)
        self.owners = OwnerMap.from_parts(part.part_offsets, ctx.plan.rank_of_part, ctx.world_size)
        if replicate in ("structure", "graph"):
            from graphdist.data.graph import Graph
            from partition.api import load_structure
            from sampling.neighbor import CSRNeighborSource

            indptr, indices, edge_type = load_structure(ctx.partitions, with_types=True)
            self.neighbor_source = CSRNeighborSource(Graph(indptr=indptr, indices=indices, edge_type=edge_type,
                                                           schema=part.schema))
        else:
            self.neighbor_source = DistNeighborSource(part, group=self.group, seed=cfg.seed, owners=self.owners)
        self.sampler = NeighborSampler(self.neighbor_source, cfg.fanouts, seed=sampler_seed(cfg.seed, ctx.rank),
                                       relation_fanouts=relation_overrides(cfg))
        plain_sampler = self.sampler
        if stretch is not None:  # GRAPHDIST_TEST_SLOWDOWN: this rank emulates a slower worker
            self.sampler = stretch.wrap_sampler(self.sampler)
        # The task decides what a batch is: train nodes, or (link prediction) supervision edges.
        self.train_seeds = task.train_items(ctx, part)
        table = feature_table(part, cfg.feature_norm, with_degrees)
        self.features = DistFeatureSource(part, group=self.group, cache_rows=cfg.cache_rows, features=table,
                                          owners=self.owners, inclusion=self._inclusion(ctx, part, task))
        # Training gathers from every part's rows when the whole graph is replicated: no fetch,
        # no collective per batch. Evaluation keeps the partitioned source.
        loader_features = self.features
        if replicate == "graph":
            loader_features = LocalFeatureSource(replicated_feature_table(ctx.partitions, cfg.feature_norm,
                                                                          with_degrees, part, table))
        self.labels = task.train_labels(part)
        if sampler == "cluster":  # ClusterGCN batches of this part alone (trainers/samplers.py)
            from graphdist.trainers.samplers import cluster_loader, local_graph

            self.loader = cluster_loader(local_graph(part, cfg.feature_norm, with_degrees),
                                         ctx.plan.steps_per_epoch if num_batches is None else num_batches, cfg.layers,
                                         seed=loader_seed(cfg.seed, ctx.rank),
                                         prefetch=use_prefetch(cfg.prefetch, torch.get_num_threads(), remote=False),
                                         device=device, loaders=self._loaders(cfg.loaders if num_batches is None else 0,
                                                                              device, local=True)["loaders"])
            return
        local = ctx.world_size == 1 or replicate == "graph"  # nothing to exchange: loader processes can fork
        table_bytes = int(ctx.partitions.meta["num_nodes"]) * int(table.shape[1]) * table.element_size()
        on_device = num_batches is None and self._samples_on_device(ctx, device, replicate, task)
        if on_device:  # the CSR on the device; the features and labels too where they fit (device_sampling.py)
            from graphdist.trainers.device_sampling import device_sources

            device_sampler, loader_features, self.labels = device_sources(
                ctx, part, table, device, replicate, (loader_features, self.labels), table_bytes, with_degrees)
            # what training and the start-up probes sample with (stretched on a test-slowed rank, as on the CPU path)
            self.sampler = stretch.wrap_sampler(device_sampler) if stretch is not None else device_sampler
        loading = self._loaders(0 if on_device or num_batches is not None else cfg.loaders, device, local)
        # Loader processes sample the plain sampler: an emulated slow rank's stretch lives in this process (its
        # compute stays stretched; its probes, which sample here, too).
        sampler = plain_sampler if loading["loaders"] else self.sampler
        self.loader = NodeLoader(
            loader_features, self.train_seeds, task.train_sampler(sampler, ctx, sampler_seed(cfg.seed, ctx.rank) + 7),
            batch_size=ctx.plan.of(ctx.rank).batch_share,
            shuffle=True, labels=self.labels,
            num_batches=ctx.plan.steps_per_epoch if num_batches is None else num_batches,
            prefetch=use_prefetch(cfg.prefetch, torch.get_num_threads(), remote=not local),
            seed=loader_seed(cfg.seed, ctx.rank), device=device,
            reuse_buffers=loader_features.device.type == "cpu",  # rows on the device: gathered there
            name=f"worker {ctx.rank}", timeout_s=cfg.timeout, **loading,
        )

    def _samples_on_device(self, ctx: WorkerContext, device: Optional[torch.device], replicate: str, task: Any) -> bool:
        """``--sample-on`` for this rank (``trainers/device_sampling.py``; collective with 2+ workers)."""
        from graphdist.trainers.device_sampling import sample_on_for

        cfg, meta = ctx.cfg, ctx.partitions.meta
        unable = ("2+ workers sample across parts (without --replicate structure or graph)"
                  if ctx.world_size > 1 and replicate == "none" else
                  "link prediction's batches are edges" if task.items != "seeds" else
                  "--loaders feeds batches from the CPU" if cfg.loaders else
                  "typed graphs sample on the CPU" if "schema" in meta else None)
        csr = 8 * (int(meta["num_nodes"]) + 1 + int(meta["num_edges"]))
        return sample_on_for(ctx, device or torch.device("cpu"), unable, csr) == "device"

    def _loaders(self, setting: Optional[int], device: Optional[torch.device], local: bool) -> dict[str, Any]:
        """The loader's ``loaders`` (``--loaders``, ``kit.loader_count``) and ``loader_join`` keywords.

        Local sources: this worker's own count, loaders forked. Sampled across parts (collective): loader k of
        every worker forms one sampling group (``comm.loader_groups``), so every worker runs the largest count any
        asked for, and the loaders are spawned into their groups.
        """
        import functools

        count = loader_count(setting, device or torch.device("cpu"), torch.get_num_threads(), self.ctx.world_size)
        if local:
            return {"loaders": count}
        if setting is None and any(not d.startswith("cpu") for d in self.ctx.cfg.devices):
            # auto on unlike devices (a CPU worker's 0, a GPU worker's share): agree on the largest
            count = int(comm.all_reduce(torch.tensor([float(count)]), op="max").item())
        if count == 0:
            return {"loaders": 0}
        groups = comm.loader_rendezvous(self.ctx.cfg.timeout)
        return {"loaders": count, "loader_join": functools.partial(comm.join_loader_group, groups, rank=self.ctx.rank)}

    def _inclusion(self, ctx: WorkerContext, part: Any, task: Any) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """How likely one of this rank's batches reads each node (``sampling.inclusion``, collective), which
        the feature cache is chosen by; None where there is nothing to cache or batches are not seeds."""
        from sampling.inclusion import inclusion_probability

        cfg = ctx.cfg
        if cfg.cache_rows == 0 or ctx.world_size == 1 or task.items != "seeds":
            return None
        return inclusion_probability(part, self.train_seeds, ctx.plan.of(ctx.rank).batch_share, cfg.fanouts,
                                     owners=self.owners, group=self.group)

    def state_dict(self) -> dict[str, Any]:
        # The loader's state holds its shuffle generator and its sampler's; the neighbour
        # source's serving generator answers other ranks' requests.
        # With one loader process both streams are the loader's.
        loader = self.loader.state_dict()
        serve = loader.pop("source", None)
        return {"loader": loader, "serve": serve if serve is not None else self.neighbor_source.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict({**state["loader"], "source": state["serve"]})
        self.neighbor_source.set_state(state["serve"])


__all__ = ["DistributedBatches"]
