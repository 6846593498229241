"""Distributed sampling: the same ``NeighborSource`` / ``FeatureSource`` interfaces over partitions.

Each worker holds one partition (its inner nodes' in-neighbour rows and feature
rows). Per hop, ``DistNeighborSource`` sends the frontier nodes owned by other
workers to their owners (an ``OwnerMap``: node range -> rank, from the placement plan)
in one variable-size all-to-all, the owners sample them
from their own rows and answer in a second one. ``NeighborSampler`` is used
unchanged on top of it, so relabelling and block building are shared with the
local sampler.

``DistFeatureSource`` serves feature rows the same way, through a cache of the
hottest remote nodes (``sampling/dist_features.py``; re-exported here).

Every rank must make the same sequence of calls (each hop and each gather is a
collective): the loader runs the same number of batches on every worker, and a
worker with no seeds left still joins with an empty request. Calls from a
prefetch thread must use a process group of their own (``group=``), never the
one gradient sync uses.

Example (one worker, a real one-rank group; with more, each rank builds the same on its part):
    >>> import tempfile
    >>> from graphdist.testing import one_rank_group, random_graph
    >>> from partition.api import load_partition, partition
    >>> from sampling import NeighborSampler, NodeLoader
    >>> part = load_partition(partition(random_graph(50, seed=0), 1, method="random",
    ...                                 out=tempfile.mkdtemp() + "/p"), 0)
    >>> with one_rank_group():
    ...     sampler = NeighborSampler(DistNeighborSource(part), [5, 5], seed=0)
    ...     features = DistFeatureSource(part, cache_rows=-1)
    ...     loader = NodeLoader(features, torch.arange(50), sampler, batch_size=20, prefetch=False)
    ...     sizes = [b.x.shape[0] == b.input_nodes.numel() for b in loader]
    >>> sizes
    [True, True, True]
"""

from __future__ import annotations

from typing import Generator, Optional

import torch
from torch import Tensor

from graphdist import comm
from graphdist.data.graph import ranges
from graphdist.data.schema import relation_offsets
from graphdist.data.npy import release, stays_mapped
from partition.format import Partition
import sampling.compiled as compiled
from sampling.base import NeighborSource, run_steps
from sampling.dist_features import CacheStats, DistFeatureSource, PendingRows, fetch_rows, fetch_rows_async
from sampling.kernels import sample_csr, sample_csr_padded, unpad
from sampling.owners import OwnerMap
from sampling.typed import (Fanout, layer_fanouts, padded_relation_counts, sample_relations, sample_relations_padded)

__all__ = ["CacheStats", "DistFeatureSource", "DistNeighborSource", "PendingRows", "fetch_rows", "fetch_rows_async",
           "serving_seed"]


