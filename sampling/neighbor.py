"""Uniform neighbour sampling over CSR, vectorised: no Python loop over nodes or edges.

``CSRNeighborSource`` draws k neighbours per node; ``NeighborSampler`` expands the seeds hop by
hop through any ``NeighborSource``, de-duplicates each frontier and relabels the blocks, so the
distributed sampler (a different source) shares all of that code.

The per-node draws (Floyd's algorithm without replacement, vectorised) are the kernels in
``sampling.kernels``; the global -> batch-local relabellers are in ``sampling.relabel``.

Example:
    >>> from graphdist.testing import random_graph
    >>> sampler = NeighborSampler(random_graph(100, seed=0), fanouts=[5, 3], seed=0)
    >>> batch = sampler.sample(torch.tensor([0, 1, 2]))
    >>> len(batch.blocks), batch.blocks[-1].num_dst, batch.input_nodes[:3].tolist()
    (2, 3, [0, 1, 2])
"""

from __future__ import annotations

from typing import Generator, Iterable, Iterator, Mapping, Optional, Sequence, TypeVar, Union

import torch
from torch import Tensor

from graphdist.data.graph import Graph, counts_to_indptr
import sampling.compiled as compiled
from sampling.base import Block, NeighborSource, SampledBatch, SeededSampler, run_steps
from sampling.kernels import sample_csr
import sampling.typed as typed
from sampling.typed import Fanout, layer_fanouts, sample_relations, spread_relations
from sampling.relabel import DENSE_MAX_NODES, _DenseRelabeler, _SortRelabeler

T = TypeVar("T")
# Streams that sample_stream interleaves; the batches in flight are split among them.
STREAMS = 2
# The dense relabellers of the batches in flight (4 bytes a node each) stay within this many MiB
# (but at least 2 batches fly): a 100M-node graph keeps 2, a 10M-node one 6.
PIPELINE_MARK_MIB = 256

