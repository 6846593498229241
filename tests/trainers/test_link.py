"""Link prediction: the edge split, the link sampler, the metrics, and --task link end to end."""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import numpy as np
import pytest
import torch

import graphdist as gd
from graphdist.testing import random_graph
from graphdist.trainers.link import rank_metrics, roc_auc
from partition.api import default_output, PartitionConfig, partition, read_meta
from partition.edges import load_degree, load_link_edges, split_edges
from sampling import NeighborSampler
from sampling.link import LinkSampler


def _edge_set(graph):
    ei = graph.edge_index()
    return set(zip(ei[0].tolist(), ei[1].tolist()))


def test_split_holds_out_both_directions_and_negatives_are_non_neighbours():
    graph = gd.synthetic(800, avg_degree=8, num_features=4, num_classes=2, seed=0)
    mp, split = split_edges(graph, (0.8, 0.1, 0.1), seed=3, eval_negatives=7)
    original, kept = _edge_set(graph), _edge_set(mp)
    held = np.concatenate([split.val, split.test], axis=1).T.tolist()
    for u, v in held:
        assert (u, v) not in kept and (v, u) not in kept and (u, v) in original
    for u, v in split.train.T.tolist():
        assert (u, v) in kept and (v, u) in kept
    undirected = len(original) // 2
    assert split.train.shape[1] + len(held) == undirected and split.val.shape[1] == round(0.1 * undirected)
    for (u, _), negs in zip(split.test.T.tolist(), split.test_neg.tolist()):
        assert all(w != u and (u, w) not in original for w in negs)
    assert np.array_equal(split.degree, np.diff(mp.indptr.numpy()))
    again = split_edges(graph, (0.8, 0.1, 0.1), seed=3, eval_negatives=7)[1]
    assert np.array_equal(again.test_neg, split.test_neg) and np.array_equal(again.train, split.train)


def test_each_part_owns_the_edges_whose_first_end_it_holds(tmp_path):
    graph = gd.synthetic(600, avg_degree=6, num_features=4, num_classes=2, seed=1)
    out = partition(graph, 3, method="random", out=tmp_path / "p", task="link", eval_negatives=5)
    meta = read_meta(out)
    assert meta["task"] == "link" and meta["format_version"] >= 2  # format 2 added the link split
    offsets = meta["part_offsets"]
    _, split = split_edges(graph, seed=0, eval_negatives=5)
    new_ids = np.empty(graph.num_nodes, dtype=np.int64)
    orig = np.load(out / "orig_ids.npy")
    new_ids[orig] = np.arange(graph.num_nodes)
    total = 0
    for p in range(3):
        edges = load_link_edges(out, [p], meta)
        assert edges.val_neg.shape == (edges.val.shape[1], 5)
        for name in ("train", "val", "test"):
            first = getattr(edges, name)[0]
            assert bool(((first >= offsets[p]) & (first < offsets[p + 1])).all())
            assert meta["parts"][p][f"num_{name}_edges"] == getattr(edges, name).shape[1]
        total += edges.train.shape[1]
    assert total == split.train.shape[1] == meta["link"]["num_train_edges"]
    both = load_link_edges(out, [0, 1, 2], meta)
    assert sorted(map(tuple, both.test.T.tolist())) == sorted(map(tuple, new_ids[split.test].T.tolist()))
    assert torch.equal(load_degree(out)[torch.from_numpy(new_ids)], torch.from_numpy(split.degree))


def test_link_and_node_partitions_never_share_a_cache_directory():
    node = default_output("cora", PartitionConfig(2))
    link = default_output("cora", PartitionConfig(2, task="link"))
    other = default_output("cora", PartitionConfig(2, task="link", edge_split=(0.7, 0.1, 0.2)))
    assert len({node, link, other}) == 3 and "link" in link.name


def test_link_sampler_pairs_point_at_the_seeds_and_resume_draws_the_same_negatives():
    g = random_graph(60, seed=0)
    edges = g.edge_index()[:, :20]
    sampler = LinkSampler(NeighborSampler(g, [3, 2], seed=1), edges, num_nodes=60, num_negatives=2, seed=5)
    state = sampler.get_state()
    batch = sampler.sample(torch.tensor([4, 9, 11]))
    pairs, labels = batch.seed_nodes[batch.meta["pairs"]], batch.meta["pair_labels"]
    assert pairs[:, :3].tolist() == edges[:, [4, 9, 11]].tolist()
    assert torch.equal(pairs[0, 3:], edges[0, [4, 9, 11]].repeat_interleave(2))  # negatives keep the source
    assert labels.tolist() == [1.0] * 3 + [0.0] * 6
    assert batch.seed_nodes.unique().numel() == batch.seed_nodes.numel()
    sampler.set_state(state)
    again = sampler.sample(torch.tensor([4, 9, 11]))
    assert torch.equal(again.seed_nodes[again.meta["pairs"]], pairs)
    streamed = list(sampler.sample_stream([torch.tensor([0, 1]), torch.tensor([], dtype=torch.int64)]))
    assert [b.meta["pair_labels"].numel() for b in streamed] == [6, 0]


