"""The epoch's plan of seed batches, which a loader samples, and its replanning when a worker's share changes.

``NodeLoader`` (``sampling.loader``) is an ``EpochPlan``: each epoch it shuffles its seeds and
splits them into ``len(loader)`` batches (empty ones past the seeds: every worker runs the same
steps). While the epoch runs, ``set_batch_size`` replans the batches nothing has drawn yet
(``earliest_batch_size_change``: past the prefetch thread's or the loader processes' lookahead,
and the pipelined sampler's), from the seeds not used yet, or from seeds handed over by other
workers (the rebalancer's migration). The plan is a list read by index, so whoever samples
(the caller's thread, the prefetch thread, a loader process) reads a batch's seeds only when it
reaches it.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

__all__ = ["EpochPlan", "resolve_seeds"]


class EpochPlan:
    """The planning half of ``NodeLoader`` (its attributes: ``seeds``, ``batch_size``, ``shuffle``,
    ``drop_last``, ``num_batches``, ``generator``, ``sampler``, ``prefetch``, ``prefetch_depth``,
    ``loaders``)."""

    seeds: Tensor
    batch_size: int
    shuffle: bool
    drop_last: bool
    num_batches: Optional[int]
    generator: torch.Generator
    sampler: Any
    prefetch: bool
    prefetch_depth: int
    loaders: int
    _batches: Optional[list[Tensor]]
    _consumed: list[int]
    _shuffled: Tensor
    _yielded: int

    def natural_num_batches(self) -> int:
        """Batches one pass over the seeds gives (before any ``num_batches`` override)."""
        n = self.seeds.numel()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __len__(self) -> int:
        return self.num_batches if self.num_batches is not None else self.natural_num_batches()

    def _plan(self) -> list[Tensor]:
        """This epoch's seed batches, drawn in the caller's thread so prefetching cannot reorder RNG use."""
        n = self.seeds.numel()
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        self._shuffled = self.seeds.index_select(0, order)
        self._batches, self._consumed = [], []
        self._plan_from(0, 0, len(self))
        return self._batches

    def _plan_from(self, k: int, start: int, want: int) -> None:
        """(Re)plans batches ``k..want-1`` at the current batch size from fresh seeds ``shuffled[start:]``."""
        bs = self.batch_size
        pieces = list(torch.split(self._shuffled[start:], bs))
        if self.drop_last and pieces and pieces[-1].numel() < bs:
            pieces.pop()
        pieces = pieces[: max(0, want - k)]
        consumed, batches = [], []
        for piece in pieces:
            consumed.append(start)
            batches.append(piece)
            start += piece.numel()
        for _ in range(want - k - len(pieces)):
            consumed.append(start)
            batches.append(self._shuffled[:0])  # no seeds left: an empty step, never a repeated seed
        # In place: the producer thread reads the plan by index, lazily.
        self._batches[k:] = batches
        self._consumed[k:] = consumed

    def earliest_batch_size_change(self) -> int:
        """The first batch of this epoch whose seeds are not drawn yet (0 between epochs).

        Batches before it may already be sampling: up to ``prefetch_depth`` ahead of the caller in
        the prefetch thread (``prefetch_depth`` per loader process), and ``sampler.lookahead`` more
        inside a pipelined sampler (per loader process).
        """
        if self._batches is None:
            return 0
        return self._yielded + self._ahead() + self.sampler.lookahead * max(1, self.loaders)

    def _ahead(self) -> int:
        """How many batches past the caller's may be sampling: each loader process's depth, or the prefetch thread's."""
        if self.loaders:
            return self.prefetch_depth * self.loaders
        return self.prefetch_depth if self.prefetch else 0

    def remaining_seeds(self, from_batch: int) -> Tensor:
        """This epoch's fresh seeds not planned before batch ``from_batch`` (in epoch order).

        Raises:
            ValueError: no epoch is running, or ``from_batch`` may already be sampling.
        """
        self._check_from(from_batch)
        if from_batch >= len(self._batches):
            return self._shuffled[:0]
        return self._shuffled[self._consumed[from_batch]:]

    def remaining_counts(self, from_batch: int) -> list[int]:
        """``remaining_seeds(b).numel()`` for every batch ``b`` from ``from_batch`` to the epoch's end,
        then 0 (no batch left), so that ranks can agree on a common ``b`` and learn each other's
        counts at it in one exchange.

        Raises:
            ValueError: as :meth:`remaining_seeds`.
        """
        self._check_from(from_batch)
        return [self._shuffled.numel() - c for c in self._consumed[from_batch:]] + [0]

    def _check_from(self, from_batch: Optional[int]) -> None:
        if self._batches is None:
            raise ValueError("no epoch is running: seeds can only be replanned during one")
        earliest = self.earliest_batch_size_change()
        if from_batch is None or from_batch < earliest:
            raise ValueError(
                f"from_batch: batches before {earliest} of this epoch may already be sampling "
                f"(got {from_batch}); pass from_batch >= {earliest}, the same on every rank"
            )

    def set_batch_size(self, batch_size: int, from_batch: Optional[int] = None,
                       seeds: Optional[Tensor] = None) -> None:
        """Seeds per batch from batch ``from_batch`` of the current epoch on (and in later epochs).

        Batches already planned before ``from_batch`` keep their seeds; the rest are replanned
        from the seeds not used yet, at the new size, and the epoch keeps its number of batches
        (a larger share runs out sooner and ends in empty batches; a smaller one leaves seeds unused, as a fixed
        ``num_batches`` does). Between epochs ``from_batch`` may be omitted. Distributed workers
        must pass the same ``from_batch`` on every rank (their collectives follow the batches).

        Args:
            batch_size: the new size (>= 1).
            from_batch: the first batch (0-based, this epoch) to get it; at least
                :meth:`earliest_batch_size_change`.
            seeds: the fresh seeds of batches ``from_batch`` on, replacing
                :meth:`remaining_seeds` for the rest of this epoch (seeds migrating between
                workers when their shares change: the caller split the epoch's seeds among
                workers, each exactly once); batches past them are empty. Later epochs shuffle
                the loader's own seeds again.

        Raises:
            ValueError: a size below 1, or a batch that may already be sampling.

        Example:
            >>> from graphdist.testing import tiny_graph
            >>> from sampling import NeighborSampler, NodeLoader
            >>> g = tiny_graph()
            >>> loader = NodeLoader(g, torch.arange(10), NeighborSampler(g, [1], seed=0), batch_size=2,
            ...                     shuffle=False, prefetch=False)
            >>> sizes = []
            >>> for i, b in enumerate(loader):
            ...     sizes.append(b.seed_nodes.numel())
            ...     if i == 0:
            ...         loader.set_batch_size(4, from_batch=loader.earliest_batch_size_change())
            >>> sizes  # 5 batches as planned; 8 fresh seeds fill two of 4, then empty steps
            [2, 4, 4, 0, 0]
        """
        if batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1 (got {batch_size})")
        if self._batches is None:
            if from_batch not in (None, 0) or seeds is not None:
                raise ValueError(f"from_batch: no epoch is running; expected None or 0 and no seeds (got {from_batch})")
            self.batch_size = int(batch_size)
            return
        self._check_from(from_batch)
        self.batch_size = int(batch_size)
        if from_batch >= len(self._batches):
            return
        start = self._consumed[from_batch]
        if seeds is not None:
            # A new tensor, not an in-place edit: batches already planned are views of the old one.
            self._shuffled = torch.cat([self._shuffled[:start], resolve_seeds(seeds)])
        self._plan_from(from_batch, start, len(self._batches))


def resolve_seeds(seeds: Any) -> Tensor:
    seeds = torch.as_tensor(seeds)
    if seeds.dtype == torch.bool:
        return seeds.nonzero().view(-1)
    if seeds.dtype.is_floating_point or seeds.dim() != 1:
        raise ValueError(f"seeds: expected a 1-D int tensor of node ids or a bool mask (got {seeds.dtype}, "
                         f"shape {tuple(seeds.shape)})")
    return seeds.to(torch.int64)
