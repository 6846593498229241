"""Full-graph strategy: N workers with an exact halo exchange == one process on the whole graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphdist.config import TrainConfig
from graphdist.testing import launch, random_graph

MODELS = ("gcn", "sage", "gat")


def _graph():
    graph = random_graph(100, avg_degree=4, seed=21, feature_dim=6)
    graph.x = torch.randn(graph.num_nodes, 6, generator=torch.Generator().manual_seed(2))
    return graph


def _cfg(model: str, world_size: int, staleness: int = 0, sync: str = "dwbp") -> TrainConfig:
    return TrainConfig(strategy="fullgraph", model=model, hidden=8, layers=3, fanouts=(-1, -1, -1), dropout=0.0,
                       heads=2, lr=0.01, staleness=staleness, sync=sync, num_workers=world_size, seed=4, timeout=20)


def _reference(graph, cfg: TrainConfig) -> dict[str, object]:
    """One process: logits of every node, the mean train loss and its parameter gradients."""
    from graphdist.models import build_model, gcn_norm_block
    from sampling.base import Block

    torch.manual_seed(cfg.seed)
    extra = {"heads": cfg.heads} if cfg.model == "gat" else {}
    model = build_model(cfg.model, graph.num_features, cfg.hidden, graph.num_classes, cfg.layers,
                        dropout=cfg.dropout, **extra)
    n = graph.num_nodes
    block = Block(src=graph.indices.to(torch.int64), dst=graph.dst_of_edges(), num_src=n, num_dst=n,
                  indptr=graph.indptr)
    if getattr(model, "needs_global_degrees", False):
        block = gcn_norm_block(block, graph.degrees())
    h = graph.x
    for i in range(model.num_layers):
        h = model.layer_forward(i, h, block)
    train = graph.train_mask.nonzero().view(-1)
    loss = torch.nn.functional.cross_entropy(h[train], graph.y[train])
    loss.backward()
    return {"logits": h.detach(), "loss": float(loss), "grads": [p.grad.clone() for p in model.parameters()]}


def _exact_body(rank: int, world_size: int, part_dir: str, expected: dict[str, dict[str, object]],
                boundary: list[int], halo: list[int]) -> None:
    from graphdist import comm
    from graphdist.trainers.run import build_strategy

    for model, ref in expected.items():
        strategy = build_strategy(rank, world_size, _cfg(model, world_size), part_dir)
        part = strategy.partition
        orig = part.orig_ids.index_select(0, part.global_ids[: part.num_inner])
        with torch.no_grad():
            logits = strategy.net()
        torch.testing.assert_close(logits, ref["logits"].index_select(0, orig), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{model} logits on rank {rank}: {m}")
        assert strategy.halo.boundary_rows == boundary[rank], (strategy.halo.boundary_rows, boundary)
        comm.reset_byte_counts()
        stats = strategy.train_epoch(1)
        # Halo bytes: layers 1 and 2 exchange hidden rows, forward and backward; the input
        # features were fetched once, at set-up.
        # Forward: the boundary rows others read; backward: the gradients of this part's halo rows.
        width = 8 * (2 if model == "gat" else 1)
        sent = comm.byte_counts().get("halo", 0)
        assert sent == 2 * (boundary[rank] + halo[rank]) * width * 4, (model, rank, sent, boundary[rank], halo[rank])
        loss = comm.all_reduce(torch.tensor([stats.loss_sum / strategy.num_train_total]), tag="test").item()
        assert loss == pytest.approx(ref["loss"], rel=1e-5), (model, loss, ref["loss"])
        for (name, p), g in zip(strategy.model.named_parameters(), ref["grads"]):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6, msg=lambda m: f"{model} grad {name}: {m}")
        strategy.close()


def _boundary_rows(graph, part_dir: Path, world_size: int) -> tuple[list[int], list[int]]:
    """Per part: rows it sends (its nodes another part reads, once per reading part) and rows it receives."""
    node_map = np.load(part_dir / "node_map.npy")
    orig = np.load(part_dir / "orig_ids.npy")
    part_of = node_map[np.argsort(orig)]  # by original id
    src, dst = graph.indices.numpy(), graph.dst_of_edges().numpy()
    pairs = {(int(s), int(part_of[d])) for s, d in zip(src, dst) if part_of[s] != part_of[d]}
    sends = [sum(1 for s, q in pairs if part_of[s] == p) for p in range(world_size)]
    receives = [sum(1 for s, q in pairs if q == p) for p in range(world_size)]
    return sends, receives


@pytest.mark.parametrize("world_size", [2, 4])
def test_exact_fullgraph_equals_one_process(tmp_path, world_size):
    from partition.api import partition

    graph = _graph()
    part_dir = Path(partition(graph, world_size, method="metis", out=tmp_path / "parts", seed=0))
    expected = {m: _reference(graph, _cfg(m, world_size)) for m in MODELS}
    boundary, halo = _boundary_rows(graph, part_dir, world_size)
    assert sum(boundary) == sum(halo) > 0
    launch(_exact_body, world_size, str(part_dir), expected, boundary, halo, timeout=150)
