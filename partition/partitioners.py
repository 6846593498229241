"""Partitioners: pure functions ``Graph -> node_to_part`` (int64 numpy ``[num_nodes]``).

=========  ==================================================  =====================
method     idea                                                edges kept / labels
=========  ==================================================  =====================
metis      pymetis k-way on the symmetrised graph, balance on  most edges; parts are
           (nodes, train nodes, edges), then a train-balance    label-skewed
           refinement pass (METIS's multi-constraint is weak)
super      METIS into C >> parts mini-clusters, clusters       between the two
           shuffled into parts of equal node count (SuperTMA)
stream     one pass of LDG (or Fennel) over the nodes in a     between metis and
           seeded order, in vectorised blocks                  random; low memory
random     a seeded permutation dealt round-robin (RandomTMA)  ~1/parts of edges;
                                                               global label mix
=========  ==================================================  =====================

Example:
    >>> from graphdist.testing import tiny_graph
    >>> parts = PARTITIONERS["random"](tiny_graph(), 2, seed=0)
    >>> np.bincount(parts).tolist()
    [5, 5]
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from graphdist.data.graph import Graph
from partition.csr import cut_edges, gather_rows, graph_arrays, symmetric_csr

logger = logging.getLogger(__name__)

BALANCE_NAMES = ("nodes", "train", "edges")
DEFAULT_BALANCE = BALANCE_NAMES
# A part's train-node count may differ from the mean by this fraction after refinement (the bound).
TRAIN_TOLERANCE = 0.10
# Refinement may raise METIS's edge cut by at most this fraction (the bound).
MAX_CUT_GROWTH = 0.10

Partitioner = Callable[..., np.ndarray]


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


# ------------------------------------------------------------------- metis
def metis(
    graph: Graph,
    num_parts: int,
    seed: int = 0,
    balance: Sequence[str] = DEFAULT_BALANCE,
    refine: bool = True,
    info: Optional[dict[str, Any]] = None,
) -> np.ndarray:
    """METIS k-way partition with multi-constraint balance and train-balance refinement.

    Args:
        graph: the graph (directed graphs are symmetrised for METIS).
        num_parts: number of parts, >= 1.
        seed: METIS's random seed (default 0).
        balance: constraints out of ``("nodes", "train", "edges")`` (default all three);
            ``train`` needs ``graph.train_mask`` and also enables the refinement pass.
        refine: run the train-balance refinement when ``train`` is balanced (default True).
        info: if given, filled with ``metis_cut`` and the refinement report.

    Returns:
        int64 ``[num_nodes]`` part of every node.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> metis(tiny_graph(), 2, balance=("nodes",)).tolist()  # the two rings
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    """
    _check_parts(graph, num_parts)
    balance = validate_balance(balance)
    xadj, adjncy = symmetric_csr(graph)
    train = _train_mask(graph) if "train" in balance else None
    weights = _vertex_weights(xadj, balance, train)
    parts = run_metis(xadj, adjncy, num_parts, seed, weights)
    if refine and train is not None and num_parts > 1:
        parts, report = refine_train_balance(xadj, adjncy, parts, train, num_parts)
        if info is not None:
            info["refine"] = report.__dict__
        if not report.balanced:
            logger.warning(
                "train nodes per part %s are not within %.0f%% of the mean: the refinement stopped at the "
                "edge-cut budget (+%.0f%% over METIS); use --balance without train or another method",
                report.train_after, TRAIN_TOLERANCE * 100, MAX_CUT_GROWTH * 100,
            )
    if info is not None:
        info["edge_cut"] = cut_edges(xadj, adjncy, parts) / max(adjncy.size, 1)
    return parts


def run_metis(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    num_parts: int,
    seed: int,
    weights: Optional[np.ndarray] = None,
    recursive: Optional[bool] = None,
) -> np.ndarray:
    """pymetis on a symmetric loop-free CSR; ``weights`` is ``[n, ncon]`` int or None.

    ``recursive`` None keeps pymetis's choice (bisection up to 8 parts, k-way above).
    """
    import pymetis  # heavy C extension: only the METIS-based methods need it

    n = xadj.size - 1
    if num_parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    index = pymetis.zero_copy_dtype()  # arrays already of this dtype are passed without a copy
    options = pymetis.Options()
    options.seed = int(seed)
    vweights = None if weights is None else np.ascontiguousarray(weights, dtype=index).reshape(-1)
    result = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(xadj.astype(index, copy=False), adjncy.astype(index, copy=False)),
        vweights=vweights,
        options=options,
        recursive=recursive,
    )
    return np.array(result.vertex_part, dtype=np.int64)


def validate_balance(balance: Union[str, Sequence[str]]) -> tuple[str, ...]:
    """Normalises ``"nodes,train"`` or a sequence to a tuple; raises on unknown names."""
    names = tuple(b.strip() for b in (balance.split(",") if isinstance(balance, str) else balance) if b.strip())
    unknown = [b for b in names if b not in BALANCE_NAMES]
    if unknown or not names:
        got = ",".join(names) or "nothing"
        raise ValueError(
            f"--balance: expected a non-empty subset of {','.join(BALANCE_NAMES)} (got {got}), "
            "e.g. --balance nodes,train"
        )
    return tuple(dict.fromkeys(names))


def _vertex_weights(xadj: np.ndarray, balance: Sequence[str], train: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``[n, ncon]`` METIS vertex weights, or None for plain node balance."""
    columns = []
    n = xadj.size - 1
    for name in balance:
        if name == "nodes":
            columns.append(np.ones(n, dtype=np.int64))
        elif name == "train" and train is not None and train.any():
            columns.append(train.astype(np.int64))
        elif name == "edges":
            # Degree + 1: METIS rejects a constraint whose weights are all zero.
            columns.append(np.diff(xadj) + 1)
    if not columns or (len(columns) == 1 and balance[0] == "nodes"):
        return None
    return np.stack(columns, axis=1)


