"""Batch shares: the closed-form optimum, the rebalance step, cost fits, quotas and seed migration."""

import random

import pytest

from placement.shares import (LinearCost, balanced_shares, fit_cost, imbalance, largest_remainder, migration, quotas,
                              rebalance)


def test_balanced_shares_equalise_linear_costs_exactly():
    costs = [LinearCost(0.002, 0.001), LinearCost(0.0, 0.002), LinearCost(0.001, 0.004)]
    shares = balanced_shares(costs, total=7000)
    assert sum(shares) == 7000
    times = [c.time(s) for c, s in zip(costs, shares)]
    # The closed form: T = (total + sum a/c) / sum 1/c, b = (T - a) / c, up to rounding to integers.
    t = (7000 + sum(c.fixed_s / c.per_seed_s for c in costs)) / sum(1 / c.per_seed_s for c in costs)
    assert [round((t - c.fixed_s) / c.per_seed_s) for c in costs] == pytest.approx(shares, abs=1)
    assert max(times) - min(times) <= 2 * max(c.per_seed_s for c in costs) + 1e-12  # one seed of rounding each


def test_balanced_shares_respect_caps_and_minimum():
    costs = [LinearCost(0.0, 1.0), LinearCost(0.0, 2.0), LinearCost(100.0, 1.0)]
    shares = balanced_shares(costs, total=90, caps=[40, 90, 90])
    assert shares[0] == 40 and shares[2] == 1 and sum(shares) == 90  # capped, and a worker slower than T
    with pytest.raises(ValueError, match="caps"):
        balanced_shares(costs, total=90, caps=[10, 10, 10])
    with pytest.raises(ValueError, match="positive"):
        balanced_shares([LinearCost(0.0, 0.0)], total=4)


def test_largest_remainder_sums_and_breaks_ties_by_index():
    assert largest_remainder([1.0, 1.0], 5) == [3, 2]
    assert largest_remainder([0.0, 0.0, 1.0], 3, minimum=0) == [0, 0, 3]
    assert largest_remainder([2.0, 1.0], 2) == [1, 1]  # the minimum of 1 each comes first


def test_rebalance_keeps_balanced_shares_and_moves_towards_the_fast_worker():
    fast, slow = LinearCost(0.01, 0.001), LinearCost(0.02, 0.002)
    assert rebalance([100, 100], [fast, fast]) is None
    new = rebalance([100, 100], [fast, slow], damping=1.0)
    assert new[0] > new[1] and sum(new) == 200
    assert imbalance([fast.time(new[0]), slow.time(new[1])]) < imbalance([fast.time(100), slow.time(100)])
    half = rebalance([100, 100], [fast, slow], damping=0.5)
    assert 100 < half[0] < new[0]  # half of the way


def test_fit_cost_separates_fixed_and_per_seed_parts():
    truth = LinearCost(0.01, 0.0005)
    rng = random.Random(0)
    samples = [(b, truth.time(b) * (1 + rng.uniform(-0.01, 0.01))) for b in (100, 150, 220, 300)]
    fit = fit_cost(samples)
    assert fit.fixed_s == pytest.approx(0.01, rel=0.2) and fit.per_seed_s == pytest.approx(0.0005, rel=0.05)
    assert fit_cost([(100, 0.2), (101, 0.2)]).fixed_s == 0.0  # one share seen: through the origin
    with pytest.raises(ValueError):
        fit_cost([(0, 1.0)])


def test_a_slowdown_restarts_the_history_and_the_shares_follow_at_once():
    from placement.shares import drifted

    before = [(509, 0.0125)] * 4  # four windows at 24.6 us a seed
    slowed = (509, 0.025)  # the rank turns 2x slower
    assert not drifted(before, (509, 0.0135)) and drifted(before, slowed)
    fast = fit_cost(before + [(509, 0.0125)], min_spread=0.5)
    mixed, fresh = fit_cost(before + [slowed], min_spread=0.5), fit_cost([slowed], min_spread=0.5)
    # Mixed with the old windows the slow rank looks 1.2x slower; from its own window, 2x.
    assert rebalance([509, 509], [fast, mixed], damping=1.0) == [555, 463]
    assert rebalance([509, 509], [fast, fresh], damping=1.0) == [679, 339]