class DistNeighborSource(NeighborSource):
    """Samples neighbours of any global node; remote ones by their owner, in one all-to-all per hop.

    Args:
        partition: this worker's ``Partition`` (the rows it serves).
        group: process group for the collectives (a prefetch thread needs its own).
        seed: seeds the generator that serves other workers' requests (checkpointed).
        owners: which rank serves each node (default: part ``p`` on rank ``p``).

    Example:
        >>> import tempfile
        >>> from graphdist.testing import one_rank_group, tiny_graph
        >>> from partition.api import load_partition, partition
        >>> from sampling import NeighborSampler
        >>> part = load_partition(partition(tiny_graph(), 1, method="random", out=tempfile.mkdtemp() + "/p"), 0)
        >>> with one_rank_group():
        ...     src = DistNeighborSource(part)
        ...     batch = NeighborSampler(src, [2], seed=0).sample(torch.tensor([0, 1]))
        >>> batch.seed_nodes.tolist(), batch.blocks[0].num_dst
        ([0, 1], 2)
    """

    def __init__(self, partition: Partition, group: object = None, seed: int = 0,
                 owners: Optional[OwnerMap] = None) -> None:
        self.partition = partition
        self.group = group
        self.owners = owners if owners is not None else OwnerMap.from_parts(partition.part_offsets)
        self.num_ranks = self.owners.world_size
        # Rows are inner nodes in global-id order; columns mapped to global ids once, here,
        # so answers need no translation per request. A large memory-mapped CSR is not copied
        # (the copy would be 8 bytes per edge of private memory): its local columns are sampled
        # and only the sampled ones translated.
        self.indptr = partition.indptr[: partition.num_inner + 1]
        inner_indices = partition.indices[: int(self.indptr[-1])]
        # Sampled ids are gathered, sent and reordered as int32 while the graph allows: a hop's
        # padded tables are its largest arrays, and two processes with six batches in flight
        # each overflow the shared L3 (half the bytes: +2% edges/s for this alone, alternating A/B of sample_stream).
        self.id_dtype = torch.int32 if self.owners.num_nodes < 2**31 else torch.int64
        self.translate = stays_mapped(inner_indices, copy_bytes=inner_indices.numel() * 8)
        self.indices = (inner_indices if self.translate
                        else partition.global_indices(inner_only=True).to(self.id_dtype))
        if not self.translate:
            release(inner_indices, unwritten=True)  # copied: the file's pages need not stay resident
        self.serve_generator = torch.Generator().manual_seed(serving_seed(seed, partition.part_id))
        # With other workers each hop pauses while its exchanges travel, so
        # ``NeighborSampler.sample_stream`` interleaves batches; alone there is nothing to wait for.
        self.pipelined = self.num_ranks > 1
        own = [a for a, b in partition.inner_ranges if b > a]
        self._sole_peer = self.owners.sole_peer(int(self.owners.rank_of(torch.tensor(own[:1]))[0])) if own else None
        self.remote_requests = 0
        self.local_requests = 0
        # A typed graph: each inner row's edges of relation r are the virtual row `row * R + r`
        # (sampling.typed); a hop's padded answers carry sum(f_r) slots, each slot's relation known by
        # its position, so no relation ids travel.
        self.schema = partition.schema
        if self.schema is not None:
            if partition.edge_type is None:
                raise ValueError(f"{partition.name}: a typed partition without edge_type.npy (rewrite it with --force)")
            self.rel_indptr = relation_offsets(self.indptr, partition.edge_type, self.schema.num_relations)

    @property
    def num_nodes(self) -> int:
        return self.owners.num_nodes

    def __getstate__(self) -> dict:
        # A loader process (sampling.loader_procs) gets this source pickled and samples on its own group.
        return {**self.__dict__, "group": None}

    def get_state(self) -> Tensor:
        return self.serve_generator.get_state()

    def set_state(self, state: Optional[Tensor]) -> None:
        if state is not None:
            self.serve_generator.set_state(state)

    def sample_neighbors(
        self, nodes: Tensor, fanout: Fanout, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> tuple[Tensor, Tensor]:
        return run_steps(self.sample_neighbors_stepwise(nodes, fanout, replace, generator))

    def sample_neighbors_stepwise(
        self, nodes: Tensor, fanout: Fanout, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> Generator[None, None, tuple[Tensor, Tensor]]:
        """``sample_neighbors``, pausing three times (every rank alike) while the exchanges travel."""
        nodes = nodes.to(torch.int64)
        if self.schema is not None:
            fanout = layer_fanouts(fanout, self.schema.num_relations)
        width = _width(fanout)  # a padded answer's slots; -1: variable (every neighbour)
        # One decision per hop for its compiled loops (the split here, the merge below).
        compiled_hop = compiled.enabled(nodes.numel() * max(width, 1))
        own_idx, own, remote_idx, remote = self._split(nodes, compiled_hop)
        self.local_requests += int(own.numel())
        self.remote_requests += int(remote_idx.numel())
        if self.num_ranks == 1:  # one worker: nothing to exchange, already in order
            return self._sample(own, fanout, replace, generator)
        # Own nodes never enter the exchange; they are sampled with the caller's generator
        # (so one worker's seeded sampling is reproducible) while other ranks' requests use
        # the serving generator. Only the remote minority is sorted by owner.
        if self._sole_peer is not None:  # one other owner (two workers): no lookup, no reorder
            requests = [torch.empty(0, dtype=self.id_dtype)] * self.num_ranks
            requests[self._sole_peer] = remote.to(self.id_dtype)
        else:
            requests, remote_order = self.owners.split(remote)
            requests = [r.to(self.id_dtype) for r in requests]
            remote_idx = remote_idx.index_select(0, remote_order)
        sizes = comm.all_to_all_counts_async([r.numel() for r in requests], group=self.group, tag="sample")
        yield  # 1: the request sizes travel
        asked_rows = sizes.wait()
        if int(sizes.matrix.sum()) == 0:
            # Nobody asks anybody (the seeds' hop, own nodes everywhere): every rank sees the same
            # count matrix, so all skip the two exchanges alike; own rows only, as a local sampler.
            yield  # 2
            yield  # 3
            return self._sample(own, fanout, replace, generator)
        pending = comm.all_to_all_v_async(requests, group=self.group, tag="sample", recv_rows=asked_rows)
        # Own nodes are sampled while the requests travel. A fixed fan-out answers in rows of
        # `fanout` slots padded with -1: rows move and reorder whole (no per-edge offsets), the
        # reply needs no size exchange, and one compaction at the end gives the edges.
        padded = width >= 0 and remote_idx.numel() > 0
        # A large hop's own rows stay compact: the compiled loop merges them with the padded
        # answers in one pass (``compiled.merge_rows``), where torch writes both into one table
        # and compacts it (same draws, same result). Typed rows keep the table: its slots say the relation.
        merged = padded and compiled_hop and self.schema is None
        mine = (self._sample_padded(own, fanout, replace, generator) if padded and not merged
                else self._sample(own, fanout, replace, generator))  # all own here: compact, in order
        yield  # 2: the requests travel
        asked = pending.wait()
        if width >= 0:
            replies = [self._serve_padded(ids, fanout, replace) for ids in asked]
            answering = comm.all_to_all_v_async(
                replies, group=self.group, tag="sample", recv_rows=[r.numel() for r in requests]
            )
        else:  # every neighbour (of some relation): variable-size answers [counts..., neighbours...]
            replies = [self._answer_all(ids, fanout) for ids in asked]
            answering = comm.all_to_all_v_async(replies, group=self.group, tag="sample")
        yield  # 3: the answers travel
        answers = answering.wait()
        if not remote_idx.numel():
            return mine  # type: ignore[return-value]
        if merged:
            joined = comm.joined_rows(answers)  # the receive buffer itself: no copy
            rows = (joined if joined is not None else torch.cat(answers)).view(-1, width)
            return compiled.merge_rows(nodes.numel(), own_idx, mine, remote_idx, rows)  # type: ignore[arg-type]
        if padded:
            table = torch.empty((nodes.numel(), width), dtype=self.id_dtype)
            table.index_copy_(0, own_idx, mine)  # type: ignore[arg-type]
            joined = comm.joined_rows(answers)  # the receive buffer itself: no copy
            table.index_copy_(0, remote_idx, (joined if joined is not None else torch.cat(answers)).view(-1, width))
            if self.schema is None:
                return unpad(table)
            return unpad(table)[0], padded_relation_counts(table, fanout)  # type: ignore[arg-type]
        head = self.schema.num_relations if self.schema is not None else 1  # counts per node in an answer
        parts = [mine] + [(a[r.numel() * head:], a[: r.numel() * head].view(-1, head) if head > 1 else a[: r.numel()])
                          for a, r in zip(answers, requests)]
        return _reassemble(parts, torch.cat([own_idx, remote_idx]))  # type: ignore[list-item]

    def _split(self, nodes: Tensor, compiled_hop: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(own_idx, own local ids, remote_idx, remote global ids)``: which of ``nodes`` this part
        serves itself, and which go to other ranks, each in the caller's order."""
        inner = self.partition.inner_ranges
        if len(inner) == 1 and compiled_hop:
            return compiled.split_range(nodes, *inner[0])  # one pass where torch makes six
        is_own = self.partition.is_inner(nodes)
        own_idx, remote_idx = is_own.nonzero().view(-1), (~is_own).nonzero().view(-1)
        own = self.partition.inner_local(nodes.index_select(0, own_idx), all_inner=True)
        return own_idx, own, remote_idx, nodes.index_select(0, remote_idx)

    def _serve_padded(self, ids: Tensor, fanout: Fanout, replace: bool) -> Tensor:
        """``[len(ids), fanout]`` sampled neighbours (``-1``-padded) for another rank's request."""
        if not ids.numel():  # this rank's own entry (own nodes never enter the exchange), or nothing asked
            return torch.empty((0, _width(fanout)), dtype=self.id_dtype)
        return self._sample_padded(self.partition.inner_local(ids), fanout, replace, self.serve_generator)

    def _answer_all(self, ids: Tensor, fanout: Fanout) -> Tensor:
        """A variable-size answer, ``[counts..., neighbours...]`` (typed: ``R`` counts a node), for a request
        whose hop takes every neighbour of some relation (drawn with the serving generator where it samples)."""
        nbrs, counts = self._sample(self.partition.inner_local(ids), fanout, generator=self.serve_generator)
        return torch.cat([counts.reshape(-1), nbrs])

    def _sample(self, rows: Tensor, fanout: Fanout, replace: bool = False,
                generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
        """Neighbours (global ids) and counts of own rows (local ids); typed: ``[n, R]`` counts."""
        if self.schema is not None:
            neighbors, counts = sample_relations(self.rel_indptr, self.indices, rows, fanout, replace,  # type: ignore[arg-type]
                                                 generator)
        else:
            neighbors, counts = sample_csr(self.indptr, self.indices, rows, fanout, replace, generator)  # type: ignore[arg-type]
        return (self.partition.global_ids.index_select(0, neighbors.to(torch.int64)) if self.translate
                else neighbors), counts

    def _sample_padded(self, rows: Tensor, fanout: Fanout, replace: bool,
                       generator: Optional[torch.Generator]) -> Tensor:
        """``[len(rows), fanout]`` neighbours in global ids (``id_dtype``), ``-1``-padded (typed: ``sum(f_r)``
        slots, relation by relation)."""
        if self.schema is not None:
            table = sample_relations_padded(self.rel_indptr, self.indices, rows, fanout, replace, generator)  # type: ignore[arg-type]
        else:
            table = sample_csr_padded(self.indptr, self.indices, rows, fanout, replace, generator)  # type: ignore[arg-type]
        if not self.translate:
            return table
        table = table.to(self.id_dtype)
        valid = table >= 0
        table[valid] = self.partition.global_ids.index_select(0, table[valid].to(torch.int64)).to(self.id_dtype)
        return table


def _width(fanout: Fanout) -> int:
    """Slots of a hop's padded answer (a typed hop: the relations' fan-outs summed); -1: variable-size answers."""
    if isinstance(fanout, int):
        return fanout
    return -1 if any(f < 0 for f in fanout) else sum(fanout)


def _reassemble(parts: list[tuple[Tensor, Tensor]], order: Tensor) -> tuple[Tensor, Tensor]:
    """Owner-grouped ``(neighbours, counts)`` back in the caller's node order (typed: ``[n, R]`` counts)."""
    nbrs_grouped = torch.cat([p[0] for p in parts])
    counts_grouped = torch.cat([p[1] for p in parts])
    per_node = counts_grouped.sum(dim=1) if counts_grouped.dim() == 2 else counts_grouped
    n = per_node.numel()
    # Segment g of the grouped list belongs to node order[g]: reorder whole segments.
    counts = torch.empty(n, dtype=torch.int64)
    counts[order] = per_node
    grouped_starts = torch.cumsum(per_node, 0) - per_node
    starts_in_order = torch.empty(n, dtype=torch.int64)
    starts_in_order[order] = grouped_starts
    positions = ranges(starts_in_order, counts)
    if counts_grouped.dim() == 2:
        typed_counts = torch.empty_like(counts_grouped)
        typed_counts[order] = counts_grouped
        return nbrs_grouped.index_select(0, positions), typed_counts
    return nbrs_grouped.index_select(0, positions), counts


def serving_seed(seed: int, part_id: int) -> int:
    """Seed of the generator that answers other ranks' sampling requests for ``part_id``.

    Distinct per part and apart from every sampler's own seed (``seed * 1000 + rank``).

    Example:
        >>> serving_seed(0, 1), serving_seed(2, 0)
        (1, 15838)
    """
    return int(seed) * 7919 + int(part_id)