def _train_mask(graph: Graph) -> Optional[np.ndarray]:
    if graph.train_mask is None or not bool(graph.train_mask.any()):
        return None
    return graph.train_mask.numpy()


# ------------------------------------------------------------ refinement
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


# ------------------------------------------------------------------ random
def random(graph: Graph, num_parts: int, seed: int = 0) -> np.ndarray:
    """Every node uniformly over parts (RandomTMA), with exactly equal part sizes.

    A seeded permutation dealt round-robin: each node's part is uniform, and
    part sizes differ by at most one (independent draws would differ by ~sqrt(N/P)).

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> np.bincount(random(tiny_graph(), 2, seed=1)).tolist()
        [5, 5]
    """
    _check_parts(graph, num_parts)
    rng = np.random.default_rng(seed)
    return rng.permutation(graph.num_nodes).astype(np.int64) % num_parts


# ------------------------------------------------------------------- super
def super_clusters(graph: Graph, num_parts: int, seed: int = 0, num_clusters: Optional[int] = None) -> np.ndarray:
    """SuperTMA: METIS into C mini-clusters, clusters shuffled into parts of equal node count.

    Args:
        graph: the graph.
        num_parts: number of parts.
        seed: seeds both METIS and the shuffle (default 0).
        num_clusters: C; default ``max(1000, 50 * num_parts)``, capped by the node count.

    Example:
        >>> from graphdist.testing import random_graph
        >>> parts = super_clusters(random_graph(400), 4, num_clusters=40)
        >>> np.bincount(parts).tolist()  # equal up to one cluster
        [101, 98, 100, 101]
    """
    _check_parts(graph, num_parts)
    n = graph.num_nodes
    c = num_clusters if num_clusters is not None else max(1000, 50 * num_parts)
    c = max(num_parts, min(int(c), n))
    xadj, adjncy = symmetric_csr(graph)
    # Recursive bisection: ~5x faster than k-way for ~1000 clusters (15.5 s -> 2.8 s on a
    # 200k-node graph) and the clusters' exact shape matters little once they are shuffled.
    clusters = run_metis(xadj, adjncy, c, seed, recursive=True)
    c = int(clusters.max()) + 1 if clusters.size else 0
    sizes = np.bincount(clusters, minlength=c)
    shuffled = np.random.default_rng(seed).permutation(c)
    # Deal shuffled clusters into consecutive slots of N/P nodes by each cluster's midpoint.
    ends = np.cumsum(sizes[shuffled])
    mids = ends - sizes[shuffled] / 2.0
    slot = np.minimum((mids * num_parts / max(n, 1)).astype(np.int64), num_parts - 1)
    part_of_cluster = np.empty(c, dtype=np.int64)
    part_of_cluster[shuffled] = slot
    return part_of_cluster[clusters]


