"""The ``Plan``: who holds what. Per rank its parts, its device and its batch share.

A plan is a pure, frozen value: trainers read it and apply it (the distributed sources get an
owner map built from ``rank_of_part``, the loader its ``batch_share``); it never touches a
process group. :func:`default_plan` reproduces the one-part-per-worker layout: part ``i`` on
rank ``i``, and batch shares in proportion to each part's train nodes, so that every worker
runs the same number of steps and the global batch covers every train node once per epoch.
The placement optimizer (HyScale-GNN style) will return other plans through the same type.

Example:
    >>> plan = default_plan(train_counts=[100, 60], batch_size=64, devices=["cpu"])
    >>> plan.steps_per_epoch, [r.batch_share for r in plan.ranks], plan.rank_of_part
    (3, [34, 20], (0, 1))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence


@dataclass(frozen=True)
class RankPlan:
    """What one rank holds and does.

    Attributes:
        rank: the rank.
        parts: the partition ids it owns (their inner nodes, features and labels).
        device: ``cpu`` or ``cuda:i``.
        batch_share: seeds per step it samples from its own train nodes.
    """

    rank: int
    parts: tuple[int, ...]
    device: str
    batch_share: int


@dataclass(frozen=True)
class Plan:
    """Parts, device and batch share of every rank, and the common step count.

    Attributes:
        ranks: one :class:`RankPlan` per rank, in rank order.
        num_parts: parts of the partition directory.
        steps_per_epoch: steps every rank runs per epoch (collectives need the same count).
    """

    ranks: tuple[RankPlan, ...]
    num_parts: int
    steps_per_epoch: int

    def __post_init__(self) -> None:
        if [r.rank for r in self.ranks] != list(range(len(self.ranks))):
            raise ValueError(f"Expected one RankPlan per rank 0..{len(self.ranks) - 1}, in order")
        owned = sorted(p for r in self.ranks for p in r.parts)
        if owned != list(range(self.num_parts)):
            raise ValueError(f"Expected every part 0..{self.num_parts - 1} on exactly one rank (got {owned})")
        if self.steps_per_epoch < 1 or any(r.batch_share < 1 for r in self.ranks):
            raise ValueError("Expected steps_per_epoch >= 1 and every batch_share >= 1")

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def rank_of_part(self) -> tuple[int, ...]:
        """The rank owning each part, indexed by part id."""
        owner = [0] * self.num_parts
        for r in self.ranks:
            for p in r.parts:
                owner[p] = r.rank
        return tuple(owner)

    def of(self, rank: int) -> RankPlan:
        """The plan of ``rank``."""
        return self.ranks[rank]

    @property
    def shares(self) -> tuple[int, ...]:
        """Every rank's batch share, in rank order."""
        return tuple(r.batch_share for r in self.ranks)

    def with_shares(self, shares: Sequence[int]) -> "Plan":
        """This plan with other batch shares (the profiler's, the rebalancer's); parts, devices and steps kept.

        Example:
            >>> plan = default_plan(train_counts=[100, 60], batch_size=64, devices=["cpu"])
            >>> plan.with_shares([40, 14]).shares, plan.shares
            ((40, 14), (34, 20))
        """
        if len(shares) != len(self.ranks):
            raise ValueError(f"Expected {len(self.ranks)} shares, one per rank (got {len(shares)})")
        return replace(self, ranks=tuple(replace(r, batch_share=int(s)) for r, s in zip(self.ranks, shares)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (what a checkpoint holds); :meth:`from_dict` reads it back.

        Example:
            >>> plan = default_plan(train_counts=[100, 60], batch_size=64, devices=["cpu"])
            >>> Plan.from_dict(plan.to_dict()) == plan
            True
        """
        return {"ranks": [{"rank": r.rank, "parts": list(r.parts), "device": r.device, "batch_share": r.batch_share}
                          for r in self.ranks],
                "num_parts": self.num_parts, "steps_per_epoch": self.steps_per_epoch}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Plan":
        return cls(ranks=tuple(RankPlan(rank=int(r["rank"]), parts=tuple(int(p) for p in r["parts"]),
                                        device=str(r["device"]), batch_share=int(r["batch_share"])) for r in d["ranks"]),
                   num_parts=int(d["num_parts"]), steps_per_epoch=int(d["steps_per_epoch"]))

    def describe(self) -> str:
        """One line per rank, for the log."""
        return "\n".join(f"rank {r.rank}: parts {list(r.parts)} on {r.device}, batch share {r.batch_share}"
                         for r in self.ranks)


def steps_per_epoch(train_counts: Sequence[int], batch_size: int) -> int:
    """Steps every worker runs: the global batch covers all train nodes once per epoch.

    Example:
        >>> steps_per_epoch([100, 60], 64)
        3
    """
    return max(1, math.ceil(sum(train_counts) / batch_size))


def batch_share(num_train: int, steps: int) -> int:
    """A worker's batch share: its train nodes spread over the common step count (>= 1).

    Example:
        >>> batch_share(100, 4), batch_share(0, 4)
        (25, 1)
    """
    return max(1, math.ceil(num_train / steps)) if num_train else 1


def default_plan(
    train_counts: Sequence[int],
    batch_size: int,
    devices: Sequence[str] = ("cpu",),
    max_steps: int = 0,
) -> Plan:
    """Part ``i`` on rank ``i``; shares in proportion to train nodes (one entry per part = per rank).

    Args:
        train_counts: train nodes of each part.
        batch_size: seeds per step over all ranks.
        devices: one device for all ranks, or one per rank.
        max_steps: cap on steps per epoch (0: a full pass over the train nodes).

    Raises:
        ValueError: ``devices`` neither 1 entry nor one per rank.
    """
    return grouped_plan([[p] for p in range(len(train_counts))], train_counts, batch_size, devices, max_steps)


def grouped_plan(
    assignment: Sequence[Sequence[int]],
    train_counts: Sequence[int],
    batch_size: int,
    devices: Sequence[str] = ("cpu",),
    max_steps: int = 0,
) -> Plan:
    """Rank ``r`` holds parts ``assignment[r]``; shares in proportion to each rank's train nodes.

    Every rank then runs the same step count and the global batch covers every train node once
    per epoch, whatever the grouping (``placement.assign.assign_parts`` chooses one).

    Example:
        >>> plan = grouped_plan([[0, 2], [1]], train_counts=[50, 60, 50], batch_size=64)
        >>> [r.batch_share for r in plan.ranks], plan.rank_of_part
        ([34, 20], (0, 1, 0))

    Raises:
        ValueError: ``devices`` neither 1 entry nor one per rank.
    """
    world = len(assignment)
    if len(devices) not in (1, world):
        raise ValueError(f"Expected 1 device or one per rank ({world}) (got {len(devices)})")
    steps = steps_per_epoch(train_counts, batch_size)
    ranks = tuple(RankPlan(rank=r, parts=tuple(sorted(parts)), device=devices[0] if len(devices) == 1 else devices[r],
                           batch_share=batch_share(sum(int(train_counts[p]) for p in parts), steps))
                  for r, parts in enumerate(assignment))
    return Plan(ranks=ranks, num_parts=len(train_counts), steps_per_epoch=min(steps, max_steps) if max_steps else steps)


__all__ = ["Plan", "RankPlan", "batch_share", "default_plan", "grouped_plan", "steps_per_epoch"]
