"""The timing model of wait-free backpropagation, docs/design.md#dwbps-timing-model (pure; no processes, no clocks).

One link, collectives served FIFO in backward order. With forward time ``F``, layer ``l``'s
backward time ``b_l`` and its collective's time ``c_l`` (layers ``L..1``, i.e. backward
order), layer ``l``'s sync starts at ``S_l = F + sum_{j>=l} b_j`` and ends at
``E_l = max(S_l, E_{l+1}) + c_l``. An iteration takes ``T_dwbp = max(F + sum b, E_1)``
instead of ``T_seq = F + sum b + sum c``; the hidden fraction is ``(T_seq - T_dwbp) / sum c``.

Example:
    >>> p = dwbp_timing(1.0, [1.0, 1.0], [0.5, 0.5])
    >>> p.t_seq, p.t_dwbp, p.hidden_fraction
    (4.0, 3.5, 0.5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from graphdist.sync.stats import hidden_fraction


@dataclass(frozen=True)
class TimingPrediction:
    """What the model predicts for one iteration (seconds, or any one unit)."""

    t_seq: float  # compute then communicate: F + sum b + sum c
    t_dwbp: float  # wait-free: max(F + sum b, E_1)
    hidden_fraction: float  # (t_seq - t_dwbp) / sum c; 0.0 when there is no communication
    sync_end: tuple[float, ...]  # E_l per layer, in the order given (backward order)


def dwbp_timing(forward: float, backward: Sequence[float], comm: Sequence[float]) -> TimingPrediction:
    """Predicted iteration times with and without wait-free layer-wise sync.

    Args:
        forward: forward time ``F``.
        backward: per-layer backward times in backward order (output layer first).
        comm: per-layer collective times, same order and length.

    Returns:
        The prediction (``t_seq``, ``t_dwbp``, ``hidden_fraction``, per-layer end times).

    Raises:
        ValueError: if the lengths differ or a time is negative.

    Example:
        >>> dwbp_timing(0.0, [1.0, 1.0], [3.0, 0.0]).hidden_fraction  # 1 of 3 hidden
        0.3333333333333333
    """
    if len(backward) != len(comm):
        raise ValueError(f"Expected one comm time per layer ({len(backward)}) (got {len(comm)})")
    if forward < 0 or any(t < 0 for t in backward) or any(t < 0 for t in comm):
        raise ValueError(f"Expected non-negative times (got F={forward}, b={list(backward)}, c={list(comm)})")
    start, end, ends = float(forward), float("-inf"), []
    for b, c in zip(backward, comm):
        start += b  # S_l: the layer's gradients are ready
        end = max(start, end) + c  # E_l: FIFO behind the previous layer's collective
        ends.append(end)
    compute = float(forward) + float(sum(backward))
    total_comm = float(sum(comm))
    t_seq = compute + total_comm
    t_dwbp = max(compute, ends[-1]) if ends else compute
    # The exposed wait is what DWBP adds to compute; the same formula as measured steps use.
    hidden = hidden_fraction(total_comm, t_dwbp - compute) if total_comm > 0 else 0.0
    return TimingPrediction(t_seq, t_dwbp, hidden, tuple(ends))


__all__ = ["TimingPrediction", "dwbp_timing"]
