"""Run-time rebalancing of batch shares: measure busy times, move seeds from slow ranks to fast ones.

HyScale-GNN's dynamic resource management and LBB's load-balanced batching, for synchronous
mini-batch training. Every ``--rebalance-every R`` steps the ranks exchange their *busy* time
over the window: the part of their step that is their own work and moves with the share (in
synchronous training every rank's wall step time is the same, so wall time says nothing). What
moves depends on what a worker holds (``MinibatchStrategy._busy_clock``): with the whole graph
replicated, the whole step less its waits in collectives; with only the structure, compute and sampling; with
neither, compute alone, because a part's neighbour lists and features are served by their
owner whoever trains the seed. Counting that serving would over-move: measured on
synthetic-100k with one rank 2x slower, balancing total CPU time moved 90% of the seeds to the
fast rank and gained nothing, since every step then waited first for the fast rank's compute
and then for the slow rank's serving. Each rank's fixed and per-seed cost is fitted over the
last few windows (``placement.shares.fit_cost``; per seed only until the windows' shares differ
by half, since closer shares make the split noise), and a window far off the fit (a slowdown
began) starts the history afresh; nothing moves while even the busiest rank
works less than half of the step (latency-bound steps: moving seeds cannot help).
``placement.shares.rebalance`` turns the busy times into new shares, the same on every rank;
every rank applies them from the same batch on. Because a rank's share then differs from
its part's train-node count, the seeds not yet visited this epoch migrate (ids and labels):
ranks over their quota hand the tail of their epoch order to ranks under it
(``placement.shares.migration``), and every train node is still visited once per epoch. A fast
rank samples migrated seeds' neighbourhoods and features through the distributed sampler, as
it does for any remote node. The gradient average is already weighted by seeds, so it stays
exact. The same migration runs at the start of every later epoch, while shares differ from the
plan's.

All decisions are collective: they are taken at step numbers every rank knows, from values
every rank has gathered, so the ranks never disagree on a share or the batch it starts at.

Example (the decision every rank takes from the gathered windows: rank 1 twice as slow per seed):
    >>> from placement.shares import fit_cost, rebalance
    >>> costs = [fit_cost([(100, 1.0)]), fit_cost([(100, 2.0)])]
    >>> rebalance([100, 100], costs, damping=1.0)
    [133, 67]
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

import torch

from graphdist import comm
from placement.shares import drifted, fit_cost, migration, quotas, rebalance

logger = logging.getLogger(__name__)

DAMPING = 0.7  # share of the way to the fitted optimum each decision moves (placement.shares.rebalance)
WORK_BOUND = 0.5  # act only when the busiest rank's own work fills at least this share of the step
HISTORY = 4  # windows each rank's cost fit looks back on
SPREAD = 0.5  # shares must differ by half before a fit splits fixed from per-seed cost (else through the origin)
DRIFT = 0.3  # a window this far off a rank's fitted cost starts the history afresh (placement.shares.drifted)

__all__ = ["Rebalancer"]


class Rebalancer:
    """Every ``every`` steps: gather busy times, maybe change shares, migrate the epoch's unvisited seeds.

    Args:
        loader: this rank's ``NodeLoader`` (its seeds are replanned in place).
        labels: this rank's ``GlobalLabels`` (extended with migrated seeds' labels).
        shares: the plan's batch share of every rank (the starting point, and what each part's
            train nodes fit without migration).
        every: steps between decisions (0: never change shares; start shares may still differ).
        eps: tolerated imbalance ``max/min`` of predicted busy times - 1.
        clock: this rank's movable busy seconds so far (any monotone counter).
        start_shares: shares to start from (default ``shares``).
        work_clock: all of this rank's own work so far, movable or not (default ``clock``): the
            guard that holds still on latency-bound steps compares it with the wall time.
    """

    def __init__(self, loader: Any, labels: Any, shares: list[int], every: int, eps: float,
                 clock: Callable[[], float], start_shares: Optional[list[int]] = None,
                 work_clock: Optional[Callable[[], float]] = None) -> None:
        self.loader, self.labels, self.every, self.eps = loader, labels, int(every), float(eps)
        self.read_clock = clock
        self.read_work = work_clock if work_clock is not None else clock
        self.natural = list(shares)
        self.shares = list(start_shares) if start_shares is not None else list(shares)
        self.rank, self.world = comm.get_rank(), comm.get_world_size()
        self.migrated = 0  # seeds this rank received this epoch
        self._start_window(0)
        self.history: list[list[tuple[float, float]]] = []
        # After a move, the step after which every batch trains at the new shares (None: no move
        # pending): the window restarts there, so it measures the new shares and nothing older.
        self._settles_after: Optional[int] = None
        # A window's busy times on their way to every rank: (vector, handle, steps), read one step later.
        self._pending: Optional[tuple[torch.Tensor, Any, int]] = None

    @property
    def active(self) -> bool:
        """Whether this rebalancer does anything (more than one rank, and rebalancing or moved shares)."""
        return self.world > 1 and (self.every > 0 or self.shares != self.natural)

    # ---------------------------------------------------------------- epoch
    def begin_epoch(self) -> None:
        if self._pending is not None:  # the last epoch ended before its window was read (not in the trainer: a
            # window goes out only before an epoch's last step, so it is read by then; kept for other callers)
            self._pending[1].wait()
            self._pending = None
        self.migrated = 0
        self._settles_after = None
        self._start_window(0)
        if self.loader.batch_size != self.shares[self.rank]:
            self.loader.set_batch_size(self.shares[self.rank])

    def _start_window(self, step: int) -> None:
        """A new window begins after step ``step`` (0: the epoch's start)."""
        self._window_busy, self._window_work = self.read_clock(), self.read_work()
        self._window_wall, self._window_seeds, self._window_origin = time.perf_counter(), 0, step

    def after_step(self, step: int, seeds: int) -> None:
        """Called on every rank after optimizer step ``step`` (1-based) with the seeds it trained on.

        A window closes every ``every`` steps, at step numbers every rank derives from values they
        share (the epoch's start, and a move's gathered first batch); its busy times travel while
        the next step trains, and the decision falls after that step, on every rank alike.
        """
        self._window_seeds += seeds
        if step == 1 and self.shares != self.natural:
            self._migrate()  # this epoch's own seeds do not fit the shares: hand some over
        if self._pending is not None:
            self._decide(step)
        if self._settles_after is not None:
            if step >= self._settles_after:  # the next batch is the first at the new shares
                self._settles_after = None
                self._start_window(step)
            return
        if (self.every and self._pending is None and step - self._window_origin >= self.every
                and step < len(self.loader)):
            self._send_window(step)

    # ------------------------------------------------------------- decision
    def _send_window(self, step: int) -> None:
        """Starts gathering this window's (busy, seeds, wall, work) from every rank, without waiting.

        A blocking gather here was a barrier every ``every`` steps: each rank waited for the
        slowest to reach it. Measured with no moves (``--rebalance-eps 10``; synthetic-100k, batch
        4096, R=3): 7-15 ms an epoch of each rank's time blocking, 1.3-3.3 ms sent this way.
        """
        busy, work = self.read_clock() - self._window_busy, self.read_work() - self._window_work
        wall, seeds, steps = time.perf_counter() - self._window_wall, self._window_seeds, step - self._window_origin
        self._start_window(step)
        table, handle = comm.all_gather_rows_async([busy, seeds, wall, work])
        self._pending = (table, handle, steps)

    def _decide(self, step: int) -> None:
        """Reads the window sent after the previous step and maybe moves shares from this step on."""
        table, handle, steps = self._pending
        self._pending = None
        handle.wait()  # landed while this step trained: every rank sent it before this step's gradients
        gathered = [(b, int(round(s)), w, k) for b, s, w, k in table.tolist()]
        window = [(b, s, w) for b, s, w, _ in gathered]
        if max(k for *_, k in gathered) < WORK_BOUND * max(w for _, _, w in window):
            # Even the busiest rank works less than half the step: the step is bound by latency
            # and collectives, which shares cannot move (measured: pubmed at 8 seeds per step).
            return
        # (seeds per step, busy per step) of every rank; the last few windows fit each rank's
        # fixed and per-seed cost (the shares differ between windows once they have moved).
        point = [(s / steps, b / steps) for b, s, _ in window]
        if any(drifted([h[r] for h in self.history], point[r], DRIFT, min_spread=SPREAD)
               for r in range(self.world)):
            # A rank's speed changed (a slowdown began): older windows describe another machine,
            # and mixed into the fit they hold the shares back for a whole history's length.
            self.history = []
        self.history.append(point)
        self.history = self.history[-HISTORY:]
        try:
            costs = [fit_cost([h[r] for h in self.history], min_spread=SPREAD) for r in range(self.world)]
        except ValueError:  # a rank trained no seeds in these windows: nothing to fit yet
            return
        new = rebalance(self.shares, costs, eps=self.eps, damping=DAMPING)
        if new is None:
            return
        if comm.is_main_process():
            logger.info("rebalance: busy %s s over %d steps, fitted %s -> shares %s (were %s)",
                        [round(b, 3) for b, _, _ in window], steps,
                        [f"{c.fixed_s * 1e3:.1f}ms+{c.per_seed_s * 1e6:.0f}us/seed" for c in costs], new, self.shares)
        self.shares = new
        # Batches already drawn (prefetched, or in a pipelined sampler) keep the old shares: the
        # next window starts after them, as soon as every batch trains at the new ones (with no
        # batch drawn ahead, at once: a 2x slowdown's first epoch then moved shares 3 times, not 2).
        first = self._migrate()
        if first is not None and first > step:
            self._settles_after = first
        else:
            self._start_window(step)

    # ------------------------------------------------------------- migration
    def _migrate(self) -> Optional[int]:
        """Replans the rest of this epoch at the current shares, moving unvisited seeds between ranks.

        Returns the first batch (0-based, the same on every rank) planned at the new shares, or
        None when the epoch has no batch left to replan.
        """
        mine_from = self.loader.earliest_batch_size_change()
        # Each rank's unvisited seeds at every batch it could restart from: one exchange tells
        # every rank the common restart (the latest) and everyone's count there.
        reach = comm.all_gather_object((mine_from, self.loader.remaining_counts(mine_from)))
        start = max(first for first, _ in reach)
        steps_left = len(self.loader) - start
        if steps_left <= 0:
            return None
        remaining = self.loader.remaining_seeds(start)
        counts = [left[start - first] for first, left in reach]
        quota = quotas(self.shares, steps_left, sum(counts))
        moves = migration(counts, quota)
        outgoing = [(recipient, lo, hi) for recipient, slices in enumerate(moves)
                    for donor, lo, hi in slices if donor == self.rank]
        payload = [(recipient, remaining[lo:hi].clone(), self.labels(remaining[lo:hi])) for recipient, lo, hi in outgoing]
        gathered = comm.all_gather_object(payload)
        keep = remaining[: min(counts[self.rank], quota[self.rank])]
        received = [(ids, y) for donor_items in gathered for recipient, ids, y in donor_items if recipient == self.rank]
        if received:
            ids = torch.cat([i for i, _ in received])
            self.labels.extend(ids, torch.cat([y for _, y in received]))
            keep = torch.cat([keep, ids])
            self.migrated += int(ids.numel())
        # Quotas exceed share * steps only when earlier batches left seeds behind: grow the
        # batches for the rest of this epoch rather than skip a train node.
        size = max(self.shares[self.rank], -(-int(keep.numel()) // steps_left))
        self.loader.set_batch_size(size, from_batch=start, seeds=keep)
        return start

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"shares": list(self.shares)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and state.get("shares"):
            self.shares = [int(s) for s in state["shares"]]
