"""Placement's options: where the workers are (``--cluster``), how their start shares are chosen
(``--placement``), how shares move while training (``--rebalance-every``), and what each worker holds
beyond its part (``--replicate``).

Example:
    >>> PlacementSection(placement="equal", rebalance_every=50).rebalance_every
    50
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from graphdist.section import Section, check_choices, fail

# Start shares: "profiled" (probe steps), "equal" (by train nodes), "auto" (profiled when the workers'
# devices differ; equal, and deterministic, when they are alike).
PLACEMENTS = ("auto", "profiled", "equal")
# What every worker holds beyond its part: "none"; "structure" (the whole CSR: sampling is local,
# features stay partitioned); "graph" (CSR and features: data-parallel, no exchange but gradients).
REPLICATE = ("none", "structure", "graph")


@dataclass(frozen=True)
class PlacementSection(Section):
    """Placement's options, checked here; which strategies read each is declared in ``graphdist.options``."""

    cluster: Optional[str] = None  # a cluster spec (YAML): per worker its device, threads, memory, speed
    placement: str = "auto"
    rebalance_every: int = 0  # steps between share rebalancing from measured busy times (0: fixed shares)
    rebalance_eps: float = 0.05  # tolerated imbalance of predicted busy times (max/min - 1)
    # Needs the graph to fit each worker; lets the rebalancer move all of a seed's work.
    replicate: str = "none"

    def check(self) -> None:
        check_choices(("placement", self.placement, PLACEMENTS), ("replicate", self.replicate, REPLICATE))
        if self.rebalance_every < 0:
            raise fail("rebalance-every", "must be >= 0 steps (0: never)", self.rebalance_every)
        if not 0.0 < self.rebalance_eps <= 10.0:
            raise fail("rebalance-eps", "must lie in (0, 10]", self.rebalance_eps)


__all__ = ["PLACEMENTS", "PlacementSection", "REPLICATE"]