def test_drift_is_a_window_that_fits_neither_a_per_seed_nor_a_fixed_cost():
    from placement.shares import drifted

    history = [(100, 0.8), (120, 1.0)]
    assert drifted(history, (110, 1.4))  # about the same share, 1.6x the time: the worker slowed down
    assert not drifted(history, (110, 0.95))
    # A quarter of the seeds in the same time is a fixed cost coming to light: judged as per-seed
    # cost alone it reset the history at every move, and the fit never saw the fixed part.
    assert not drifted(history, (25, 0.9))
    # A smaller share and a longer step fits neither (synthetic-100k's first window after a
    # slowdown began mid-move): afresh, or the fit reads the slow rank's step as fixed.
    assert drifted([(2185, 0.0527)], (1514, 0.069))


def test_latency_bound_steps_return_to_the_plans_shares():
    """pubmed's shape: the slow rank takes 5 ms a step at 8 seeds and at 2; each migration costs 5 ms."""
    from placement.shares import choose_shares

    fast = fit_cost([(8, 0.002), (14, 0.0025)], min_spread=0.5)
    slow = fit_cost([(8, 0.005), (4, 0.0051), (2, 0.005)], min_spread=0.5)
    assert slow.fixed_s > 0.0045 and slow.per_seed_s < 1e-4  # nearly all fixed
    assert choose_shares([14, 2], None, [8, 8], [fast, slow], steps=4, migration_s=0.005, epochs=5) == [8, 8]
    # Seen at one share only, the same worker's cost goes through the origin and moving looks worth it.
    origin = fit_cost([(8, 0.005)], min_spread=0.5)
    assert choose_shares([8, 8], rebalance([8, 8], [fast, origin]), [8, 8], [fast, origin], steps=4,
                         migration_s=0.0, epochs=5) is not None
    # With steps long enough, the same migrations pay: synthetic-100k's 15 steps of ~100 ms.
    slow_linear = fit_cost([(2048, 0.2), (1400, 0.137)], min_spread=0.5)
    fast_linear = fit_cost([(2048, 0.1)], min_spread=0.5)
    moved = rebalance([2048, 2048], [fast_linear, slow_linear])
    assert choose_shares([2048, 2048], moved, [2048, 2048], [fast_linear, slow_linear], steps=15,
                         migration_s=0.01, epochs=5) == moved


@pytest.mark.parametrize("seed", range(20))
def test_migration_gives_every_remaining_seed_to_exactly_one_worker_within_quota(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 5)
    remaining = [rng.randint(0, 60) for _ in range(n)]
    shares = [rng.randint(1, 20) for _ in range(n)]
    quota = quotas(shares, steps_left=rng.randint(1, 8), remaining=sum(remaining))
    assert sum(quota) == sum(remaining)
    moves = migration(remaining, quota)
    held = []
    for rank in range(n):
        kept = min(remaining[rank], quota[rank])
        mine = [(rank, i) for i in range(kept)] + [(d, i) for d, lo, hi in moves[rank] for i in range(lo, hi)]
        assert len(mine) == quota[rank]
        held += mine
    assert sorted(held) == sorted((r, i) for r in range(n) for i in range(remaining[r]))  # each seed once


def test_quotas_follow_shares():
    assert quotas([3, 1], steps_left=2, remaining=8) == [6, 2]
    assert quotas([1, 1], steps_left=5, remaining=3) == [2, 1]


@pytest.mark.parametrize("seed", range(10))
def test_balanced_shares_are_feasible_and_no_single_move_improves_them(seed):
    rng = random.Random(seed)
    for _ in range(200):
        n = rng.randint(1, 5)
        total = rng.randint(n, 400)
        costs = [LinearCost(rng.choice([0.0, rng.uniform(0, 0.1)]), rng.uniform(1e-5, 1e-2)) for _ in range(n)]
        caps = [rng.randint(1, total) for _ in range(n)]
        if sum(caps) < total:
            caps = [total] * n
        shares = balanced_shares(costs, total, caps)
        assert sum(shares) == total and all(1 <= s <= c for s, c in zip(shares, caps))
        worst = max(c.time(s) for c, s in zip(costs, shares))
        for i in range(n):  # moving one seed off the slowest worker to any other never helps by more than rounding
            for j in range(n):
                if i != j and shares[i] > 1 and shares[j] < caps[j]:
                    moved = list(shares)
                    moved[i] -= 1
                    moved[j] += 1
                    assert max(c.time(s) for c, s in zip(costs, moved)) >= worst - max(c.per_seed_s for c in costs) - 1e-12
