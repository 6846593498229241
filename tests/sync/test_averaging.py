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
    # Overlapped: the due step starts the average; the next call lands it, keeping the step taken meanwhile.
    v = torch.full((4,), float(rank))
    overlapped = PeriodicAverager(2, overlap=True)
    assert [overlapped.average_parameters([v]) for _ in range(2)] == [False, True]
    assert torch.equal(v, torch.full((4,), float(rank)))  # in flight: not applied yet
    v.add_(10.0 * (rank + 1))  # this rank's next step
    assert overlapped.average_parameters([v]) is False
    assert torch.equal(v, torch.full((4,), 0.5 + 10.0 * (rank + 1)))  # mean(0, 1) + its own step
    assert overlapped.average_parameters([v]) is True and overlapped.averages == 2
    try:
        overlapped.state_dict()
        raise AssertionError("state_dict() with an average in flight must refuse")
    except RuntimeError as err:
        assert "in flight" in str(err)
    overlapped.average_now([v])  # lands the pending one, then averages now: one model everywhere
    assert torch.equal(v, torch.full((4,), 15.5)) and overlapped.state_dict()["averages"] == 3
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
