"""The distributed sampler and feature fetch against the local sampler on the whole graph."""

from pathlib import Path

import pytest
import torch

from graphdist.data import Graph
from graphdist.testing import launch, random_graph

FANOUT_ALL = [-1, -1]


def _partition(graph: Graph, num_parts: int, out: Path, method: str = "random") -> Path:
    from partition.api import partition

    return Path(partition(graph, num_parts, method=method, out=out, seed=1))


def _edge_sets(batch, orig: torch.Tensor) -> list[set]:
    """Per block, the set of (source, destination) edges in original ids."""
    ids = orig.index_select(0, batch.input_nodes)
    return [set(zip(ids[b.src].tolist(), ids[b.dst].tolist())) for b in batch.blocks]


def _same_samples(a, b) -> bool:
    """Two batches with the same input nodes and the same edges in every block."""
    return torch.equal(a.input_nodes, b.input_nodes) and all(
        torch.equal(x.src, y.src) and torch.equal(x.dst, y.dst) for x, y in zip(a.blocks, b.blocks))


def _same_as_local_body(rank: int, world_size: int, part_dir: str, graph: Graph, stream: bool) -> None:
    from partition.api import load_partition
    from sampling.neighbor import NeighborSampler
    from sampling.distributed import DistNeighborSource

    part = load_partition(part_dir, rank)
    orig = torch.as_tensor(part.orig_ids).to(torch.int64)
    sampler = NeighborSampler(DistNeighborSource(part), FANOUT_ALL, seed=rank)
    local = NeighborSampler(graph, FANOUT_ALL, seed=0)
    # Seeds: this rank's own nodes, in three batches (an odd count: the pipelined stream
    # runs a pair, then one batch alone).
    [(lo, hi)] = part.inner_ranges
    batches = list(torch.arange(lo, hi, dtype=torch.int64).chunk(3))
    got = list(sampler.sample_stream(batches)) if stream else [sampler.sample(s) for s in batches]
    assert len(got) == len(batches)
    for seeds, batch in zip(batches, got):
        expected = local.sample(orig.index_select(0, seeds))
        assert _edge_sets(batch, orig) == _edge_sets(expected, torch.arange(graph.num_nodes))
        assert orig.index_select(0, batch.input_nodes).tolist()[: seeds.numel()] == orig.index_select(0, seeds).tolist()
    # A large mapped CSR is sampled in local ids and only the sampled ones translated: the same samples.
    import graphdist.data.npy as npy

    saved, npy.MAPPED_COPY_MAX_BYTES = npy.MAPPED_COPY_MAX_BYTES, 0
    try:
        translated = DistNeighborSource(part, seed=5)
    finally:
        npy.MAPPED_COPY_MAX_BYTES = saved
    copied = DistNeighborSource(part, seed=5)
    assert translated.translate and not copied.translate
    for fanout in (3, -1):
        a = NeighborSampler(translated, [fanout, 2], seed=rank).sample(batches[0])
        b = NeighborSampler(copied, [fanout, 2], seed=rank).sample(batches[0])
        assert _same_samples(a, b)
    # Every hop on the compiled loops (own rows merged with the answers in one pass) samples what the
    # torch kernels sample: every rank switches alike, so the exchanges still pair up.
    import os
    from unittest import mock

    from graphdist import _numba
    from sampling import compiled

    def hops(mode: str) -> list:
        os.environ["GRAPHDIST_NUMBA"] = mode
        sampler = NeighborSampler(DistNeighborSource(part, seed=7), [4, 3], seed=rank)
        return [sampler.sample(s) for s in batches] + list(sampler.sample_stream(batches))

    with (mock.patch.object(compiled, "MIN_DRAWS", 0), mock.patch.object(_numba, "WARMUP_CALLS", 0),
          mock.patch.dict(os.environ)):
        ref, got = hops("0"), hops("1")
    assert all(_same_samples(a, b) for a, b in zip(ref, got, strict=True))
    # Sampled ids travel as int32: one more slot of fan-out costs 4 bytes for each row another
    # rank asks of this one (every other rank asks for all of this rank's nodes here).
    from graphdist import comm

    sent = []
    for fanout in (2, 3):
        comm.reset_byte_counts()
        nbrs, _ = copied.sample_neighbors(torch.arange(graph.num_nodes), fanout)
        assert nbrs.dtype == torch.int64
        sent.append(comm.byte_counts().get("sample", 0))
    assert sent[1] - sent[0] == 4 * (world_size - 1) * part.num_inner, sent