def test_degree_biased_negatives_follow_degree_to_the_three_quarters():
    g = random_graph(10, seed=0)
    degree = torch.tensor([0, 1, 16, 0, 0, 0, 0, 0, 0, 81])
    sampler = LinkSampler(NeighborSampler(g, [1], seed=0), g.edge_index()[:, :2], 10, negative="degree",
                          degree=degree, seed=0)
    counts = torch.bincount(sampler.negatives(40_000), minlength=10).double() / 40_000
    expected = degree.double().pow(0.75) / degree.double().pow(0.75).sum()  # 1 : 8 : 27
    assert torch.allclose(counts, expected, atol=0.01) and counts[0] == 0


def test_auc_and_ranks_against_brute_force():
    gen = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 5, (40,), generator=gen).float()  # many ties
    neg = torch.randint(0, 5, (30, 3), generator=gen).float()
    pairs = [(p, n) for p, n in itertools.product(pos.tolist(), neg.reshape(-1).tolist())]
    brute = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
    assert roc_auc(pos, neg.reshape(-1)) == pytest.approx(brute)
    reciprocal, hits, count = rank_metrics(pos[:30], neg, hits_k=2)
    ranks = [1 + sum(n > p for n in row) + 0.5 * sum(n == p for n in row) for p, row in zip(pos[:30].tolist(),
                                                                                          neg.tolist())]
    assert reciprocal == pytest.approx(sum(1 / r for r in ranks)) and hits == sum(r <= 2 for r in ranks)
    assert count == 30


def test_task_and_partition_must_agree(tmp_path):
    node_parts = partition(gd.synthetic(300, avg_degree=4, num_features=4, num_classes=2, seed=0), 2,
                           method="random", out=tmp_path / "node")
    link_parts = partition(gd.synthetic(300, avg_degree=4, num_features=4, num_classes=2, seed=0), 2,
                           method="random", out=tmp_path / "link", task="link", eval_negatives=3)
    with pytest.raises(ValueError, match="task='node': the partition was made for link prediction"):
        gd.train(None, partitions=str(link_parts), num_workers=2, epochs=1, run_dir=str(tmp_path / "r1"))
    with pytest.raises(ValueError, match="task='link': the partition holds no edge split"):
        gd.train(None, partitions=str(node_parts), num_workers=2, epochs=1, task="link", run_dir=str(tmp_path / "r2"))
    with pytest.raises(ValueError, match="task= link needs strategy='minibatch'"):
        gd.train(None, partitions=str(link_parts), num_workers=2, epochs=1, task="link", strategy="fullgraph")


def test_two_workers_learn_links_and_resume_bit_identically(tmp_path):
    run = tmp_path / "run"
    common = dict(dataset="synthetic-2000", task="link", num_workers=2, hidden=32, batch_size=1024, lr=0.01,
                  eval_negatives=20, hits_k=5)
    with contextlib.redirect_stdout(io.StringIO()):
        first = gd.train(None, epochs=1, run_dir=str(run), **common)
        res = gd.train(None, epochs=3, resume=str(run), **common)
    records = res.history
    assert [r["epoch"] for r in records] == [1, 2, 3] and first.final["epoch"] == 1
    final = records[-1]
    assert final["test_auc"] > 0.7 and 0 < final["test_mrr"] <= 1 and 0 <= final["test_hits@5"] <= 1
    # every supervision edge once per epoch, with its one negative
    assert final["seeds"] == 2 * read_meta(_parts(run))["link"]["num_train_edges"]
    status = json.loads((run / "run.json").read_text())
    assert status["best_metric"] == "val_auc"
    straight = tmp_path / "straight"
    with contextlib.redirect_stdout(io.StringIO()):
        gd.train(None, epochs=3, run_dir=str(straight), **common)
    a = torch.load(run / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(straight / "checkpoint.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _parts(run):
    import yaml

    return yaml.safe_load((run / "config.yaml").read_text())["partitions"]
