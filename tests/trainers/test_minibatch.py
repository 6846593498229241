"""The minibatch trainer's pieces against single-process oracles."""

from pathlib import Path

import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.testing import launch, random_graph
from graphdist.trainers.minibatch import local_batch_size, normalize_features, steps_per_epoch


def _full_graph_outputs(graph, cfg: TrainConfig) -> torch.Tensor:
    """The reference: the same model (same seed) layer by layer on the whole graph."""
    from graphdist.models import build_model, gcn_norm_block
    from sampling.base import Block

    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, graph.num_features, cfg.hidden, graph.num_classes, cfg.layers, dropout=cfg.dropout)
    model.eval()
    n = graph.num_nodes
    block = Block(src=graph.indices.to(torch.int64), dst=graph.dst_of_edges(), num_src=n, num_dst=n,
                  indptr=graph.indptr)
    if getattr(model, "needs_global_degrees", False):
        block = gcn_norm_block(block, graph.degrees())
    h = graph.x
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer_forward(i, h, block)
    return h


def _distributed_inference_body(rank: int, world_size: int, part_dir: str, cfg: TrainConfig, expected: torch.Tensor):
    from graphdist.trainers.minibatch import build_worker, layerwise_inference

    state = build_worker(rank, world_size, cfg, part_dir)
    out = layerwise_inference(state)
    part = state.partition
    orig = torch.as_tensor(part.orig_ids).to(torch.int64).index_select(0, part.global_ids[: part.num_inner])
    torch.testing.assert_close(out, expected.index_select(0, orig), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_distributed_layerwise_inference_equals_full_graph(tmp_path, model):
    from partition.api import partition

    graph = random_graph(90, avg_degree=5, seed=4, feature_dim=6)
    graph.x = torch.randn(graph.num_nodes, 6, generator=torch.Generator().manual_seed(0))
    part_dir = partition(graph, 2, method="random", out=Path(tmp_path) / "parts", seed=0)
    cfg = TrainConfig(model=model, hidden=8, layers=2, fanouts=(3, 3), prefetch=False, seed=5)
    expected = _full_graph_outputs(graph, cfg)
    launch(_distributed_inference_body, 2, str(part_dir), cfg, expected, timeout=90)


def test_batch_shares_cover_all_train_nodes_in_equal_steps():
    counts = [100, 7, 0]
    steps = steps_per_epoch(counts, 32)
    assert steps == 4
    shares = [local_batch_size(c, steps) for c in counts]
    assert all(s * steps >= c for s, c in zip(shares, counts))
    assert shares[0] == 25 and shares[1] == 2


def test_row_normalisation():
    x = torch.tensor([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]])
    assert normalize_features(x, "row").tolist() == [[0.25, 0.75], [0.0, 0.0], [0.5, 0.5]]
    assert normalize_features(x, "none") is x
