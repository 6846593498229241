"""Run-time rebalancing: shares move to the fast rank, every rank agrees, every train node is seen once per epoch."""

import time
from pathlib import Path

import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.testing import launch, random_graph, tiny_graph
from graphdist.testing.env import require
from graphdist.testing.slowdown import Slowdown, Stretch, parse_slowdown
from graphdist.trainers.features import GlobalLabels


def test_loader_takes_handed_over_seeds_and_never_repeats_them():
    from sampling import NeighborSampler, NodeLoader

    g = tiny_graph()
    loader = NodeLoader(g, torch.arange(6), NeighborSampler(g, [1], seed=0), batch_size=2, shuffle=False,
                        prefetch=False, num_batches=4)
    seen = []
    for i, batch in enumerate(loader):
        seen.append(batch.seed_nodes.tolist())
        if i == 0:
            assert loader.remaining_seeds(1).tolist() == [2, 3, 4, 5]
            assert loader.remaining_counts(1) == [4, 2, 0, 0]  # from batch 1, 2, 3 and the epoch's end
            loader.set_batch_size(3, from_batch=1, seeds=torch.tensor([2, 3, 9, 8]))
    # Seeds 4 and 5 went elsewhere, 8 and 9 came in; the last batch is empty, not a repeat.
    assert seen == [[0, 1], [2, 3, 9], [8], []]
    with pytest.raises(ValueError, match="no epoch"):
        loader.remaining_seeds(0)


def test_labels_of_handed_over_seeds():
    labels = GlobalLabels(torch.tensor([1, 2, 3]), inner_local=lambda g: g - 5)
    labels.extend(torch.tensor([0, 9]), torch.tensor([7, 8]))
    assert labels(torch.tensor([9, 5, 0, 7])).tolist() == [8, 1, 7, 3]
    with pytest.raises(KeyError, match="neither inner nor handed over"):
        labels(torch.tensor([1]))


def test_slowdown_spec_and_stretch():
    assert parse_slowdown("1:2.0@3") == {1: Slowdown(1, 2.0, 3)}
    for bad in ("1", "x:2", "1:0.5", "1:2@0"):
        with pytest.raises(ValueError, match="GRAPHDIST_TEST_SLOWDOWN"):
            parse_slowdown(bad)
    stretch = Stretch(Slowdown(0, 2.0, from_epoch=2))
    stretch.set_epoch(1)
    stretch.mark()
    sum(i * i for i in range(100_000))
    stretch.tick()
    assert stretch.extra_s == 0.0  # not before its epoch
    stretch.set_epoch(2)
    start = time.perf_counter()
    stretch.mark()
    cpu0 = time.thread_time()
    sum(i * i for i in range(300_000))
    cpu = time.thread_time() - cpu0
    stretch.tick()
    took = time.perf_counter() - start
    # (factor - 1) x the time the thread ran or waited for a core: its CPU time at least, and no
    # more than the work's wall time (what else ran on this core is this machine's business).
    # `took` is that wall time plus the stretch itself (a sleep, or a spin on a core of its own,
    # of at least extra_s): on a busy machine both sides grow, the order stays.
    assert cpu <= stretch.extra_s
    assert stretch.extra_s + stretch.extra_s <= took  # the work's wall time, then the stretch


def test_stretch_counts_time_another_process_held_the_core():
    """A worker sharing its core is slower too: the stretch counts run-queue delay, not only CPU time."""
    import os
    import subprocess
    import sys

    from graphdist.testing.slowdown import wanted_cpu_clock

    require(wanted_cpu_clock() is not time.thread_time and hasattr(os, "sched_setaffinity"),
            "no /proc/thread-self/schedstat or CPU affinity here: the stretch falls back to CPU time")
    before = os.sched_getaffinity(0)
    core = min(before)
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.2)  # the hog is running on that core
        stretch = Stretch(Slowdown(0, 2.0))
        stretch.set_epoch(1)
        stretch.mark()
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        while time.perf_counter() - wall0 < 0.4:
            sum(i * i for i in range(2_000))
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
        stretch.tick()
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    assert cpu < 0.8 * wall  # the core was shared
    # (factor - 1) x the time this thread wanted the core: its wall time here, not its CPU time.
    assert stretch.extra_s == pytest.approx(wall, rel=0.15)


