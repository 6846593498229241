"""Uniform neighbour sampling over CSR, vectorised: no Python loop over nodes or edges.

``CSRNeighborSource`` draws k neighbours per node; ``NeighborSampler`` expands the seeds hop by
hop through any ``NeighborSource``, de-duplicates each frontier and relabels the blocks, so the
distributed sampler (a different source) shares all of that code.

Sampling without replacement uses Robert Floyd's algorithm run across all nodes at once: k
vectorised steps (a loop over the fan-out, never over nodes), each drawing one offset per node
and replacing it by ``j`` when it is already taken. That draws every k-subset of a node's
``d`` neighbours with equal probability, so each neighbour is picked with probability exactly
``k/d``, and costs ``O(n k^2)`` small comparisons instead of a key per edge of the frontier
(which power-law hubs make huge). With replacement: one ``floor(u * d)`` per draw.

Relabelling keeps one local id per node for the whole batch: every layer's sources are the next
layer's destinations plus new nodes, so a node's id never changes between hops and nothing is
re-marked. A dense ``[num_nodes]`` mark array (reset after each batch, touching only the nodes
used) does it in a few gathers; graphs too large for one (``num_nodes`` over
``DENSE_MAX_NODES``) use a sort-based relabeller that gives the same ids. New nodes are
numbered in order of first appearance, as DGL's ``to_block`` does.

Example:
    >>> from graphdist.testing import random_graph
    >>> sampler = NeighborSampler(random_graph(100, seed=0), fanouts=[5, 3], seed=0)
    >>> batch = sampler.sample(torch.tensor([0, 1, 2]))
    >>> len(batch.blocks), batch.blocks[-1].num_dst, batch.input_nodes[:3].tolist()
    (2, 3, [0, 1, 2])
"""

from __future__ import annotations

from typing import Generator, Iterable, Iterator, Optional, Sequence, Union

import torch
from torch import Tensor

from graphdist.data.graph import Graph, counts_to_indptr, ranges
from sampling.base import Block, NeighborSource, SampledBatch, Sampler, run_steps

__all__ = ["CSRNeighborSource", "NeighborSampler", "check_fanouts", "sample_csr", "sample_csr_padded", "unpad"]

# Above this many nodes the dense mark array (4 bytes a node, per sampler) gives way to sorting.
DENSE_MAX_NODES = 1 << 27
_BIG = torch.iinfo(torch.int64).max
# Below this many draws per hop Floyd's per-step compare is one broadcast op (overhead-bound).
_SMALL_FLOYD = 1 << 15
_FREE = torch.iinfo(torch.int32).max  # mark value of a node not in the current batch


def check_fanouts(fanouts: Sequence[int]) -> list[int]:
    """Validates per-layer fan-outs (seeds outward; ``-1`` = all neighbours).

    Raises:
        ValueError: on an empty list or an entry that is neither positive nor -1.

    Example:
        >>> check_fanouts([15, 10, -1])
        [15, 10, -1]
    """
    fanouts = [int(f) for f in fanouts]
    if not fanouts:
        raise ValueError("fanouts: expected one fan-out per layer, e.g. [15, 10, 5] (got an empty list)")
    bad = [f for f in fanouts if f == 0 or f < -1]
    if bad:
        raise ValueError(f"fanouts: expected positive counts or -1 for all neighbours (got {fanouts})")
    return fanouts


