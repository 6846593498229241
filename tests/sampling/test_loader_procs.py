"""Loader processes (``--loaders K``): the batches they hand over, their determinism, resume, and failure.

``sampling/loader_procs.py``: K = 0 (the prefetch thread) and K = 1 give the same batches; K >= 2
trains every seed once per epoch, the same way twice; a dead loader is named within the timeout.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import torch

from graphdist.testing import random_graph
from sampling import NeighborSampler, NodeLoader
from sampling.cluster import ClusterSampler, metis_clusters
from sampling.loader_procs import LoaderDied

N = 1500


@pytest.fixture(scope="module")
def graph() -> Any:
    return random_graph(N, seed=4, feature_dim=8)


def _loader(g: Any, loaders: int, **kw: Any) -> NodeLoader:
    args = dict(batch_size=64, seed=11, loaders=loaders, timeout_s=20)
    args.update(kw)
    return NodeLoader(g, torch.arange(N), NeighborSampler(g, [4, 3], seed=5), **args)


def _epoch(loader: NodeLoader, resize_at: int = -1) -> list[tuple]:
    out = []
    for i, b in enumerate(loader):
        out.append((b.input_nodes.clone(), b.seed_nodes.clone(), b.x.clone(), b.y.clone(),
                    [(blk.src.clone(), blk.dst.clone(), blk.indptr.clone(), blk.num_src, blk.num_dst)
                     for blk in b.blocks]))
        if i == resize_at:  # as the rebalancer does: a new share from the first batch not drawn yet
            loader.set_batch_size(96, from_batch=loader.earliest_batch_size_change())
    return out


def _same(a: list[tuple], b: list[tuple]) -> bool:
    def eq(x: Any, y: Any) -> bool:
        if isinstance(x, torch.Tensor):
            return torch.equal(x, y)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(eq(p, q) for p, q in zip(x, y))
        return x == y

    return eq(a, b)


def test_one_loader_gives_the_prefetch_threads_batches(graph: Any) -> None:
    plain, one = _loader(graph, 0), _loader(graph, 1)
    try:
        for resize_at in (-1, 3):  # the second epoch changes the batch size mid-epoch
            a, b = _epoch(plain, resize_at), _epoch(one, resize_at)
            assert len(a) == len(b) == 24 and _same(a, b)
        assert torch.equal(plain.state_dict()["sampler"], one.state_dict()["sampler"])
    finally:
        one.close()


def test_two_loaders_are_deterministic_and_train_each_seed_once(graph: Any) -> None:
    runs = []
    for _ in range(2):
        loader = _loader(graph, 2)
        try:
            runs.append([_epoch(loader) for _ in range(2)])
        finally:
            loader.close()
    assert _same(runs[0], runs[1])
    for epoch in runs[0]:
        seeds = torch.cat([batch[1] for batch in epoch])
        assert sorted(seeds.tolist()) == list(range(N))
        # each batch's features and labels are its own nodes' (no slot mixed up between loaders)
        assert all(torch.equal(batch[2], graph.x[batch[0]]) and torch.equal(batch[3], graph.y[batch[1]])
                   for batch in epoch)
    assert not _same(runs[0][0], runs[0][1])  # each epoch draws anew


@pytest.mark.parametrize("loaders", [1, 2])
def test_resume_from_an_epochs_end_continues_the_streams(graph: Any, loaders: int) -> None:
    whole = _loader(graph, loaders)
    try:
        _epoch(whole)
        state = whole.state_dict()
        second = _epoch(whole)
    finally:
        whole.close()
    resumed = _loader(graph, loaders, seed=99)  # the checkpoint's streams replace its own
    try:
        resumed.load_state_dict(state)
        assert _same(_epoch(resumed), second)
    finally:
        resumed.close()


def test_an_early_stop_then_a_full_epoch(graph: Any) -> None:
    a, b = _loader(graph, 0), _loader(graph, 1)
    try:
        for loader in (a, b):
            for i, _ in enumerate(loader):
                if i == 5:
                    break
        assert _same(_epoch(a), _epoch(b))
    finally:
        b.close()


def test_a_killed_loader_is_named_within_the_timeout(graph: Any) -> None:
    loader = _loader(graph, 1, name="worker 3", timeout_s=5)
    try:
        batches = iter(loader)
        next(batches)
        pid = loader._procs.procs[0].pid
        with open(f"/proc/{pid}/comm") as f:
            assert f.read().strip() == "gd-loader-0"  # what ps and top show
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(LoaderDied, match=r"worker 3: loader 0 of 1 was killed by signal 9"):
            for _ in batches:
                pass
        assert time.monotonic() - start < 5
    finally:
        loader.close()


def test_a_loaders_own_error_reaches_the_worker(graph: Any) -> None:
    class Failing(NeighborSampler):
        def sample(self, seeds: torch.Tensor) -> Any:
            raise ValueError("no neighbours today")

    loader = NodeLoader(graph, torch.arange(N), Failing(graph, [2], seed=0), batch_size=64, loaders=1, timeout_s=20)
    try:
        with pytest.raises(LoaderDied, match="loader 0 of 1 failed:(.|\n)*no neighbours today"):
            next(iter(loader))
    finally:
        loader.close()


def test_cluster_batches_through_a_loader(graph: Any) -> None:
    clusters = metis_clusters(graph, 12, seed=0)

    def make(k: int) -> NodeLoader:
        sampler = ClusterSampler(graph, clusters, num_layers=2)
        return NodeLoader(graph, torch.arange(sampler.num_clusters), sampler, batch_size=3, seed=1, loaders=k)

    a, b = make(0), make(1)
    try:
        assert _same(_epoch(a), _epoch(b))
    finally:
        b.close()


def _dist_body(rank: int, world_size: int, part_dir: str, loaders: int, out: str) -> None:
    """Two epochs of this rank's batches from the distributed sampler, with ``loaders`` loader processes."""
    import functools

    from graphdist import comm
    from partition.api import load_partition
    from sampling.dist_features import DistFeatureSource
    from sampling.distributed import DistNeighborSource

    part = load_partition(part_dir, rank)
    group = comm.new_group()
    source = DistNeighborSource(part, group=group, seed=3)
    features = DistFeatureSource(part, group=group, cache_rows=20)
    join = None
    if loaders:
        join = functools.partial(comm.join_loader_group, comm.loader_rendezvous(60), rank=rank)
    seeds = torch.arange(*part.inner_ranges[0])
    loader = NodeLoader(features, seeds, NeighborSampler(source, [4, 3], seed=7 + rank), batch_size=16, seed=rank,
                        num_batches=6, loaders=loaders, loader_join=join, timeout_s=60)
    try:
        epochs = [_epoch_ids(loader) for _ in range(2)]
    finally:
        loader.close()
    torch.save(epochs, f"{out}/rank{rank}.pt")


