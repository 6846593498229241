"""What gradient sync measured: per-layer events, per-step timings, running totals.

``hidden_fraction`` is THE formula for the share of communication hidden behind backward,
``(T_seq - T_actual) / T_comm = (T_comm - T_exposed) / T_comm``; the timing model
(``graphdist.sync.timing``), the per-step stats, the epoch totals and the benches all call it.

Example:
    >>> hidden_fraction(comm_s=2.0, exposed_s=0.5)
    0.75
    >>> s = SyncSummary(); s.add(comm_s=1.0, exposed_s=0.5, backward_s=2.0, predicted=0.6)
    >>> s.hidden_fraction, s.predicted_hidden_fraction
    (0.5, 0.6)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

if TYPE_CHECKING:  # the numbers here need no torch
    from torch import nn


def hidden_fraction(comm_s: float, exposed_s: float) -> float:
    """Share of ``comm_s`` seconds of communication that did not stall compute, clipped to [0, 1].

    ``exposed_s`` is the time compute waited for communication. ``nan`` when nothing was sent.

    Example:
        >>> hidden_fraction(1.0, 2.0), math.isnan(hidden_fraction(0.0, 0.0))
        (0.0, True)
    """
    if comm_s <= 0:
        return float("nan")
    return min(1.0, max(0.0, (comm_s - exposed_s) / comm_s))


@dataclass
class Layer:
    """A unit of synchronisation: parameters flattened into one buffer, one collective.

    ``modules`` are the module(s) owning the parameters (hooks that capture a Linear's
    input need them); empty when the layer was given as bare parameters.
    """

    name: str
    params: list["nn.Parameter"]
    numel: int
    modules: tuple["nn.Module", ...] = ()


@dataclass
class LayerTiming:
    """One layer's events in one step, in seconds since ``begin_step``."""

    name: str
    numel: int
    ready_s: Optional[float]  # last gradient landed (None: flushed in finish())
    launch_s: float
    complete_s: float  # the backend finished (callback), or the wait returned
    comm_s: float  # service time: complete - max(launch, previous layer's complete)


@dataclass
class StepStats:
    """Timing of one step. Times in seconds; ``comm_s`` is 0.0 where not measured (ddp)."""

    step: int
    mode: str
    num_seeds: int
    total_seeds: int
    backward_s: float  # first gradient hook to last (ddp: begin_step to finish)
    comm_s: float  # sum of the layers' collective service times, T_comm
    exposed_s: float  # time finish() blocked: communication not hidden behind backward
    predicted_hidden_fraction: float  # the timing model (docs/design.md#dwbps-timing-model) on this step's b_l and c_l
    layers: list[LayerTiming] = field(default_factory=list)
    # Time backward blocked on the step's seed count (peers not yet at this step): waiting, not work.
    count_wait_s: float = 0.0

    @property
    def t_seq_s(self) -> float:
        """What compute-then-communicate would take: backward + T_comm."""
        return self.backward_s + self.comm_s

    @property
    def t_dwbp_s(self) -> float:
        """What the step took: backward + the exposed wait."""
        return self.backward_s + self.exposed_s

    @property
    def hidden_fraction(self) -> float:
        return hidden_fraction(self.comm_s, self.exposed_s)


@dataclass
class SyncSummary:
    """Totals over steps that communicated (``comm_s > 0``), for an epoch or a bench window.

    Sums add across ranks too (``merge``), so ``hidden_fraction`` of a merged summary is the
    communication-weighted share over all ranks and steps.
    """

    steps: int = 0
    backward_s: float = 0.0
    comm_s: float = 0.0
    exposed_s: float = 0.0
    predicted_weighted: float = 0.0  # sum of predicted hidden fraction x comm_s

    def add(self, comm_s: float, exposed_s: float, backward_s: float, predicted: float) -> None:
        if comm_s <= 0:
            return
        self.steps += 1
        self.comm_s += comm_s
        self.exposed_s += min(exposed_s, comm_s)
        self.backward_s += backward_s
        if not math.isnan(predicted):
            self.predicted_weighted += predicted * comm_s

    def add_step(self, stats: StepStats) -> None:
        self.add(stats.comm_s, stats.exposed_s, stats.backward_s, stats.predicted_hidden_fraction)

    def as_list(self) -> list[float]:
        """The sums as numbers, in a fixed order (to all-reduce them)."""
        return [float(self.steps), self.backward_s, self.comm_s, self.exposed_s, self.predicted_weighted]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> "SyncSummary":
        steps, backward, comm_s, exposed, predicted = values
        return cls(int(round(steps)), backward, comm_s, exposed, predicted)

    @property
    def hidden_fraction(self) -> float:
        """Share of communication time hidden behind backward over all steps (nan: none)."""
        return hidden_fraction(self.comm_s, self.exposed_s)

    @property
    def predicted_hidden_fraction(self) -> float:
        """The timing model's prediction, weighted by each step's communication time (nan: none)."""
        return self.predicted_weighted / self.comm_s if self.comm_s > 0 else float("nan")


def backward_per_layer(t_first: float, ready: Sequence[Optional[float]]) -> list[float]:
    """b_l from ready times in launch order (a flushed layer took no backward time).

    Example:
        >>> backward_per_layer(1.0, [1.5, None, 2.5])
        [0.5, 0.0, 1.0]
    """
    out, prev = [], t_first
    for r in ready:
        if r is None:
            out.append(0.0)
            continue
        out.append(max(0.0, r - prev))
        prev = max(prev, r)
    return out


def wait_free_witness(timeline: Iterable[tuple[str, str, float]], output_layer: str) -> bool:
    """Whether some other layer became ready while ``output_layer``'s collective was in flight.

    In flight = launched and not yet waited on. This is the property that makes DWBP wait-free;
    an implementation that waits inside the hook never shows it.

    Example:
        >>> wait_free_witness([("launch", "out", 0.1), ("ready", "hid", 0.2), ("wait", "out", 0.3)], "out")
        True
    """
    in_flight = False
    for kind, layer, _t in timeline:
        if layer == output_layer and kind == "launch":
            in_flight = True
        elif layer == output_layer and kind == "wait":
            in_flight = False
        elif in_flight and kind == "ready" and layer != output_layer:
            return True
    return False


__all__ = ["Layer", "LayerTiming", "StepStats", "SyncSummary", "backward_per_layer", "hidden_fraction",
           "wait_free_witness"]
