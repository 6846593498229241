"""``--sync auto`` (the default): torch DDP's buckets, or graphdist's per-layer sync where it pays.

Per-layer sync (``dwbp``: a collective per layer launched from the gradient hooks, SACP's
factors, the weight-gradient-first reroute) buys time only where a step waits on its links: it
hides each layer's exchange under the layers below and shrinks the bytes. Everything it adds
runs on the step's own core. On one host the links are loopback or shared memory and a small
GNN's gradients cross them in well under a millisecond, so there is nothing to hide and the
extras are a loss: measured on 2 cores with 2 workers, the default dwbp trained at 0.84x of
torch DDP on the quickstart's workload and 0.90-1.00x on the 1M-node speed workload, while
across emulated hosts dwbp with SACP ran 1.3x (synthetic-1m, 1 Gbit/s) to 5.5x (pubmed,
100 Mbit/s) DDP's speed.

So :func:`choose_sync` decides, once, at the run's start:

- options only one candidate honours decide it (``--compress int8``, ``--sacp on``, an explicit
  ``--allreduce``: per-layer; see :func:`able_modes`);
- on one host, DDP's buckets (the links cannot repay the extras);
- across hosts, probe steps of both (the strategy's own batches and model, alternating, the
  slowest rank's median): DDP's buckets only when they are faster by more than ``MARGIN``; within
  it, per-layer sync, the default before ``auto`` (on emulated 2-host synthetic-1m at 100 Mbit/s
  dwbp won by 4-7%, and a 5% bar for it let probe noise pick DDP, 4% slower).

Every rank takes the same decision from the same gathered numbers; it is kept in the run's
decisions, so the checkpoint holds it and a resume trains on with it (bit for bit).

A choice the probe steps made is measured again when the step time moves: after each epoch the
slowest rank's mean step is compared with the reference (the epoch after the choice, its first
being a warm-up); beyond ``RECHECK_FACTOR`` either way (a link slowed or recovered, the load moved)
the candidates are probed again at that epoch's end and the sync is rebuilt if the other one wins
(:func:`needs_recheck`; ``graphdist.trainers.base.recheck_sync``).

Example (probe medians of the slowest rank, seconds per step):
    >>> choose_sync(("ddp", "dwbp"), one_host=False, step_s={"ddp": 0.050, "dwbp": 0.031}).chosen
    'dwbp'
    >>> choose_sync(("ddp", "dwbp"), one_host=False, step_s={"ddp": 0.030, "dwbp": 0.031}).chosen
    'dwbp'
    >>> choose_sync(("ddp", "dwbp"), one_host=False, step_s={"ddp": 0.008, "dwbp": 0.016}).chosen
    'ddp'
    >>> choose_sync(("ddp", "dwbp"), one_host=True).reason
    'all workers on one host: loopback links leave per-layer sync nothing to hide'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from graphdist.sync.modes import COMPRESSIONS, SYNC_MODES

# Across hosts DDP's buckets must beat per-layer sync by this share of the step to be chosen: within
# it the two are a tie on a noisy machine, and per-layer sync (the default before auto) stays.
MARGIN = 0.05
# A timed choice is probed again when the step time differs from its reference by more than this factor.
RECHECK_FACTOR = 1.5

__all__ = ["MARGIN", "RECHECK_FACTOR", "SyncChoice", "able_modes", "choose_sync", "needs_recheck", "probe_order"]


@dataclass(frozen=True)
class SyncChoice:
    """What ``--sync auto`` chose and why (one log line)."""

    chosen: str
    reason: str

    def describe(self) -> str:
        return f"--sync auto: {self.chosen} ({self.reason})"


def able_modes(sync: str, compress: str, sacp: str, sacp_override: Optional[str], allreduce: str,
               devices: Sequence[str]) -> tuple[str, ...]:
    """The candidates of ``sync`` that honour every option given: a mode that would ignore one (DDP ignores
    ``--allreduce`` and SACP, and sends no int8) is left out.

    Example:
        >>> able_modes("auto", "none", "auto", None, "auto", ("cpu",))
        ('ddp', 'dwbp')
        >>> able_modes("auto", "int8", "auto", None, "auto", ("cpu",)), able_modes("auto", "none", "on", None, "auto", ("cpu",))
        (('dwbp',), ('dwbp',))
    """
    mode = SYNC_MODES[sync]
    if not mode.candidates:
        return (sync,)
    able = []
    on_gpus = all(d.startswith("cuda") for d in devices)
    for name in mode.candidates:
        candidate = SYNC_MODES[name]
        if not candidate.sends(compress):
            continue
        c = COMPRESSIONS.get(compress)
        if c is not None and candidate.owns_allreduce and c.ddp_needs_gpu and not on_gpus:
            continue
        if not candidate.layerwise and (sacp == "on" or sacp_override):
            continue
        if candidate.owns_allreduce and allreduce != "auto":
            continue
        able.append(name)
    return tuple(able)


def choose_sync(able: Sequence[str], one_host: bool, step_s: Optional[dict[str, float]] = None,
                margin: float = MARGIN, timed_by: str = "probe steps") -> SyncChoice:
    """``--sync auto``'s decision among ``able`` (:func:`able_modes`; bucketed first, per-layer last).

    Args:
        one_host: every worker on one host (``Topology``): the links are loopback or shared memory.
        step_s: per candidate, the slowest rank's median probe step in seconds; None: not measured
            (a strategy without probe batches), and the per-layer sync, the default before ``auto``, stays.
        margin: how much faster DDP's buckets must be to be chosen across hosts.
        timed_by: what gave ``step_s``, for the reason (``graphdist-plan`` passes its predictions).
    """
    able = list(able)
    if len(able) == 1:
        return SyncChoice(able[0], "the only mode that honours the options given")
    bucketed = next(name for name in able if SYNC_MODES[name].owns_allreduce)
    layered = next(name for name in able if SYNC_MODES[name].layerwise)
    if one_host:
        return SyncChoice(bucketed, "all workers on one host: loopback links leave per-layer sync nothing to hide")
    if not step_s:
        return SyncChoice(layered, "across hosts, no probe steps to compare: per-layer sync")
    words = f"{timed_by} {layered} {1e3 * step_s[layered]:.1f} ms, {bucketed} {1e3 * step_s[bucketed]:.1f} ms"
    if step_s[bucketed] < (1.0 - margin) * step_s[layered]:
        return SyncChoice(bucketed, words)
    return SyncChoice(layered, words + (f" (within {100 * margin:.0f}%: per-layer)"
                                        if step_s[layered] >= step_s[bucketed] else ""))


def needs_recheck(reference_s: Optional[float], step_s: float, factor: float = RECHECK_FACTOR) -> bool:
    """Whether a timed choice is measured again: the step time ``step_s`` moved from ``reference_s`` by more than
    ``factor``, either way (no reference yet: no).

    Example:
        >>> needs_recheck(0.020, 0.025), needs_recheck(0.020, 0.045), needs_recheck(0.020, 0.010), needs_recheck(None, 1.0)
        (False, True, True, False)
    """
    if not reference_s or reference_s <= 0 or step_s <= 0:
        return False
    return max(step_s / reference_s, reference_s / step_s) > factor


def probe_order(able: Sequence[str], rounds: int) -> list[Any]:
    """The probe steps' modes: one untimed step of each, then ``rounds`` alternating rounds (warm-up effects
    fall on both alike).

    Example:
        >>> probe_order(["ddp", "dwbp"], 2)
        ['ddp', 'dwbp', 'ddp', 'dwbp', 'dwbp', 'ddp']
    """
    order = list(able)
    for k in range(rounds):
        order += list(able) if k % 2 == 0 else list(reversed(able))
    return order
