"""Train-balance refinement of a METIS partition under an edge-cut budget.

METIS's multi-constraint balance is weak on the train-node constraint; ``refine_train_balance``
moves boundary train nodes from over-full to under-full parts, cheapest cut growth first,
until every part is within ``TRAIN_TOLERANCE`` of the mean or the cut has grown by
``MAX_CUT_GROWTH``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from partition.csr import cut_edges, gather_rows

__all__ = ["MAX_CUT_GROWTH", "TRAIN_TOLERANCE", "RefineReport", "refine_train_balance"]

# A part's train-node count may differ from the mean by this fraction after refinement (the bound).
TRAIN_TOLERANCE = 0.10
# Refinement may raise METIS's edge cut by at most this fraction (the bound).
MAX_CUT_GROWTH = 0.10


@dataclass
class RefineReport:
    """What the train-balance refinement did (recorded in ``meta.json``)."""

    metis_cut: int  # directed cut edges of METIS's own result
    final_cut: int
    moved: int = 0
    rounds: int = 0
    balanced: bool = True
    train_before: list[int] = field(default_factory=list)
    train_after: list[int] = field(default_factory=list)


def refine_train_balance(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    parts: np.ndarray,
    train: np.ndarray,
    num_parts: int,
    tolerance: float = TRAIN_TOLERANCE,
    max_cut_growth: float = MAX_CUT_GROWTH,
    max_rounds: int = 50,
) -> tuple[np.ndarray, RefineReport]:
    """Moves boundary train nodes until every part's train count is within ``tolerance`` of the mean.

    Each round computes, for the train nodes of parts above the mean, their
    neighbour count in every part, and moves the cheapest (cut grows by
    ``conn[own] - conn[target]``) to parts below the band, each target taking at
    most its own deficit so moves spread over all under-full parts rather than
    piling onto one. Moves within a round are chosen on gains computed before
    the round; since sources are above the mean and targets below it, two moves
    in one round can only make the true cut smaller than the estimate, so the
    budget (``max_cut_growth`` over METIS's cut) is never exceeded.

    Args:
        xadj, adjncy: symmetric CSR (as given to METIS).
        parts: METIS's result (not modified).
        train: bool ``[n]``.
        num_parts: number of parts.
        tolerance: allowed relative distance of a part's train count from the mean (default 0.10).
        max_cut_growth: allowed relative cut increase over METIS's (default 0.10).
        max_rounds: safety bound on rounds (default 50).

    Returns:
        ``(new parts, report)``; ``report.balanced`` is False when the budget ran out first.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from partition.csr import symmetric_csr
        >>> g = tiny_graph()
        >>> xadj, adjncy = symmetric_csr(g)
        >>> lopsided = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1])  # train nodes 4 : 1
        >>> parts, report = refine_train_balance(
        ...     xadj, adjncy, lopsided, g.train_mask.numpy(), 2, max_cut_growth=1.0)
        >>> report.train_before, report.train_after, report.metis_cut, report.final_cut
        ([4, 1], [3, 2], 6, 8)
    """
    parts = parts.astype(np.int64, copy=True)
    train_ids = np.flatnonzero(train)
    metis_cut = cut_edges(xadj, adjncy, parts)
    # Directed counts: a symmetric CSR stores each undirected cut edge twice.
    limit = math.floor(metis_cut * (1.0 + max_cut_growth))
    report = RefineReport(metis_cut=metis_cut, final_cut=metis_cut)
    report.train_before = np.bincount(parts[train_ids], minlength=num_parts).tolist()
    mean = train_ids.size / num_parts
    lo, hi = math.ceil(mean * (1 - tolerance) - 1e-9), math.floor(mean * (1 + tolerance) + 1e-9)
    # Integer counts: with few train nodes the band may hold no integer; widen it to floor/ceil of the mean.
    lo, hi = min(lo, math.floor(mean)), max(hi, math.ceil(mean))
    cut = metis_cut
    for _ in range(max_rounds):
        counts = np.bincount(parts[train_ids], minlength=num_parts)
        if counts.min() >= lo and counts.max() <= hi:
            break
        moved, cost = _refine_round(xadj, adjncy, parts, train_ids, counts, mean, lo, hi, limit - cut)
        if moved == 0:
            break
        report.rounds += 1
        report.moved += moved
        cut = cut_edges(xadj, adjncy, parts)
    counts = np.bincount(parts[train_ids], minlength=num_parts)
    report.final_cut = cut
    report.train_after = counts.tolist()
    report.balanced = bool(counts.min() >= lo and counts.max() <= hi)
    return parts, report


def _refine_round(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    parts: np.ndarray,
    train_ids: np.ndarray,
    counts: np.ndarray,
    mean: float,
    lo: int,
    hi: int,
    budget: int,
) -> tuple[int, int]:
    """One batch of moves (in place on ``parts``); returns ``(moved, estimated directed cut increase)``."""
    num_parts = counts.size
    # Out-of-band parts are fixed first, each only as far as the band edge: few
    # moves, little cut. When only one side is out of band, the in-band parts on
    # the other side trade up to ceil/floor of the mean, which always leaves
    # enough room (the counts sum to P * mean), spread over all of them by quota.
    if (counts < lo).any():
        take = np.maximum(lo - counts, 0)
    else:
        take = np.maximum(math.ceil(mean) - counts, 0)
    if (counts > hi).any():
        give = np.maximum(counts - hi, 0)
    else:
        give = np.maximum(counts - math.floor(mean), 0)
    if not take.any() or not give.any():
        return 0, 0
    cand = train_ids[give[parts[train_ids]] > 0]
    if cand.size == 0:
        return 0, 0
    deg, nbrs = gather_rows(xadj, adjncy, cand)
    owner = np.repeat(np.arange(cand.size, dtype=np.int64), deg)
    conn = np.bincount(owner * num_parts + parts[nbrs], minlength=cand.size * num_parts).reshape(cand.size, num_parts)
    own = conn[np.arange(cand.size), parts[cand]]
    # Cost of moving candidate i to part q, in directed cut edges; closed targets get a sentinel.
    closed = np.iinfo(np.int64).max
    cost = np.where((take > 0)[None, :], 2 * (own[:, None] - conn), closed)
    # Every (candidate, target) pair, cheapest first; boundary nodes (conn > 0) first among equals.
    order = np.lexsort(((conn == 0).reshape(-1), cost.reshape(-1)))
    flat_cost = cost.reshape(-1)[order]
    valid = flat_cost != closed
    order, flat_cost = order[valid], flat_cost[valid]
    return _apply_moves(parts, cand, order // num_parts, order % num_parts, flat_cost, take, give, budget)


def _apply_moves(
    parts: np.ndarray,
    cand: np.ndarray,
    who: np.ndarray,
    target: np.ndarray,
    cost: np.ndarray,
    take: np.ndarray,
    give: np.ndarray,
    budget: int,
) -> tuple[int, int]:
    """Greedy acceptance in cost order under per-part quotas and the cut budget.

    A Python loop, but over candidate pairs only (train nodes of donor parts
    times parts), and it stops as soon as every quota or the budget is used.
    """
    take, give = take.copy(), give.copy()
    used = np.zeros(cand.size, dtype=bool)
    spent = moved = 0
    need = int(min(take.sum(), give.sum()))
    for i, q, c in zip(who.tolist(), target.tolist(), cost.tolist()):
        if moved >= need:
            break
        if used[i] or take[q] == 0:
            continue
        p = int(parts[cand[i]])
        if give[p] == 0:
            continue
        if spent + c > budget:
            break  # pairs are in cost order: nothing further fits either
        used[i] = True
        parts[cand[i]] = q
        take[q] -= 1
        give[p] -= 1
        spent += c
        moved += 1
    return moved, spent
