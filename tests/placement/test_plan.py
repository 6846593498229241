"""The default plan reproduces one part per worker with shares by train nodes; plans validate."""

from __future__ import annotations

import pytest

from placement.plan import Plan, RankPlan, batch_share, default_plan, steps_per_epoch


def test_default_plan_covers_every_train_node_in_equal_steps():
    counts = [100, 7, 0]
    plan = default_plan(counts, batch_size=32, devices=["cpu", "cuda:0", "cpu"])
    assert plan.steps_per_epoch == steps_per_epoch(counts, 32) == 4
    shares = [r.batch_share for r in plan.ranks]
    assert shares == [25, 2, 1]  # a worker with no train nodes still takes part (share 1, empty batches)
    assert all(s * plan.steps_per_epoch >= c for s, c in zip(shares, counts))
    assert plan.rank_of_part == (0, 1, 2) and [r.parts for r in plan.ranks] == [(0,), (1,), (2,)]
    assert [r.device for r in plan.ranks] == ["cpu", "cuda:0", "cpu"]
    assert default_plan(counts, 32, max_steps=2).steps_per_epoch == 2
    assert batch_share(0, 3) == 1 and batch_share(10, 3) == 4


def test_plan_validates_ownership_and_shares():
    ok = Plan((RankPlan(0, (1, 2), "cpu", 8), RankPlan(1, (0,), "cpu", 4)), num_parts=3, steps_per_epoch=2)
    assert ok.rank_of_part == (1, 0, 0) and ok.world_size == 2
    assert "rank 0: parts [1, 2] on cpu, batch share 8" in ok.describe()
    with pytest.raises(ValueError, match="every part 0..2 on exactly one rank"):
        Plan((RankPlan(0, (0, 1), "cpu", 8), RankPlan(1, (1,), "cpu", 4)), num_parts=3, steps_per_epoch=2)
    with pytest.raises(ValueError, match="one RankPlan per rank"):
        Plan((RankPlan(1, (0,), "cpu", 8),), num_parts=1, steps_per_epoch=2)
    with pytest.raises(ValueError, match="batch_share >= 1"):
        Plan((RankPlan(0, (0,), "cpu", 0),), num_parts=1, steps_per_epoch=2)
    with pytest.raises(ValueError, match="1 device or one per rank"):
        default_plan([1, 2, 3], 4, devices=["cpu", "cpu"])
