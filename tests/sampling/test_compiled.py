"""The compiled sampling loops (numba) give the torch kernels' results bit for bit, and can be turned off."""

from __future__ import annotations

import pytest
import torch

from graphdist import _numba
from graphdist.data.graph import Graph
from graphdist.testing import random_graph
from graphdist.testing.env import require
from sampling import NeighborSampler, compiled, kernels
from sampling.kernels import sample_csr, sample_csr_padded


@pytest.fixture
def numba_on(monkeypatch):
    """Every hop on the compiled loops (no size threshold); skips without numba (fails in CI)."""
    require(compiled._kernels() is not None, "numba is not installed: the compiled sampling loops cannot run")
    monkeypatch.setattr(compiled, "MIN_DRAWS", 0)
    monkeypatch.setattr(_numba, "WARMUP_CALLS", 0)
    monkeypatch.setenv("GRAPHDIST_NUMBA", "1")


def _torch_path(monkeypatch) -> None:
    monkeypatch.setenv("GRAPHDIST_NUMBA", "0")


def _hub_graph() -> Graph:
    """Degrees from 0 to ~125: nodes with fewer neighbours than the fan-out, and hubs with many more."""
    g = random_graph(300, avg_degree=5.0, seed=4)
    hub = torch.arange(1, 121)
    extra = torch.stack([hub, torch.zeros_like(hub)])
    ei = torch.cat([g.edge_index(), extra, extra.flip(0)], dim=1)
    return Graph.from_edge_index(ei, num_nodes=g.num_nodes, x=g.x, y=g.y)


def _both(monkeypatch, fn):
    """``fn()`` on the torch kernels, then on the compiled loops (same seeds)."""
    _torch_path(monkeypatch)
    ref = fn()
    monkeypatch.setenv("GRAPHDIST_NUMBA", "1")
    return ref, fn()


@pytest.mark.parametrize("fanout", [1, 3, 10, 40])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_kernels_draw_the_same_neighbours(numba_on, monkeypatch, fanout, index_dtype):
    g = _hub_graph()
    indices = g.indices.to(index_dtype)
    nodes = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(fanout))[:200]

    def compact():
        return sample_csr(g.indptr, indices, nodes, fanout, generator=torch.Generator().manual_seed(7))

    def padded():
        return sample_csr_padded(g.indptr, indices, nodes, fanout, generator=torch.Generator().manual_seed(7))

    (ref_nb, ref_counts), (nb, counts) = _both(monkeypatch, compact)
    assert torch.equal(nb, ref_nb) and torch.equal(counts, ref_counts) and nb.dtype == torch.int64
    ref_table, table = _both(monkeypatch, padded)
    assert torch.equal(table, ref_table) and table.dtype == index_dtype


def test_float64_draws_match(numba_on, monkeypatch):
    """Hubs above 2^24 neighbours draw in float64: both paths read those draws alike (forced here)."""
    g = _hub_graph()

    def draws(deg, k, generator):
        return torch.rand((k, deg.numel()), generator=generator, dtype=torch.float64)

    monkeypatch.setattr(kernels, "_floyd_draws", draws)
    nodes = torch.arange(g.num_nodes)
    ref, got = _both(monkeypatch, lambda: sample_csr(g.indptr, g.indices, nodes, 5,
                                                     generator=torch.Generator().manual_seed(1)))
    assert all(torch.equal(a, b) for a, b in zip(ref, got))


def _same_batches(a, b) -> bool:
    return all(torch.equal(x.input_nodes, y.input_nodes) and all(
        torch.equal(p.src, q.src) and torch.equal(p.dst, q.dst) and torch.equal(p.indptr, q.indptr)
        and (p.num_src, p.num_dst) == (q.num_src, q.num_dst) for p, q in zip(x.blocks, y.blocks)) for x, y in zip(a, b))


def test_sampler_batches_identical(numba_on, monkeypatch):
    """Whole multi-hop batches, relabelled ids included."""
    g = _hub_graph()
    seeds = [torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(s))[:40] for s in range(6)]

    def batches():
        sampler = NeighborSampler(g, [10, 5, 3], seed=11)
        return [sampler.sample(s) for s in seeds]

    ref, got = _both(monkeypatch, batches)
    assert len(ref) == len(got) and _same_batches(ref, got)


