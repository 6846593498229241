"""Global -> batch-local node ids for ``NeighborSampler``: a dense mark array, or sorting.

Relabelling keeps one local id per node for the whole batch: every layer's sources are the next
layer's destinations plus new nodes, so a node's id never changes between hops and nothing is
re-marked. A dense ``[num_nodes]`` mark array (reset after each batch, touching only the nodes
used) does it in a few gathers; graphs too large for one (``num_nodes`` over
``DENSE_MAX_NODES``) use a sort-based relabeller that gives the same ids. New nodes are
numbered in order of first appearance, as DGL's ``to_block`` does.

Example:
    >>> for relabeler in (_DenseRelabeler(10), _SortRelabeler(10)):
    ...     relabeler.start(torch.tensor([7, 3]))  # the seeds get ids 0 and 1
    ...     local = relabeler.add(torch.tensor([3, 9, 9, 1]))
    ...     print(local.tolist(), relabeler.nodes().tolist())
    ...     relabeler.finish()
    [1, 2, 2, 3] [7, 3, 9, 1]
    [1, 2, 2, 3] [7, 3, 9, 1]
"""

from __future__ import annotations

import torch
from torch import Tensor

import sampling.compiled as compiled
from sampling.kernels import compact_by_slot

__all__ = ["DENSE_MAX_NODES"]

# Above this many nodes the dense mark array (4 bytes a node, per sampler) gives way to sorting.
DENSE_MAX_NODES = 1 << 27
_BIG = torch.iinfo(torch.int64).max
_FREE = torch.iinfo(torch.int32).max  # mark value of a node not in the current batch


