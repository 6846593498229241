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
last few windows (``rank_cost``; per seed only until the windows' shares differ by half, since
closer shares make the split noise, unless the time plainly did not move with the share), and a
window far off the rank's windows, as per-seed and as fixed cost alike (a slowdown began), starts
that rank's history afresh; nothing moves while even the busiest rank
works less than half of the step (latency-bound steps: moving seeds cannot help).
``placement.shares.rebalance`` turns the busy times into new shares, the same on every rank;
every rank applies them from the same batch on. Because a rank's share then differs from
its part's train-node count, the seeds not yet visited this epoch migrate (ids and labels):
ranks over their quota hand the tail of their epoch order to ranks under it
(``placement.shares.migration``), and every train node is still visited once per epoch. A fast
rank samples migrated seeds' neighbourhoods and features through the distributed sampler, as
it does for any remote node. The gradient average is already weighted by seeds, so it stays
exact. The same migration runs at the start of every later epoch, while shares differ from the
plan's; so a move must pay for its migrations: each is timed, and
``placement.shares.choose_shares`` moves, stays, or returns to the plan's shares, whichever the
fitted costs and the migrations make cheapest per epoch (before the first move, a migration's two
exchanges are timed with nothing to move). Where steps are latency-bound (pubmed: 4 steps of
about 10 ms an epoch, the slow rank's step the same at 8 seeds and at 2), moves do not pay: the
fit sees the fixed cost once shares differ by a fifth (``rank_cost``), and the shares go back.
A window shorter than ``MIN_WINDOW_S`` is not acted on (its noise exceeds what a move could
gain), and the next spans enough steps to last that long; where an epoch is shorter than that
(pubmed again), the shares hold still.

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
import math
import time
from typing import Any, Callable, Optional

import torch

from graphdist import comm
from placement.plan import Plan
from placement.shares import LinearCost, choose_shares, drifted, fit_cost, migration, quotas, rebalance

logger = logging.getLogger(__name__)

MIN_WINDOW_S = 0.1  # a window shorter than this is not acted on, and the next spans more steps
DAMPING = 0.7  # share of the way to the fitted optimum each decision moves (placement.shares.rebalance)
WORK_BOUND = 0.5  # act only when the busiest rank's own work fills at least this share of the step
HISTORY = 4  # windows each rank's cost fit looks back on
SPREAD = 0.5  # shares must differ by half before a fit splits fixed from per-seed cost (else through the origin)
FIXED_SPREAD = 0.2  # ... except that shares a fifth apart already show a cost mostly fixed (rank_cost)
FIXED_SHARE = 0.5  # "mostly": at least this share of the time at the latest window's share
DRIFT = 0.3  # a window this far off the rank's windows starts its history afresh (placement.shares.drifted)

__all__ = ["Rebalancer", "rank_cost", "remember"]


def remember(windows: list[tuple[float, float]], point: tuple[float, float]) -> list[tuple[float, float]]:
    """A rank's last ``HISTORY`` windows with ``point`` added, and, when those all sit at about one
    share, the latest older window at another: while the shares hold still, what the last move
    showed (a step that did not shrink with the share) is kept, not forgotten and tried again.

    Example:
        >>> remember([(6, 5.0)] + [(8, 5.0)] * 3, (8, 5.1))  # (6, 5.0) would fall out: it stays
        [(6, 5.0), (8, 5.0), (8, 5.0), (8, 5.0), (8, 5.1)]
        >>> remember([(8, 5.0)] * 4, (8, 5.1))
        [(8, 5.0), (8, 5.0), (8, 5.0), (8, 5.1)]
    """
    windows = list(windows) + [point]
    recent, older = windows[-HISTORY:], windows[:-HISTORY]
    shares = [x for x, _ in recent]
    if max(shares) - min(shares) <= FIXED_SPREAD * max(shares):
        other = [w for w in older if abs(w[0] - point[0]) > FIXED_SPREAD * max(w[0], point[0])]
        if other:
            recent = [other[-1]] + recent
    return recent


def rank_cost(windows: list[tuple[float, float]]) -> LinearCost:
    """A rank's cost from its recent ``(seeds per step, busy per step)`` windows.

    Through the origin until the shares differ by ``SPREAD``: closer shares make a split into
    fixed and per-seed cost mostly noise (synthetic-100k at batch 4096). But where shares a fifth
    apart already show the time barely moving with the share, the fixed cost is real: through
    the origin it read as per-seed cost, and pubmed's latency-bound steps moved seeds off a rank
    whose step never shrank, down to 15:1, paying a migration at every epoch.

    Example:
        >>> rank_cost([(8, 0.005)])  # one share seen: all per seed
        LinearCost(fixed_s=0.0, per_seed_s=0.000625)
        >>> rank_cost([(8, 0.005), (6, 0.005)]).fixed_s > 0.004  # a quarter fewer seeds, no faster
        True
    """
    cost = fit_cost(windows, min_spread=SPREAD)
    if cost.fixed_s == 0.0:
        wide = fit_cost(windows, min_spread=FIXED_SPREAD)
        if wide.fixed_s >= FIXED_SHARE * wide.time(windows[-1][0]):
            return wide
    return cost


class Rebalancer:
    """Every ``every`` steps: gather busy times, maybe change shares, migrate the epoch's unvisited seeds.

    The rebalancer does not change shares behind the loop's back: :meth:`after_step` returns the
    new ``Plan`` it decided on, and the caller applies it (:meth:`apply`) at that same step, on
    every rank; :attr:`plan` is the plan in force.

    Args:
        loader: this rank's ``NodeLoader`` (its seeds are replanned in place).
        labels: this rank's ``GlobalLabels`` (extended with migrated seeds' labels).
        plan: the job's ``placement.Plan``: its batch shares are the starting point, and what each
            part's train nodes fit without migration.
        every: steps between decisions (0: never change shares; a plan applied at the start may still differ).
        eps: tolerated imbalance ``max/min`` of predicted busy times - 1.
        clock: this rank's movable busy seconds so far (any monotone counter).
        work_clock: all of this rank's own work so far, movable or not (default ``clock``): the
            guard that holds still on latency-bound steps compares it with the wall time.
    """

    def __init__(self, loader: Any, labels: Any, plan: Plan, every: int, eps: float,
                 clock: Callable[[], float], work_clock: Optional[Callable[[], float]] = None) -> None:
        self.loader, self.labels, self.every, self.eps = loader, labels, int(every), float(eps)
        # Steps a window spans: ``every``, or more where that many steps last under MIN_WINDOW_S.
        self.window_steps = self.every
        self.read_clock = clock
        self.read_work = work_clock if work_clock is not None else clock
        self.natural = list(plan.shares)
        self.plan = plan
        self.rank, self.world = comm.get_rank(), comm.get_world_size()
        self.migrated = 0  # seeds this rank received this epoch
        self.epochs_left = 1  # this epoch and the later ones: what a change of shares is spread over
        self._migration_s, self._migrations = 0.0, 0  # this rank's time in migrations, and their number
        self._start_window(0)
        # Per rank, its last few windows' (seeds per step, busy per step).
        self.history: list[list[tuple[float, float]]] = [[] for _ in range(self.world)]
        # After a move, the step after which every batch trains at the new shares (None: no move
        # pending): the window restarts there, so it measures the new shares and nothing older.
        self._settles_after: Optional[int] = None
        # A window's busy times on their way to every rank: (vector, handle, steps), read one step later.
        self._pending: Optional[tuple[torch.Tensor, Any, int]] = None

    @property
    def shares(self) -> list[int]:
        """The batch shares in force (the current plan's), in rank order."""
        return list(self.plan.shares)

    @property
    def active(self) -> bool:
        """Whether this rebalancer does anything (more than one rank, and rebalancing or moved shares)."""
        return self.world > 1 and (self.every > 0 or self.shares != self.natural)

    # ---------------------------------------------------------------- epoch
    def begin_epoch(self, epochs_left: int = 1) -> None:
        """Called before each epoch's first step; ``epochs_left`` counts this one."""
        self.epochs_left = max(1, int(epochs_left))
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

    def after_step(self, step: int, seeds: int) -> Optional[Plan]:
        """Called on every rank after optimizer step ``step`` (1-based) with the seeds it trained on;
        returns the plan decided on at this step (the same on every rank), for :meth:`apply`, or None.

        A window closes every ``every`` steps, at step numbers every rank derives from values they
        share (the epoch's start, and a move's gathered first batch); its busy times travel while
        the next step trains, and the decision falls after that step, on every rank alike.
        """
        self._window_seeds += seeds
        if step == 1 and self.shares != self.natural:
            self._migrate()  # this epoch's own seeds do not fit the shares: hand some over
        decided = self._decide(step) if self._pending is not None else None
        if decided is None:
            self._next_window(step)
        return decided

    def apply(self, plan: Plan, step: int = 0) -> None:
        """Trains at ``plan``'s shares from the batch after ``step`` on (0: from the next epoch's start).

        Collective within an epoch: every rank applies the same plan at the same step, and the
        epoch's unvisited seeds migrate to fit it.
        """
        if len(plan.ranks) != self.world:
            raise ValueError(f"Expected a plan of {self.world} ranks (got {len(plan.ranks)})")
        self.plan = plan
        if step <= 0:
            return
        # Batches already drawn (prefetched, or in a pipelined sampler) keep the old shares: the
        # next window starts after them, as soon as every batch trains at the new ones (with no
        # batch drawn ahead, at once: a 2x slowdown's first epoch then moved shares 3 times, not 2).
        first = self._migrate()
        if first is not None and first > step:
            self._settles_after = first
        else:
            self._start_window(step)

    def _next_window(self, step: int) -> None:
        """After a step with no decision: restart the window once a move has settled, or send it when full."""
        if self._settles_after is not None:
            if step >= self._settles_after:  # the next batch is the first at the new shares
                self._settles_after = None
                self._start_window(step)
            return
        if (self.every and self._pending is None and step - self._window_origin >= self.window_steps
                and step < len(self.loader)):
            self._send_window(step)

    # ------------------------------------------------------------- decision
    def _send_window(self, step: int) -> None:
        """Starts gathering this window's (busy, seeds, wall, work, mean migration) from every rank, without waiting.

        A blocking gather here was a barrier every ``every`` steps: each rank waited for the
        slowest to reach it. Measured with no moves (``--rebalance-eps 10``; synthetic-100k, batch
        4096, R=3): 7-15 ms an epoch of each rank's time blocking, 1.3-3.3 ms sent this way.
        """
        busy, work = self.read_clock() - self._window_busy, self.read_work() - self._window_work
        wall, seeds, steps = time.perf_counter() - self._window_wall, self._window_seeds, step - self._window_origin
        self._start_window(step)
        migration_s = self._migration_s / self._migrations if self._migrations else 0.0
        table, handle = comm.all_gather_rows_async([busy, seeds, wall, work, migration_s])
        self._pending = (table, handle, steps)

    def _decide(self, step: int) -> Optional[Plan]:
        """Reads the window sent after the previous step: a plan with new shares from this step on, or None."""
        table, handle, steps = self._pending
        self._pending = None
        handle.wait()  # landed while this step trained: every rank sent it before this step's gradients
        gathered = [(b, int(round(s)), w, k, m) for b, s, w, k, m in table.tolist()]
        window = [(b, s, w) for b, s, w, _, _ in gathered]
        wall = max(w for _, _, w in window)  # the same on every rank: decisions stay collective
        self.window_steps = max(self.every, math.ceil(MIN_WINDOW_S * steps / wall)) if wall > 0 else self.every
        if wall < MIN_WINDOW_S:
            # Too short to tell the ranks' times apart: on this machine a window of pubmed's two
            # 10 ms steps swung by a third from one to the next, and the moves it prompted did not
            # pay for their migrations (0.62-0.77x). Later windows span enough steps, where the
            # epoch has them.
            return None
        if max(k for *_, k, _ in gathered) < WORK_BOUND * max(w for _, _, w in window):
            # Even the busiest rank works less than half the step: the step is bound by latency
            # and collectives, which shares cannot move (measured: pubmed at 8 seeds per step).
            return None
        # (seeds per step, busy per step) of every rank; the last few windows fit each rank's
        # fixed and per-seed cost (the shares differ between windows once they have moved).
        point = [(s / steps, b / steps) for b, s, _ in window]
        for r in range(self.world):
            if drifted(self.history[r], point[r], DRIFT):
                # The rank's speed changed (a slowdown began): its older windows describe another
                # machine, and mixed into the fit they hold the shares back for a history's length.
                self.history[r] = []
            self.history[r] = remember(self.history[r], point[r])
        try:
            costs = [rank_cost(h) for h in self.history]
        except ValueError:  # a rank trained no seeds in these windows: nothing to fit yet
            return None
        # A migration's cost: the last rank to arrive spends least in it, about the exchange itself
        # (the others' extra is their wait for that rank, which the gradient sync would hold anyway).
        migration_s = min(m for *_, m in gathered)
        candidate = rebalance(self.shares, costs, eps=self.eps, damping=DAMPING)
        if candidate is not None and not migration_s:
            migration_s = self._measure_migration()
        new = choose_shares(self.shares, candidate, self.natural, costs, len(self.loader), migration_s,
                            self.epochs_left)
        if new is None:
            return None
        if comm.is_main_process():
            logger.info("rebalance: busy %s s over %d steps, fitted %s, migrations %.1f ms -> shares %s (were %s)",
                        [round(b, 3) for b, _, _ in window], steps,
                        [f"{c.fixed_s * 1e3:.1f}ms+{c.per_seed_s * 1e6:.0f}us/seed" for c in costs], migration_s * 1e3,
                        new, self.shares)
        return self.plan.with_shares(new)

    # ------------------------------------------------------------- migration
    def _measure_migration(self) -> float:
        """A migration's two exchanges with nothing to move, timed on every rank (collective).

        Before the first move the rebalancer has no migration to go by; moving to learn the cost
        and back cost pubmed two migrations and an epoch at the wrong shares. The last rank to
        arrive spends least here, about the exchanges themselves; empty payloads make this a lower
        bound, so it errs on the side of moving.
        """
        t0 = time.perf_counter()
        comm.all_gather_object((0, []))
        comm.all_gather_object([])
        measured = min(comm.all_gather_object(time.perf_counter() - t0))
        self._migration_s, self._migrations = self._migration_s + measured, self._migrations + 1
        return measured

    def _migrate(self) -> Optional[int]:
        """Replans the rest of this epoch at the current shares, moving unvisited seeds between ranks.

        Returns the first batch (0-based, the same on every rank) planned at the new shares, or
        None when the epoch has no batch left to replan. Timed: what a change of shares costs
        enters the next decision (``placement.shares.choose_shares``).
        """
        t0 = time.perf_counter()
        try:
            return self._replan()
        finally:
            self._migration_s += time.perf_counter() - t0
            self._migrations += 1

    def _replan(self) -> Optional[int]:
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
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A checkpoint written before checkpoints held the plan: its ``{"shares": [...]}``."""
        if state and state.get("shares"):
            self.plan = self.plan.with_shares([int(s) for s in state["shares"]])
