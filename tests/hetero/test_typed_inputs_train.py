"""Each typed input loads, partitions and trains: a PyG HeteroData, OGB's ogbn-mag folder and the generator
(the typed .npz trains from the command line in test_typed_training.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.data.graph import Graph
from graphdist.data.hetero import hetero_to_pyg
from graphdist.data.loaders import load_graph
from graphdist.testing import one_rank_group, typed_random_graph
from graphdist.testing.ogb_files import write_mag


def _hetero_data(tmp_path: Path) -> Graph:
    return Graph.from_pyg(hetero_to_pyg(typed_random_graph(60, seed=4)), name="from-hetero-data")


def _mag(tmp_path: Path) -> Graph:
    write_mag(tmp_path / "ogbn_mag")
    return load_graph(str(tmp_path / "ogbn_mag"))


def _generated(tmp_path: Path) -> Graph:
    return load_graph("synthetic-hetero-2500")


@pytest.mark.parametrize("source", [_hetero_data, _mag, _generated], ids=["HeteroData", "ogbn-mag", "generator"])
def test_a_typed_input_partitions_and_trains(tmp_path: Path, source) -> None:
    from graphdist.trainers.run import build_strategy
    from partition.api import partition

    graph = source(tmp_path)
    assert graph.typed
    parts = partition(graph, 2, method="metis", out=tmp_path / "parts")
    cfg = TrainConfig(model="rgcn", hidden=8, fanouts=(4, 4), batch_size=64, max_steps=2, num_workers=1,
                      prefetch=False, timeout=30)
    with one_rank_group():
        strategy = build_strategy(0, 1, cfg, str(parts))
        stats = strategy.train_epoch(1)
        logits = strategy._exact()
        strategy.close()
    assert stats.steps >= 1 and stats.seeds > 0 and math.isfinite(stats.loss_sum)
    assert logits.shape == (graph.num_nodes, graph.num_classes) and bool(torch.isfinite(logits).all())
