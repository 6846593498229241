"""NodeLoader: every seed once per epoch, features and labels right, prefetch changes nothing."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from graphdist.testing import random_graph
from sampling import LocalFeatureSource, NeighborSampler, NodeLoader, SampledBatch, Sampler


@pytest.fixture(scope="module")
def graph():
    return random_graph(500, avg_degree=6.0, seed=2, feature_dim=3)


def _loader(g, seeds, **kw):
    sampler = NeighborSampler(g, kw.pop("fanouts", [4, 3]), seed=kw.pop("sampler_seed", 0))
    return NodeLoader(g, seeds, sampler, **{"batch_size": 64, "seed": 0, **kw})


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("prefetch", [True, False])
def test_every_seed_once_per_epoch(graph, shuffle, drop_last, prefetch):
    seeds = graph.train_mask.nonzero().view(-1)
    loader = _loader(graph, graph.train_mask, shuffle=shuffle, drop_last=drop_last, prefetch=prefetch)
    for _ in range(2):
        got = torch.cat([b.seed_nodes for b in loader])
        assert got.unique().numel() == got.numel()
        if drop_last:
            assert got.numel() == seeds.numel() // 64 * 64 and bool(torch.isin(got, seeds).all())
        else:
            assert torch.equal(got.sort().values, seeds)
        if not shuffle:
            assert torch.equal(got, seeds[: got.numel()])
    assert len(loader) == (seeds.numel() // 64 if drop_last else -(-seeds.numel() // 64))


def test_features_and_labels_match(graph):
    for batch in _loader(graph, torch.arange(500)):
        assert batch.x.shape == (batch.input_nodes.numel(), 3)
        assert torch.equal(batch.x[:, 0].long(), batch.input_nodes)  # x = node id
        assert torch.equal(batch.y, graph.y[batch.seed_nodes])


def _fingerprint(batch: SampledBatch) -> list[torch.Tensor]:
    return [batch.seed_nodes, batch.input_nodes, batch.x.clone(), batch.y] + [
        t for b in batch.blocks for t in (b.src, b.dst, b.indptr)
    ]


def test_prefetch_on_off_identical(graph):
    runs = []
    for prefetch in (True, False):
        loader = _loader(graph, torch.arange(500), prefetch=prefetch, sampler_seed=5, seed=9)
        runs.append([_fingerprint(b) for _ in range(2) for b in loader])
    assert len(runs[0]) == len(runs[1]) == 16
    for a, b in zip(*runs):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_reused_buffer_outlives_the_next_batch(graph):
    it = iter(_loader(graph, torch.arange(500), prefetch=True, batch_size=16))
    previous = next(it)
    for batch in it:
        # The documented lifetime: batch t's x is intact while batch t+1 is in use.
        assert torch.equal(previous.x[:, 0].long(), previous.input_nodes)
        previous = batch


def test_num_batches_ends_in_empty_steps_and_truncates(graph):
    seeds = torch.arange(100)
    loader = _loader(graph, seeds, batch_size=30, num_batches=7)
    for _ in range(2):  # every epoch: each seed exactly once, then empty steps, never a repeated seed
        batches = [b.seed_nodes for b in loader]
        assert len(batches) == 7 == len(loader)
        assert torch.equal(torch.cat(batches).sort().values, seeds)
        assert [b.numel() for b in batches] == [30, 30, 30, 10, 0, 0, 0]
    assert len([b for b in _loader(graph, seeds, batch_size=30, num_batches=2)]) == 2


def test_worker_without_seeds_still_steps(graph):
    loader = _loader(graph, torch.zeros(0, dtype=torch.int64), num_batches=3)
    sizes = [(b.seed_nodes.numel(), b.x.shape[0]) for b in loader]
    assert sizes == [(0, 0)] * 3


class _Failing(Sampler):
    def __init__(self, inner: Sampler, fail_at: int) -> None:
        self.inner, self.fail_at, self.calls = inner, fail_at, 0

    def sample(self, seeds):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("boom in the prefetch thread")
        return self.inner.sample(seeds)


def test_prefetch_errors_reach_the_caller_and_threads_end(graph):
    sampler = _Failing(NeighborSampler(graph, [3], seed=0), fail_at=3)
    loader = NodeLoader(graph, torch.arange(500), sampler, batch_size=50, seed=0)
    with pytest.raises(RuntimeError, match="boom"):
        for _ in loader:
            pass
    assert not any(t.name == "graphdist-prefetch" for t in threading.enumerate())


def test_early_break_then_new_epoch(graph):
    loader = _loader(graph, torch.arange(500), batch_size=10)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert sum(1 for _ in loader) == 50
    assert not any(t.name == "graphdist-prefetch" for t in threading.enumerate())
    assert loader.stats.batches == 53 and loader.stats.sample_s > 0 and loader.stats.gather_s > 0


@pytest.mark.parametrize("depth", [1, 2])
def test_prefetch_runs_at_most_depth_batches_ahead_of_requests(graph, depth):
    # How far the producer gets must depend only on what the caller asked for (with a
    # distributed sampler, ranks that stop at the same batch must have made the same calls).
    sampler = _Failing(NeighborSampler(graph, [3], seed=0), fail_at=-1)
    loader = NodeLoader(graph, torch.arange(500), sampler, batch_size=10, seed=0, prefetch_depth=depth)
    for i, _ in enumerate(loader):
        if i == 2:
            time.sleep(0.3)  # ample time for a producer that is not held back to run further
            assert sampler.calls <= 3 + depth
            break
    assert sampler.calls <= 3 + depth


def test_state_dict_resumes_the_same_epoch(graph):
    a = _loader(graph, torch.arange(500))
    next(iter(a))
    state = a.state_dict()
    want = [_fingerprint(b) for b in a]
    b = _loader(graph, torch.arange(500), seed=123, sampler_seed=321)
    b.load_state_dict(state)
    got = [_fingerprint(x) for x in b]
    assert all(torch.equal(x, y) for fa, fb in zip(want, got) for x, y in zip(fa, fb))


def test_feature_source_with_label_function(graph):
    features = LocalFeatureSource(graph.x)
    loader = NodeLoader(features, torch.arange(40), NeighborSampler(graph, [2], seed=0), batch_size=16,
                        labels=lambda ids: ids * 10, seed=0)
    for batch in loader:
        assert torch.equal(batch.y, batch.seed_nodes * 10)
        assert torch.equal(batch.x[:, 0].long(), batch.input_nodes)


def test_bad_arguments(graph):
    sampler = NeighborSampler(graph, [2], seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        NodeLoader(graph, torch.arange(5), sampler, batch_size=0)
    with pytest.raises(ValueError, match="seeds"):
        NodeLoader(graph, torch.rand(5), sampler, batch_size=2)
    with pytest.raises(ValueError, match="sampler"):
        NodeLoader(graph, torch.arange(5), object(), batch_size=2)


@pytest.mark.parametrize("prefetch", [False, True])
def test_batch_size_changes_from_a_later_batch_and_seeds_stay_unique(graph, prefetch):
    loader = _loader(graph, torch.arange(100), batch_size=10, prefetch=prefetch, shuffle=True, num_batches=10)
    sizes, seen, changed_at = [], [], None
    for i, batch in enumerate(loader):
        sizes.append(batch.seed_nodes.numel())
        seen.append(batch.seed_nodes)
        if i == 1:
            changed_at = loader.earliest_batch_size_change()
            # prefetch depth (1) ahead of the 2 batches handed out; the local sampler reads no further.
            assert changed_at == (3 if prefetch else 2)
            with pytest.raises(ValueError, match=f"batches before {changed_at} of this epoch may already be sampling"):
                loader.set_batch_size(20, from_batch=changed_at - 1)
            loader.set_batch_size(20, from_batch=changed_at)
    # The epoch keeps its 10 batches: 10 seeds each until the change, then 20 while fresh seeds last.
    fresh = 100 - 10 * changed_at
    refilled = [20] * (fresh // 20) + ([fresh % 20] if fresh % 20 else [])
    assert len(sizes) == 10 and sizes[:changed_at] == [10] * changed_at
    assert sizes[changed_at : changed_at + len(refilled)] == refilled
    unpadded = torch.cat(seen[: changed_at + len(refilled)])
    assert unpadded.unique().numel() == unpadded.numel() == 100  # every seed exactly once
    assert all(n == 0 for n in sizes[changed_at + len(refilled):])  # then empty steps, no repeats
    # The new size holds for the next epoch; between epochs no batch index is needed.
    assert [b.seed_nodes.numel() for b in loader][:5] == [20] * 5
    loader.set_batch_size(50)
    assert len(loader) == 10 and loader.natural_num_batches() == 2
    with pytest.raises(ValueError, match="batch_size: expected >= 1"):
        loader.set_batch_size(0)