def _features_body(rank: int, world_size: int, part_dir: str, num_nodes: int) -> None:
    from partition.api import load_partition
    from sampling.distributed import DistFeatureSource

    part = load_partition(part_dir, rank)
    orig = torch.as_tensor(part.orig_ids).to(torch.float32)
    cached = DistFeatureSource(part, cache_rows=-1)
    uncached = DistFeatureSource(part, cache_rows=0)
    gen = torch.Generator().manual_seed(rank)
    nodes = torch.randint(0, num_nodes, (200,), generator=gen)
    a, b = cached.gather(nodes), uncached.gather(nodes)
    # x = original node id, so every fetched row names the node it belongs to.
    assert torch.equal(a[:, 0], orig.index_select(0, nodes))
    assert torch.equal(a, b)
    # Graphs too large for the dense row map look rows up by binary search: same rows, same counts.
    searched = DistFeatureSource(part, cache_rows=-1)
    searched._row_of = None
    assert torch.equal(searched.gather(nodes), a)
    assert (searched.stats.cache_hits, searched.stats.fetched_rows) == (cached.stats.cache_hits,
                                                                        cached.stats.fetched_rows)
    assert cached.stats.cache_hits > 0 and uncached.stats.cache_hits == 0
    assert cached.stats.fetched_rows < uncached.stats.fetched_rows
    # Large mapped own rows stay mapped (no copy into the worker): the cache apart, the same rows.
    import graphdist.data.npy as npy
    from graphdist.data.npy import is_mapped

    saved, npy.MAPPED_COPY_MAX_BYTES = npy.MAPPED_COPY_MAX_BYTES, 0
    try:
        mapped = DistFeatureSource(part, cache_rows=-1)
    finally:
        npy.MAPPED_COPY_MAX_BYTES = saved
    assert mapped.split and is_mapped(mapped.x) and not cached.split and not is_mapped(cached.x)
    assert torch.equal(mapped.gather(nodes), a)
    assert (mapped.stats.cache_hits, mapped.stats.fetched_rows) == (cached.stats.cache_hits, cached.stats.fetched_rows)


def _uniform_body(
    rank: int, world_size: int, part_dir: str, hub_new: int, degree: int, k: int, draws: int, stream: bool
) -> None:
    from scipy.stats import chi2

    from partition.api import load_partition
    from sampling.neighbor import NeighborSampler
    from sampling.distributed import DistNeighborSource

    part = load_partition(part_dir, rank)
    sampler = NeighborSampler(DistNeighborSource(part), [k], seed=100 + rank)
    asker = int(part.owner(torch.tensor([hub_new]))[0] + 1) % world_size  # a rank that does not own the hub
    seeds = torch.tensor([hub_new]) if rank == asker else torch.zeros(0, dtype=torch.int64)
    batches = sampler.sample_stream([seeds] * draws) if stream else (sampler.sample(seeds) for _ in range(draws))
    counts: dict[int, int] = {}
    for batch in batches:
        if rank == asker:
            block = batch.blocks[-1]
            picked = batch.input_nodes[block.src].tolist()
            assert len(picked) == k and len(set(picked)) == k  # without replacement
            for node in picked:
                counts[node] = counts.get(node, 0) + 1
    if rank == asker:
        assert len(counts) == degree
        expected = draws * k / degree
        stat = sum((c - expected) ** 2 / expected for c in counts.values())
        assert stat < chi2.ppf(0.999, degree - 1), stat


def _uneven_body(rank: int, world_size: int, part_dir: str) -> None:
    from partition.api import load_partition
    from sampling.neighbor import NeighborSampler
    from sampling.distributed import DistFeatureSource, DistNeighborSource

    part = load_partition(part_dir, rank)
    sampler = NeighborSampler(DistNeighborSource(part), [3, 2], seed=rank)
    features = DistFeatureSource(part, cache_rows=0)
    [(lo, hi)] = part.inner_ranges
    mine = torch.arange(lo, hi)[: 4 * (rank + 1)]  # rank r has r + 1 batches of 4
    # Every rank runs as many steps as the busiest one; the others join with empty batches.
    for step in range(world_size):
        seeds = mine[4 * step : 4 * step + 4]
        batch = sampler.sample(seeds)
        x = features.gather(batch.input_nodes)
        assert x.shape[0] == batch.input_nodes.numel()
        assert batch.seed_nodes.numel() == (4 if step <= rank else 0)


