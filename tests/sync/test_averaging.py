"""Model averagers: the mean over ranks, at the same step on every rank (even when clocks disagree)."""

from __future__ import annotations

import time

import torch

from graphdist.testing import launch


def _body(rank: int, world_size: int) -> None:
    from graphdist import comm
    from graphdist.sync.averaging import PeriodicAverager, TimedAverager, optimizer_tensors

    # Periodic: every 3rd step averages; parameters set to the rank come out as the mean of the ranks.
    w = torch.nn.Parameter(torch.full((4,), float(rank)))
    avg = PeriodicAverager(3)
    did = []
    for _ in range(6):
        did.append(avg.average_parameters([w]))
        if not did[-1]:
            with torch.no_grad():
                w.add_(rank)  # ranks drift apart between averages
    assert did == [False, False, True, False, False, True]
    assert torch.allclose(w, torch.full((4,), comm.all_reduce(w.detach().clone()).mean().item() / world_size))
    gathered = comm.all_gather_object(w.detach().clone())
    assert all(torch.equal(gathered[0], g) for g in gathered)
    assert comm.byte_counts()["param"] > 0
    # Timed: only rank 1's clock runs past T, yet both ranks average at that very step.
    timed = TimedAverager(0.2)
    decisions = []
    for step in range(3):
        if rank == 1 and step == 1:
            time.sleep(0.3)
        decisions.append(timed.average_parameters([w]))
    assert decisions == [False, True, False], decisions
    # Optimizer moments in parameter order (the same on every rank), scalars (Adam's step) left out.
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p])
    (p * (rank + 1)).sum().backward()
    opt.step()
    moments = optimizer_tensors(opt)
    PeriodicAverager(1).average_now(moments)
    assert torch.allclose(moments[0], torch.full((3,), 0.1 * 1.5))  # exp_avg = 0.1 * grad, grads 1 and 2


def test_averagers_on_two_ranks():
    launch(_body, 2, timeout=60)
