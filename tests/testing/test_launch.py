import time

import pytest
import torch

from graphdist.testing import WorkerFailed, WorkerTimeout, launch


def _allreduce_ranks(rank: int, world_size: int) -> None:
    import torch.distributed as dist

    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    assert t.item() == sum(range(world_size))


def _raise_on_rank_1(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("boom from rank 1")


def _hang_on_rank_1(rank: int, world_size: int) -> None:
    if rank == 1:
        time.sleep(600)


def test_launch_runs_collective():
    launch(_allreduce_ranks, 2, timeout=30)


def test_launch_propagates_child_exception():
    with pytest.raises(WorkerFailed, match=r"rank 1[\s\S]*boom from rank 1"):
        launch(_raise_on_rank_1, 2, timeout=30)


def test_launch_times_out_on_hang():
    start = time.monotonic()
    # Rank 1 hangs for sure; under load rank 0 may not have finished starting either.
    with pytest.raises(WorkerTimeout, match=r"ranks \[(0, )?1\] still running"):
        launch(_hang_on_rank_1, 2, timeout=8)
    assert time.monotonic() - start < 30