def _epoch_ids(loader: NodeLoader) -> list[tuple]:
    return [(b.input_nodes.clone(), b.seed_nodes.clone(), b.x.clone(), [blk.src.clone() for blk in b.blocks])
            for b in loader]


def _dist_run(tmp_path: Any, graph: Any, world_size: int, loaders: int, name: str) -> list:
    from graphdist.testing import launch
    from partition.api import partition

    parts = tmp_path / f"p{world_size}"
    if not parts.exists():
        partition(graph, world_size, method="random", out=parts, seed=0)
    out = tmp_path / name
    out.mkdir()
    launch(_dist_body, world_size, str(parts), loaders, str(out), timeout=120)
    return [torch.load(out / f"rank{r}.pt") for r in range(world_size)]


@pytest.mark.parametrize("world_size", [2, 3])
def test_across_parts_one_loader_gives_the_threads_batches(tmp_path: Any, graph: Any, world_size: int) -> None:
    """Loader k of every worker samples in a group of its own (spawned, its sources pickled)."""
    plain = _dist_run(tmp_path, graph, world_size, 0, "k0")
    one = _dist_run(tmp_path, graph, world_size, 1, "k1")
    assert _same(plain, one)


def test_across_parts_two_loaders_are_deterministic(tmp_path: Any, graph: Any) -> None:
    a = _dist_run(tmp_path, graph, 3, 2, "a")
    b = _dist_run(tmp_path, graph, 3, 2, "b")
    assert _same(a, b)
    for rank_epochs in a:
        for epoch in rank_epochs:
            # every seed of the rank's part once (6 batches of 16 cover its 500 inner nodes' first 96)
            seeds = torch.cat([batch[1] for batch in epoch])
            assert seeds.unique().numel() == seeds.numel() == 96
