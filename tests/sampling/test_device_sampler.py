"""Sampling on the CSR's device (``sampling/device.py``): the draws' law, the blocks' layout, determinism.

Run here on the CPU "device"; the same torch operations run on a GPU (``bench/check_cuda.py --only loaders``).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from graphdist.data import Graph
from graphdist.testing import random_graph
from sampling import NeighborSampler
from sampling.device import DeviceNeighborSampler


@pytest.fixture(scope="module")
def graph() -> Graph:
    return random_graph(400, avg_degree=14, seed=2)


def _sampler(g: Graph, fanouts: list[int], **kw) -> DeviceNeighborSampler:
    return DeviceNeighborSampler(g.indptr, g.indices, fanouts, device="cpu", **kw)


def _neighbours(g: Graph, v: int) -> list[int]:
    return g.indices[g.indptr[v]:g.indptr[v + 1]].tolist()


@pytest.mark.parametrize("replace", [False, True])
def test_every_edge_is_real_and_counts_follow_the_fanout(graph: Graph, replace: bool) -> None:
    batch = _sampler(graph, [6, 3], replace=replace, seed=0).sample(torch.arange(0, 400, 7))
    ids = batch.input_nodes
    for block, fanout in zip(reversed(batch.blocks), [6, 3]):
        for j in range(block.num_dst):
            v = int(ids[j])
            srcs = ids[block.src[block.indptr[j]:block.indptr[j + 1]]].tolist()
            degree = len(_neighbours(graph, v))
            assert len(srcs) == (min(degree, fanout) if not replace else (fanout if degree else 0))
            assert set(srcs) <= set(_neighbours(graph, v))
            if not replace:  # distinct positions (the graph has no parallel edges)
                assert len(set(srcs)) == len(srcs)


def test_blocks_keep_the_samplers_layout(graph: Graph) -> None:
    seeds = torch.tensor([5, 17, 3, 250])
    batch = _sampler(graph, [4, 4, 2], seed=1).sample(seeds)
    assert batch.seed_nodes.tolist() == seeds.tolist() and batch.input_nodes[:4].tolist() == seeds.tolist()
    assert batch.input_nodes.unique().numel() == batch.input_nodes.numel()
    assert batch.blocks[-1].num_dst == 4 and batch.blocks[0].num_src == batch.input_nodes.numel()
    for inner, outer in zip(batch.blocks[1:], batch.blocks[:-1]):
        assert outer.num_dst == inner.num_src  # a layer's sources are the next hop's destinations
    for block in batch.blocks:
        assert torch.equal(block.dst, torch.repeat_interleave(torch.arange(block.num_dst), block.in_degrees()))
        # new sources in order of first appearance, after the destinations
        new = block.src[block.src >= block.num_dst]
        firsts = list(dict.fromkeys(new.tolist()))
        assert firsts == list(range(block.num_dst, block.num_src))


def test_every_neighbour_equals_the_cpu_sampler(graph: Graph) -> None:
    seeds = torch.tensor([1, 9, 33])
    a = _sampler(graph, [-1, -1], seed=0).sample(seeds)
    b = NeighborSampler(graph, [-1, -1], seed=0).sample(seeds)
    assert torch.equal(a.input_nodes.sort().values, b.input_nodes.sort().values)
    for x, y in zip(a.blocks, b.blocks):
        edges = lambda batch, blk: sorted(zip(batch.input_nodes[blk.src].tolist(), batch.input_nodes[blk.dst].tolist()))  # noqa: E731
        assert edges(a, x) == edges(b, y)


@pytest.mark.parametrize("fanouts", [[5, 5], [3, 8, 2]])
def test_on_the_cpu_it_draws_as_the_cpu_sampler(graph: Graph, fanouts: list[int]) -> None:
    """The same Floyd rounds with the same generator calls: batch for batch the CPU sampler's (a GPU's generator
    draws otherwise)."""
    a, b = _sampler(graph, fanouts, seed=3), NeighborSampler(graph, fanouts, seed=3)
    for seeds in (torch.arange(0, 400, 9), torch.tensor([7, 1, 300])):
        x, y = a.sample(seeds), b.sample(seeds)
        assert torch.equal(x.input_nodes, y.input_nodes)
        assert all(torch.equal(p.src, q.src) and torch.equal(p.indptr, q.indptr) for p, q in zip(x.blocks, y.blocks))


def test_draws_are_uniform_without_replacement() -> None:
    # node 0 has 10 neighbours; 3 of them drawn each time: each with probability 0.3
    star = Graph(indptr=torch.tensor([0] + [10] * 11), indices=torch.arange(1, 11))
    sampler = _sampler(star, [3], seed=4)
    draws = Counter()
    for _ in range(3000):
        draws.update(sampler.sample(torch.tensor([0])).input_nodes[1:].tolist())
    assert sorted(draws) == list(range(1, 11))
    assert all(abs(n / 3000 - 0.3) < 0.04 for n in draws.values()), draws


def test_a_seed_and_a_state_reproduce_a_batch(graph: Graph) -> None:
    seeds = torch.arange(0, 400, 11)
    a, b = _sampler(graph, [5, 5], seed=9), _sampler(graph, [5, 5], seed=9)
    first = a.sample(seeds)
    assert torch.equal(first.input_nodes, b.sample(seeds).input_nodes)
    state = a.get_state()
    second = a.sample(seeds)
    a.set_state(state)
    assert torch.equal(a.sample(seeds).input_nodes, second.input_nodes)
    assert not torch.equal(first.input_nodes, second.input_nodes)
