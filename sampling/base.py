"""The sampling interface: ``Sampler.sample(seeds) -> SampledBatch``, and the two sources it reads.

Three layers, each a one-method ABC with dataclasses in between (PyG's store/sampler/loader split):

- ``NeighborSource.sample_neighbors(nodes, fanout, replace, generator)`` answers "k neighbours of
  each of these global nodes". ``CSRNeighborSource`` does it over a local CSR; the distributed
  sampler answers it with one all-to-all to the owners. Nothing else differs between the two, so
  ``NeighborSampler`` (frontier de-duplication, block relabelling) is shared.
- ``Sampler.sample(seeds) -> SampledBatch``: neighbour, cluster and full-neighbour samplers.
- ``FeatureSource.gather(nodes) -> Tensor``: local rows here, remote fetch + cache in the
  distributed version. The loader (``sampling.loader``) composes a sampler and a feature source.

A ``Block`` is one layer's bipartite graph in block-local ids. Its destination nodes are its first
``num_dst`` source nodes, so ``x[:num_dst]`` are their own features; edges are sorted by
destination and ``indptr`` is the CSR over destination rows. ``blocks[0]`` is the input layer
(outermost hop) and ``blocks[-1]`` produces the seeds.

Example:
    >>> from graphdist.testing import tiny_graph
    >>> from sampling import NeighborSampler
    >>> batch = NeighborSampler(tiny_graph(), fanouts=[-1, -1], seed=0).sample(torch.tensor([0]))
    >>> [b.size for b in batch.blocks], batch.input_nodes[:1].tolist()
    ([(8, 4), (4, 1)], [0])
"""

from __future__ import annotations

import abc
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Generator, Iterable, Iterator, Optional, TypeVar

import torch
from torch import Tensor

__all__ = ["Block", "SampledBatch", "Sampler", "SeededSampler", "NeighborSource", "FeatureSource", "LocalFeatureSource",
           "run_steps"]

T = TypeVar("T")


