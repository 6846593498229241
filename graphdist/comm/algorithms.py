"""Allreduce algorithms as callables: ``algorithm(tensor, group, tag) -> Handle``.

An algorithm starts an in-place sum over the group and returns at once; it counts the
bytes this rank sends by its own formula, and the part of them that crosses hosts by the
``Topology`` it was built with. Sync hooks (``graphdist.sync.hooks``) take an algorithm, so a
topology-aware one plugs in without touching them. Today's is :class:`Ring`, the backend's
``all_reduce``: gloo and NCCL run a ring (or a tree, for NCCL's small messages), and the ring's
formula ``2 (P-1)/P * nbytes`` is what each rank sends.

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

from graphdist.comm.collectives import Group, Handle, group_rank, group_size, start_all_reduce
from graphdist.comm.counters import COUNTER
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


ALLREDUCE_ALGORITHMS: dict[str, Any] = {"ring": Ring}


def allreduce_algorithm(name: str = "ring", topology: Optional[Topology] = None) -> AllreduceAlgorithm:
    """The algorithm registered as ``name``, built for ``topology``.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name not in ALLREDUCE_ALGORITHMS:
        raise ValueError(f"Expected an allreduce algorithm in {sorted(ALLREDUCE_ALGORITHMS)} (got {name!r})")
    return ALLREDUCE_ALGORITHMS[name](topology)


_DEFAULT = Ring()


def all_reduce_async(tensor: torch.Tensor, op: str = "sum", group: Group = None, tag: str = "grad") -> Handle:
    """Starts an in-place all-reduce (``sum``, ``max``, ``min``) and returns at once; ``wait()`` completes it.

    Counted as a ring (:class:`Ring`). For gradient traffic, sync hooks call an algorithm instead.
    """
    return _DEFAULT(tensor, group, tag, op=op)


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


__all__ = ["ALLREDUCE_ALGORITHMS", "AllreduceAlgorithm", "Ring", "all_reduce", "all_reduce_async",
           "allreduce_algorithm"]
