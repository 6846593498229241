"""Distributed sampling: the same ``NeighborSource`` / ``FeatureSource`` interfaces over partitions.

Each worker holds one partition (its inner nodes' in-neighbour rows and feature
rows). Per hop, ``DistNeighborSource`` sends the frontier nodes owned by other
workers to their owners (an ``OwnerMap``: node range -> rank, from the placement plan)
in one variable-size all-to-all, the owners sample them
from their own rows and answer in a second one. ``NeighborSampler`` is used
unchanged on top of it, so relabelling and block building are shared with the
local sampler.

``DistFeatureSource`` serves feature rows the same way, through a cache of the
hottest remote nodes: halo nodes ranked by how many of this part's edges point
at them (PaGraph's out-degree rule, measured from the worker's own view).

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

from dataclasses import dataclass
from typing import Any, Generator, Optional

import torch
from torch import Tensor

from graphdist import comm
from graphdist.data.graph import ranges
from graphdist.data.npy import is_mapped, release
from partition.format import Partition
from sampling.base import LocalFeatureSource, NeighborSource, run_steps
from sampling.kernels import sample_csr, sample_csr_padded, unpad
from sampling.owners import OwnerMap
from sampling.relabel import DENSE_MAX_NODES

# --cache-rows -1 (the default): every halo row while they fit in this much memory per worker, the
# hottest that fit beyond. Small graphs cache their whole halo; a 10M-node graph in 4 parts would
# need ~2.8 GB per worker for it.
AUTO_CACHE_MIB = 512
# Own rows that are a memory map larger than this stay mapped (not copied into the worker's memory);
# smaller ones are copied once into one table with the cache, which gathers in one index_select.
MAPPED_COPY_MAX_BYTES = 256 << 20
FILL_BYTES = 32 << 20  # the cache is filled in pieces of this many bytes of rows

__all__ = ["DistNeighborSource", "DistFeatureSource", "CacheStats", "fetch_rows"]


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
        self.translate = inner_indices.numel() * 8 > MAPPED_COPY_MAX_BYTES and is_mapped(inner_indices)
        self.indices = (inner_indices if self.translate
                        else partition.global_indices(inner_only=True).to(self.id_dtype))
        if not self.translate:
            release(inner_indices, unwritten=True)  # copied: the file's pages need not stay resident
        self.serve_generator = torch.Generator().manual_seed(serving_seed(seed, partition.part_id))
        # With other workers each hop pauses while its exchanges travel, so
        # ``NeighborSampler.sample_stream`` interleaves batches; alone there is nothing to wait for.
        self.pipelined = self.num_ranks > 1
        self._sole_peer = _sole_peer(self.owners, partition)
        self.remote_requests = 0
        self.local_requests = 0

    @property
    def num_nodes(self) -> int:
        return self.owners.num_nodes

    def get_state(self) -> Tensor:
        return self.serve_generator.get_state()

    def set_state(self, state: Optional[Tensor]) -> None:
        if state is not None:
            self.serve_generator.set_state(state)

    def sample_neighbors(
        self, nodes: Tensor, fanout: int, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> tuple[Tensor, Tensor]:
        return run_steps(self.sample_neighbors_stepwise(nodes, fanout, replace, generator))

    def sample_neighbors_stepwise(
        self, nodes: Tensor, fanout: int, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> Generator[None, None, tuple[Tensor, Tensor]]:
        """``sample_neighbors``, pausing three times (every rank alike) while the exchanges travel."""
        nodes = nodes.to(torch.int64)
        is_own = self.partition.is_inner(nodes)
        own_idx, remote_idx = is_own.nonzero().view(-1), (~is_own).nonzero().view(-1)
        own = self.partition.inner_local(nodes.index_select(0, own_idx), all_inner=True)
        self.local_requests += int(own.numel())
        self.remote_requests += int(remote_idx.numel())
        if self.num_ranks == 1:  # one worker: nothing to exchange, already in order
            return self._sample(own, fanout, replace, generator)
        # Own nodes never enter the exchange; they are sampled with the caller's generator
        # (so one worker's seeded sampling is reproducible) while other ranks' requests use
        # the serving generator. Only the remote minority is sorted by owner.
        remote = nodes.index_select(0, remote_idx)
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
        padded = fanout >= 0 and remote_idx.numel() > 0
        mine = (self._sample_padded(own, fanout, replace, generator) if padded
                else self._sample(own, fanout, replace, generator))  # all own here: compact, in order
        yield  # 2: the requests travel
        asked = pending.wait()
        if fanout >= 0:
            replies = [self._serve_padded(ids, fanout, replace) for ids in asked]
            answering = comm.all_to_all_v_async(
                replies, group=self.group, tag="sample", recv_rows=[r.numel() for r in requests]
            )
        else:  # every neighbour: variable-size answers [counts..., neighbours...]
            replies = [torch.cat(self._sample(self.partition.inner_local(ids), -1)[::-1]) for ids in asked]
            answering = comm.all_to_all_v_async(replies, group=self.group, tag="sample")
        yield  # 3: the answers travel
        answers = answering.wait()
        if not remote_idx.numel():
            return mine  # type: ignore[return-value]
        if padded:
            table = torch.empty((nodes.numel(), fanout), dtype=self.id_dtype)
            table.index_copy_(0, own_idx, mine)  # type: ignore[arg-type]
            joined = comm.joined_rows(answers)  # the receive buffer itself: no copy
            table.index_copy_(0, remote_idx, joined if joined is not None else torch.cat(answers))
            return unpad(table)
        parts = [mine] + [(a[r.numel():], a[: r.numel()]) for a, r in zip(answers, requests)]
        return _reassemble(parts, torch.cat([own_idx, remote_idx]))  # type: ignore[list-item]

    def _serve_padded(self, ids: Tensor, fanout: int, replace: bool) -> Tensor:
        """``[len(ids), fanout]`` sampled neighbours (``-1``-padded) for another rank's request."""
        if not ids.numel():  # this rank's own entry (own nodes never enter the exchange), or nothing asked
            return torch.empty((0, fanout), dtype=self.id_dtype)
        return self._sample_padded(self.partition.inner_local(ids), fanout, replace, self.serve_generator)

    def _sample(self, rows: Tensor, fanout: int, replace: bool = False,
                generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
        """Neighbours (global ids) and counts of own rows (local ids)."""
        neighbors, counts = sample_csr(self.indptr, self.indices, rows, fanout, replace, generator)
        return (self.partition.global_ids.index_select(0, neighbors.to(torch.int64)) if self.translate
                else neighbors), counts

    def _sample_padded(self, rows: Tensor, fanout: int, replace: bool,
                       generator: Optional[torch.Generator]) -> Tensor:
        """``[len(rows), fanout]`` neighbours in global ids (``id_dtype``), ``-1``-padded."""
        table = sample_csr_padded(self.indptr, self.indices, rows, fanout, replace, generator)
        if not self.translate:
            return table
        table = table.to(self.id_dtype)
        valid = table >= 0
        table[valid] = self.partition.global_ids.index_select(0, table[valid].to(torch.int64)).to(self.id_dtype)
        return table


def _sole_peer(owners: OwnerMap, partition: Partition) -> Optional[int]:
    """The one rank that owns every node this partition does not (two workers), else None."""
    starts = [a for a, b in partition.inner_ranges if b > a]
    if not starts:
        return None
    mine = int(owners.rank_of(torch.tensor(starts[:1]))[0])
    peers = {int(r) for r in owners.ranks.tolist()} - {mine}
    return peers.pop() if len(peers) == 1 else None


def _reassemble(parts: list[tuple[Tensor, Tensor]], order: Tensor) -> tuple[Tensor, Tensor]:
    """Owner-grouped ``(neighbours, counts)`` back in the caller's node order."""
    nbrs_grouped = torch.cat([p[0] for p in parts])
    counts_grouped = torch.cat([p[1] for p in parts])
    n = counts_grouped.numel()
    # Segment g of the grouped list belongs to node order[g]: reorder whole segments.
    counts = torch.empty(n, dtype=torch.int64)
    counts[order] = counts_grouped
    grouped_starts = torch.cumsum(counts_grouped, 0) - counts_grouped
    starts_in_order = torch.empty(n, dtype=torch.int64)
    starts_in_order[order] = grouped_starts
    positions = ranges(starts_in_order, counts)
    return nbrs_grouped.index_select(0, positions), counts


def serving_seed(seed: int, part_id: int) -> int:
    """Seed of the generator that answers other ranks' sampling requests for ``part_id``.

    Distinct per part and apart from every sampler's own seed (``seed * 1000 + rank``).

    Example:
        >>> serving_seed(0, 1), serving_seed(2, 0)
        (1, 15838)
    """
    return int(seed) * 7919 + int(part_id)


def fetch_rows(partition: Partition, table: Tensor, nodes: Tensor, group: object = None, tag: str = "feature",
               owners: Optional[OwnerMap] = None) -> Tensor:
    """Rows of ``nodes`` from whichever worker owns them; a collective (one request, one reply).

    Args:
        partition: this worker's ``Partition`` (its own rows' id range).
        table: ``[num_inner, F]`` rows of this worker's inner nodes (features or embeddings).
        nodes: int64 global ids (any owner; may be empty, the call is still collective).
        group: process group.
        tag: byte-counter tag.
        owners: which rank serves each node (default: part ``p`` on rank ``p``).

    Returns:
        ``[len(nodes), F]`` rows in ``nodes`` order.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import one_rank_group, tiny_graph
        >>> from partition.api import load_partition, partition
        >>> part = load_partition(partition(tiny_graph(), 1, method="random", out=tempfile.mkdtemp() + "/p"), 0)
        >>> with one_rank_group():
        ...     rows = fetch_rows(part, part.x, torch.tensor([3, 1]))
        >>> torch.equal(rows, part.x[[3, 1]])
        True
    """
    return fetch_rows_async(partition, table, nodes, group, tag, owners).wait()


class PendingRows:
    """Rows of :func:`fetch_rows_async` in flight; ``wait()`` returns them in the order asked."""

    def __init__(self, pending: Any, order: Tensor) -> None:
        self._pending, self._order = pending, order

    def wait(self) -> Tensor:
        answers = self._pending.wait()
        received = comm.joined_rows(answers)
        received = received if received is not None else torch.cat(answers)
        order = self._order
        if bool((order[1:] > order[:-1]).all()):  # asked in owner order already (a halo is): nothing to reorder
            return received
        out = torch.empty_like(received)
        out[order] = received
        return out


def fetch_rows_async(partition: Partition, table: Tensor, nodes: Tensor, group: object = None, tag: str = "feature",
                     owners: Optional[OwnerMap] = None) -> PendingRows:
    """:func:`fetch_rows` that returns once the rows travel (the requests have been answered here):
    compute with what is local, then ``wait()``."""
    nodes = nodes.to(torch.int64)
    owners = owners if owners is not None else OwnerMap.from_parts(partition.part_offsets)
    requests, order = owners.split(nodes)
    asked = comm.all_to_all_v(requests, group=group, tag=tag)
    # One gather for every rank's reply; the all-to-all sends its row blocks without joining them again.
    replies = torch.split(table.index_select(0, partition.inner_local(torch.cat(asked))), [a.numel() for a in asked])
    # One row back per id asked: the reply sizes are known, no size exchange.
    pending = comm.all_to_all_v_async(replies, group=group, tag=tag, recv_rows=[r.numel() for r in requests])
    return PendingRows(pending, order)


@dataclass
class CacheStats:
    """Remote-feature traffic: rows asked for, served from the cache, fetched over the network."""

    local_rows: int = 0
    cache_hits: int = 0
    fetched_rows: int = 0

    @property
    def remote_rows(self) -> int:
        return self.cache_hits + self.fetched_rows

    @property
    def hit_rate(self) -> float:
        return self.cache_hits / self.remote_rows if self.remote_rows else 0.0


class DistFeatureSource(LocalFeatureSource):
    """Feature rows of any global node: own rows locally, hot remote rows from a cache, the rest fetched.

    A :class:`LocalFeatureSource` over the partition's own rows (``x[inner_local(global)]``),
    extended with the cache and the fetch from the other workers. Own rows held in memory and
    cached rows live in one table (``table``; ``x`` and ``cached`` are views of it), so a
    batch's local and cached rows come in one ``index_select``; building it copies ``x`` once.
    Own rows that are a large memory map (a partition's ``x.npy`` above ``MAPPED_COPY_MAX_BYTES``)
    stay one: never copied into the worker's private memory, pages read in as batches touch
    them; the cache is then its own tensor and a gather reads the two apart.

    Args:
        partition: this worker's ``Partition``.
        group: process group (one per thread that gathers).
        cache_rows: remote rows to cache: ``-1`` (default) every halo node while their rows fit
            in ``AUTO_CACHE_MIB`` (the hottest that fit beyond), ``0`` none, ``n`` the ``n``
            hottest (``cache_mib`` permitting). The same meaning as ``--cache-rows``.
        cache_mib: a cap on the cache's memory in MiB (None: ``AUTO_CACHE_MIB`` for ``-1``, else none).
        inclusion: ``(nodes, probability)`` that one of this worker's batches reads each node
            (``sampling.inclusion``): the cache holds the remote nodes most likely read, 1-hop
            and 2-hop alike. None: the halo nodes most referenced by this part's edges.
        features: the ``[num_inner, F]`` table to serve instead of ``partition.x`` (e.g.
            normalised features, or embeddings during layer-wise inference).
        owners: which rank serves each node (default: part ``p`` on rank ``p``).

    The cache is filled once, collectively, at construction: every rank must
    construct its source at the same point.
    """

    def __init__(
        self,
        partition: Partition,
        group: object = None,
        cache_rows: int = -1,
        cache_mib: Optional[float] = None,
        features: Optional[Tensor] = None,
        owners: Optional[OwnerMap] = None,
        inclusion: Optional[tuple[Tensor, Tensor]] = None,
    ) -> None:
        x = partition.x if features is None else features
        if x is None:
            raise ValueError(f"partition {partition.name}: has no features (x.npy) to serve")
        if cache_rows < -1:
            raise ValueError(f"cache_rows: expected -1 (every halo node), 0 (none) or a row count (got {cache_rows})")
        super().__init__(x)
        self.partition = partition
        self.group = group
        self.owners = owners if owners is not None else OwnerMap.from_parts(partition.part_offsets)
        self.num_ranks = self.owners.world_size
        self.stats = CacheStats()
        self.inclusion = inclusion
        self._build_cache(cache_rows, cache_mib)

    # ---------------------------------------------------------------- cache
    def _hot_halo_nodes(self, limit: int) -> Tensor:
        """The remote nodes to cache, most valuable first (global ids): by inclusion probability when
        known, else halo nodes by how many local edges reference them."""
        part = self.partition
        if limit <= 0:
            return torch.zeros(0, dtype=torch.int64)
        if self.inclusion is not None:
            nodes, prob = self.inclusion
            remote = part.inner_local(nodes) < 0
            nodes, prob = nodes[remote], prob[remote]
            top = torch.argsort(prob, descending=True, stable=True)[:limit]
            return nodes[top[prob[top] > 0]]
        if part.num_halo == 0:
            return torch.zeros(0, dtype=torch.int64)
        refs = torch.bincount(part.indices.to(torch.int64), minlength=part.num_local)[part.num_inner :]
        top = torch.argsort(refs, descending=True, stable=True)[:limit]
        return part.global_ids[part.num_inner + top]

    def _build_cache(self, cache_rows: int, cache_mib: Optional[float]) -> None:
        # Candidates: the halo, or every remote node a batch may read when inclusion is known.
        candidates = self.partition.num_halo if self.inclusion is None else int(self.inclusion[0].numel())
        limit = candidates if cache_rows == -1 else min(int(cache_rows), candidates)
        if cache_rows == -1 and cache_mib is None:
            cache_mib = AUTO_CACHE_MIB
        if cache_mib is not None:
            row_bytes = self.num_features * self.x.element_size()
            limit = min(limit, int(cache_mib * 2**20 // max(row_bytes, 1)))
        hot = self._hot_halo_nodes(limit)
        self.cache_ids, _ = torch.sort(hot)
        cached = self._fill(self.cache_ids)
        num_inner = int(self.partition.num_inner)
        # One table, own rows then cached rows: a gather reads both with a single index_select
        # straight into the batch buffer (no second copy of the cached rows, no masked writes).
        # Mapped own rows are not copied into private memory: the cache stays apart.
        self.split = (bool(cached.shape[0]) and self.x.numel() * self.x.element_size() > MAPPED_COPY_MAX_BYTES
                      and is_mapped(self.x))
        if self.split:
            self.table, self.cached = None, cached
        else:
            self.table = torch.cat([self.x, cached]) if cached.shape[0] else self.x
            self.x = self.table[:num_inner]
            self.cached = self.table[num_inner:]
        # Table row of every global id (-1: fetch it), one int32 gather per batch. Above
        # DENSE_MAX_NODES nodes the map would cost too much memory: a binary search over the
        # sorted cache ids does the same.
        self._row_of: Optional[Tensor] = None
        if self.num_ranks > 1 and self.owners.num_nodes <= DENSE_MAX_NODES:
            row_of = torch.full((self.owners.num_nodes,), -1, dtype=torch.int32)
            row_of[self.partition.inner_global_ids()] = torch.arange(num_inner, dtype=torch.int32)
            row_of[self.cache_ids] = torch.arange(num_inner, num_inner + self.cache_ids.numel(), dtype=torch.int32)
            self._row_of = row_of
        self.stats = CacheStats()

    @property
    def cache_bytes(self) -> int:
        return int(self.cached.numel() * self.cached.element_size())

    def _table_rows(self, nodes: Tensor) -> Tensor:
        """Row of ``self.table`` holding each node, ``-1`` where the node must be fetched."""
        if self._row_of is not None:
            return self._row_of.index_select(0, nodes)
        num_inner = int(self.partition.num_inner)
        rows = self.partition.inner_local(nodes)
        own = rows >= 0
        if self.cache_ids.numel():
            remote_idx = (~own).nonzero().view(-1)
            remote = nodes.index_select(0, remote_idx)
            slot = torch.searchsorted(self.cache_ids, remote).clamp_(max=self.cache_ids.numel() - 1)
            hit = self.cache_ids.index_select(0, slot) == remote
            rows[remote_idx[hit]] = num_inner + slot[hit]
        return rows

    def _fill(self, ids: Tensor) -> Tensor:
        """The cache's rows, fetched in pieces of ``FILL_BYTES`` (every rank the same number of pieces):
        one fetch of a 512 MiB cache would hold its requests, replies and answers at once."""
        rows = max(1, FILL_BYTES // max(1, self.num_features * self.x.element_size()))
        mine = torch.tensor([-(-ids.numel() // rows)], dtype=torch.int64)
        pieces = int(comm.all_reduce(mine, op="max", group=self.group, tag="init")) if self.num_ranks > 1 else 1
        out = torch.empty((ids.numel(), self.num_features), dtype=self.x.dtype)
        for i in range(max(pieces, 1)):
            chunk = ids[i * rows : (i + 1) * rows]
            got = self._fetch(chunk)
            if chunk.numel():
                out[i * rows : i * rows + chunk.numel()] = got
        return out

    # ---------------------------------------------------------------- fetch
    def _fetch(self, nodes: Tensor) -> Tensor:
        return fetch_rows(self.partition, self.x, nodes, group=self.group, tag="feature", owners=self.owners)

    def gather(self, nodes: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """Rows of ``nodes``; a collective (every rank calls it, possibly with no nodes)."""
        nodes = nodes.to(torch.int64)
        n = nodes.numel()
        if out is None:
            out = torch.empty((n, self.num_features), dtype=self.x.dtype)
        rows = self._table_rows(nodes)
        miss_idx = (rows < 0).nonzero().view(-1)
        num_miss = int(miss_idx.numel())
        num_local = int((rows < int(self.partition.num_inner)).sum()) - num_miss
        # Own and cached rows in one index_select into `out`; the misses read a placeholder
        # row there and are overwritten with the fetched ones.
        if self.split:
            num_inner = int(self.partition.num_inner)
            own_idx = ((rows >= 0) & (rows < num_inner)).nonzero().view(-1)
            hit_idx = (rows >= num_inner).nonzero().view(-1)
            out[own_idx] = self.x.index_select(0, rows.index_select(0, own_idx))
            out[hit_idx] = self.cached.index_select(0, rows.index_select(0, hit_idx) - num_inner)
        elif self.table.shape[0]:
            torch.index_select(self.table, 0, rows.clamp_(min=0) if num_miss else rows, out=out)
        if self.num_ranks > 1:
            out[miss_idx] = self._fetch(nodes.index_select(0, miss_idx))
        self.stats.cache_hits += n - num_local - num_miss
        self.stats.fetched_rows += num_miss
        self.stats.local_rows += num_local
        return out
