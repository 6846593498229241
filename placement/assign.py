"""Parts onto workers, batch shares from throughput, and a plan that explains itself.

A partition directory may hold more parts than a job has workers (16 parts on 2, 4 or 8
workers). :func:`assign_parts` places them so that every worker's memory holds its parts, the
predicted work per worker follows its speed, and strongly connected parts share a worker (fewer
cut edges between workers, less remote traffic): each part goes, largest first, to the worker
it is most connected to among those with room under their balanced target, or else to the one
that would finish earliest. :func:`optimize_plan` adds batch shares (``placement.shares``) and
returns a :class:`~placement.plan.Plan` with a per-worker explanation.

Example:
    >>> edges = [[9, 5, 0, 0], [5, 9, 0, 0], [0, 0, 9, 5], [0, 0, 5, 9]]
    >>> assign_parts(work=[1, 1, 1, 1], memory=[1, 1, 1, 1], part_edges=edges, speeds=[1, 1], capacity=[4, 4])
    [[0, 1], [2, 3]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from graphdist.data.paths import human_bytes
from placement.plan import Plan, RankPlan, steps_per_epoch
from placement.shares import LinearCost, balanced_shares

__all__ = ["PlacementError", "WorkerExplanation", "assign_parts", "cut_between_workers", "optimize_plan",
           "part_loads", "part_memory_bytes"]

# Work may exceed a worker's balanced target by this much before adjacency stops pulling parts to it.
_TOLERANCE = 0.05


class PlacementError(ValueError):
    """No placement fits: names the worker and by how much."""


def part_memory_bytes(num_inner: int, num_halo: int, num_edges: int, feature_dim: int, cache_halo: bool = True) -> float:
    """A part's resident bytes on its worker: float32 features of inner (and cached halo) rows, int64 CSR.

    Example:
        >>> part_memory_bytes(1000, 100, 5000, 10, cache_halo=False)
        88008.0
    """
    rows = num_inner + (num_halo if cache_halo else 0)
    return float(rows * feature_dim * 4 + (num_inner + 1 + num_edges) * 8)


def part_loads(meta: dict) -> tuple[list[int], list[float]]:
    """Per part of a ``meta.json`` its train nodes (inner nodes where none are marked; supervision edges
    in a link-prediction partition) and its bytes on a worker (:func:`part_memory_bytes`): what placement
    balances and fits.

    Example:
        >>> part_loads({"feature_dim": 10, "parts": [{"num_inner": 1000, "num_halo": 100, "num_edges": 5000,
        ...                                           "num_train": 60}]})
        ([60], [92008.0])
    """
    parts, dim = meta["parts"], int(meta.get("feature_dim") or 0)
    if meta.get("task") == "link":  # link prediction trains on each part's supervision edges
        train = [int(p["num_train_edges"]) for p in parts]
    else:
        train = [int(p["num_train"] if p.get("num_train") is not None else p["num_inner"]) for p in parts]
    memory = [part_memory_bytes(int(p["num_inner"]), int(p["num_halo"]), int(p["num_edges"]), dim) for p in parts]
    return train, memory


def assign_parts(work: Sequence[float], memory: Sequence[float], part_edges: Sequence[Sequence[int]],
                 speeds: Sequence[float], capacity: Sequence[float]) -> list[list[int]]:
    """Parts per worker: memory fits, work follows speed, connected parts together.

    Args:
        work: per part, its work per epoch (e.g. train nodes).
        memory: per part, its bytes on a worker.
        part_edges: ``[p][q]`` edges between parts (``partition.api.part_edges``).
        speeds: per worker, its relative throughput.
        capacity: per worker, its memory in bytes.

    Raises:
        PlacementError: a part fits no worker, naming the part, the closest worker and the shortfall.
    """
    n_parts, n_workers = len(work), len(speeds)
    if n_parts < n_workers:
        raise PlacementError(f"{n_parts} parts cannot occupy {n_workers} workers; repartition with "
                             f"--num-parts {n_workers} (or a multiple of it)")
    total, speed_sum = float(sum(work)), float(sum(speeds))
    target = [total * s / speed_sum for s in speeds]
    load, used = [0.0] * n_workers, [0.0] * n_workers
    on: list[list[int]] = [[] for _ in range(n_workers)]
    link = [[part_edges[p][q] + part_edges[q][p] for q in range(n_parts)] for p in range(n_parts)]
    for p in sorted(range(n_parts), key=lambda i: (-work[i], i)):
        fits = [w for w in range(n_workers) if used[w] + memory[p] <= capacity[w]]
        if not fits:
            w = max(range(n_workers), key=lambda k: capacity[k] - used[k])
            short = used[w] + memory[p] - capacity[w]
            raise PlacementError(f"part {p} ({human_bytes(memory[p])}) fits no worker: worker {w} has the most room "
                                 f"({human_bytes(capacity[w] - used[w])} of {human_bytes(capacity[w])} free) and lacks "
                                 f"{human_bytes(short)}; use more parts or workers with more memory")
        empty = [w for w in fits if not on[w]]
        room = [w for w in fits if load[w] + work[p] <= target[w] * (1 + _TOLERANCE)]
        if empty and not any(link[p][q] for w in room for q in on[w]):
            choice = min(empty, key=lambda w: (-speeds[w], w))  # start a new worker: nothing pulls p elsewhere
        elif room:
            choice = max(room, key=lambda w: (sum(link[p][q] for q in on[w]), -load[w] / speeds[w], -w))
        else:
            choice = min(fits, key=lambda w: ((load[w] + work[p]) / speeds[w], w))
        on[choice].append(p)
        load[choice] += work[p]
        used[choice] += memory[p]
    empty_workers = [w for w in range(n_workers) if not on[w]]
    if empty_workers:
        raise PlacementError(f"workers {empty_workers} got no part (memory or balance); use more parts")
    return [sorted(ps) for ps in on]


def job_plan(meta: dict, world_size: int, batch_size: int, devices: Sequence[str], max_steps: int,
             part_edges: Callable[[], Sequence[Sequence[int]]], workers: Sequence[object] = (),
             where: str = "the partition") -> Plan:
    """The job's start ``Plan`` from a partition directory's ``meta.json`` (pure: every rank gets the same).

    One part per worker: part ``i`` on rank ``i``. More parts than workers: :func:`assign_parts`
    groups them (each worker's memory holds its parts, train nodes follow the workers' speeds,
    connected parts together) and every worker trains on the union of its parts. Shares follow
    each worker's train nodes, so an epoch still visits every train node once.

    Args:
        part_edges: the parts' edge counts between them, read only where parts are grouped.
        workers: the cluster's workers (``speed``, ``memory_bytes``); default: ``world_size`` alike.
        where: the partition as messages name it (its directory).

    Raises:
        ValueError: fewer parts than workers; ``PlacementError`` (a ValueError): the parts fit no
            worker's memory, naming the part, the worker and the shortfall.

    Example:
        >>> meta = {"num_parts": 2, "parts": [{"num_train": 8, "num_inner": 10, "num_halo": 2, "num_edges": 30},
        ...                                   {"num_train": 8, "num_inner": 10, "num_halo": 2, "num_edges": 30}],
        ...         "feature_dim": 4}
        >>> job_plan(meta, 2, 4, ("cpu",), 0, part_edges=lambda: []).steps_per_epoch
        4
    """
    from placement.plan import default_plan, grouped_plan

    num_parts = int(meta["num_parts"])
    counts, memory = part_loads(meta)
    if num_parts == world_size:
        return default_plan(counts, batch_size, devices, max_steps)
    if num_parts < world_size:
        raise ValueError(f"{where} has {num_parts} parts but the job has {world_size} workers; repartition "
                         f"with --num-parts {world_size} (or a multiple of it) or run --num-workers {num_parts}")
    if not workers:
        from placement.cluster import local_cluster

        workers = local_cluster(world_size).workers
    groups = assign_parts(counts, memory, part_edges(), [w.speed for w in workers], [w.memory_bytes for w in workers])
    return grouped_plan(groups, counts, batch_size, devices, max_steps)


def cut_between_workers(assignment: Sequence[Sequence[int]], part_edges: Sequence[Sequence[int]]) -> int:
    """Edges whose endpoints' parts sit on different workers.

    Example:
        >>> cut_between_workers([[0], [1]], [[3, 2], [1, 4]])
        3
    """
    worker = {p: w for w, ps in enumerate(assignment) for p in ps}
    return sum(c for p, row in enumerate(part_edges) for q, c in enumerate(row) if worker[p] != worker[q])


@dataclass(frozen=True)
class WorkerExplanation:
    """Why a worker got what it got: parts, nodes, memory, share, predicted step time, bottleneck."""

    rank: int
    device: str
    parts: tuple[int, ...]
    inner_nodes: int
    train_nodes: int
    memory_bytes: float
    capacity_bytes: float
    share: int
    step_s: float
    bottleneck: str

    def line(self, measured: bool = True) -> str:
        step = (f"predicted step {1e3 * self.step_s:.1f} ms ({self.bottleneck})" if measured
                else f"relative step time {self.step_s:.3g}")
        return (f"rank {self.rank} ({self.device}): parts {list(self.parts)}, {self.inner_nodes:,} nodes "
                f"({self.train_nodes:,} train), {self.memory_bytes / 2**30:.2f} of {self.capacity_bytes / 2**30:.1f} GiB, "
                f"share {self.share}, {step}")


def optimize_plan(train: Sequence[int], inner: Sequence[int], memory: Sequence[float],
                  part_edges: Sequence[Sequence[int]], devices: Sequence[str], speeds: Sequence[float],
                  capacity: Sequence[float], batch_size: int,
                  costs: Optional[Sequence[dict[str, LinearCost]]] = None,
                  assignment: Optional[Sequence[Sequence[int]]] = None) -> tuple[Plan, list[WorkerExplanation]]:
    """Parts -> workers, then batch shares that balance the predicted step times.

    Args:
        train, inner, memory: per part its train nodes, inner nodes and bytes.
        part_edges: ``[p][q]`` edges between parts.
        devices, speeds, capacity: per worker its device, relative speed and memory (bytes).
        batch_size: the global batch.
        costs: per worker its profiled ``{"sample", "gather", "compute"}`` costs (serial sum); without
            them each worker's per-seed cost is ``1 / speed`` (relative units) and the bottleneck "compute".
        assignment: the parts of each worker when the caller has placed them already (:func:`assign_parts`
            of these same inputs); None places them here.

    Example:
        >>> plan, why = optimize_plan([60, 60], [100, 100], [1.0, 1.0], [[5, 1], [1, 5]], ["cpu", "cpu"],
        ...                           [1.0, 2.0], [8.0, 8.0], batch_size=30)
        >>> [r.batch_share for r in plan.ranks]
        [10, 20]
    """
    if assignment is None:
        assignment = assign_parts(train, memory, part_edges, speeds, capacity)
    if costs is None:
        costs = [{"sample": LinearCost(0.0, 0.0), "gather": LinearCost(0.0, 0.0),
                  "compute": LinearCost(0.0, 1.0 / s)} for s in speeds]
    totals = [LinearCost(sum(c[k].fixed_s for k in c), sum(c[k].per_seed_s for k in c)) for c in costs]
    shares = balanced_shares(totals, total=batch_size)
    steps = steps_per_epoch(train, batch_size)
    ranks, why = [], []
    for w, parts in enumerate(assignment):
        ranks.append(RankPlan(rank=w, parts=tuple(parts), device=devices[w], batch_share=shares[w]))
        parts_of = costs[w]
        bottleneck = max(parts_of, key=lambda k: parts_of[k].time(shares[w]))
        why.append(WorkerExplanation(rank=w, device=devices[w], parts=tuple(parts),
                                     inner_nodes=sum(inner[p] for p in parts), train_nodes=sum(train[p] for p in parts),
                                     memory_bytes=sum(memory[p] for p in parts), capacity_bytes=capacity[w],
                                     share=shares[w], step_s=totals[w].time(shares[w]), bottleneck=bottleneck))
    return Plan(ranks=tuple(ranks), num_parts=len(train), steps_per_epoch=steps), why