__all__ = ["CSRNeighborSource", "NeighborSampler", "check_fanouts", "type_blocks"]


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
        self.schema = graph.schema
        if graph.typed:  # a typed graph: each (node, relation) is a row of its own (sampling.typed)
            from graphdist.data.hetero import relation_indptr

            self.rel_indptr = relation_indptr(graph)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    def sample_neighbors(
        self, nodes: Tensor, fanout: Fanout, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> tuple[Tensor, Tensor]:
        if self.schema is not None:
            fanouts = layer_fanouts(fanout, self.schema.num_relations)
            return sample_relations(self.rel_indptr, self.indices, nodes, fanouts, replace, generator)
        return sample_csr(self.indptr, self.indices, nodes, fanout, replace, generator)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the sampler
class NeighborSampler(SeededSampler):
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
            (the distributed one), as two interleaved streams whose batches share each hop's
            exchanges; each costs one more relabeller (4 bytes a node; at most
            ``PIPELINE_MARK_MIB`` of them, at least 2). Default 6 (see ``sample_stream``).
        relation_fanouts: a typed graph only: relation -> one count per layer, replacing ``fanouts``
            for that relation (``{"cites": [15, 5]}``; 0 skips the relation). Every relation not
            named samples ``fanouts``. The blocks then carry each edge's relation and each node's type.

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
        pipeline: int = 6,
        relation_fanouts: Optional[Mapping[str, Sequence[int]]] = None,
    ) -> None:
        self.source = CSRNeighborSource(source) if isinstance(source, Graph) else source
        if not isinstance(self.source, NeighborSource):
            raise ValueError(f"source: expected a Graph or NeighborSource (got {type(source).__name__})")
        self.fanouts = check_fanouts(fanouts)
        self.schema = self.source.schema
        if self.schema is None and relation_fanouts:
            raise ValueError(f"relation_fanouts: the graph has no relations (got {dict(relation_fanouts)})")
        # What each hop asks the source for: one count, or (typed) one per relation.
        self.hops: list[Fanout] = (list(self.fanouts) if self.schema is None
                                   else typed.relation_fanouts(self.schema, self.fanouts, relation_fanouts))
        self.replace = bool(replace)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        if relabel not in ("auto", "dense", "sort"):
            raise ValueError(f"relabel: expected 'auto', 'dense' or 'sort' (got {relabel!r})")
        dense = relabel == "dense" or (relabel == "auto" and self.source.num_nodes <= DENSE_MAX_NODES)
        self._relabel_kind = _DenseRelabeler if dense else _SortRelabeler
        self._relabeler = self._relabel_kind(self.source.num_nodes)
        self._relabelers = [self._relabeler]  # one per batch in flight (sample_stream)
        if pipeline < 1:
            raise ValueError(f"pipeline: expected >= 1 batches in flight (got {pipeline})")
        if dense and self.source.pipelined:  # every batch in flight has a mark array of its own
            fit = (PIPELINE_MARK_MIB << 20) // max(1, 4 * self.source.num_nodes)
            pipeline = min(int(pipeline), max(2, fit))
        self.pipeline = int(pipeline)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def __getstate__(self) -> dict:
        # Pickled for a loader process (sampling.loader_procs): tensors travel as shared memory, and the
        # relabellers' mark arrays are scratch every sampling process writes; each copy makes its own.
        return {**self.__dict__, "_relabeler": None, "_relabelers": []}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._relabeler = self._relabel_kind(self.source.num_nodes)
        self._relabelers = [self._relabeler]

    def sample(self, seeds: Tensor) -> SampledBatch:
        return run_steps(self._sample_steps(seeds, self._relabeler))

    @property
    def lookahead(self) -> int:
        """Batches in flight beyond the current one: ``pipeline - 1`` over a communicating source."""
        return self.pipeline - 1 if self.source.pipelined and self.pipeline >= 2 else 0

    def sample_stream(self, seed_batches: Iterable[Tensor]) -> Iterator[SampledBatch]:
        """Batches in order; over a communicating source, ``pipeline`` of them in flight at once.

        The in-flight batches form two streams that advance in turn, one step each, so while
        one stream's exchange travels the other samples its own nodes: the waits at each hop's
        exchanges mostly vanish. A stream's batches go to the source as one frontier per hop
        (relabelled apart), so a hop costs one set of exchanges for all of them: per batch,
        fewer collectives and fewer kernel calls. On ``bench/bench_dist_sampler.py``'s workload
        (2 workers, 1M nodes) 6 in flight (2 streams of 3) ran at 0.65-0.69x of the local
        sampler against 0.53x for 2 single batches in turn, 0.59x for 3. The schedule depends only
        on the number of batches, so every rank issues its collectives in the same order (all
        ranks must pass the same number of batches).
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
            drawn = list(zip(self._relabelers[: self.pipeline], batches))
            if not drawn:
                return
            # Two streams advance in turn (one samples while the other's exchange travels); each
            # sends its batches' frontiers as one, so a hop costs one exchange for all of them.
            streams = min(len(drawn), STREAMS)
            cut = [len(drawn) * k // streams for k in range(streams + 1)]
            group = [self._sample_merged([s for _, s in drawn[a:b]], [r for r, _ in drawn[a:b]])
                     for a, b in zip(cut[:-1], cut[1:])]
            try:
                results = [batch for merged in _interleave(group) for batch in merged]
            finally:
                for steps in group:
                    steps.close()  # on an early exit: the relabellers are reset
            yield from results

    def _sample_steps(self, seeds: Tensor, relabel: "_DenseRelabeler | _SortRelabeler") -> Generator[
        None, None, SampledBatch
    ]:
        """One batch, pausing wherever the source waits for other workers."""
        [batch] = yield from self._sample_merged([seeds], [relabel])
        return batch

    def _sample_merged(self, seed_batches: list[Tensor], relabels: list["_DenseRelabeler | _SortRelabeler"]
                       ) -> Generator[None, None, list[SampledBatch]]:
        """Several batches whose hops go to the source as one frontier (one exchange per hop for all),
        each relabelled on its own; pausing wherever the source waits for other workers."""
        seed_batches = [torch.as_tensor(s, dtype=torch.int64).view(-1) for s in seed_batches]
        started = []
        try:
            for seeds, relabel in zip(seed_batches, relabels):
                relabel.start(seeds)
                started.append(relabel)
            blocks: list[list[Block]] = [[] for _ in seed_batches]
            num_dst = [s.numel() for s in seed_batches]
            frontiers = list(seed_batches)
            for fanout in self.hops:
                joined = frontiers[0] if len(frontiers) == 1 else torch.cat(frontiers)
                nbrs, counts = yield from self.source.sample_neighbors_stepwise(
                    joined, fanout, self.replace, self.generator
                )
                node_counts = [f.numel() for f in frontiers]
                counts_each = counts.split(node_counts)
                nbrs_each = nbrs.split([int(c.sum()) for c in counts_each]) if len(frontiers) > 1 else [nbrs]
                for i, relabel in enumerate(relabels):
                    src = relabel.add(nbrs_each[i])
                    blocks[i].append(_make_block(src, counts_each[i], num_dst[i], relabel.count))
                    # The next hop samples every source of this layer; its first num_dst are known.
                    num_dst[i] = relabel.count
                    frontiers[i] = relabel.nodes()
            inputs = [relabel.nodes() for relabel in relabels]
        finally:
            for relabel in started:
                relabel.finish()
        out = []
        for seeds, layer_blocks, input_nodes in zip(seed_batches, blocks, inputs):
            layer_blocks.reverse()  # built seeds outward; blocks[0] is the input layer
            if self.schema is not None:
                type_blocks(layer_blocks, input_nodes, self.schema)
            out.append(SampledBatch(blocks=layer_blocks, input_nodes=input_nodes, seed_nodes=seeds))
        return out


def _interleave(group: list[Generator[None, None, T]]) -> list[T]:
    """Advances the generators in turn, one step each, until all have returned; their results in order."""
    results: list[Optional[T]] = [None] * len(group)
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


def type_blocks(blocks: Sequence[Block], input_nodes: Tensor, schema: object) -> None:
    """Sets every block's ``node_type`` and ``type_index`` (prefixes of the batch's, as its sources are).

    Example:
        >>> from graphdist.data.hetero import typed_graph
        >>> g = typed_graph({"a": 2, "b": 2}, {("b", "r", "a"): [[0, 1], [0, 0]]})
        >>> b = NeighborSampler(g, [-1], seed=0).sample(torch.tensor([0])).blocks[0]
        >>> b.node_type.tolist(), b.type_index.tolist(), b.edge_type.tolist()
        ([0, 1, 1], [0, 0, 1], [0, 0])
    """
    types = schema.node_type(input_nodes)  # type: ignore[attr-defined]
    index = schema.type_index(input_nodes)  # type: ignore[attr-defined]
    for block in blocks:
        block.node_type, block.type_index = types[: block.num_src], index[: block.num_src]


def _make_block(src: Tensor, counts: Tensor, num_dst: int, num_src: int) -> Block:
    """A block from per-destination counts: sources arrive grouped by destination already. ``[n, R]``
    counts (a typed graph's): grouped by destination, then relation, which the block keeps per edge."""
    if counts.dim() == 2:
        block = _make_block(src, counts.sum(dim=1), num_dst, num_src)
        block.edge_type = spread_relations(counts)
        return block
    if compiled.enabled(src.numel()) and counts.dtype == torch.int64:
        dst, indptr = compiled.block_index(counts, src.numel())
    else:
        dst = torch.repeat_interleave(torch.arange(num_dst, dtype=torch.int64), counts, output_size=src.numel())
        indptr = counts_to_indptr(counts)
    return Block(src=src, dst=dst, num_src=num_src, num_dst=num_dst, indptr=indptr)
