"""``--sampler cluster``: ClusterGCN batches train the minibatch and aggregation strategies."""

import json
from pathlib import Path

import pytest
import torch

FAST = ["--hidden", "32", "--batch-size", "35", "--log-interval", "1000", "--timeout", "60", "--lr", "0.01"]


@pytest.fixture(scope="module")
def cora_2(tmp_path_factory):
    from graphdist.data import load_graph
    from graphdist.testing.env import find_dataset
    from partition.api import partition

    graph = load_graph(find_dataset("cora"))
    return partition(graph, 2, method="metis", out=tmp_path_factory.mktemp("parts") / "cora-2", seed=0)


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("strategy", ["minibatch", "aggregation"])
def test_cluster_batches_train_every_train_node_once_an_epoch_and_learn(tmp_path, cora_2, strategy):
    from graphdist.cli.train import main

    run = tmp_path / strategy
    assert main(["--partitions", str(cora_2), "--num-workers", "2", "--epochs", "4", "--run-dir", str(run),
                 "--strategy", strategy, "--sampler", "cluster", *FAST]) == 0
    records = _records(run)
    # Every train node is a seed once an epoch: the loss counts train nodes only (cora: 140).
    assert all(r["seeds"] == 140 for r in records), [r["seeds"] for r in records]
    assert records[-1]["loss"] < records[0]["loss"], [r["loss"] for r in records]
    assert records[-1]["val_acc"] > 0.5, records[-1]  # 7 classes: chance is about 0.15
    if strategy == "minibatch":  # a cluster batch reads nothing remote: only gradients travel while training
        assert not records[-1]["bytes_sent"].get("feature"), records[-1]["bytes_sent"]


def test_the_cluster_sampler_refuses_what_it_cannot_honour(tmp_path, cora_2):
    from graphdist.config import ConfigError, TrainConfig

    for flags in ({"rebalance_every": 4}, {"replicate": "graph"}, {"placement": "profiled"}):
        with pytest.raises(ConfigError, match="cannot go with --sampler cluster"):
            TrainConfig(partitions=str(cora_2), sampler="cluster", **flags)
    with pytest.raises(ConfigError, match="--sampler must be one of neighbor, cluster"):
        TrainConfig(sampler="saint")


def test_supervised_cluster_batches_put_their_seeds_first_and_end_on_their_rows():
    from graphdist.testing import tiny_graph
    from sampling.cluster import ClusterSampler

    g = tiny_graph()
    batch = ClusterSampler(g, torch.arange(10) // 5, num_layers=2, supervised=g.train_mask).sample(torch.tensor([1]))
    assert batch.seed_nodes.tolist() == [6, 8] and batch.input_nodes.tolist()[:2] == [6, 8]
    first, last = batch.blocks
    assert (first.num_src, first.num_dst) == (5, 5) and (last.num_src, last.num_dst) == (5, 2)
    assert torch.equal(last.indptr, first.indptr[:3]) and torch.equal(last.src, first.src[: int(first.indptr[2])])
