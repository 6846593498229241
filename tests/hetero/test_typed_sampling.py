"""Typed sampling: per-relation fan-outs draw min(f_r, deg_r) edges of the right relation, locally, over a
partition directory, and across 2 ranks (equal to the local sampler with every neighbour)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from graphdist.data.graph import Graph
from graphdist.testing import launch, typed_random_graph
from partition.api import load_partition, partition
from partition.merge import load_parts
from partition.views import load_structure
from sampling import NeighborSampler


def _edges(graph: Graph, v: int) -> Counter:
    lo, hi = int(graph.indptr[v]), int(graph.indptr[v + 1])
    return Counter(zip(graph.indices[lo:hi].tolist(), graph.edge_type[lo:hi].tolist()))


def _sampled(batch) -> list[Counter]:
    """Per layer, (destination global id, source global id, relation) of every sampled edge."""
    ids = batch.input_nodes
    return [Counter(zip(ids[b.dst].tolist(), ids[b.src].tolist(), b.edge_type.tolist())) for b in batch.blocks]


def test_relation_fanouts_draw_min_of_fanout_and_degree_with_their_relations() -> None:
    g = typed_random_graph(80, seed=1)
    s = g.schema
    sampler = NeighborSampler(g, [2, 3], seed=0, relation_fanouts={"cites": [1, 0], "paper__has__term": [4, 4]})
    assert sampler.hops == [(1, 2, 2, 2, 4), (0, 3, 3, 3, 4)]
    batch = sampler.sample(torch.arange(10))
    want_fan = sampler.hops[::-1]  # blocks[0] is the outermost hop
    for block, fans in zip(batch.blocks, want_fan):
        dst_ids = batch.input_nodes[: block.num_dst]
        assert torch.equal(block.node_type, s.node_type(batch.input_nodes[: block.num_src]))
        for j in range(block.num_dst):
            v = int(dst_ids[j])
            edges = range(int(block.indptr[j]), int(block.indptr[j + 1]))
            have = _edges(g, v)
            got = Counter()
            for e in edges:
                r = int(block.edge_type[e])
                u = int(batch.input_nodes[block.src[e]])
                assert have[(u, r)] > 0, f"edge {u} -> {v} of relation {r} is not in the graph"
                got[r] += 1
            for r, f in enumerate(fans):
                deg = sum(c for (u, rr), c in have.items() if rr == r)
                assert got[r] == (deg if f < 0 else min(f, deg))
            rels = block.edge_type[int(block.indptr[j]): int(block.indptr[j + 1])]
            assert bool((rels[1:] >= rels[:-1]).all()), "a destination's edges are grouped by relation"
    # each node's row within its type: the ids of its type counted from the type's first
    ti = batch.blocks[0].type_index
    assert torch.equal(ti, batch.input_nodes - torch.tensor(s.offsets)[batch.blocks[0].node_type])


def test_relation_fanouts_are_refused_on_an_untyped_graph_and_name_unknown_relations() -> None:
    from graphdist.testing import random_graph

    with pytest.raises(ValueError, match="has no relations"):
        NeighborSampler(random_graph(10), [2], relation_fanouts={"cites": [1]})
    with pytest.raises(ValueError, match="unknown name 'likes'"):
        NeighborSampler(typed_random_graph(10), [2], relation_fanouts={"likes": [1]})
    with pytest.raises(ValueError, match="one count per layer"):
        NeighborSampler(typed_random_graph(10), [2, 2], relation_fanouts={"cites": [1]})


@pytest.mark.parametrize("hops", [1, 2])
def test_a_partition_directory_keeps_every_edges_relation(tmp_path: Path, hops: int) -> None:
    g = typed_random_graph(60)
    out = partition(g, 3, method="random", out=tmp_path / "p", halo_hops=hops)
    indptr, indices, edge_type = load_structure(out, with_types=True)
    part = load_partition(out, 0)
    orig = part.orig_ids
    renamed = Graph(indptr=indptr, indices=indices)
    for new in range(g.num_nodes):
        lo, hi = int(indptr[new]), int(indptr[new + 1])
        assert Counter(zip(orig[indices[lo:hi]].tolist(), edge_type[lo:hi].tolist())) == _edges(g, int(orig[new]))
    ids = torch.arange(g.num_nodes)
    assert torch.equal(part.schema.node_type(ids), g.schema.node_type(orig))
    # rows within a type are a permutation of the type's rows
    for t, name in enumerate(g.schema.node_types):
        rows = part.schema.type_index(ids)[part.schema.node_type(ids) == t]
        assert sorted(rows.tolist()) == list(range(g.schema.num_nodes(name)))
    union = load_parts(out, [0, 2])
    assert union.edge_type.numel() == union.indices.numel() and renamed.num_edges == g.num_edges


def _distributed_equals_local(rank: int, world: int, out: str, result: str) -> None:
    from sampling.distributed import DistNeighborSource

    part = load_partition(out, rank)
    sampler = NeighborSampler(DistNeighborSource(part, seed=0), [-1, -1], seed=rank)
    fixed = NeighborSampler(DistNeighborSource(part, seed=0), [2, 1], seed=rank, relation_fanouts={"cites": [3, -1]})
    seeds = part.inner_global_ids()[:7]
    full = sampler.sample(seeds)
    some = fixed.sample(seeds)
    torch.save({"seeds": seeds, "full": _sampled(full), "some_edges": _sampled(some)}, f"{result}-{rank}.pt")


def test_distributed_typed_sampling_equals_local_on_two_ranks(tmp_path: Path) -> None:
    g = typed_random_graph(60, seed=3)
    out = partition(g, 2, method="random", out=tmp_path / "p")
    launch(_distributed_equals_local, 2, str(out), str(tmp_path / "r"))
    indptr, indices, edge_type = load_structure(out, with_types=True)
    # the whole graph in the partition's ids, typed by the partition's schema
    relabelled = Graph(indptr=indptr, indices=indices, edge_type=edge_type, schema=load_partition(out, 0).schema)
    for rank in range(2):
        got = torch.load(tmp_path / f"r-{rank}.pt")
        want = NeighborSampler(relabelled, [-1, -1], seed=0).sample(got["seeds"])
        assert got["full"] == _sampled(want)
        # fixed fan-outs: every sampled edge exists with its relation, counts min(f, deg) per relation
        for layer in got["some_edges"]:
            for (v, u, r), c in layer.items():
                lo, hi = int(indptr[v]), int(indptr[v + 1])
                assert Counter(zip(indices[lo:hi].tolist(), edge_type[lo:hi].tolist()))[(u, r)] >= c


@pytest.mark.parametrize("method", ["metis", "stream", "super"])
def test_partition_stats_show_types_and_relations_from_the_directory_as_from_the_graph(tmp_path: Path,
                                                                                      method: str) -> None:
    import numpy as np

    from partition.stats import partition_stats

    g = typed_random_graph(120)
    out = partition(g, 3, method=method, out=tmp_path / "p")
    from_dir = partition_stats(out)
    parts = np.repeat(np.arange(3), np.diff(from_dir_offsets := load_partition(out, 0).part_offsets.numpy()))
    assign = np.empty_like(parts)
    assign[load_partition(out, 0).orig_ids.numpy()] = parts
    assert from_dir_offsets[-1] == g.num_nodes
    assert partition_stats(g, assign, 3).table() == from_dir.table()
    table = from_dir.table()
    assert "type term: 30 nodes, per part" in table and "relation paper__cites__paper: 360 edges, cut " in table
    assert sum(map(sum, from_dir.relation_edges)) == g.num_edges