# ------------------------------------------------------------------ sampling over CSR
def sample_csr(
    indptr: Tensor,
    indices: Tensor,
    nodes: Tensor,
    fanout: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> tuple[Tensor, Tensor]:
    """Samples up to ``fanout`` in-neighbours of each node from CSR arrays; the shared kernel.

    The distributed source calls this on its partition's CSR (with local row ids) too.

    Args:
        indptr: int64 ``[N + 1]``.
        indices: int64 or int32 ``[E]``.
        nodes: int64 ``[n]`` rows to sample.
        fanout: neighbours per node, ``-1`` = all.
        replace: with replacement (nodes with a neighbour get exactly ``fanout``).
        generator: RNG.

    Returns:
        ``(neighbors, counts)``: int64 neighbours grouped by node in ``nodes`` order, and
        int64 ``[n]`` counts.

    Example:
        >>> nb, c = sample_csr(torch.tensor([0, 2, 3]), torch.tensor([1, 2, 0]), torch.tensor([1]), -1)
        >>> nb.tolist(), c.tolist()
        ([0], [1])
    """
    starts = indptr.index_select(0, nodes)
    deg = indptr[1:].index_select(0, nodes).sub_(starts)
    if fanout < 0:
        positions = ranges(starts, deg)
        return _gather_ids(indices, positions), deg
    return _sample_fixed(indices, starts, deg, fanout, replace, generator)


def _gather_ids(indices: Tensor, positions: Tensor) -> Tensor:
    out = indices.index_select(0, positions)
    return out if out.dtype == torch.int64 else out.to(torch.int64)


def _sampled_positions(
    starts: Tensor, deg: Tensor, k: int, replace: bool, generator: Optional[torch.Generator]
) -> tuple[Tensor, Optional[Tensor]]:
    """``[n, k]`` CSR positions of the draws and the ``[n, k]`` mask of real ones (None: all real).

    Without replacement a node of degree ``d < k`` fills only its last ``d`` slots (see
    ``_floyd``); with replacement a node without neighbours fills none.
    """
    n = deg.numel()
    if replace:
        # float64 keeps floor(u * d) uniform even for hubs with millions of neighbours.
        u = torch.rand((n, k), dtype=torch.float64, generator=generator)
        positions = (u * deg.unsqueeze(1)).to(torch.int64).add_(starts.unsqueeze(1))
        has = deg > 0
        return positions, None if bool(has.all()) else has.unsqueeze(1).expand(n, k)
    positions = _floyd(deg, k, generator).t() + starts.unsqueeze(1)
    if bool((deg >= k).all()):
        return positions, None
    return positions, torch.arange(k).unsqueeze(0) >= (k - deg.clamp(max=k)).unsqueeze(1)


def sample_csr_padded(
    indptr: Tensor,
    indices: Tensor,
    nodes: Tensor,
    fanout: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    """:func:`sample_csr` with a fixed fan-out, as an ``[n, fanout]`` int64 table padded with ``-1``.

    Same draws as ``sample_csr`` with the same generator. No compaction: the distributed
    source moves and reorders whole rows and compacts once, at the end (``unpad``).

    Example:
        >>> sample_csr_padded(torch.tensor([0, 2, 3]), torch.tensor([1, 2, 0]), torch.tensor([1]), 2).tolist()
        [[-1, 0]]
    """
    if fanout < 0:
        raise ValueError(f"fanout: a padded sample needs a fixed fan-out (got {fanout})")
    starts = indptr.index_select(0, nodes)
    deg = indptr[1:].index_select(0, nodes).sub_(starts)
    if indices.numel() == 0:
        return torch.full((nodes.numel(), fanout), -1, dtype=torch.int64)
    positions, real = _sampled_positions(starts, deg, fanout, replace, generator)
    if real is None:
        return _gather_ids(indices, positions.reshape(-1)).view(-1, fanout)
    # Padding slots may point outside the array: read position 0 there, then overwrite.
    out = _gather_ids(indices, torch.where(real, positions, 0).view(-1)).view(-1, fanout)
    return out.masked_fill_(~real, -1)


def unpad(table: Tensor) -> tuple[Tensor, Tensor]:
    """``(neighbors, counts)`` of a ``-1``-padded ``[n, k]`` table, rows in order (``sample_csr``'s form).

    Example:
        >>> [t.tolist() for t in unpad(torch.tensor([[-1, 4], [2, 3]]))]
        [[4, 2, 3], [1, 2]]
    """
    real = table >= 0
    counts = real.sum(1)
    if int(counts.sum()) == table.numel():
        return table.reshape(-1), counts
    return torch.masked_select(table, real), counts


def _sample_fixed(
    indices: Tensor, starts: Tensor, deg: Tensor, k: int, replace: bool, generator: Optional[torch.Generator]
) -> tuple[Tensor, Tensor]:
    positions, real = _sampled_positions(starts, deg, k, replace, generator)
    counts = deg.clamp(max=k) if not replace else torch.where(deg > 0, k, 0)
    if real is None:
        return _gather_ids(indices, positions.reshape(-1)), counts
    return _gather_ids(indices, torch.masked_select(positions, real)), counts


def _floyd(deg: Tensor, k: int, generator: Optional[torch.Generator]) -> Tensor:
    """``[k, n]`` int32 offsets; the last ``min(deg[i], k)`` rows of column ``i`` are a uniform
    ``min(deg[i], k)``-subset of ``range(deg[i])`` (all of it when ``deg[i] <= k``).

    Floyd: for j = d-k .. d-1 draw t in [0, j]; take t unless already taken, else take j. Run on
    every node at once, steps with ``j < 0`` (only when ``d < k``) write ``j`` itself: negative,
    so never mistaken for a taken offset, and the remaining steps are Floyd for a ``d``-subset
    of ``d``, i.e. all neighbours. One code path for small and large degrees, no compaction.
    Row-major ``[k, n]`` keeps each step's compare and write contiguous.
    """
    n = deg.numel()
    # int32 offsets halve the bandwidth of the O(k^2) comparisons; degrees stay below 2^31.
    deg32 = deg.to(torch.int32)
    # float32 resolves u * (j + 1) to single offsets only below 2^24: hubs above that need float64.
    precise = n > 0 and int(deg.max()) > (1 << 24)
    u = torch.rand((k, n), generator=generator, dtype=torch.float64 if precise else torch.float32)
    # All k draws at once (few large ops instead of many small ones); row s is step s.
    j = (deg32 - k).unsqueeze(0) + torch.arange(k, dtype=torch.int32).unsqueeze(1)
    # u * (j + 1) can round up to j + 1 in floating point; the min maps that to j.
    chosen = torch.minimum(u.mul_(j + 1).to(torch.int32), j)
    small = n * k < _SMALL_FLOYD
    for step in range(1, k):
        t = chosen[step]
        if small:
            # Few nodes: per-op overhead dominates, so one broadcast compare per step.
            taken = (chosen[:step] == t).any(dim=0)
        else:
            # Many nodes: chained == / |= over the taken rows beats a (step, n) compare + any.
            taken = chosen[0] == t
            for row in range(1, step):
                taken |= chosen[row] == t
        torch.where(taken, j[step], t, out=t)
    return chosen


class CSRNeighborSource(NeighborSource):
    """Neighbour sampling over a local CSR graph (rows = destinations).

    Args:
        graph: a ``Graph`` (its ``indptr``/``indices`` are used as they are, int32 indices too).

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> nb, c = CSRNeighborSource(tiny_graph()).sample_neighbors(torch.tensor([5, 6]), 1)
        >>> c.tolist(), nb.numel()
        ([1, 1], 2)
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.indptr = graph.indptr
        self.indices = graph.indices

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    def sample_neighbors(
        self, nodes: Tensor, fanout: int, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> tuple[Tensor, Tensor]:
        return sample_csr(self.indptr, self.indices, nodes, fanout, replace, generator)


# ------------------------------------------------------------------ relabelling
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

    def start(self, seeds: Tensor) -> None:
        n = seeds.numel()
        if n >= _FREE:
            raise ValueError(f"seeds: expected fewer than {_FREE} seeds per batch (got {n})")
        pos = torch.arange(n, dtype=torch.int32)
        self.mark.scatter_reduce_(0, seeds, pos, reduce="amin")
        self.parts, self.count, self.idmap = [seeds], n, [torch.arange(n, dtype=torch.int64)]
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
        pos = torch.arange(self.stream, self.stream + m, dtype=torch.int32)
        mark = self.mark
        mark.scatter_reduce_(0, nbrs, pos, reduce="amin")
        first_pos = mark.index_select(0, nbrs)
        is_first = first_pos == pos
        # rank[i] = how many first appearances up to and including i in this hop (1-based).
        rank = torch.cumsum(is_first, 0)
        num_new = int(rank[-1])
        self.idmap.append(rank.add_(self.count - 1))
        idmap = torch.cat(self.idmap)
        self.idmap = [idmap]
        local = idmap.index_select(0, first_pos.to(torch.int64))
        if num_new:
            # Compaction by scatter into slot rank (1..num_new), slot 0 a dump for repeats: faster
            # than a boolean mask and deterministic since every real slot is written once.
            slot = is_first.to(torch.int64).mul_(idmap[-m:] - (self.count - 1))
            uniq = torch.empty(num_new + 1, dtype=torch.int64).scatter_(0, slot, nbrs)[1:]
            self.parts.append(uniq)
        self.count += num_new
        self.stream += m
        return local

    def nodes(self) -> Tensor:
        return torch.cat(self.parts) if len(self.parts) > 1 else self.parts[0]

    def finish(self) -> None:
        for part in self.parts:
            self.mark.index_fill_(0, part, _FREE)
        self.parts, self.count, self.idmap = [], 0, []


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


# ------------------------------------------------------------------ the sampler
class NeighborSampler(Sampler):
    """Uniform multi-hop neighbour sampling with per-layer fan-outs, over any ``NeighborSource``.

    Args:
        source: a ``Graph`` (sampled through ``CSRNeighborSource``) or any ``NeighborSource``.
        fanouts: per layer, from the seeds outward (PyG's order: ``[15, 10, 5]`` takes 15
            neighbours of each seed first); ``-1`` = all neighbours.
        replace: sample with replacement. Default False.
        seed: seeds the sampler's own ``torch.Generator``; None draws one from torch's global RNG
            (so ``torch.manual_seed`` decides). Default None.
        relabel: ``"dense"`` (mark array), ``"sort"``, or ``"auto"`` (dense up to
            ``DENSE_MAX_NODES`` nodes). Both give identical batches. Default ``"auto"``.
        pipeline: batches ``sample_stream`` keeps in flight over a source that communicates
            (the distributed one); each costs one more relabeller. Default 2.

    Raises:
        ValueError: on bad fan-outs or relabel mode; ``sample`` on repeated seeds.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> s = NeighborSampler(tiny_graph(), fanouts=[2, 2], seed=1)
        >>> b = s.sample(torch.tensor([0, 5]))
        >>> b.blocks[-1].num_dst, int(b.blocks[-1].in_degrees().max())
        (2, 2)
    """

    def __init__(
        self,
        source: Union[Graph, NeighborSource],
        fanouts: Sequence[int],
        replace: bool = False,
        seed: Optional[int] = None,
        relabel: str = "auto",
        pipeline: int = 2,
    ) -> None:
        self.source = CSRNeighborSource(source) if isinstance(source, Graph) else source
        if not isinstance(self.source, NeighborSource):
            raise ValueError(f"source: expected a Graph or NeighborSource (got {type(source).__name__})")
        self.fanouts = check_fanouts(fanouts)
        self.replace = bool(replace)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        if relabel not in ("auto", "dense", "sort"):
            raise ValueError(f"relabel: expected 'auto', 'dense' or 'sort' (got {relabel!r})")
        dense = relabel == "dense" or (relabel == "auto" and self.source.num_nodes <= DENSE_MAX_NODES)
        self._relabeler = (_DenseRelabeler if dense else _SortRelabeler)(self.source.num_nodes)
        self._relabelers = [self._relabeler]  # one per batch in flight (sample_stream)
        if pipeline < 1:
            raise ValueError(f"pipeline: expected >= 1 batches in flight (got {pipeline})")
        self.pipeline = int(pipeline)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def get_state(self) -> Tensor:
        return self.generator.get_state()

    def set_state(self, state: Optional[Tensor]) -> None:
        if state is not None:
            self.generator.set_state(state)

    def sample(self, seeds: Tensor) -> SampledBatch:
        return run_steps(self._sample_steps(seeds, self._relabeler))

    def sample_stream(self, seed_batches: Iterable[Tensor]) -> Iterator[SampledBatch]:
        """Batches in order; over a communicating source, ``pipeline`` of them in flight at once.

        The in-flight batches advance in turn, one step each, so while one batch's exchange
        travels another samples its own nodes: the waits at each hop's exchanges mostly
        vanish. The schedule depends only on the number of batches, so every rank issues its
        collectives in the same order (all ranks must pass the same number of batches).
        """
        if not self.source.pipelined or self.pipeline < 2:
            yield from super().sample_stream(seed_batches)
            return
        while len(self._relabelers) < self.pipeline:
            self._relabelers.append(type(self._relabeler)(self.source.num_nodes))
        batches = iter(seed_batches)
        while True:
            # A group of up to `pipeline` batches starts together and, having the same number
            # of steps, finishes together: the schedule is the same on every rank.
            # (relabellers first in zip: it must not draw a batch it has no relabeller for)
            group = [self._sample_steps(seeds, r) for r, seeds in zip(self._relabelers[: self.pipeline], batches)]
            if not group:
                return
            try:
                results = _interleave(group)
            finally:
                for steps in group:
                    steps.close()  # on an early exit: the relabellers are reset
            yield from results

    def _sample_steps(self, seeds: Tensor, relabel: "_DenseRelabeler | _SortRelabeler") -> Generator[
        None, None, SampledBatch
    ]:
        """One batch, pausing wherever the source waits for other workers."""
        seeds = torch.as_tensor(seeds, dtype=torch.int64).view(-1)
        relabel.start(seeds)
        try:
            blocks = []
            num_dst = seeds.numel()
            frontier = seeds
            for fanout in self.fanouts:
                nbrs, counts = yield from self.source.sample_neighbors_stepwise(
                    frontier, fanout, self.replace, self.generator
                )
                src = relabel.add(nbrs)
                blocks.append(_make_block(src, counts, num_dst, relabel.count))
                # The next hop samples every source of this layer; its first num_dst are known.
                num_dst = relabel.count
                frontier = relabel.nodes()
            input_nodes = relabel.nodes()
        finally:
            relabel.finish()
        blocks.reverse()  # built seeds outward; blocks[0] is the input layer
        return SampledBatch(blocks=blocks, input_nodes=input_nodes, seed_nodes=seeds)


def _interleave(group: list[Generator[None, None, SampledBatch]]) -> list[SampledBatch]:
    """Advances the generators in turn, one step each, until all have returned; their results in order."""
    results: list[Optional[SampledBatch]] = [None] * len(group)
    running = list(range(len(group)))
    while running:
        still = []
        for i in running:
            try:
                next(group[i])
                still.append(i)
            except StopIteration as done:
                results[i] = done.value
        running = still
    return results  # type: ignore[return-value]


def _make_block(src: Tensor, counts: Tensor, num_dst: int, num_src: int) -> Block:
    """A block from per-destination counts: sources arrive grouped by destination already."""
    dst = torch.repeat_interleave(torch.arange(num_dst, dtype=torch.int64), counts, output_size=src.numel())
    return Block(src=src, dst=dst, num_src=num_src, num_dst=num_dst, indptr=counts_to_indptr(counts))