class _DenseRelabeler:
    """Global -> batch-local ids through a ``[num_nodes]`` int32 mark array.

    Every id a batch meets is given a position in one stream (seeds first, then each hop's
    neighbours). ``mark[v]`` holds the first position of ``v`` (``_FREE`` when unseen), found
    with one ``scatter_reduce(amin)``: a min is order-free, so the result does not depend on
    thread scheduling (a racing ``index_put`` would). A position is a node's first appearance
    iff ``mark[v] == position``; a cumulative sum of those flags numbers the new nodes, and
    ``idmap[position]`` turns any first position into its local id. No boolean indexing (torch
    compacts masks slowly) and no sort. Only touched entries are reset after a batch, so a batch
    costs O(its nodes), not O(num_nodes). Not thread-safe: one per sampler, one sampler per thread.
    """

    def __init__(self, num_nodes: int) -> None:
        # int32 halves the cache footprint of the random gathers (4 MiB per million nodes).
        self.mark = torch.full((num_nodes,), _FREE, dtype=torch.int32)
        self.parts: list[Tensor] = []
        self.count = 0
        self.idmap = torch.zeros(0, dtype=torch.int32)  # stream position -> local id, for first positions

    def start(self, seeds: Tensor) -> None:
        n = seeds.numel()
        if n >= _FREE:
            raise ValueError(f"seeds: expected fewer than {_FREE} seeds per batch (got {n})")
        pos = torch.arange(n, dtype=torch.int32)
        self.mark.scatter_reduce_(0, seeds, pos, reduce="amin")
        self.parts, self.count, self.idmap = [seeds], n, torch.arange(n, dtype=torch.int32)
        self.stream = n
        if n and not bool(torch.equal(self.mark.index_select(0, seeds), pos)):
            self.finish()
            raise ValueError(f"seeds: expected distinct node ids (got {n - int(torch.unique(seeds).numel())} repeats)")

    def add(self, nbrs: Tensor) -> Tensor:
        """Local ids of ``nbrs``; nodes not seen yet get the next ids in order of first appearance."""
        m = nbrs.numel()
        if m == 0:
            return torch.zeros(0, dtype=torch.int64)
        if self.stream + m >= _FREE:
            raise ValueError(f"a batch may meet at most {_FREE - 1} node ids; use smaller batches or fan-outs")
        if compiled.enabled(m):  # the same ids and state, one loop (sampling.compiled)
            local, idmap, new_nodes = compiled.relabel_add(self.mark, nbrs, self.stream, self.count, self.idmap)
        else:
            local, idmap, new_nodes = self._add_vectorised(nbrs)
        self.idmap = idmap
        if new_nodes.numel():
            self.parts.append(new_nodes)
        self.count += new_nodes.numel()
        self.stream += m
        return local

    def _add_vectorised(self, nbrs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``add``'s work in torch calls: ``(local ids, the batch's idmap through this hop, new nodes in order)``."""
        m = nbrs.numel()
        pos = torch.arange(self.stream, self.stream + m, dtype=torch.int32)
        mark = self.mark
        mark.scatter_reduce_(0, nbrs, pos, reduce="amin")
        first_pos = mark.index_select(0, nbrs)
        is_first = first_pos == pos
        # rank[i] = how many first appearances up to and including i in this hop (1-based).
        # int32 like mark: idmap lives as long as the batch and is read at random, and with
        # several batches in flight (the distributed sampler) their arrays compete for cache.
        rank = torch.cumsum(is_first, 0, dtype=torch.int32)
        num_new = int(rank[-1])
        idmap = torch.cat([self.idmap, rank.add_(self.count - 1)])
        local = idmap.index_select(0, first_pos).to(torch.int64)
        # New nodes to their rank's slot (1..num_new), repeats to slot 0.
        slot = is_first.to(torch.int64).mul_(idmap[-m:] - (self.count - 1))
        return local, idmap, compact_by_slot(nbrs, slot, num_new) if num_new else nbrs[:0]

    def nodes(self) -> Tensor:
        return torch.cat(self.parts) if len(self.parts) > 1 else self.parts[0]

    def finish(self) -> None:
        for part in self.parts:
            self.mark.index_fill_(0, part, _FREE)
        self.parts, self.count, self.idmap = [], 0, self.idmap[:0]


class _SortRelabeler:
    """The same ids as ``_DenseRelabeler`` without an O(num_nodes) array: sorted known ids + search."""

    def __init__(self, num_nodes: int) -> None:
        del num_nodes
        self.parts: list[Tensor] = []
        self.count = 0

    def start(self, seeds: Tensor) -> None:
        n = seeds.numel()
        self.sorted, order = torch.sort(seeds)
        self.sorted_local = order
        if n > 1 and bool((self.sorted[1:] == self.sorted[:-1]).any()):
            raise ValueError(f"seeds: expected distinct node ids (got {n - int(torch.unique(seeds).numel())} repeats)")
        self.parts, self.count = [seeds], n

    def add(self, nbrs: Tensor) -> Tensor:
        pos = torch.searchsorted(self.sorted, nbrs).clamp_(max=max(self.sorted.numel() - 1, 0))
        hit = self.sorted[pos] == nbrs if self.sorted.numel() else torch.zeros_like(nbrs, dtype=torch.bool)
        local = torch.where(hit, self.sorted_local[pos], -1)
        is_new = ~hit
        new = nbrs[is_new]
        m = new.numel()
        if m == 0:
            return local
        uniq, inverse = torch.unique(new, return_inverse=True)
        first = torch.full((uniq.numel(),), _BIG, dtype=torch.int64)
        first.scatter_reduce_(0, inverse, torch.arange(m, dtype=torch.int64), reduce="amin")
        rank = torch.argsort(first)  # unique ids in order of first appearance
        uniq_local = torch.empty_like(rank)
        uniq_local[rank] = torch.arange(self.count, self.count + uniq.numel(), dtype=torch.int64)
        local[is_new] = uniq_local[inverse]
        self.parts.append(uniq[rank])
        self.count += uniq.numel()
        self.sorted, order = torch.sort(torch.cat([self.sorted, uniq]))
        self.sorted_local = torch.cat([self.sorted_local, uniq_local])[order]
        return local

    def nodes(self) -> Tensor:
        return torch.cat(self.parts) if len(self.parts) > 1 else self.parts[0]

    def finish(self) -> None:
        self.parts, self.count = [], 0