def _loader_body(rank: int, world_size: int, part_dir: str, prefetch: bool) -> None:
    """The loader over the distributed sampler and features (pipelined stream), uneven seeds."""
    from partition.api import load_partition
    from sampling.loader import NodeLoader
    from sampling.neighbor import NeighborSampler
    from sampling.distributed import DistFeatureSource, DistNeighborSource

    part = load_partition(part_dir, rank)
    orig = torch.as_tensor(part.orig_ids).to(torch.float32)
    sampler = NeighborSampler(DistNeighborSource(part), [3, 2], seed=rank, pipeline=3)  # streams of 1 and 2
    features = DistFeatureSource(part, cache_rows=5)
    [(lo, hi)] = part.inner_ranges
    mine = torch.arange(lo, hi)[: 3 * (rank + 1)]  # uneven: rank r has 3 (r + 1) seeds
    loader = NodeLoader(features, mine, sampler, batch_size=2, num_batches=5, prefetch=prefetch, seed=rank)
    for epoch in range(2):
        seen = []
        for batch in loader:
            # x = original id: every row, local, cached or fetched, belongs to its node.
            assert torch.equal(batch.x[:, 0], orig.index_select(0, batch.input_nodes))
            assert batch.blocks[-1].num_dst == batch.seed_nodes.numel()
            seen.append(batch.seed_nodes)
        assert len(seen) == 5
        assert set(torch.cat(seen).tolist()) <= set(mine.tolist())
    # An epoch abandoned half-way (every rank alike) leaves the sampler usable.
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert len(list(loader)) == 5
    # A batch share changed mid-epoch, from the same batch on every rank: the collectives still
    # line up (no hang), and the new size applies from that batch on.
    sizes, change = [], None
    for i, batch in enumerate(loader):
        sizes.append(batch.seed_nodes.numel())
        if i == 0:
            # Pipelined sampler (3 in flight): two batches beyond the one produced; prefetch one more.
            change = loader.earliest_batch_size_change()
            assert change == 1 + (1 if prefetch else 0) + 2
            loader.set_batch_size(3, from_batch=change)
    assert len(sizes) == 5 and all(s <= 2 for s in sizes[:change])
    if rank == 2:  # 9 seeds: 2 per batch until the change, then 3 while they last
        assert sizes[change] == min(3, 9 - 2 * change)
        assert sum(sizes) == 9


@pytest.fixture(scope="module")
def small_graph() -> Graph:
    return random_graph(80, avg_degree=6, seed=3)


@pytest.mark.parametrize("world_size,stream", [(2, False), (3, False), (2, True), (3, True)])
def test_full_fanout_equals_local_sampler(tmp_path, small_graph, world_size, stream):
    part_dir = _partition(small_graph, world_size, tmp_path / "parts")
    launch(_same_as_local_body, world_size, str(part_dir), small_graph, stream, timeout=90)


def test_remote_features_and_cache(tmp_path, small_graph):
    part_dir = _partition(small_graph, 3, tmp_path / "parts")
    launch(_features_body, 3, str(part_dir), small_graph.num_nodes, timeout=90)


@pytest.mark.parametrize("stream", [False, True])
def test_distributed_sampling_is_uniform(tmp_path, stream):
    degree, k, draws = 12, 4, 600
    # A hub (node 0) with `degree` in-neighbours, plus a ring so every node has edges.
    n = 40
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    hub = torch.stack([torch.arange(1, degree + 1), torch.zeros(degree, dtype=torch.int64)])
    graph = Graph.from_edge_index(torch.cat([ring, hub], dim=1), num_nodes=n,
                                  x=torch.arange(n, dtype=torch.float32).view(-1, 1))
    degree = int(graph.degrees()[0])  # the hub's own ring edge counts too
    part_dir = _partition(graph, 2, tmp_path / "parts")
    import numpy as np

    orig_ids = np.load(part_dir / "orig_ids.npy")
    hub_new = int(np.nonzero(orig_ids == 0)[0][0])
    launch(_uniform_body, 2, str(part_dir), hub_new, degree, k, draws, stream, timeout=120)


def test_uneven_seed_counts_do_not_hang(tmp_path, small_graph):
    part_dir = _partition(small_graph, 3, tmp_path / "parts")
    launch(_uneven_body, 3, str(part_dir), timeout=60)


@pytest.mark.parametrize("prefetch", [False, True])
def test_loader_over_distributed_sampler(tmp_path, small_graph, prefetch):
    part_dir = _partition(small_graph, 3, tmp_path / "parts")
    launch(_loader_body, 3, str(part_dir), prefetch, timeout=90)
