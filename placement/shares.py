"""Batch shares: how many seeds each worker takes per step, and how seeds move when shares change.

Synchronous training runs at the pace of its slowest worker, so the shares that minimise the
step time ``max_i T_i(b_i)`` (``sum_i b_i`` = the global batch) equalise the workers' predicted
times. With a linear cost ``T_i(b) = a_i + c_i * b`` (a fixed part and a per-seed part, fitted by
the profiler or measured while training) that optimum has a closed form (:func:`balanced_shares`).
The run-time rebalancer (HyScale-GNN's dynamic resource management, LBB's load-balanced batching)
re-measures every R steps and calls :func:`rebalance`; since shares no longer follow each part's
train-node count, seeds migrate between workers so that every train node is still visited once
per epoch (:func:`migration`).

Everything here is pure arithmetic on lists: the trainer measures and exchanges, every rank
calls these functions with the same inputs and gets the same answer.

Example:
    >>> balanced_shares([LinearCost(0.0, 1.0), LinearCost(0.0, 2.0)], total=30)
    [20, 10]
    >>> rebalance([15, 15], [LinearCost(0.0, 1.0), LinearCost(0.0, 2.0)])
    [20, 10]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["LinearCost", "balanced_shares", "choose_shares", "drifted", "fit_cost", "rebalance", "round_to_total", "largest_remainder", "migration", "quotas", "imbalance"]


FLAT = 0.01  # a cost that does not rise with the share: per seed, this much of its mean time per seed

@dataclass(frozen=True)
class LinearCost:
    """A worker's step time as a function of its batch share: ``fixed_s + per_seed_s * b``.

    Example:
        >>> LinearCost(0.5, 0.25).time(10)
        3.0
    """

    fixed_s: float
    per_seed_s: float

    def time(self, share: float) -> float:
        return self.fixed_s + self.per_seed_s * share


def largest_remainder(weights: Sequence[float], total: int, minimum: int = 1) -> list[int]:
    """Integers proportional to ``weights`` that sum to ``total`` (each at least ``minimum``).

    Hamilton's method: floors first, then the largest fractional parts get one more; ties go to
    the lower index, so every rank computes the same split.

    Example:
        >>> largest_remainder([1.0, 1.0, 1.0], 10)
        [4, 3, 3]
    """
    n = len(weights)
    if n == 0:
        return []
    if total < minimum * n:
        raise ValueError(f"total {total} cannot give {n} workers at least {minimum} each")
    spare = total - minimum * n
    w = [max(0.0, float(x)) for x in weights]
    s = sum(w)
    if s <= 0 or not math.isfinite(s):
        w, s = [1.0] * n, float(n)
    exact = [spare * x / s for x in w]
    out = [int(math.floor(e)) for e in exact]
    order = sorted(range(n), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: spare - sum(out)]:
        out[i] += 1
    return [minimum + o for o in out]


def round_to_total(values: Sequence[float], total: int) -> list[int]:
    """``values`` (summing to ``total``) rounded to integers that still sum to ``total``.

    Floors first; the largest fractional parts get one more (ties to the lower index).

    Example:
        >>> round_to_total([40.0, 48.6, 1.4], 90)
        [40, 49, 1]
    """
    out = [int(math.floor(v + 1e-9)) for v in values]
    order = sorted(range(len(values)), key=lambda i: (-(values[i] - out[i]), i))
    for i in order[: max(0, total - sum(out))]:
        out[i] += 1
    return out


def balanced_shares(costs: Sequence[LinearCost], total: int, caps: Optional[Sequence[int]] = None) -> list[int]:
    """Shares summing to ``total`` that minimise ``max_i costs[i].time(b_i)``, each ``b_i <= caps[i]``.

    Every worker finishes at the same ``T``, so ``b_i = (T - a_i) / c_i``; without bounds
    ``sum b_i = total`` gives ``T = (total + sum a_i/c_i) / sum 1/c_i``. With bounds (at least 1
    seed; at most ``caps[i]``, e.g. memory) each ``b_i`` is clamped, and ``T`` is the level at which
    the clamped shares add up to ``total`` (water-filling, found by bisection).

    Raises:
        ValueError: a non-positive per-seed cost, or caps that cannot hold ``total`` seeds.

    Example:
        >>> balanced_shares([LinearCost(0.1, 0.01), LinearCost(0.0, 0.01)], total=20)
        [5, 15]
        >>> balanced_shares([LinearCost(0.0, 1.0), LinearCost(0.0, 2.0)], total=30, caps=[12, 100])
        [12, 18]
    """
    n = len(costs)
    if any(c.per_seed_s <= 0 or not math.isfinite(c.per_seed_s) for c in costs):
        raise ValueError(f"balanced_shares: expected positive per-seed costs (got {[c.per_seed_s for c in costs]})")
    caps = [int(c) for c in caps] if caps is not None else [total] * n
    if sum(caps) < total:
        raise ValueError(f"balanced_shares: the workers' caps {caps} hold {sum(caps)} seeds per step, "
                         f"fewer than the batch of {total}")
    # Water-filling: every worker finishes at T, clamped to [1, cap]; the clamped sum grows with T,
    # so bisection finds the T whose shares add up to the batch (closed form when nothing clamps).
    def shares_at(t: float) -> list[float]:
        return [min(float(caps[i]), max(1.0, (t - costs[i].fixed_s) / costs[i].per_seed_s)) for i in range(n)]

    lo, hi = 0.0, max(c.time(total) for c in costs)
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(shares_at(mid)) < total:
            lo = mid
        else:
            hi = mid
    real = shares_at(hi)
    excess = sum(real) - total  # bisection's last sliver: take it from the unclamped workers
    free = [i for i in range(n) if 1.0 < real[i] < caps[i]] or list(range(n))
    for i in free:
        real[i] -= excess / len(free)
    shares = round_to_total(real, total)
    # Rounding may push a capped worker one over its cap: hand the excess to the fastest others.
    for i in range(n):
        while shares[i] > caps[i]:
            j = min((k for k in range(n) if shares[k] < caps[k]), key=lambda k: costs[k].time(shares[k] + 1))
            shares[i] -= 1
            shares[j] += 1
    return shares


def imbalance(times: Sequence[float]) -> float:
    """``max / min`` of positive times (1.0 = balanced).

    Example:
        >>> imbalance([2.0, 1.0])
        2.0
    """
    low = min(times)
    return math.inf if low <= 0 else max(times) / low


def fit_cost(samples: Sequence[tuple[float, float]], min_spread: float = 0.1) -> LinearCost:
    """A worker's :class:`LinearCost` from ``(seeds per step, busy seconds per step)`` windows.

    Least squares when the windows' shares differ by more than ``min_spread`` (relative), so the
    fixed part (optimizer step, per-step overheads: work that does not move with seeds) is
    separated from the per-seed part; through the origin otherwise (one share seen so far).
    The fixed part is kept in ``[0, min busy]`` and the per-seed part positive: where the time
    does not rise with the share, nearly all of it is fixed.

    Example:
        >>> fit_cost([(100, 1.1), (200, 2.1)])
        LinearCost(fixed_s=0.1, per_seed_s=0.01)
        >>> fit_cost([(100, 1.0)])
        LinearCost(fixed_s=0.0, per_seed_s=0.01)
        >>> fit_cost([(8, 5.0), (2, 5.0)])  # a quarter of the seeds, the same time: latency-bound
        LinearCost(fixed_s=4.95, per_seed_s=0.01)
    """
    pts = [(float(x), float(y)) for x, y in samples if x > 0 and y > 0 and math.isfinite(y)]
    if not pts:
        raise ValueError("fit_cost: expected at least one window with seeds and busy time")
    xs = [x for x, _ in pts]
    if (max(xs) - min(xs)) <= min_spread * max(xs):
        return LinearCost(0.0, sum(y for _, y in pts) / sum(xs))
    n, mx, my = len(pts), sum(xs) / len(pts), sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
    # Shares that differ by min_spread and times that do not rise with them: the time is the
    # worker's fixed cost (latency-bound steps); a per-seed cost of FLAT of the origin model's
    # keeps the model strictly increasing, as balanced_shares needs.
    slope = max(slope, FLAT * my / mx)
    fixed = min(max(0.0, my - slope * mx), min(y for _, y in pts))
    return LinearCost(round(fixed, 12), round(slope, 12))


def drifted(samples: Sequence[tuple[float, float]], point: tuple[float, float], tolerance: float = 0.3) -> bool:
    """Whether ``point`` (seeds per step, busy seconds per step) lies off ``samples`` by more than
    ``tolerance`` both as a per-seed cost (their time per seed times its share) and as a fixed one
    (their mean time): the worker's speed changed (a slowdown began, a neighbour arrived), so the
    older samples describe another machine. At the share the samples were taken the two agree.
    A point that fits either is kept: a step that did not shrink with a smaller share is a fixed
    cost coming to light (pubmed's latency-bound steps), not a slower machine; judged as per-seed
    cost alone, every such move reset the history and the fit never saw the fixed part.

    Example:
        >>> drifted([(100, 1.0)], (100, 1.1)), drifted([(100, 1.0)], (100, 1.6))
        (False, True)
        >>> drifted([(100, 1.0)], (50, 0.5)), drifted([(100, 1.0)], (50, 1.05))  # per seed; fixed
        (False, False)
        >>> drifted([(100, 1.0)], (50, 1.6)), drifted([], (150, 3.0))  # neither; nothing to compare
        (True, False)
    """
    pts = [(x, y) for x, y in samples if x > 0]
    if not pts or point[0] <= 0:
        return False
    per_seed = point[0] * sum(y for _, y in pts) / sum(x for x, _ in pts)
    fixed = sum(y for _, y in pts) / len(pts)
    return all(p > 0 and abs(point[1] - p) > tolerance * p for p in (per_seed, fixed))


def rebalance(shares: Sequence[int], costs: Sequence[LinearCost], eps: float = 0.1,
              damping: float = 1.0) -> Optional[list[int]]:
    """New shares from the workers' fitted costs, or None when they are already within ``1 + eps``.

    The predicted step times at the current shares are compared; if the slowest exceeds the
    fastest by more than ``1 + eps``, the shares move ``damping`` of the way (1: all the way)
    towards :func:`balanced_shares` of the costs, with the same total: seeds move from the slowest
    to the fastest. Costs fitted from a few noisy windows overshoot; a damping below 1 keeps one
    bad window from swinging the shares, at the price of a few more steps to converge.
    None also when the move would not shorten the predicted step by ``eps / 2`` of it.

    Example:
        >>> rebalance([10, 10], [LinearCost(0.0, 0.1), LinearCost(0.0, 0.105)]) is None
        True
        >>> rebalance([10, 10], [LinearCost(0.0, 0.1), LinearCost(0.0, 0.3)])
        [15, 5]
    """
    if len(shares) != len(costs):
        raise ValueError(f"rebalance: {len(shares)} shares but {len(costs)} costs")
    if imbalance([c.time(s) for c, s in zip(costs, shares)]) <= 1.0 + eps:
        return None
    target = balanced_shares(costs, total=sum(shares))
    new = round_to_total([s + damping * (t - s) for s, t in zip(shares, target)], sum(shares))
    before = max(c.time(s) for c, s in zip(costs, shares))
    after = max(c.time(s) for c, s in zip(costs, new))
    if list(new) == list(shares) or after > before * (1.0 - eps / 2):
        return None
    return new


def choose_shares(current: Sequence[int], candidate: Optional[Sequence[int]], natural: Sequence[int],
                  costs: Sequence[LinearCost], steps: int, migration_s: float, epochs: float = 1.0
                  ) -> Optional[list[int]]:
    """Where to go when moving seeds costs migrations: ``candidate``, back to ``natural``, or None (stay).

    Shares other than ``natural`` (each part's own train nodes) cost a migration at the start of
    every later epoch, and a change of shares one more at once. So an option costs, averaged over
    the ``epochs`` left (this one counted, its start already paid), ``steps`` times its predicted
    step (the slowest worker's fitted time), plus ``migration_s`` for each later epoch away from
    ``natural``, plus one for a change. The cheapest wins, staying on a tie. Where steps are
    latency-bound and epochs short, what a move saves does not pay for the migrations it brings:
    the shares stay, or return to where no seed has to move.

    Example:
        >>> costs = [LinearCost(0.0, 0.001), LinearCost(0.0, 0.002)]  # worker 1 twice as slow per seed
        >>> choose_shares([100, 100], [133, 67], [100, 100], costs, steps=4, migration_s=0.05)
        [133, 67]
        >>> choose_shares([100, 100], [133, 67], [100, 100], costs, steps=4, migration_s=0.3) is None
        True
        >>> choose_shares([133, 67], None, [100, 100], costs, steps=1, migration_s=0.2, epochs=5)
        [100, 100]
    """
    epochs = max(1.0, epochs)

    def per_epoch(shares: Sequence[int]) -> float:
        step = max(c.time(s) for c, s in zip(costs, shares))
        return steps * step + (migration_s * (epochs - 1) / epochs if list(shares) != list(natural) else 0.0)

    best, best_cost = None, per_epoch(current)
    for option in (candidate, natural):
        if option is None or list(option) == list(current):
            continue
        cost = per_epoch(option) + migration_s / epochs
        if cost < best_cost:
            best, best_cost = list(option), cost
    return best


def quotas(shares: Sequence[int], steps_left: int, remaining: int) -> list[int]:
    """Seeds each worker takes in the rest of the epoch: ``remaining`` split in proportion to shares.

    Exactly the remaining seeds, so no worker runs out early and repeats seeds while another
    still holds unvisited ones; all of them finish in about the same step. Each quota is at most
    ``share * steps_left`` unless the seeds exceed that capacity (then all are raised alike, and
    the loader's batches grow at the end rather than skip a train node).

    Example:
        >>> quotas([3, 1], steps_left=2, remaining=8)
        [6, 2]
        >>> quotas([3, 1], steps_left=2, remaining=6)
        [5, 1]
    """
    if not shares:
        return []
    return largest_remainder([float(s) for s in shares], remaining, minimum=0)


def migration(remaining: Sequence[int], quota: Sequence[int]) -> list[list[tuple[int, int, int]]]:
    """Who sends which of its remaining seeds to whom, so that every worker holds at most its quota.

    ``remaining[i]`` seeds are still unvisited on worker ``i`` (in its epoch order). A worker keeps
    the first ``min(remaining, quota)`` of its own (locality: they are its part's nodes) and
    donates the tail; workers below quota take donations in rank order. The result, per recipient,
    lists ``(donor, start, stop)`` slices of the donor's remaining seeds. Donated seeds beyond
    every quota stay with their donor (the caller sizes quotas with :func:`quotas`, so there are none).

    Example:
        >>> migration([10, 2], [6, 6])
        [[], [(0, 6, 10)]]
    """
    keep = [min(r, q) for r, q in zip(remaining, quota)]
    surplus = [(i, keep[i], remaining[i]) for i in range(len(remaining)) if remaining[i] > keep[i]]
    out: list[list[tuple[int, int, int]]] = [[] for _ in remaining]
    for i in range(len(remaining)):
        need = quota[i] - keep[i]
        while need > 0 and surplus:
            donor, start, stop = surplus[0]
            take = min(need, stop - start)
            out[i].append((donor, start, start + take))
            need -= take
            if start + take == stop:
                surplus.pop(0)
            else:
                surplus[0] = (donor, start + take, stop)
    return out
