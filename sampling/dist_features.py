"""Feature (or any table's) rows across partitions: ``fetch_rows`` from their owners, and
``DistFeatureSource``, a ``FeatureSource`` over a partition with a cache of hot remote rows.

``fetch_rows`` sends each owner the ids it serves in one all-to-all and gets the rows back in a
second, of known sizes. ``DistFeatureSource`` serves a batch's own rows locally, hot remote rows
from a cache (by default every halo row that fits ``AUTO_CACHE_MIB``, ranked by how many of this
part's edges point at them: PaGraph's out-degree rule, measured from the worker's own view, or by
inclusion probability, ``sampling/inclusion.py``) and fetches the rest. Every rank must make the
same calls: each gather is a collective. ``sampling.distributed`` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from graphdist import comm
from graphdist.data.npy import stays_mapped
from partition.format import Partition
from sampling.base import LocalFeatureSource
from sampling.owners import OwnerMap
from sampling.relabel import DENSE_MAX_NODES

# --cache-rows -1 (the default): every halo row while they fit in this much memory per worker, the
# hottest that fit beyond. Small graphs cache their whole halo; a 10M-node graph in 4 parts would
# need ~2.8 GB per worker for it.
AUTO_CACHE_MIB = 512
FILL_BYTES = 32 << 20  # the cache is filled in pieces of this many bytes of rows

__all__ = ["AUTO_CACHE_MIB", "CacheStats", "DistFeatureSource", "PendingRows", "fetch_rows", "fetch_rows_async"]


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
    Own rows that are a large memory map (a partition's ``x.npy`` above ``graphdist.data.npy.MAPPED_COPY_MAX_BYTES``)
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
            normalised features, or embeddings during layer-at-a-time inference).
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

    def __getstate__(self) -> dict:
        # A loader process (sampling.loader_procs) gets this source pickled and fetches on its own group.
        return {**self.__dict__, "group": None}

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
        self.split = bool(cached.shape[0]) and stays_mapped(self.x, copy_bytes=self.x.numel() * self.x.element_size())
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