def test_on_a_core_of_its_own_a_worker_takes_factor_times_its_work():
    """A bound worker's threads share its core: each holds it for its own stretch (a slower core),
    and time one queued behind the other is not stretched twice."""
    import os
    import threading

    require(hasattr(os, "sched_setaffinity"), "no CPU affinity here: a worker cannot be bound to one core")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # threads started below inherit the one core
    try:
        stretch = Stretch(Slowdown(0, 2.0))
        stretch.set_epoch(1)

        def work() -> None:
            stretch.mark()
            for _ in range(4):
                sum(i * i for i in range(300_000))
                stretch.tick()

        cpu0, wall0 = time.process_time(), time.perf_counter()
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        os.sched_setaffinity(0, before)
    own = cpu - stretch.extra_s  # the threads' work; the rest of the CPU time is the stretch, spun
    others = wall - cpu  # another process held the core (a parallel test run shares it): that queueing is
    # stretched too, by each thread that was ready then (at most both: 2 x others); siblings' is not.
    # Measured alone: extra 0.98-0.99x the work, and 1.29-1.35x when queueing behind the sibling counted.
    assert stretch.slept_s == 0.0
    assert 0.85 * own <= stretch.extra_s <= 1.15 * own + 2 * others  # (factor - 1) x the work, counted once


class _SeedFeaturesTask:
    """Plain classification of the seeds' own features (a model without graph layers)."""

    def batch_weight(self, batch):
        return int(batch.seed_nodes.numel())

    def batch_loss(self, m, batch, with_degrees, device):
        out = m(batch.x[: batch.seed_nodes.numel()])
        return torch.nn.functional.cross_entropy(out, batch.y[: batch.seed_nodes.numel()]), out, 0


def test_slow_rank_is_stretched_before_each_wait_of_its_step():
    """Forward's return (SACP's count exchange starts there) and backward's end (the gradient wait) both tick."""
    from graphdist.sync.base import NoSync
    from graphdist.trainers.steps import train_steps
    from sampling import NeighborSampler, NodeLoader

    g = tiny_graph()
    model = torch.nn.Sequential(torch.nn.Linear(g.x.shape[1], 3))
    events: list[str] = []
    stretch = Stretch(Slowdown(0, 2.0))
    stretch.tick = lambda: events.append("tick")  # where, not how long
    stretch.attach(model)

    class Batches:  # two steps of plain node classification on x -> y
        def __iter__(self):
            loader = NodeLoader(g, torch.arange(4), NeighborSampler(g, [1], seed=0), batch_size=2, shuffle=False,
                                prefetch=False)
            for b in loader:
                events.append("batch")
                yield b

    class Task(_SeedFeaturesTask):
        def batch_loss(self, m, batch, with_degrees, device):
            loss = super().batch_loss(m, batch, with_degrees, device)
            events.append("forward")
            return loss

    sync = NoSync(model)
    finish = sync.finish
    sync.finish = lambda: (events.append("finish"), finish())[1]
    train_steps(Batches(), sync, torch.optim.SGD(model.parameters(), lr=0.1), torch.device("cpu"), False,
                after_step=lambda *_: events.append("after_step"), task=Task(), before_finish=stretch.tick)
    assert events == ["batch", "tick", "forward", "tick", "finish", "after_step"] * 2
    model.eval()
    model(g.x)  # evaluation is not a training step: no tick
    assert events.count("tick") == 4


