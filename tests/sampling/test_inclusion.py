"""Vertex inclusion probability: the formula against sampled batches, and the distributed computation
against the same computation on the whole graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphdist.testing import launch, one_rank_group, random_graph
from partition.api import load_partition, partition
from sampling import NeighborSampler
from sampling.inclusion import inclusion_probability


def test_probabilities_match_the_frequencies_of_sampled_batches(tmp_path):
    graph = random_graph(300, avg_degree=6, seed=4)
    part = load_partition(partition(graph, 1, method="random", out=tmp_path / "p"), 0)
    seeds = part.inner_global_ids()[:60]
    fanouts, batch = [4, 2], 12
    with one_rank_group():
        nodes, prob = inclusion_probability(part, seeds, batch, fanouts)
    # The frequency with which real batches read each node (the node sampler on the same part).
    from sampling.distributed import DistNeighborSource

    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(graph.num_nodes)
    draws = 1000
    with one_rank_group():
        sampler = NeighborSampler(DistNeighborSource(part), fanouts, seed=1)
        for _ in range(draws):
            pick = seeds[torch.randperm(seeds.numel(), generator=gen)[:batch]]
            counts[sampler.sample(pick).input_nodes] += 1
    freq = counts / draws
    estimate = torch.zeros(graph.num_nodes, dtype=torch.float64)
    estimate[nodes] = prob
    assert set(freq.nonzero().view(-1).tolist()) <= set(nodes.tolist())  # nothing read is predicted impossible
    # Independent draws are an approximation (a seed's neighbour may sample the seed back, so seeds
    # come out high): what the cache ranks, the nodes that are no seed, within a few points and in order.
    others = torch.ones(graph.num_nodes, dtype=torch.bool)
    others[seeds] = False
    est, seen = estimate[others], freq.double()[others]
    assert float((est - seen).abs().mean()) < 0.04 and float((est - seen).abs().max()) < 0.15
    assert float(torch.corrcoef(torch.stack([est, seen]))[0, 1]) > 0.98


def _distributed_body(rank: int, world_size: int, two: str, one: str) -> None:
    from graphdist import comm

    part = load_partition(two, rank)
    seeds = part.mask_global_ids("train_mask")
    nodes, prob = inclusion_probability(part, seeds, 7, [3, -1])
    whole = load_partition(one, 0)  # the same graph in one part: no collective, the same seeds
    new_of_orig = torch.empty_like(whole.orig_ids)
    new_of_orig[whole.orig_ids] = torch.arange(whole.orig_ids.numel())
    local_nodes, local_prob = inclusion_probability(whole, new_of_orig[part.orig_ids[seeds]], 7, [3, -1])
    got = dict(zip(part.orig_ids[nodes].tolist(), prob.tolist()))
    expected = dict(zip(whole.orig_ids[local_nodes].tolist(), local_prob.tolist()))
    assert got.keys() == expected.keys()
    assert max(abs(got[k] - expected[k]) for k in got) < 1e-9
    comm.barrier()


def test_two_ranks_compute_what_one_process_computes_on_the_whole_graph(tmp_path):
    graph = random_graph(120, avg_degree=5, seed=2)
    two = partition(graph, 2, method="random", out=tmp_path / "two", seed=1)
    one = partition(graph, 1, method="random", out=tmp_path / "one")
    launch(_distributed_body, 2, str(two), str(one), timeout=60)