# ------------------------------------------------------------------ stream
def stream(
    graph: Graph,
    num_parts: int,
    seed: int = 0,
    order: Union[str, np.ndarray] = "random",
    objective: str = "ldg",
    slack: float = 0.05,
    block_size: Optional[int] = None,
    gamma: float = 1.5,
) -> np.ndarray:
    """One-pass streaming partition (LDG or Fennel), in vectorised blocks of nodes.

    Nodes arrive in ``order``; each goes to the part holding most of its
    already-placed in-neighbours, discounted by that part's fill (LDG:
    ``conn * (1 - size/capacity)``; Fennel: ``conn - alpha*gamma*size^(gamma-1)``).
    Memory is O(N + block edges): nothing is symmetrised.

    A block of nodes is scored against the assignment before the block, so
    neighbours inside one block do not see each other; blocks are kept small
    relative to a part (N / (64 P) nodes, at most 8192) so this costs little cut.

    Args:
        graph: the graph (rows = in-neighbours; undirected graphs see all neighbours).
        num_parts: number of parts.
        seed: seeds the order (for ``order="random"``) and the tie-breaks (default 0).
        order: ``"random"`` (default), ``"natural"`` (node id order) or an explicit permutation.
        objective: ``"ldg"`` (default) or ``"fennel"``.
        slack: parts hold at most ``(1 + slack) * N / P`` nodes (default 0.05).
        block_size: nodes scored together (default as above).
        gamma: Fennel's exponent (default 1.5, as in the paper).

    Example:
        >>> from graphdist.testing import random_graph
        >>> parts = stream(random_graph(200), 4, seed=0)
        >>> int(np.bincount(parts).max()) <= 1.05 * 200 / 4
        True
    """
    _check_parts(graph, num_parts)
    if objective not in ("ldg", "fennel"):
        raise ValueError(f"objective: expected 'ldg' or 'fennel' (got {objective!r})")
    indptr, indices = graph_arrays(graph)
    n = graph.num_nodes
    rng = np.random.default_rng(seed)
    sequence = _stream_order(order, n, rng)
    capacity = max(math.ceil((1.0 + slack) * n / num_parts), 1)
    block = block_size or int(min(8192, max(16, n // (64 * num_parts))))
    # Fennel's alpha from the paper: sqrt(P) * m / n^1.5 (m undirected edges).
    alpha = math.sqrt(num_parts) * (indices.size / 2) / max(n, 1) ** 1.5
    assign = np.full(n, -1, dtype=np.int64)
    sizes = np.zeros(num_parts, dtype=np.int64)
    for start in range(0, n, block):
        nodes = sequence[start : start + block]
        conn = _placed_neighbour_counts(indptr, indices, assign, nodes, num_parts)
        if objective == "ldg":
            score = conn * (1.0 - sizes / capacity)
        else:
            score = conn - alpha * gamma * np.power(sizes.astype(np.float64), gamma - 1.0)
        choice = _choose(score, conn, sizes, capacity, rng)
        assign[nodes] = choice
        sizes += np.bincount(choice, minlength=num_parts)
    return assign


def _stream_order(order: Union[str, np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(order, str):
        if order == "random":
            return rng.permutation(n).astype(np.int64)
        if order == "natural":
            return np.arange(n, dtype=np.int64)
        raise ValueError(f"order: expected 'random', 'natural' or a permutation (got {order!r})")
    sequence = np.asarray(order, dtype=np.int64)
    if sequence.shape != (n,) or not np.array_equal(np.sort(sequence), np.arange(n)):
        raise ValueError(f"order: expected a permutation of 0..{n - 1} (got shape {sequence.shape})")
    return sequence


def _placed_neighbour_counts(
    indptr: np.ndarray, indices: np.ndarray, assign: np.ndarray, nodes: np.ndarray, num_parts: int
) -> np.ndarray:
    """``[len(nodes), P]`` count of each node's in-neighbours already placed in each part."""
    deg, nbrs = gather_rows(indptr, indices, nodes)
    nbr_parts = assign[nbrs]
    row = np.repeat(np.arange(nodes.size, dtype=np.int64), deg)
    placed = nbr_parts >= 0
    keys = row[placed] * num_parts + nbr_parts[placed]
    return np.bincount(keys, minlength=nodes.size * num_parts).reshape(nodes.size, num_parts).astype(np.float64)


def _choose(
    score: np.ndarray, conn: np.ndarray, sizes: np.ndarray, capacity: int, rng: np.random.Generator
) -> np.ndarray:
    """Best part per row under capacity; rows with no placed neighbour go by free space."""
    num_parts = sizes.size
    free = np.maximum(capacity - sizes, 0).astype(np.float64)
    # A tiny seeded jitter breaks ties without changing any strict preference.
    score = score + rng.random(score.shape) * 1e-9
    score[:, free <= 0] = -np.inf
    choice = np.argmax(score, axis=1).astype(np.int64)
    lonely = conn.sum(axis=1) == 0
    if lonely.any():
        # No information: draw proportionally to free space, which keeps a block
        # from piling onto the single least-loaded part.
        weights = free / free.sum() if free.sum() > 0 else np.full(num_parts, 1.0 / num_parts)
        choice[lonely] = rng.choice(num_parts, size=int(lonely.sum()), p=weights)
    return _enforce_capacity(choice, score, sizes, capacity)


def _enforce_capacity(choice: np.ndarray, score: np.ndarray, sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Moves the weakest choices of any part the block would overfill to the emptiest parts."""
    num_parts = sizes.size
    counts = np.bincount(choice, minlength=num_parts)
    room = capacity - sizes
    if np.all(counts <= room):
        return choice
    for p in np.flatnonzero(counts > room):
        rows = np.flatnonzero(choice == p)
        weakest = rows[np.argsort(score[rows, p])][: counts[p] - max(room[p], 0)]
        for r in weakest:
            counts[p] -= 1
            q = int(np.argmax(room - counts))
            choice[r] = q
            counts[q] += 1
    return choice


# ---------------------------------------------------------------- registry
def _check_parts(graph: Graph, num_parts: int) -> None:
    if not isinstance(num_parts, (int, np.integer)) or num_parts < 1:
        raise ValueError(f"num_parts: expected an integer >= 1 (got {num_parts!r})")
    if num_parts > graph.num_nodes:
        raise ValueError(
            f"num_parts: expected at most the number of nodes, {graph.num_nodes:,} (got {num_parts:,})"
        )


PARTITIONERS: dict[str, Partitioner] = {
    "metis": metis,
    "random": random,
    "super": super_clusters,
    "stream": stream,
}
METHODS = tuple(PARTITIONERS)