class _Recorder:
    """Wraps a loader's sampler: the seeds of every batch this rank trains on."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def sample_stream(self, batches):
        for b in self.inner.sample_stream(batches):
            self.seen.append(b.seed_nodes.clone())
            yield b

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _profile_leaves_training_untouched(strategy, run_dir):
    import numpy as np

    from graphdist import comm
    from graphdist.trainers.profile import PROFILE_NAME, profiled_plan

    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), strategy.batches.sampler.get_state(),
              strategy.batches.neighbor_source.get_state(), [p.detach().clone() for p in strategy.model.parameters()],
              strategy.optimizer.state_dict()["state"].copy())
    target, job_plan = strategy.probe_target(), strategy.ctx.plan
    shares = list(profiled_plan(target, job_plan, strategy.ctx.cfg, run_dir).shares)
    after = (torch.get_rng_state(), np.random.get_state()[1], strategy.batches.sampler.get_state(),
             strategy.batches.neighbor_source.get_state(), list(strategy.model.parameters()))
    assert torch.equal(before[0], after[0]) and (before[1] == after[1]).all()
    assert torch.equal(before[2], after[2]) and torch.equal(before[3], after[3])
    assert all(torch.equal(a, b) for a, b in zip(before[4], after[4]))
    assert strategy.optimizer.state_dict()["state"].keys() == before[5].keys()
    assert sum(shares) == sum(r.batch_share for r in strategy.ctx.plan.ranks), (shares, strategy.ctx.plan)
    plan = [r.batch_share for r in strategy.ctx.plan.ranks]
    assert shares[0] / plan[0] > shares[1] / plan[1], (shares, plan)  # rank 1 is 4x slower from the start
    assert comm.all_gather_object(shares) == [shares] * 2
    assert (run_dir / PROFILE_NAME).exists()
    assert list(profiled_plan(target, job_plan, strategy.ctx.cfg, run_dir).shares) == shares  # cached: no probes


def _rebalance_body(rank: int, world_size: int, part_dir: str, cfgs: list, run_dir=None):
    from graphdist import comm
    from graphdist.trainers.run import build_strategy
    from sampling.base import Sampler

    for cfg in cfgs:
        strategy = build_strategy(rank, world_size, cfg, part_dir)
        loader = strategy.loader
        recorder = _Recorder(loader.sampler)
        Sampler.register(_Recorder)
        loader.sampler = recorder
        start = list(strategy.rebalancer.shares)
        train = torch.cat([p for p in comm.all_gather_object(strategy.train_seeds)])
        # Three epochs: on a loaded machine (the suite's other process busy on both cores) the first windows'
        # times swing, and twice in CI two epochs ended without a move.
        for epoch in (1, 2, 3):
            recorder.seen = []
            stats = strategy.train_epoch(epoch)
            seen = torch.cat(comm.all_gather_object(torch.cat(recorder.seen)))
            # Every train node exactly once per epoch, wherever its seeds migrated.
            assert torch.equal(torch.sort(seen).values, torch.sort(train).values), (cfg.replicate, epoch)
            assert stats.seeds == int(torch.cat(recorder.seen).numel())
            shares = comm.all_gather_object(strategy.rebalancer.shares)
            assert all(s == shares[0] for s in shares)  # every rank applied the same shares
        final = strategy.rebalancer.shares
        assert sum(final) == sum(start)
        # rank 1 is 4x slower; what each rank's windows read, to tell why if it did not move
        assert final[0] > final[1] and final != start, (cfg.replicate, start, final, strategy.rebalancer.history)
        assert list(strategy.plan.shares) == final  # the plan in force, which the checkpoint holds
        if cfg.replicate == "none":
            _profile_leaves_training_untouched(strategy, Path(run_dir))
        strategy.close()


def test_rebalancer_moves_seeds_to_the_fast_rank_and_visits_every_node_once(tmp_path, monkeypatch):
    from partition.api import partition

    graph = random_graph(3000, avg_degree=6, seed=1, feature_dim=16)
    part_dir = partition(graph, 2, method="metis", out=Path(tmp_path) / "parts", seed=0)
    monkeypatch.setenv("GRAPHDIST_TEST_SLOWDOWN", "1:4.0")
    base = dict(model="sage", hidden=32, layers=2, fanouts=(5, 5), batch_size=64, prefetch=False,
                rebalance_every=2, eval_every=0, seed=0)
    cfgs = [TrainConfig(**base, replicate="none"), TrainConfig(**base, replicate="graph")]
    launch(_rebalance_body, 2, str(part_dir), cfgs, tmp_path, timeout=120)


def test_rebalance_flags_are_checked():
    with pytest.raises(ValueError, match="--rebalance-every"):
        TrainConfig(rebalance_every=-1)
    with pytest.raises(ValueError, match="--rebalance-every applies to --strategy minibatch"):
        TrainConfig(rebalance_every=5, strategy="aggregation")
    with pytest.raises(ValueError, match="--replicate"):
        TrainConfig(replicate="all")


def test_cluster_spec_sets_workers_devices_threads_and_memory(tmp_path):
    from graphdist.trainers.run import apply_cluster, heterogeneous, worker_threads

    spec = tmp_path / "c.yaml"
    spec.write_text("hosts:\n  - name: h\n    workers:\n"
                    "      - {device: cpu, threads: 3, memory: 2GiB}\n"
                    "      - {device: cpu, threads: 1, memory: 1GiB}\n")
    cfg = apply_cluster(TrainConfig(cluster=str(spec), num_workers=4))
    assert cfg.num_workers == 2 and cfg.devices == ("cpu", "cpu") and cfg.max_memory == 1.0
    assert [worker_threads(cfg, r) for r in (0, 1)] == [3, 1] and heterogeneous(cfg)  # auto placement profiles
    assert not heterogeneous(TrainConfig())
    with pytest.raises(ValueError, match="WORLD_SIZE=3"):
        apply_cluster(TrainConfig(cluster=str(spec)), world_size=3)
    with pytest.raises(ValueError, match="--devices cuda:0,cpu contradicts --cluster"):
        apply_cluster(TrainConfig(cluster=str(spec), devices=("cuda:0", "cpu")))
    two = tmp_path / "two.yaml"
    two.write_text("hosts: [{name: a, workers: [{device: cpu}]}, {name: b, workers: [{device: cpu}]}]\n")
    with pytest.raises(ValueError, match="2 hosts; the local launcher runs one host"):
        apply_cluster(TrainConfig(cluster=str(two)))
    assert apply_cluster(TrainConfig(cluster=str(two)), world_size=2).num_workers == 2


def test_probe_copy_drops_the_hooks_others_attached_and_keeps_the_models_own():
    from graphdist.trainers.probes import probe_copy

    class Own(torch.nn.Module):  # carries a hook bound to itself, as PyG's lazy layers do
        def __init__(self):
            super().__init__()
            self.lin, self.seen = torch.nn.Linear(2, 2), []
            self.register_forward_pre_hook(self.note)

        def note(self, module, _inputs):
            self.seen.append(module)

        def forward(self, x):
            return self.lin(x)

    model, calls = Own(), []
    model.lin.register_forward_hook(lambda *_: calls.append("sync capture"))
    clone = probe_copy(model)
    clone(torch.randn(3, 2)).sum().backward()
    assert calls == []  # the run's hooks neither run nor count as compute in the probes
    assert clone.seen == [clone] and model.seen == []  # the model's own hook, bound to the copy
    model(torch.randn(3, 2))
    assert calls == ["sync capture"] and model.seen == [model]  # the original keeps both


def test_time_the_rebalancer_holds_a_step_is_not_busy_time(monkeypatch):
    """A fast rank waits in the rebalancer's exchange for a slow one: counted as work, it hid the imbalance."""
    import types

    from graphdist.sync.base import NoSync
    from graphdist.trainers import steps
    from sampling import NeighborSampler, NodeLoader

    g = tiny_graph()
    model = torch.nn.Sequential(torch.nn.Linear(g.x.shape[1], 3))
    loader = NodeLoader(g, torch.arange(4), NeighborSampler(g, [1], seed=0), batch_size=2, shuffle=False,
                        prefetch=False)
    # The step loop's clock moves only where this test says: 10 ms of work in each forward, 50 ms
    # blocked in each exchange (the real ones are load-dependent; the bookkeeping is what is judged).
    clock = [0.0]
    monkeypatch.setattr(steps, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    class Task(_SeedFeaturesTask):
        def batch_loss(self, m, batch, with_degrees, device):
            clock[0] += 0.01
            return super().batch_loss(m, batch, with_degrees, device)

    def exchange(step: int, seeds: int) -> float:
        clock[0] += 0.05  # blocked in a collective
        return 0.05

    stats = steps.train_steps(loader, NoSync(model), torch.optim.SGD(model.parameters(), lr=0.1),
                              torch.device("cpu"), False, after_step=exchange, task=Task())
    assert stats.steps == 2
    assert stats.comm_exposed_s == pytest.approx(2 * 0.05) and stats.compute_s == pytest.approx(2 * 0.01)


class _PlannedLoader:
    """A loader's planning surface: ``lookahead`` batches are drawn ahead of the caller."""

    def __init__(self, steps: int, share: int, lookahead: int) -> None:
        self.steps, self.batch_size, self.lookahead, self.yielded = steps, share, lookahead, 0

    def __len__(self) -> int:
        return self.steps

    def earliest_batch_size_change(self) -> int:
        return self.yielded + self.lookahead

    def remaining_seeds(self, start: int) -> torch.Tensor:
        return torch.arange((self.steps - start) * self.batch_size)

    def remaining_counts(self, start: int) -> list[int]:
        return [(self.steps - b) * self.batch_size for b in range(start, self.steps + 1)]

    def set_batch_size(self, size: int, from_batch: int = 0, seeds=None) -> None:
        self.batch_size = size


def _fake_comm(monkeypatch, module, send, exchange_s: float = 0.0) -> None:
    """Rank 0 of 2 in ``module``: ``send`` answers the window's gather; a migration finds the other
    rank with the same unvisited seeds and hands nothing over; each object exchange takes ``exchange_s``."""
    import types

    def gather(obj):
        time.sleep(exchange_s)
        return [obj, obj] if isinstance(obj, (tuple, float)) else [obj, []]

    monkeypatch.setattr(module, "comm", types.SimpleNamespace(
        get_rank=lambda: 0, get_world_size=lambda: 2, all_gather_object=gather, all_gather_rows_async=send,
        is_main_process=lambda: False))


def _two_ranks(share: int, steps: int):
    """The job plan of two ranks, one part each, at ``share`` seeds per step."""
    from placement.plan import Plan, RankPlan

    return Plan(ranks=(RankPlan(0, (0,), "cpu", share), RankPlan(1, (1,), "cpu", share)), num_parts=2,
                steps_per_epoch=steps)


def _step(rebalancer, step: int, seeds: int) -> None:
    """What the strategy's step loop does after a step: the plan the rebalancer decided on, applied there."""
    plan = rebalancer.after_step(step, seeds)
    if plan is not None:
        rebalancer.apply(plan, step)


def _decision_steps(monkeypatch, lookahead: int) -> list[tuple[int, int, bool]]:
    """(window's last step, decision's step, shares moved) over one 15-step epoch, rank 1 twice as slow per seed."""
    import types

    from graphdist.trainers import rebalance as module

    loader = _PlannedLoader(15, 100, lookahead)
    clock = [0.0]
    decisions: list[list] = []

    def send(values, group=None, tag="other"):
        busy, seeds, wall, work, migration_s = values  # the window: rank 1 works twice as long per seed
        seeds_1 = seeds * rebalancer.shares[1] // rebalancer.shares[0]
        wall = 2 * busy  # the step waits for rank 1 (this loop's own wall time is microseconds)
        table = torch.tensor([[busy, seeds, wall, work, migration_s],
                              [2 * busy * seeds_1 / seeds, seeds_1, wall, 2 * busy * seeds_1 / seeds, migration_s]],
                             dtype=torch.float64)
        decisions.append([step, None, None])
        return table, types.SimpleNamespace(wait=lambda: decisions[-1].__setitem__(1, step))

    _fake_comm(monkeypatch, module, send)
    rebalancer = module.Rebalancer(loader, labels=lambda ids: ids, plan=_two_ranks(100, 15), every=3, eps=0.05,
                                   clock=lambda: clock[0])
    rebalancer.begin_epoch()
    for step in range(1, 16):
        loader.yielded = step
        clock[0] += 0.001 * loader.batch_size  # this rank's busy time grows with its share
        before = list(rebalancer.shares)
        _step(rebalancer, step, loader.batch_size)
        if decisions and decisions[-1][1] == step:
            decisions[-1][2] = rebalancer.shares != before
    return [tuple(d) for d in decisions]


def test_a_window_is_read_one_step_after_it_closes_and_the_next_starts_with_the_new_shares(monkeypatch):
    # Nothing drawn ahead: the window closing at step 3 is sent without waiting and read after
    # step 4, whose batch still had the old shares; the next window starts there.
    immediate = _decision_steps(monkeypatch, lookahead=0)
    assert [(sent, read) for sent, read, _ in immediate] == [(3, 4), (7, 8), (11, 12)], immediate
    assert immediate[0][2], immediate
    # Two batches drawn ahead (a prefetch thread and a pipelined sampler): after the move at
    # step 4 they still train at the old shares, so the next window opens after step 6.
    ahead = _decision_steps(monkeypatch, lookahead=2)
    assert ahead[0] == (3, 4, True) and ahead[1][0] == 9, ahead


def test_the_pipelined_probe_fits_through_each_sizes_median_group():
    """One group in four waiting long on the stream's exchanges does not move the profile's step."""
    from graphdist.trainers.probes import _measures

    model = torch.nn.Linear(4, 2)
    # (seeds, wall, loading CPU, training CPU, gradient wait, training wall, process CPU) per timed group
    groups = [(100, 0.010, 0.002, 0.004, 0.001, 0.006, 0.007), (200, 0.015, 0.003, 0.006, 0.001, 0.009, 0.011)] * 3
    slow = [(100, 0.020, 0.002, 0.004, 0.001, 0.006, 0.007), (200, 0.015, 0.003, 0.006, 0.001, 0.009, 0.011)]
    pipelined = _measures(model, {k: [] for k in ("sample", "feature", "wait", "exchanges", "sync_wait")},
                          [], groups + slow)["pipelined"]
    fixed, per_seed = pipelined["step"]
    assert fixed + 100 * per_seed == pytest.approx(0.010)  # a mean over the groups read 0.0125
    assert fixed + 200 * per_seed == pytest.approx(0.015)
    fixed, per_seed = pipelined["other_cpu"]  # the process's CPU beyond the two threads'
    assert fixed + 100 * per_seed == pytest.approx(0.001) and fixed + 200 * per_seed == pytest.approx(0.002)


def test_latency_bound_steps_move_once_then_return_to_the_plans_shares_and_hold(monkeypatch):
    """Rank 1's step takes 60 ms at any share (pubmed's shape, slower), and a migration a few ms.

    Through the origin, its first window reads 5 ms as per-seed cost and seeds move; the next
    window, a quarter fewer seeds and no faster, shows the cost fixed, and the shares go back to
    the plan's (no migration at every epoch's start) and stay there. Before, with every move
    restarting the history, the fit stayed through the origin and the shares ran down to 15:1.
    """
    import types

    from graphdist.trainers import rebalance as module

    class Loader(_PlannedLoader):
        def set_batch_size(self, size: int, from_batch: int = 0, seeds=None) -> None:
            self.batch_size = rebalancer.shares[0]  # the migration handed over what the share says

    loader = Loader(15, 8, lookahead=0)
    clock = [0.0]

    def send(values, group=None, tag="other"):
        busy, seeds, wall, work, migration_s = values
        steps = seeds / rebalancer.shares[0]
        slow = 0.06 * steps  # fixed: the same at every share
        table = torch.tensor([[busy, seeds, slow, busy, migration_s],
                              [slow, rebalancer.shares[1] * steps, slow, slow, migration_s]], dtype=torch.float64)
        return table, types.SimpleNamespace(wait=lambda: None)

    _fake_comm(monkeypatch, module, send, exchange_s=0.01)  # migrations are not free
    rebalancer = module.Rebalancer(loader, labels=lambda ids: ids, plan=_two_ranks(8, 15), every=2, eps=0.05,
                                   clock=lambda: clock[0])
    rebalancer.begin_epoch(epochs_left=5)
    seen = [list(rebalancer.shares)]
    for step in range(1, 16):
        loader.yielded = step
        clock[0] += 0.003 * loader.batch_size  # rank 0: 3 ms a seed
        _step(rebalancer, step, loader.batch_size)
        if rebalancer.shares != seen[-1]:
            seen.append(list(rebalancer.shares))
    assert len(seen) == 3 and seen[1][0] > 8 and seen[2] == [8, 8], seen
    assert rebalancer.history[1][-1][1] == pytest.approx(0.06)