def test_merged_frontiers_identical(numba_on, monkeypatch):
    """The pipelined path relabels several batches in flight, each with a relabeller of its own."""
    from sampling.base import run_steps
    from sampling.relabel import _DenseRelabeler

    g = _hub_graph()
    seeds = [torch.arange(s * 30, s * 30 + 30) for s in range(3)]

    def merged():
        sampler = NeighborSampler(g, [6, 4], seed=2)
        relabels = [_DenseRelabeler(g.num_nodes) for _ in seeds]
        return run_steps(sampler._sample_merged(seeds, relabels))

    ref, got = _both(monkeypatch, merged)
    assert _same_batches(ref, got)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_merged_rows_equal_the_padded_table_compacted(numba_on, dtype):
    """The distributed source's one-pass merge of own (compact) and remote (padded) rows against its
    torch path: both written into one padded table, then ``unpad``."""
    gen = torch.Generator().manual_seed(3)
    n, k = 500, 6
    table = torch.randint(0, 1000, (n, k), generator=gen, dtype=dtype)
    real = torch.randint(0, k + 1, (n,), generator=gen)  # real entries per row, some none, some all
    table[torch.arange(k).unsqueeze(0) < (k - real).unsqueeze(1)] = -1  # the padding comes first
    order = torch.randperm(n, generator=gen)
    own_idx, remote_idx = order[:200], order[200:]
    own = kernels.unpad(table.index_select(0, own_idx))
    expected = kernels.unpad(table)
    got = compiled.merge_rows(n, own_idx, own, remote_idx, table.index_select(0, remote_idx))
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]) and got[0].dtype == torch.int64
    none = torch.zeros(0, dtype=torch.int64)  # two own rows without neighbours, no remote row
    empty = compiled.merge_rows(2, torch.tensor([0, 1]), (none, torch.zeros(2, dtype=torch.int64)), none,
                                torch.zeros((0, k), dtype=dtype))
    assert empty[0].numel() == 0 and empty[1].tolist() == [0, 0]


def test_split_range_keeps_order(numba_on):
    nodes = torch.randint(0, 100, (1000,), generator=torch.Generator().manual_seed(0))
    inside = (nodes >= 30) & (nodes < 60)
    own_idx, own, remote_idx, remote = compiled.split_range(nodes, 30, 60)
    assert torch.equal(own_idx, inside.nonzero().view(-1)) and torch.equal(own, nodes[inside] - 30)
    assert torch.equal(remote_idx, (~inside).nonzero().view(-1)) and torch.equal(remote, nodes[~inside])


def test_relabeller_is_reset_between_batches(numba_on):
    """After a compiled batch the mark array is clean: the next batch numbers its nodes from scratch."""
    g = random_graph(200, seed=1)
    sampler = NeighborSampler(g, [5, 5], seed=0)
    first = sampler.sample(torch.tensor([3, 4, 5]))
    assert bool((sampler._relabeler.mark == torch.iinfo(torch.int32).max).all())
    again = NeighborSampler(g, [5, 5], seed=0).sample(torch.tensor([3, 4, 5]))
    assert torch.equal(first.input_nodes, again.input_nodes)


def test_off_switch_threshold_and_warm_up(monkeypatch):
    monkeypatch.setattr(_numba, "WARMUP_CALLS", 3)
    monkeypatch.setattr(_numba, "_calls", 0)
    monkeypatch.setenv("GRAPHDIST_NUMBA", "0")
    assert not compiled.enabled(10**9)
    monkeypatch.setenv("GRAPHDIST_NUMBA", "1")
    assert not compiled.enabled(compiled.MIN_DRAWS - 1)
    # A process's first eligible calls stay on torch: short jobs never load numba.
    assert [compiled.enabled(compiled.MIN_DRAWS) for _ in range(4)] == [False] * 3 + [_numba.numba_module() is not None]
    monkeypatch.setattr(_numba, "_calls", 0)
    monkeypatch.setenv("GRAPHDIST_NUMBA", "eager")  # the throughput benches: from the first call
    assert compiled.enabled(compiled.MIN_DRAWS) == (_numba.numba_module() is not None)
    # A training job that will make enough calls switches at once; a short one, or with numba off, does not.
    monkeypatch.setenv("GRAPHDIST_NUMBA", "1")
    monkeypatch.setattr(_numba, "_calls", 0)
    assert not _numba.expect_calls(2) and not compiled.enabled(compiled.MIN_DRAWS)
    monkeypatch.setenv("GRAPHDIST_NUMBA", "0")
    assert not _numba.expect_calls(10**6)
    monkeypatch.setenv("GRAPHDIST_NUMBA", "1")
    assert _numba.expect_calls(3) and compiled.enabled(compiled.MIN_DRAWS) == (_numba.numba_module() is not None)


_CACHE_PLACE = """
import torch_geometric  # imports numba before graphdist sets its cache directory
import torch
from graphdist.testing import random_graph
from sampling import NeighborSampler
g = random_graph(3000, avg_degree=8.0, seed=0)
NeighborSampler(g, [10, 10], seed=0).sample(torch.arange(600))
"""


def test_numba_writes_its_cache_under_graphdist_cache(tmp_path):
    """Even when torch_geometric imported numba first, the compiled loops' cache goes under GRAPHDIST_CACHE."""
    import os
    import subprocess
    import sys

    require(_numba.numba_module() is not None, "numba is not installed: the compiled sampling loops cannot run")
    import sampling

    pycache = os.path.join(os.path.dirname(sampling.__file__), "__pycache__")

    def numba_files() -> set:
        return {n for n in os.listdir(pycache) if ".nb" in n} if os.path.isdir(pycache) else set()

    before = numba_files()
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(GRAPHDIST_CACHE=str(tmp_path), GRAPHDIST_NUMBA="eager")
    subprocess.run([sys.executable, "-c", _CACHE_PLACE], env=env, check=True, timeout=120)
    assert any(name.endswith(".nbi") for _, _, files in os.walk(tmp_path / "numba") for name in files)
    assert numba_files() == before
