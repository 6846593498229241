"""Allreduce algorithms as callables: ``algorithm(tensor, group, tag) -> Handle``.

An algorithm starts an in-place sum over the group and returns at once; it counts the
bytes this rank sends by its own formula, and the part of them that crosses hosts by the
``Topology`` it was built with. Sync hooks (``graphdist.sync.hooks``) take an algorithm, so a
topology-aware one plugs in without touching them (``--allreduce NAME``):

- ``ring`` (:class:`Ring`): the backend's ``all_reduce``; gloo and NCCL run a ring (or a tree,
  for NCCL's small messages), and the ring's formula ``2 (P-1)/P * nbytes`` is what each rank sends.
- ``hd`` and ``hier``: halving-doubling and hierarchical (``graphdist.comm.halving``).
- ``auto`` (:class:`Auto`): ``ring`` on one host or under NCCL (NCCL's own allreduce is the one
  to beat on GPUs); otherwise each candidate is timed once on a probe tensor at start and the
  fastest kept (every rank keeps the same one: the times are the slowest rank's).

Example:
    >>> import torch
    >>> from graphdist.testing import one_rank_group
    >>> ring = allreduce_algorithm("ring")
    >>> with one_rank_group():
    ...     t = ring(torch.ones(4), None, "doc").wait()
    >>> t.tolist(), ring.bytes_sent(1000, rank=0, world_size=4)
    ([1.0, 1.0, 1.0, 1.0], (1500, 0))
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import torch

from graphdist.comm.collectives import Group, Handle, backend_name, group_rank, group_size, start_all_reduce
from graphdist.comm.counters import COUNTER
from graphdist.comm.group import get_world_size, is_initialized
from graphdist.comm.halving import HalvingDoubling, Hierarchical
from graphdist.comm.topology import Topology


class AllreduceAlgorithm(Protocol):
    """What a sync hook calls: an in-place sum over ``group`` that returns a :class:`Handle` at once."""

    name: str

    def __call__(self, tensor: torch.Tensor, group: Group = None, tag: str = "grad") -> Handle: ...

    def bytes_sent(self, nbytes: int, rank: int, world_size: int) -> tuple[int, int]:
        """``(bytes this rank sends, of which across hosts)`` to reduce a tensor of ``nbytes``."""
        ...


class Ring:
    """The backend's allreduce, counted as a ring: each rank sends ``2 (P-1)/P * nbytes`` to its successor.

    Args:
        topology: which ranks share a host (default: unknown, nothing counted as inter-host).
            Only consulted for groups of the topology's size (the default group).

    Example:
        >>> Ring(Topology.parse("2x2", 4)).bytes_sent(400, rank=1, world_size=4)  # rank 1 -> rank 2: other host
        (600, 600)
    """

    name = "ring"

    def __init__(self, topology: Optional[Topology] = None) -> None:
        self.topology = topology

    def bytes_sent(self, nbytes: int, rank: int, world_size: int) -> tuple[int, int]:
        if world_size <= 1:
            return 0, 0
        sent = int(2 * (world_size - 1) / world_size * nbytes)
        successor = (rank + 1) % world_size
        topo = self.topology
        crosses = topo is not None and topo.world_size == world_size and not topo.same_host(rank, successor)
        return sent, sent if crosses else 0

    def __call__(self, tensor: torch.Tensor, group: Group = None, tag: str = "grad", op: str = "sum") -> Handle:
        size = group_size(group, tensor)
        sent, inter = self.bytes_sent(tensor.numel() * tensor.element_size(), group_rank(group, tensor), size)
        COUNTER.add(tag, sent, inter_host=inter)
        return start_all_reduce(tensor, op=op, group=group)

    def __repr__(self) -> str:
        return f"Ring({self.topology.describe() if self.topology else 'topology unknown'})"


class Auto:
    """The fastest of ``ring``, ``hd`` and ``hier`` for this cluster, chosen once at construction.

    On one host, for one rank, for one rank per host on 2 hosts (nothing else differs), or under
    NCCL: ``ring`` without a measurement. Otherwise every
    candidate sums a probe tensor ``repeats`` times; the median time of the slowest rank decides.
    Construction is collective (every rank, same point).

    Args:
        topology: which ranks share a host.
        probe_bytes: size of the probe (the trainer passes its largest layer's gradient).
        repeats: timed runs per candidate, after one warm-up.

    Example:
        >>> Auto(None).chosen  # no process group: nothing to measure
        'ring'
    """

    name = "auto"

    def __init__(self, topology: Optional[Topology] = None, probe_bytes: int = 1 << 20, repeats: int = 3) -> None:
        self.topology = topology
        self.probe_bytes = int(probe_bytes)
        self.timings: dict[str, float] = {}
        self.chosen = "ring"
        self._algorithm: Any = Ring(topology)
        size = get_world_size() if is_initialized() else 1
        if size <= 1 or topology is None or topology.num_hosts <= 1 or backend_name() == "nccl":
            return
        candidates: dict[str, Any] = {"ring": self._algorithm}
        if size > 2:  # for 2 ranks halving-doubling is the ring's exchange in more steps
            candidates["hd"] = HalvingDoubling(topology)
        if any(len(h) > 1 for h in topology.hosts):
            candidates["hier"] = Hierarchical(topology)
        if len(candidates) == 1:
            return
        probe = torch.zeros(max(1, probe_bytes // 4))
        for name, algorithm in candidates.items():
            self.timings[name] = _slowest_median(algorithm, probe, repeats)
        self.chosen = min(self.timings, key=self.timings.__getitem__)
        self._algorithm = candidates[self.chosen]

    def bytes_sent(self, nbytes: int, rank: int, world_size: int) -> tuple[int, int]:
        return self._algorithm.bytes_sent(nbytes, rank, world_size)

    def __call__(self, tensor: torch.Tensor, group: Group = None, tag: str = "grad", op: str = "sum") -> Handle:
        return self._algorithm(tensor, group, tag, op=op)

    def describe(self) -> str:
        """``auto: hier (ring 0.412 s, hd 0.301 s, hier 0.287 s for a 4.0 MB probe)``, for the log."""
        if not self.timings:
            return f"auto: {self.chosen} (no measurement: one host, two ranks on two hosts, or NCCL)"
        times = ", ".join(f"{k} {v:.3f} s" for k, v in self.timings.items())
        return f"auto: {self.chosen} ({times} for a {self.probe_bytes / 2**20:.1f} MB probe)"

    def __repr__(self) -> str:
        return f"Auto({self.chosen})"


def _slowest_median(algorithm: Any, probe: torch.Tensor, repeats: int) -> float:
    """Median over ``repeats`` runs of the slowest rank's time to sum ``probe`` (one warm-up first)."""
    import time

    algorithm(probe.clone(), None, "probe").wait()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        algorithm(probe.clone(), None, "probe").wait()
        times.append(time.perf_counter() - t0)
    median = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
    _DEFAULT(median, None, "probe", op="max").wait()
    return float(median.item())


ALLREDUCE_ALGORITHMS: dict[str, Any] = {"ring": Ring, "hd": HalvingDoubling, "hier": Hierarchical, "auto": Auto}


def allreduce_algorithm(name: str = "ring", topology: Optional[Topology] = None, **kwargs: Any) -> AllreduceAlgorithm:
    """The algorithm registered as ``name``, built for ``topology`` (``kwargs``: e.g. ``probe_bytes`` for auto).

    Every rank must call it at the same point: all but ``ring`` create process groups.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name not in ALLREDUCE_ALGORITHMS:
        raise ValueError(f"Expected an allreduce algorithm in {sorted(ALLREDUCE_ALGORITHMS)} (got {name!r}); "
                         f"e.g. --allreduce auto")
    return ALLREDUCE_ALGORITHMS[name](topology, **kwargs)


_DEFAULT = Ring()


def all_reduce_async(tensor: torch.Tensor, op: str = "sum", group: Group = None, tag: str = "grad") -> Handle:
    """Starts an in-place all-reduce (``sum``, ``max``, ``min``) and returns at once; ``wait()`` completes it.

    Counted as a ring (:class:`Ring`). For gradient traffic, sync hooks call an algorithm instead.
    """
    return _DEFAULT(tensor, group, tag, op=op)


def all_gather_rows_async(values: list[float], group: Group = None, tag: str = "other") -> tuple[torch.Tensor, Handle]:
    """Starts gathering every rank's ``values`` (the same length on each) and returns at once.

    Returns ``(table, handle)``: after ``handle.wait()``, row r of the ``ranks x len(values)``
    float64 table is rank r's values. Each rank writes its own row of a zero table and the table
    is summed, so it is one small all-reduce that need not be waited for at once (unlike
    ``all_gather_object``, which pickles and blocks).

    Example:
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     table, handle = all_gather_rows_async([1.5, 2.0])
        ...     _ = handle.wait()
        >>> table.tolist()
        [[1.5, 2.0]]
    """
    table = torch.zeros(group_size(group), len(values), dtype=torch.float64)
    table[group_rank(group)] = torch.tensor([float(v) for v in values], dtype=torch.float64)
    return table, all_reduce_async(table, group=group, tag=tag)


def all_reduce(tensor: torch.Tensor, op: str = "sum", group: Group = None, tag: str = "other") -> torch.Tensor:
    """In-place all-reduce (``sum``, ``max``, ``min``); returns ``tensor``.

    Example:
        >>> import torch
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     all_reduce(torch.full((2,), 3.0), op="max").tolist()
        [3.0, 3.0]
    """
    all_reduce_async(tensor, op=op, group=group, tag=tag).wait()
    return tensor


__all__ = ["ALLREDUCE_ALGORITHMS", "AllreduceAlgorithm", "Auto", "HalvingDoubling", "Hierarchical", "Ring",
           "all_gather_rows_async", "all_reduce", "all_reduce_async", "allreduce_algorithm"]