@dataclass
class Block:
    """One layer's bipartite graph, in block-local ids, edges sorted by destination.

    Attributes:
        src: int64 ``[E]`` source of every edge, in ``[0, num_src)``.
        dst: int64 ``[E]`` destination of every edge, in ``[0, num_dst)``, non-decreasing.
        num_src: source node count; source ``i`` is ``batch`` node ``i`` of this layer.
        num_dst: destination count; destination ``j`` is source ``j`` (same node).
        indptr: int64 ``[num_dst + 1]``; edges of destination ``j`` are ``indptr[j]:indptr[j+1]``.
        edge_weight: optional float ``[E]`` (e.g. GCN weights from global degrees).
        edge_type: a typed graph's relation of every edge (int64 ``[E]``; ``graphdist.data.hetero``).
        node_type: a typed graph's type of every source node (int64 ``[num_src]``; the destinations'
            are its first ``num_dst``).
        type_index: each source node's row within its type (int64 ``[num_src]``): where a featureless
            type's embedding is looked up.

    Example:
        >>> b = Block(src=torch.tensor([1, 0]), dst=torch.tensor([0, 0]), num_src=2, num_dst=1,
        ...           indptr=torch.tensor([0, 2]))
        >>> b.edge_index.tolist(), b.size
        ([[1, 0], [0, 0]], (2, 1))
    """

    src: Tensor
    dst: Tensor
    num_src: int
    num_dst: int
    indptr: Tensor
    edge_weight: Optional[Tensor] = None
    edge_type: Optional[Tensor] = None
    node_type: Optional[Tensor] = None
    type_index: Optional[Tensor] = None

    @property
    def typed(self) -> bool:
        """Whether the block carries relations and node types (sampled from a typed graph)."""
        return self.edge_type is not None

    @property
    def edge_index(self) -> Tensor:
        """``[2, E]`` (source, destination) in block-local ids: PyG's ``edge_index``."""
        return torch.stack([self.src, self.dst])

    @property
    def size(self) -> tuple[int, int]:
        """``(num_src, num_dst)``: the ``size`` argument PyG's bipartite layers take."""
        return (self.num_src, self.num_dst)

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())

    def in_degrees(self) -> Tensor:
        """Sampled in-degree of every destination (int64 ``[num_dst]``)."""
        return self.indptr[1:] - self.indptr[:-1]

    def pair(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(x, x[:num_dst])``: the (source, destination) features PyG's bipartite layers take.

        Example:
            >>> from torch_geometric.nn import SAGEConv
            >>> from graphdist.testing import tiny_graph
            >>> from sampling import NeighborSampler
            >>> g = tiny_graph(feature_dim=4)
            >>> batch = NeighborSampler(g, [2], seed=0).sample(torch.tensor([0, 5]))
            >>> block, x = batch.blocks[0], g.x[batch.input_nodes]
            >>> SAGEConv(4, 8)(block.pair(x), block.edge_index, size=block.size).shape
            torch.Size([2, 8])
        """
        return x, x[: self.num_dst]

    def adj(self, values: Optional[Tensor] = None) -> Tensor:
        """Sparse CSR ``[num_dst, num_src]`` adjacency (ones or ``values``) for ``adj @ x`` aggregation.

        Example:
            >>> b = Block(src=torch.tensor([0, 1, 2]), dst=torch.tensor([0, 0, 1]), num_src=3, num_dst=2,
            ...           indptr=torch.tensor([0, 2, 3]))
            >>> x = torch.tensor([[1.0], [3.0], [5.0]])
            >>> (b.adj() @ x / b.in_degrees().clamp(min=1)[:, None]).tolist()  # mean aggregation
            [[2.0], [5.0]]
        """
        if values is None:
            values = self.edge_weight if self.edge_weight is not None else torch.ones(self.num_edges)
        with warnings.catch_warnings():
            # "sparse CSR is in beta": a one-time notice, not actionable for callers.
            warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
            # Blocks are built valid (sorted dst, in-range ids), so skip the O(E) invariant check.
            return torch.sparse_csr_tensor(
                self.indptr, self.src, values, size=(self.num_dst, self.num_src), device=self.src.device,
                check_invariants=False,
            )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Block":
        """A copy with every tensor on ``device``."""
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return replace(self, src=move(self.src), dst=move(self.dst), indptr=move(self.indptr),
                       edge_weight=move(self.edge_weight), edge_type=move(self.edge_type),
                       node_type=move(self.node_type), type_index=move(self.type_index))


@dataclass
class SampledBatch:
    """A sampler's output: one block per layer plus the node ids they refer to.

    Attributes:
        blocks: ``blocks[0]`` is the input layer (outermost hop), ``blocks[-1]`` produces the seeds.
        input_nodes: int64 global ids of ``blocks[0]``'s sources: the rows of ``x``. Block-local id
            ``i`` of any layer is ``input_nodes[i]`` (every layer's sources are a prefix), so
            ``input_nodes[:len(seed_nodes)] == seed_nodes``.
        seed_nodes: int64 global ids whose outputs ``blocks[-1]`` computes.
        x: ``[len(input_nodes), F]`` input features, filled by the loader.
        y: ``[len(seed_nodes)]`` labels, filled by the loader.
        meta: free-form extras (e.g. a cluster batch's cluster ids).

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import NeighborSampler
        >>> b = NeighborSampler(tiny_graph(), [2], seed=0).sample(torch.tensor([3]))
        >>> b.seed_nodes.tolist(), b.blocks[-1].num_dst
        ([3], 1)
    """

    blocks: list[Block]
    input_nodes: Tensor
    seed_nodes: Tensor
    x: Optional[Tensor] = None
    y: Optional[Tensor] = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_sampled_edges(self) -> int:
        """Edges over all blocks: the bench's "sampled edges"."""
        return sum(b.num_edges for b in self.blocks)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "SampledBatch":
        """A copy with blocks, ids, ``x`` and ``y`` on ``device``."""
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return replace(
            self, blocks=[b.to(device, non_blocking) for b in self.blocks], input_nodes=move(self.input_nodes),
            seed_nodes=move(self.seed_nodes), x=move(self.x), y=move(self.y),
        )


class Sampler(abc.ABC):
    """Turns a tensor of seeds into a ``SampledBatch``; the one method every sampler implements.

    A sampler may keep scratch state between calls (e.g. a dense mark array): use one sampler
    per thread. Seeded samplers expose ``get_state``/``set_state`` for checkpoint and resume.

    Example:
        >>> class Identity(Sampler):
        ...     def sample(self, seeds):
        ...         return SampledBatch(blocks=[], input_nodes=seeds, seed_nodes=seeds)
        >>> Identity().sample(torch.tensor([4])).input_nodes.tolist()
        [4]
    """

    @abc.abstractmethod
    def sample(self, seeds: Tensor) -> SampledBatch:
        """Samples the computation graph of ``seeds`` (int64 global ids; sampler-specific meaning
        for cluster samplers, where they are cluster ids)."""

    @property
    def lookahead(self) -> int:
        """How many batches beyond the one being produced ``sample_stream`` may already have read.

        A loader that changes later batches' seeds (``NodeLoader.set_batch_size``) must stay
        clear of those. 0 here: one batch at a time.
        """
        return 0

    def sample_stream(self, seed_batches: Iterable[Tensor]) -> Iterator[SampledBatch]:
        """``sample`` of each seed batch, in order; what loaders call.

        Samplers whose source communicates override it to keep several batches in flight
        (one batch computes while another's exchange travels). The batches are valid samples
        either way, but need not equal one ``sample`` call per batch with the same seed.

        Example:
            >>> from graphdist.testing import tiny_graph
            >>> from sampling import NeighborSampler
            >>> s = NeighborSampler(tiny_graph(), [2], seed=0)
            >>> [b.seed_nodes.tolist() for b in s.sample_stream([torch.tensor([0]), torch.tensor([3])])]
            [[0], [3]]
        """
        for seeds in seed_batches:
            yield self.sample(seeds)

    def get_state(self) -> Optional[Tensor]:
        """The RNG state to checkpoint (None for deterministic samplers)."""
        return None

    def set_state(self, state: Optional[Tensor]) -> None:
        """Restores ``get_state()``'s result."""


class SeededSampler(Sampler):
    """A sampler whose draws come from its own ``generator``: its state is what a checkpoint keeps.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import NeighborSampler
        >>> s = NeighborSampler(tiny_graph(), [1], seed=0)
        >>> state = s.get_state(); first = s.sample(torch.tensor([0])).input_nodes
        >>> s.set_state(state); torch.equal(s.sample(torch.tensor([0])).input_nodes, first)
        True
    """

    generator: torch.Generator

    def get_state(self) -> Tensor:
        return self.generator.get_state()

    def set_state(self, state: Optional[Tensor]) -> None:
        if state is not None:
            self.generator.set_state(state)


class NeighborSource(abc.ABC):
    """Samples neighbours of global node ids: local CSR here, owners via all-to-all when distributed.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import CSRNeighborSource
        >>> nbrs, counts = CSRNeighborSource(tiny_graph()).sample_neighbors(torch.tensor([0]), -1)
        >>> sorted(nbrs.tolist()), counts.tolist()
        ([1, 4, 9], [3])
    """

    @property
    @abc.abstractmethod
    def num_nodes(self) -> int:
        """Global node count (ids lie in ``[0, num_nodes)``): sizes the relabeller's mark array."""

    @abc.abstractmethod
    def sample_neighbors(
        self, nodes: Tensor, fanout: int, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> tuple[Tensor, Tensor]:
        """Samples up to ``fanout`` in-neighbours of every node (``-1`` = all of them).

        Args:
            nodes: int64 ``[n]`` global ids.
            fanout: neighbours per node, or ``-1`` for all.
            replace: sample with replacement (then a node with any neighbour gets exactly
                ``fanout``). Without replacement a node with ``d <= fanout`` gets all ``d``.
            generator: the caller's RNG, so the caller's seed decides the sample.

        Returns:
            ``(neighbors, counts)``: int64 global ids grouped by node in ``nodes`` order, and
            int64 ``[n]`` how many each node got.
        """

    #: True when ``sample_neighbors_stepwise`` pauses at communication points, so a sampler
    #: gains from interleaving several batches.
    pipelined: bool = False
    #: A typed graph's ``Schema`` (``graphdist.data.hetero``): then ``fanout`` is one count per relation
    #: and the counts returned are ``[n, R]``, each node's neighbours grouped by relation (``sampling.typed``).
    schema: Optional[Any] = None

    def sample_neighbors_stepwise(
        self, nodes: Tensor, fanout: int, replace: bool = False, generator: Optional[torch.Generator] = None
    ) -> Generator[None, None, tuple[Tensor, Tensor]]:
        """``sample_neighbors`` as a generator that yields wherever it waits for other workers,
        and returns its result (``(neighbors, counts) = yield from ...``).

        A driver advances several of them in turn, so one batch computes while another's
        exchange travels. Every rank must yield the same number of times per call, whatever
        its data, so that all ranks issue their collectives in the same order. The local
        default never pauses.
        """
        return self.sample_neighbors(nodes, fanout, replace, generator)
        yield  # unreachable: makes this function a generator

    def get_state(self) -> Optional[Tensor]:
        """RNG state of a source that draws on its own (serving other ranks' requests); None here:
        local sources draw with the caller's generator."""
        return None

    def set_state(self, state: Optional[Tensor]) -> None:
        """Restores ``get_state()``'s result."""


def run_steps(steps: Generator[None, None, T]) -> T:
    """Runs a stepwise generator (see ``NeighborSource.sample_neighbors_stepwise``) to its result.

    Example:
        >>> def twice(x):
        ...     yield
        ...     return 2 * x
        >>> run_steps(twice(21))
        42
    """
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class FeatureSource(abc.ABC):
    """Rows of node features by global id: local here, fetched (and cached) when distributed.

    Example:
        >>> src = LocalFeatureSource(torch.arange(6.0).view(3, 2))
        >>> src.gather(torch.tensor([2, 0])).tolist(), src.num_features
        ([[4.0, 5.0], [0.0, 1.0]], 2)
    """

    @property
    @abc.abstractmethod
    def num_features(self) -> int:
        """Feature width ``F``."""

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    @property
    def device(self) -> torch.device:
        """Where the rows are: a gather takes node ids there (the host, unless a source says otherwise)."""
        return torch.device("cpu")

    @abc.abstractmethod
    def gather(self, nodes: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """Rows ``nodes`` as ``[len(nodes), F]``, written into ``out`` when given (a reused buffer)."""


class LocalFeatureSource(FeatureSource):
    """Feature rows from an in-memory (or memory-mapped) ``[N, F]`` tensor.

    Args:
        x: ``[N, F]`` features indexed by global id.

    Example:
        >>> LocalFeatureSource(torch.eye(3)).gather(torch.tensor([1])).tolist()
        [[0.0, 1.0, 0.0]]
    """

    def __init__(self, x: Tensor) -> None:
        if x.dim() != 2:
            raise ValueError(f"x: expected a [num_nodes, F] tensor (got shape {tuple(x.shape)})")
        self.x = x

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    @property
    def device(self) -> torch.device:
        return self.x.device

    def gather(self, nodes: Tensor, out: Optional[Tensor] = None) -> Tensor:
        if out is None:
            return self.x.index_select(0, nodes)
        return torch.index_select(self.x, 0, nodes, out=out)
